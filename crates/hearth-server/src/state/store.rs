//! The Responses API's in-process store: each stored response (`store: true`) with the conversation it ends, so
//! `previous_response_id` can continue it and `GET /v1/responses/{id}` return it. Capped in bytes (the least
//! recently used response goes first) and in age (a response older than the TTL is gone); nothing survives a
//! restart. An unknown, evicted or expired id reads as absent.

use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One stored response.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// The response object, as returned.
    pub response: Value,
    /// The conversation up to and including this response's output, as chat messages (instructions left out:
    /// they do not carry over to a continuation).
    pub messages: Vec<Value>,
}

struct Entry {
    stored: Stored,
    bytes: usize,
    at: Instant,
    /// Last use, for LRU order.
    tick: u64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<String, Entry>,
    bytes: usize,
    tick: u64,
}

pub struct ResponseStore {
    inner: Mutex<Inner>,
    max_bytes: usize,
    ttl: Duration,
}

impl ResponseStore {
    /// `max_bytes` 0: nothing is stored.
    pub fn new(max_bytes: usize, ttl: Duration) -> Self {
        Self { inner: Mutex::new(Inner::default()), max_bytes, ttl }
    }

    /// Store `stored` under `id`; false when it alone is larger than the cap (then it is not stored).
    pub fn put(&self, id: &str, stored: Stored) -> bool {
        let bytes = id.len()
            + stored.response.to_string().len()
            + stored.messages.iter().map(|m| m.to_string().len()).sum::<usize>();
        if bytes > self.max_bytes {
            return false;
        }
        let Ok(mut g) = self.inner.lock() else { return false };
        let now = Instant::now();
        let ttl = self.ttl;
        let expired: Vec<String> = g.map.iter().filter(|(_, e)| now - e.at > ttl).map(|(k, _)| k.clone()).collect();
        for k in expired {
            remove(&mut g, &k);
        }
        remove(&mut g, id);
        while g.bytes + bytes > self.max_bytes {
            let Some(oldest) = g.map.iter().min_by_key(|(_, e)| e.tick).map(|(k, _)| k.clone()) else { break };
            remove(&mut g, &oldest);
        }
        g.tick += 1;
        let tick = g.tick;
        g.bytes += bytes;
        g.map.insert(id.to_string(), Entry { stored, bytes, at: now, tick });
        true
    }

    /// The response stored under `id`, unless it expired (it is dropped then).
    pub fn get(&self, id: &str) -> Option<Stored> {
        let mut g = self.inner.lock().ok()?;
        let expired = g.map.get(id).is_some_and(|e| e.at.elapsed() > self.ttl);
        if expired {
            remove(&mut g, id);
            return None;
        }
        g.tick += 1;
        let tick = g.tick;
        let e = g.map.get_mut(id)?;
        e.tick = tick;
        Some(e.stored.clone())
    }

    /// Delete `id`; whether it was there (and not expired).
    pub fn delete(&self, id: &str) -> bool {
        let Ok(mut g) = self.inner.lock() else { return false };
        let live = g.map.get(id).is_some_and(|e| e.at.elapsed() <= self.ttl);
        remove(&mut g, id);
        live
    }

    /// Stored responses and their bytes.
    pub fn usage(&self) -> (usize, usize) {
        self.inner.lock().map(|g| (g.map.len(), g.bytes)).unwrap_or((0, 0))
    }
}

fn remove(g: &mut Inner, id: &str) {
    if let Some(e) = g.map.remove(id) {
        g.bytes -= e.bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(n: usize) -> Stored {
        Stored { response: json!({"text": "x".repeat(n)}), messages: vec![json!({"role": "user", "content": "hi"})] }
    }

    #[test]
    fn least_recently_used_goes_first_when_over_the_cap() {
        let s = ResponseStore::new(300, Duration::from_secs(60));
        assert!(s.put("a", stored(100)) && s.put("b", stored(100)));
        assert!(s.get("a").is_some()); // a is now more recent than b
        assert!(s.put("c", stored(100)));
        assert!(s.get("b").is_none(), "b was least recently used");
        assert!(s.get("a").is_some() && s.get("c").is_some());
        assert!(s.usage().1 <= 300);
        assert!(!s.put("huge", stored(1000)), "larger than the cap alone");
        assert!(s.delete("a") && !s.delete("a") && s.get("a").is_none());
    }

    #[test]
    fn expired_responses_are_gone() {
        let s = ResponseStore::new(10_000, Duration::from_millis(30));
        assert!(s.put("a", stored(10)));
        assert!(s.get("a").is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert!(s.get("a").is_none() && !s.delete("a"));
        assert_eq!(s.usage(), (0, 0));
        let off = ResponseStore::new(0, Duration::from_secs(60));
        assert!(!off.put("a", stored(1)));
    }
}
