//! Which addresses the media fetch may connect to, and its limits.
//!
//! Refused unless `--allow-private-media`: IPv4 0/8, 10/8, 127/8, 100.64/10 (carrier-grade NAT), 169.254/16,
//! 172.16/12, 192.168/16 and 224/4 and everything above it (multicast, reserved, broadcast); IPv6 `::`, `::1`,
//! fe80::/10, fc00::/7 and ff00::/8. An IPv6 address carrying an IPv4 one — v4-mapped (`::ffff:a.b.c.d`), NAT64
//! (`64:ff9b::/96`) or the deprecated v4-compatible form (`::a.b.c.d`) — is judged by the IPv4 address inside.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

/// The fetch's policy and limits.
#[derive(Clone, Debug)]
pub struct FetchPolicy {
    /// Connect to private, loopback and link-local addresses too (`--allow-private-media`, for LAN use).
    pub allow_private: bool,
    /// Redirects followed, each one re-checked.
    pub max_redirects: usize,
    /// The whole fetch's wall-clock limit: resolving, connecting, every redirect and the body.
    pub timeout: Duration,
    /// The most body bytes read; a larger declared length is refused before reading.
    pub max_bytes: usize,
}

impl Default for FetchPolicy {
    fn default() -> Self {
        FetchPolicy { allow_private: false, max_redirects: 5, timeout: Duration::from_secs(10), max_bytes: 64 << 20 }
    }
}

/// Why an address is refused (the range it is in), or None where the fetch may connect to it.
pub fn refusal(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) => refusal_v4(a),
        IpAddr::V6(a) => refusal_v6(a),
    }
}

fn in_v4(a: Ipv4Addr, net: [u8; 4], bits: u32) -> bool {
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
    u32::from(a) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn refusal_v4(a: Ipv4Addr) -> Option<&'static str> {
    const RANGES: [([u8; 4], u32, &str); 8] = [
        ([0, 0, 0, 0], 8, "a \"this network\" address (0.0.0.0/8)"),
        ([10, 0, 0, 0], 8, "a private address (10.0.0.0/8)"),
        ([127, 0, 0, 0], 8, "a loopback address (127.0.0.0/8)"),
        ([100, 64, 0, 0], 10, "a carrier-grade NAT address (100.64.0.0/10)"),
        ([169, 254, 0, 0], 16, "a link-local address (169.254.0.0/16)"),
        ([172, 16, 0, 0], 12, "a private address (172.16.0.0/12)"),
        ([192, 168, 0, 0], 16, "a private address (192.168.0.0/16)"),
        ([224, 0, 0, 0], 3, "a multicast or reserved address (224.0.0.0 and above)"),
    ];
    RANGES.iter().find(|(net, bits, _)| in_v4(a, *net, *bits)).map(|r| r.2)
}

fn refusal_v6(a: Ipv6Addr) -> Option<&'static str> {
    let s = a.segments();
    if a.is_unspecified() {
        return Some("the unspecified address (::)");
    }
    if a.is_loopback() {
        return Some("the loopback address (::1)");
    }
    if s[0] & 0xffc0 == 0xfe80 {
        return Some("a link-local address (fe80::/10)");
    }
    if s[0] & 0xfe00 == 0xfc00 {
        return Some("a unique local address (fc00::/7)");
    }
    if s[0] & 0xff00 == 0xff00 {
        return Some("a multicast address (ff00::/8)");
    }
    embedded_v4(a).and_then(refusal_v4)
}

/// The IPv4 address inside a v4-mapped, NAT64 (64:ff9b::/96) or v4-compatible IPv6 address.
fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = a.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let mapped = s[..5] == [0; 5] && s[5] == 0xffff;
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    let compatible = s[..6] == [0; 6];
    (mapped || nat64 || compatible).then_some(low)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_range_is_refused_and_public_addresses_pass() {
        for (ip, why) in [
            ("0.0.0.0", "this network"),
            ("0.1.2.3", "this network"),
            ("10.255.0.1", "private"),
            ("127.0.0.1", "loopback"),
            ("127.255.255.254", "loopback"),
            ("100.64.0.1", "carrier-grade"),
            ("100.127.255.255", "carrier-grade"),
            ("169.254.169.254", "link-local"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("224.0.0.1", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "reserved"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fc00::1", "unique local"),
            ("fd12:3456::1", "unique local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("64:ff9b::7f00:1", "loopback"),
            ("::192.168.0.1", "private"),
        ] {
            let got = refusal(ip.parse().unwrap());
            assert!(got.is_some_and(|r| r.contains(why)), "{ip}: {got:?}");
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.15.255.255",
            "172.32.0.1",
            "169.253.0.1",
            "192.169.0.1",
            "223.255.255.255",
            "11.0.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "fec0::1",
        ] {
            assert_eq!(refusal(ip.parse().unwrap()), None, "{ip}");
        }
    }
}
