//! Server configuration and the sampling defaults a request falls back to (request > flags > the model's
//! `generation_config.json` > built-in greedy).

use crate::origin::AllowList;
use serde_json::Value;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    /// Largest request body in bytes (413 above it).
    pub max_body: usize,
    /// Most bytes of text one `/tokenize` or `/detokenize` request may hold (413 above it).
    pub max_tokenize: usize,
    /// When set, every route but `/health` needs `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// SSE keep-alive comment interval while a streamed request waits for its first token.
    pub keepalive: Duration,
    /// The Responses API's store of responses: its cap in bytes (0: nothing is stored) and how long a response
    /// stays.
    pub response_store_bytes: usize,
    pub response_store_ttl: Duration,
    /// Serve the web chat at `/` (`--no-ui` turns it off).
    pub ui: bool,
    /// Most time a connection has to send a request's head; also how long an idle keep-alive connection stays.
    pub header_timeout: Duration,
    /// Most time a request's body may take to arrive (`--timeout`; 408 after it).
    pub timeout: Duration,
    /// On shutdown, how long requests in flight get to finish.
    pub shutdown_grace: Duration,
    /// Most open connections (None: from the open-file limit, see `http::conns::default_max_connections`).
    pub max_connections: Option<usize>,
    /// Web origins that may call the server besides its own and loopback ones (`--allowed-origins`).
    pub allowed_origins: AllowList,
    /// `Host` names answered without an API key besides loopback names, IP addresses and `host`
    /// (`--allowed-hosts`).
    pub allowed_hosts: AllowList,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 8080,
            max_body: 4 * 1024 * 1024,
            max_tokenize: 1 << 20,
            api_key: None,
            keepalive: Duration::from_secs(1),
            response_store_bytes: 64 << 20,
            response_store_ttl: Duration::from_secs(3600),
            ui: true,
            header_timeout: Duration::from_secs(20),
            timeout: Duration::from_secs(600),
            shutdown_grace: Duration::from_secs(30),
            max_connections: None,
            allowed_origins: AllowList::default(),
            allowed_hosts: AllowList::default(),
        }
    }
}

/// What a request gets for a parameter it does not set.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingDefaults {
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: usize,
    pub min_p: f32,
    pub repetition_penalty: f32,
    /// `None`: min(2048, what is left of the context).
    pub max_tokens: Option<usize>,
}

impl Default for SamplingDefaults {
    fn default() -> Self {
        Self { temperature: 0.0, top_p: 1.0, top_k: 0, min_p: 0.0, repetition_penalty: 1.0, max_tokens: None }
    }
}

/// Values given on the command line (each overrides the model's generation config).
#[derive(Debug, Clone, Default)]
pub struct DefaultOverrides {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub max_tokens: Option<usize>,
}

impl SamplingDefaults {
    /// Built-in defaults, then the model's `generation_config.json` (if it samples), then the flags.
    pub fn resolve(generation_config: Option<&Value>, flags: &DefaultOverrides) -> Self {
        let mut d = Self::default();
        if let Some(g) = generation_config.filter(|g| g.get("do_sample").and_then(Value::as_bool) != Some(false)) {
            let f = |k: &str| g.get(k).and_then(Value::as_f64).filter(|x| x.is_finite());
            if let Some(t) = f("temperature").filter(|t| *t >= 0.0) {
                d.temperature = t as f32;
            }
            if let Some(p) = f("top_p").filter(|p| *p > 0.0 && *p <= 1.0) {
                d.top_p = p as f32;
            }
            if let Some(k) = g.get("top_k").and_then(Value::as_u64) {
                d.top_k = k as usize;
            }
            if let Some(m) = f("min_p").filter(|m| (0.0..=1.0).contains(m)) {
                d.min_p = m as f32;
            }
            if let Some(r) = f("repetition_penalty").filter(|r| *r > 0.0) {
                d.repetition_penalty = r as f32;
            }
        }
        if let Some(t) = flags.temperature {
            d.temperature = t;
        }
        if let Some(p) = flags.top_p {
            d.top_p = p;
        }
        if let Some(k) = flags.top_k {
            d.top_k = k;
        }
        d.max_tokens = flags.max_tokens;
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn precedence_flags_over_generation_config_over_builtin() {
        assert_eq!(SamplingDefaults::resolve(None, &DefaultOverrides::default()), SamplingDefaults::default());
        let g = json!({"do_sample": true, "temperature": 0.6, "top_p": 0.95, "top_k": 20});
        let d = SamplingDefaults::resolve(Some(&g), &DefaultOverrides { top_k: Some(5), ..Default::default() });
        assert_eq!((d.temperature, d.top_p, d.top_k), (0.6, 0.95, 5));
        // A greedy generation config leaves the built-ins alone.
        let g = json!({"do_sample": false, "temperature": 0.6});
        assert_eq!(SamplingDefaults::resolve(Some(&g), &DefaultOverrides::default()).temperature, 0.0);
    }
}
