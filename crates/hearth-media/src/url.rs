//! http(s) URLs as a browser reads them, as far as the media fetch needs: the scheme, the host (an IP address in
//! any of the WHATWG forms, or a domain), the port and the request target.
//!
//! The host is read the way the WHATWG URL standard reads it, so that a host which *means* an address is judged
//! as that address: percent-escapes are decoded first (`%31%32%37.0.0.1` is 127.0.0.1), and a host whose last
//! label is a number is an IPv4 address in decimal, octal (`0177.0.0.1`) or hex (`0x7f.1`) parts, or one 32-bit
//! number (`2130706433`). Non-ASCII hosts are refused (send their punycode `xn--` form); so are credentials in the
//! URL.

use crate::MediaError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The schemes the fetch speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// A URL's host: an address, or a domain name (lowercase ASCII) to resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    Ip(IpAddr),
    Domain(String),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            Host::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            Host::Domain(d) => f.write_str(d),
        }
    }
}

/// A parsed http(s) URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MediaUrl {
    pub scheme: Scheme,
    pub host: Host,
    pub port: u16,
    /// The request target: the path and query, percent-encoded where HTTP needs it (no fragment).
    pub target: String,
}

impl MediaUrl {
    /// The `Host` header's value.
    pub fn authority(&self) -> String {
        if self.port == self.scheme.default_port() {
            self.host.to_string()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for MediaUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", self.scheme.as_str(), self.authority(), self.target)
    }
}

fn bad(url: &str, why: impl fmt::Display) -> MediaError {
    MediaError::BadUrl(format!("`{}`: {why}", clip(url)))
}

/// The first 200 characters of a URL, for messages.
pub(crate) fn clip(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// The scheme of an absolute URL (`letters/digits/+-.` then `:`), lowercase, or None for a relative reference.
fn scheme_of(s: &str) -> Option<(String, &str)> {
    let colon = s.find(':')?;
    let name = &s[..colon];
    let mut chars = name.chars();
    let first = chars.next()?;
    if !first.is_ascii_alphabetic() || !chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) {
        return None;
    }
    Some((name.to_ascii_lowercase(), &s[colon + 1..]))
}

/// Parse an absolute http(s) URL.
pub fn parse(input: &str) -> Result<MediaUrl, MediaError> {
    // WHATWG: leading and trailing C0 controls and spaces are stripped, tabs and newlines removed anywhere.
    let cleaned: String =
        input.trim_matches(|c: char| c <= ' ').chars().filter(|c| !matches!(c, '\t' | '\n' | '\r')).collect();
    let (scheme, rest) = scheme_of(&cleaned).ok_or_else(|| bad(input, "not an absolute URL"))?;
    let scheme = match scheme.as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => return Err(bad(input, format!("the `{other}:` scheme is not fetched; only http and https are"))),
    };
    // Special schemes ignore any number of slashes (and backslashes) before the authority.
    let rest = rest.trim_start_matches(['/', '\\']);
    let end = rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err(bad(input, "credentials in a media URL are not supported"));
    }
    let (host_text, port_text) = split_port(authority).map_err(|why| bad(input, why))?;
    let host = parse_host(host_text).map_err(|why| bad(input, why))?;
    let port = match port_text {
        None | Some("") => scheme.default_port(),
        Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => {
            p.parse::<u16>().map_err(|_| bad(input, format!("port {p} is out of range")))?
        }
        Some(p) => return Err(bad(input, format!("`{p}` is not a port number"))),
    };
    let tail = tail.split('#').next().unwrap_or("");
    Ok(MediaUrl { scheme, host, port, target: encode_target(tail) })
}

/// The authority's host and port text (`[v6]:port`, `host:port`, `host`).
fn split_port(authority: &str) -> Result<(&str, Option<&str>), String> {
    if authority.starts_with('[') {
        let close = authority.find(']').ok_or("an IPv6 address without its closing `]`")?;
        let after = &authority[close + 1..];
        return match after.strip_prefix(':') {
            Some(p) => Ok((&authority[..=close], Some(p))),
            None if after.is_empty() => Ok((&authority[..=close], None)),
            None => Err(format!("unexpected `{after}` after the IPv6 address")),
        };
    }
    Ok(match authority.rfind(':') {
        Some(i) => (&authority[..i], Some(&authority[i + 1..])),
        None => (authority, None),
    })
}

