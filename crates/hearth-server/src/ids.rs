//! Ids and times the responses carry: `chatcmpl-3f9a...`, `msg_3f9a...`, and the Unix time.

use std::sync::OnceLock;

/// Seconds since the Unix epoch (0 if the clock is before it).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A fresh id like `chatcmpl-3f9a...` (random per process, unique per call).
pub fn new_id(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static SEED: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    let mut h = SEED.get_or_init(Default::default).build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let a = h.finish();
    h.write_u64(a);
    format!("{prefix}-{:016x}{:08x}", a, h.finish() as u32)
}

/// A fresh id with an underscore, as Anthropic's and the Responses API's ids are spelled: `msg_...`, `resp_...`,
/// `call_...`.
pub fn item_id(prefix: &str) -> String {
    new_id(prefix).replacen(&format!("{prefix}-"), &format!("{prefix}_"), 1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_prefixed_and_unique() {
        let (a, b) = (super::new_id("cmpl"), super::new_id("cmpl"));
        assert!(a.starts_with("cmpl-") && a.len() == "cmpl-".len() + 24 && a != b, "{a} {b}");
        assert!(super::item_id("msg").starts_with("msg_"));
    }
}
