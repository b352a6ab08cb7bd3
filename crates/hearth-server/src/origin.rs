//! What a browser may do with the server: which origins may call it (CORS, `--allowed-origins`), which `Host`
//! names it answers without an API key (against DNS rebinding, `--allowed-hosts`), and which request bodies are
//! JSON (a form or `text/plain` body, which any web page may send without a preflight, is not).
//!
//! A web page on another site can send "simple" requests (POST with a `text/plain` or form body) to a local
//! server without asking, and with DNS rebinding it can even read the answers under its own name. So by default
//! the server lets only its own origin and loopback origins call it, answers only loopback names, IP addresses,
//! its `--host` and `--allowed-hosts` (an API key makes the name check moot), and refuses bodies that do not say
//! they are JSON.
//!
//! This is the policy; `http::guard` applies it to every request and `http::middleware::cors` to CORS.

use axum::http::HeaderValue;

/// A comma-separated list as given to `--allowed-origins` / `--allowed-hosts`: `*` allows everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AllowList {
    pub any: bool,
    pub entries: Vec<String>,
}

impl AllowList {
    pub fn parse(s: &str) -> Self {
        let entries: Vec<String> = s
            .split(',')
            .map(|e| e.trim().trim_end_matches('/').to_ascii_lowercase())
            .filter(|e| !e.is_empty())
            .collect();
        Self { any: entries.iter().any(|e| e == "*"), entries }
    }

    fn contains(&self, item: &str) -> bool {
        self.any || self.entries.iter().any(|e| e.eq_ignore_ascii_case(item))
    }
}

/// The host part of `host[:port]` / `[v6]:port`, lowercased.
pub fn host_name(authority: &str) -> String {
    let a = authority.trim().to_ascii_lowercase();
    if let Some(rest) = a.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("").to_string();
    }
    match a.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h.to_string(),
        _ => a,
    }
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether a browser page of `origin` may call the server: `--allowed-origins`, a loopback origin, or the
/// server's own origin (the one the request was sent to).
pub fn origin_allowed(origin: &str, allowed: &AllowList, request_host: Option<&str>) -> bool {
    let origin = origin.trim().trim_end_matches('/');
    if allowed.contains(origin) {
        return true;
    }
    let Some((scheme, authority)) = origin.split_once("://") else { return false };
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return false;
    }
    is_loopback_name(&host_name(authority)) || request_host.is_some_and(|h| h.trim().eq_ignore_ascii_case(authority))
}

/// Whether the server answers a request sent to `host` (its `Host` header) without an API key: loopback names,
/// any IP address (a rebinding attack needs a name), the `--host` it listens on, and `--allowed-hosts`.
pub fn host_allowed(host: &str, listen_host: &str, allowed: &AllowList) -> bool {
    let name = host_name(host);
    allowed.contains(&name)
        || is_loopback_name(&name)
        || name.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case(&host_name(listen_host))
}

/// Whether a body's `Content-Type` is JSON (or absent: clients that send none mean JSON).
pub fn is_json_type(content_type: Option<&HeaderValue>) -> bool {
    let Some(v) = content_type else { return true };
    let Ok(v) = v.to_str() else { return false };
    let essence = v.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        let none = AllowList::default();
        let own = Some("192.168.1.5:8080");
        assert!(origin_allowed("http://localhost:3000", &none, own));
        assert!(origin_allowed("http://127.0.0.1:5173", &none, own));
        assert!(origin_allowed("http://[::1]:8080", &none, own));
        assert!(origin_allowed("http://192.168.1.5:8080", &none, own));
        assert!(!origin_allowed("https://evil.example", &none, own));
        assert!(!origin_allowed("null", &none, own));
        assert!(!origin_allowed("http://localhost.evil.example", &none, own));
        let some = AllowList::parse("https://app.example, http://tool.lan:9000/");
        assert!(origin_allowed("https://app.example", &some, own));
        assert!(origin_allowed("http://tool.lan:9000", &some, own));
        assert!(!origin_allowed("https://other.example", &some, own));
        assert!(origin_allowed("https://other.example", &AllowList::parse("*"), own));
    }

    #[test]
    fn hosts() {
        let none = AllowList::default();
        assert!(host_allowed("localhost:8080", "127.0.0.1", &none));
        assert!(host_allowed("127.0.0.1:8080", "127.0.0.1", &none));
        assert!(host_allowed("[::1]:8080", "127.0.0.1", &none));
        assert!(host_allowed("10.0.0.7:8080", "0.0.0.0", &none));
        assert!(host_allowed("app.localhost", "127.0.0.1", &none));
        assert!(!host_allowed("rebind.evil.example:8080", "127.0.0.1", &none));
        assert!(host_allowed("mybox.lan:8080", "mybox.lan", &none));
        assert!(host_allowed("mybox.lan:8080", "0.0.0.0", &AllowList::parse("mybox.lan")));
        assert!(host_allowed("anything:1", "127.0.0.1", &AllowList::parse("*")));
    }

    #[test]
    fn json_content_types() {
        let v = |s: &'static str| HeaderValue::from_static(s);
        assert!(is_json_type(None));
        assert!(is_json_type(Some(&v("application/json"))));
        assert!(is_json_type(Some(&v("Application/JSON; charset=utf-8"))));
        assert!(is_json_type(Some(&v("application/vnd.api+json"))));
        assert!(!is_json_type(Some(&v("text/plain"))));
        assert!(!is_json_type(Some(&v("application/x-www-form-urlencoded"))));
        assert!(!is_json_type(Some(&v("multipart/form-data; boundary=x"))));
    }
}