/// The WHATWG host parser for special schemes, without IDNA (non-ASCII is refused).
pub fn parse_host(text: &str) -> Result<Host, String> {
    if text.is_empty() {
        return Err("the URL has no host".into());
    }
    if let Some(inner) = text.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or("an IPv6 address without its closing `]`")?;
        return inner
            .parse::<Ipv6Addr>()
            .map(|a| Host::Ip(IpAddr::V6(a)))
            .map_err(|_| format!("`{inner}` is not an IPv6 address"));
    }
    let decoded = percent_decode(text.as_bytes());
    let domain = String::from_utf8(decoded).map_err(|_| "the host is not valid UTF-8 after percent-decoding")?;
    if !domain.is_ascii() {
        return Err(format!("non-ASCII host `{domain}`: send its punycode (`xn--`) form"));
    }
    let domain = domain.to_ascii_lowercase();
    if let Some(c) = domain.chars().find(|&c| c <= ' ' || c == '\x7f' || "#/:<>?@[\\]^|%".contains(c)) {
        return Err(format!("the host `{domain}` contains the forbidden character {c:?}"));
    }
    if domain.is_empty() {
        return Err("the URL has no host".into());
    }
    if ends_in_number(&domain) {
        return parse_ipv4(&domain).map(|a| Host::Ip(IpAddr::V4(a)));
    }
    Ok(Host::Domain(domain))
}

fn percent_decode(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            if let (Some(h), Some(l)) = (hex(s[i + 1]), hex(s[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// WHATWG "ends in a number": the last label (a trailing empty label dropped) is digits or `0x` hex.
fn ends_in_number(domain: &str) -> bool {
    let mut labels: Vec<&str> = domain.split('.').collect();
    if labels.last() == Some(&"") {
        if labels.len() == 1 {
            return false;
        }
        labels.pop();
    }
    let last = labels.last().copied().unwrap_or("");
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    match last.strip_prefix("0x").or_else(|| last.strip_prefix("0X")) {
        Some(h) => h.bytes().all(|b| b.is_ascii_hexdigit()),
        None => false,
    }
}

/// The WHATWG IPv4 parser: up to four parts, each decimal, octal (leading 0) or hex (0x); the last fills the
/// remaining bytes.
fn parse_ipv4(s: &str) -> Result<Ipv4Addr, String> {
    let mut parts: Vec<&str> = s.split('.').collect();
    if parts.last() == Some(&"") && parts.len() > 1 {
        parts.pop();
    }
    if parts.len() > 4 {
        return Err(format!("`{s}` is not an IPv4 address (more than four parts)"));
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for p in &parts {
        numbers.push(ipv4_number(p).ok_or_else(|| format!("`{s}` is not an IPv4 address"))?);
    }
    let (last, init) = numbers.split_last().ok_or_else(|| format!("`{s}` is not an IPv4 address"))?;
    if init.iter().any(|&n| n > 255) || *last >= 256u64.pow(5 - numbers.len() as u32) {
        return Err(format!("`{s}` is not an IPv4 address (a part is out of range)"));
    }
    let mut addr = *last;
    for (i, &n) in init.iter().enumerate() {
        addr += n << (8 * (3 - i));
    }
    Ok(Ipv4Addr::from(addr as u32))
}

fn ipv4_number(p: &str) -> Option<u64> {
    if p.is_empty() {
        return None;
    }
    let (digits, radix) = if let Some(h) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
        (h, 16)
    } else if p.len() > 1 && p.starts_with('0') {
        (&p[1..], 8)
    } else {
        (p, 10)
    };
    // Saturating: anything past 2^32 is out of range whatever its length.
    digits
        .chars()
        .try_fold(0u64, |n, c| c.to_digit(radix).map(|d| n.saturating_mul(radix as u64).saturating_add(d as u64)))
}

/// The request target: `/` when empty, backslashes as slashes, bytes HTTP does not allow percent-encoded.
fn encode_target(tail: &str) -> String {
    let mut out = String::with_capacity(tail.len() + 1);
    if !tail.starts_with(['/', '\\']) {
        out.push('/');
    }
    let mut in_query = false;
    for b in tail.bytes() {
        match b {
            b'?' => {
                in_query = true;
                out.push('?');
            }
            b'\\' if !in_query => out.push('/'),
            b if b <= b' ' || b >= 0x7f || b"\"<>`{}|\\^".contains(&b) => out.push_str(&format!("%{b:02X}")),
            b => out.push(b as char),
        }
    }
    out
}

/// A redirect's `Location` resolved against the URL that answered it.
pub fn join(base: &MediaUrl, location: &str) -> Result<MediaUrl, MediaError> {
    let loc = location.trim_matches(|c: char| c <= ' ');
    if scheme_of(loc).is_some() {
        return parse(loc);
    }
    let origin = format!("{}://{}", base.scheme.as_str(), base.authority());
    let joined = if loc.starts_with("//") || loc.starts_with("\\\\") {
        format!("{}:{loc}", base.scheme.as_str())
    } else if loc.starts_with(['/', '\\']) {
        format!("{origin}{loc}")
    } else if loc.starts_with('?') {
        format!("{origin}{}{loc}", base.target.split('?').next().unwrap_or("/"))
    } else if loc.is_empty() || loc.starts_with('#') {
        base.to_string()
    } else {
        let path = base.target.split('?').next().unwrap_or("/");
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        format!("{origin}{dir}{loc}")
    };
    parse(&joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(url: &str) -> Host {
        parse(url).unwrap_or_else(|e| panic!("{url}: {e}")).host
    }
    fn v4(a: [u8; 4]) -> Host {
        Host::Ip(IpAddr::V4(Ipv4Addr::from(a)))
    }

    #[test]
    fn ipv4_forms_read_as_a_browser_reads_them() {
        for (url, want) in [
            ("http://127.0.0.1/", [127, 0, 0, 1]),
            ("http://2130706433/", [127, 0, 0, 1]),
            ("http://0x7f000001/", [127, 0, 0, 1]),
            ("http://0177.0.0.1/", [127, 0, 0, 1]),
            ("http://0x7f.1/", [127, 0, 0, 1]),
            ("http://127.1/", [127, 0, 0, 1]),
            ("http://10.1/", [10, 0, 0, 1]),
            ("http://0/", [0, 0, 0, 0]),
            ("http://0x0A.0.0.01/", [10, 0, 0, 1]),
            ("http://%31%32%37.0.0.1/", [127, 0, 0, 1]),
            ("http://127.0.0.1./", [127, 0, 0, 1]),
            ("HTTP://0XA9.0XFE.0xA9.0XFE/", [169, 254, 169, 254]),
            ("http://3232235777:8080/x", [192, 168, 1, 1]),
        ] {
            assert_eq!(host(url), v4(want), "{url}");
        }
        for url in
            ["http://256.0.0.1/", "http://1.2.3.4.5/", "http://4294967296/", "http://1.09/", "http://0x100.1.1.1/"]
        {
            assert!(parse(url).is_err(), "{url} should be refused, got {:?}", parse(url));
        }
    }

    #[test]
    fn hosts_ports_and_targets() {
        let u = parse("  https://Example.COM:8443/a b/c?q=1 2#frag ").unwrap();
        assert_eq!(u.host, Host::Domain("example.com".into()));
        assert_eq!((u.scheme, u.port), (Scheme::Https, 8443));
        assert_eq!(u.target, "/a%20b/c?q=1%202");
        assert_eq!(u.to_string(), "https://example.com:8443/a%20b/c?q=1%202");
        let u = parse("http://[::ffff:127.0.0.1]:81").unwrap();
        assert_eq!(u.host, Host::Ip("::ffff:127.0.0.1".parse().unwrap()));
        assert_eq!((u.port, u.target.as_str()), (81, "/"));
        assert_eq!(parse("http:\\\\example.com\\a\\b").unwrap().target, "/a/b");
        assert_eq!(parse("http:example.com").unwrap().host, Host::Domain("example.com".into()));
        assert_eq!(parse("http://a.b-c.d.example/x").unwrap().port, 80);
        // A domain whose last label is not a number stays a domain.
        assert_eq!(host("http://1.2.3.example/"), Host::Domain("1.2.3.example".into()));
        assert_eq!(host("http://0x1g/"), Host::Domain("0x1g".into()));
        // Special schemes skip any slashes before the host, as browsers do.
        assert_eq!(host("http:///x/y"), Host::Domain("x".into()));
    }

    #[test]
    fn refused_urls_say_why() {
        for (url, why) in [
            ("file:///etc/passwd", "`file:` scheme"),
            ("ftp://example.com/x", "`ftp:` scheme"),
            ("gopher://127.0.0.1:6379/_x", "`gopher:` scheme"),
            ("/relative/path", "not an absolute URL"),
            ("http://user:pw@example.com/", "credentials"),
            ("http://example.com:99999/", "out of range"),
            ("http://example.com:8x/", "not a port"),
            ("http://", "no host"),
            ("http://:80/", "no host"),
            ("http://[::1/", "closing"),
            ("http://exämple.com/", "punycode"),
            ("http://ex%00ample.com/", "forbidden"),
        ] {
            let e = parse(url).expect_err(url).to_string();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn redirects_resolve_against_the_answering_url() {
        let base = parse("https://example.com:8443/img/a.png?x=1").unwrap();
        for (loc, want) in [
            ("/b.png", "https://example.com:8443/b.png"),
            ("b.png", "https://example.com:8443/img/b.png"),
            ("?y=2", "https://example.com:8443/img/a.png?y=2"),
            ("//other.example/c", "https://other.example/c"),
            ("http://10.0.0.1/", "http://10.0.0.1/"),
        ] {
            assert_eq!(join(&base, loc).unwrap().to_string(), want, "{loc}");
        }
        assert!(join(&base, "file:///etc/passwd").unwrap_err().to_string().contains("`file:` scheme"));
    }
}
