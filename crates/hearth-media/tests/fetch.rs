//! The media fetch against local servers through an injected network: public-looking test addresses dial local
//! listeners, so the policy runs exactly as it does for real hosts.

use hearth_media::fetch::{fetch, Net, NetFuture};
use hearth_media::{FetchPolicy, MediaError};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Names resolve to the listed addresses (a name listed twice answers its entries in turn: a rebinding
/// resolver); every dial goes to the local server, and is recorded.
struct TestNet {
    names: Mutex<HashMap<String, Vec<Vec<IpAddr>>>>,
    server: SocketAddr,
    dialed: Mutex<Vec<SocketAddr>>,
    resolved: Mutex<Vec<String>>,
}

impl TestNet {
    fn new(server: SocketAddr, names: &[(&str, &[&str])]) -> Arc<Self> {
        let mut map: HashMap<String, Vec<Vec<IpAddr>>> = HashMap::new();
        for (n, ips) in names {
            map.entry(n.to_string()).or_default().push(ips.iter().map(|i| i.parse().unwrap()).collect());
        }
        Arc::new(TestNet { names: Mutex::new(map), server, dialed: Mutex::default(), resolved: Mutex::default() })
    }
}

impl Net for TestNet {
    fn resolve<'a>(&'a self, host: &'a str, _port: u16) -> NetFuture<'a, Vec<IpAddr>> {
        self.resolved.lock().unwrap().push(host.to_string());
        let mut names = self.names.lock().unwrap();
        let answer = match names.get_mut(host) {
            Some(list) if list.len() > 1 => list.remove(0),
            Some(list) => list[0].clone(),
            None => vec![],
        };
        Box::pin(async move { Ok(answer) })
    }
    fn connect(&self, addr: SocketAddr) -> NetFuture<'_, TcpStream> {
        self.dialed.lock().unwrap().push(addr);
        let server = self.server;
        Box::pin(TcpStream::connect(server))
    }
}

/// A local HTTP/1.1 server answering by path (one request per connection).
async fn server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut n = 0;
                while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf[n..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => n += k,
                    }
                    if buf[0] == 0x16 {
                        // A TLS ClientHello: this server speaks plain HTTP.
                        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").await;
                        return;
                    }
                }
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let host =
                    head.lines().find_map(|l| l.strip_prefix("host: ").or(l.strip_prefix("Host: "))).unwrap_or("");
                respond(&mut s, &path, host.trim()).await;
            });
        }
    });
    addr
}

async fn respond(s: &mut TcpStream, path: &str, host: &str) {
    let redirect = |to: &str| format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n");
    let reply = match path {
        "/ok" => "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 5\r\n\r\nhello".to_string(),
        "/echo-host" => format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{host}", host.len()),
        p if p.starts_with("/hops/") => {
            let n: u32 = p[6..].parse().unwrap_or(0);
            if n == 0 {
                redirect("/ok")
            } else {
                redirect(&format!("/hops/{}", n - 1))
            }
        }
        "/to-private" => redirect("http://10.0.0.7/ok"),
        "/to-private-name" => redirect("http://intranet.test/ok"),
        "/to-file" => redirect("file:///etc/passwd"),
        "/to-gopher" => redirect("gopher://public.test/x"),
        "/missing" => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_string(),
        "/declared-huge" => "HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n".to_string(),
        "/chunked-forever" => {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").await;
            let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
            for _ in 0..1000 {
                if s.write_all(chunk.as_bytes()).await.is_err() {
                    return;
                }
            }
            return;
        }
        "/lying-short" => {
            // Declares 5 bytes and sends a megabyte: only the declared 5 are read.
            format!("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello{}", "y".repeat(1 << 20))
        }
        "/drip" => {
            // Declares 1000 bytes under the cap, then drips one every 100 ms.
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n").await;
            for _ in 0..1000 {
                if s.write_all(b"z").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            return;
        }
        "/stall" => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            return;
        }
        _ => "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".to_string(),
    };
    let _ = s.write_all(reply.as_bytes()).await;
    let _ = s.shutdown().await;
}

fn policy() -> FetchPolicy {
    FetchPolicy { timeout: Duration::from_millis(1500), max_bytes: 1 << 20, ..FetchPolicy::default() }
}

async fn setup(names: &[(&str, &[&str])]) -> Arc<TestNet> {
    let mut all: Vec<(&str, &[&str])> = vec![("public.test", &["203.0.113.7"]), ("intranet.test", &["192.168.1.5"])];
    all.extend_from_slice(names);
    TestNet::new(server().await, &all)
}

#[tokio::test]
async fn a_public_host_is_fetched_through_its_checked_address() {
    let net = setup(&[]).await;
    let got = fetch("http://public.test/ok", &policy(), net.as_ref()).await.unwrap();
    assert_eq!((got.bytes.as_slice(), got.content_type.as_deref()), (&b"hello"[..], Some("image/png")));
    assert_eq!(*net.dialed.lock().unwrap(), vec!["203.0.113.7:80".parse().unwrap()]);
    let got = fetch("http://public.test:8080/echo-host", &policy(), net.as_ref()).await.unwrap();
    assert_eq!(got.bytes, b"public.test:8080");
}

#[tokio::test]
async fn private_destinations_are_refused_before_any_connection() {
    let net = setup(&[("both.test", &["203.0.113.9", "10.1.2.3"]), ("mapped.test", &["::ffff:169.254.169.254"])]).await;
    for (url, why) in [
        ("http://127.0.0.1/ok", "loopback"),
        ("http://2130706433/ok", "loopback"),
        ("http://0x7f.0.0.1/ok", "loopback"),
        ("http://0177.0.0.1/ok", "loopback"),
        ("http://017700000001/ok", "loopback"),
        ("http://%31%30.0.0.1/ok", "private"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[::1]/ok", "loopback"),
        ("http://[::ffff:127.0.0.1]/ok", "loopback"),
        ("http://[::ffff:7f00:1]/ok", "loopback"),
        ("http://[64:ff9b::a9fe:a9fe]/ok", "link-local"),
        ("http://[fd00::1]/ok", "unique local"),
        ("http://[fe80::1]/ok", "link-local"),
        ("http://100.64.1.1/ok", "carrier-grade"),
        ("http://0.0.0.0/ok", "this network"),
        ("http://intranet.test/ok", "intranet.test resolves to 192.168.1.5"),
        ("http://both.test/ok", "both.test resolves to 10.1.2.3"),
        ("http://mapped.test/ok", "link-local"),
    ] {
        let e = fetch(url, &policy(), net.as_ref()).await.expect_err(url);
        assert!(matches!(e, MediaError::Refused { .. }), "{url}: {e}");
        assert!(e.to_string().contains(why), "{url}: {e}");
        assert!(e.to_string().contains("--allow-private-media"), "{url}: {e}");
    }
    assert!(net.dialed.lock().unwrap().is_empty(), "dialed {:?}", net.dialed.lock().unwrap());
    // The numeric hosts never reached the resolver.
    let resolved = net.resolved.lock().unwrap().clone();
    assert_eq!(resolved, vec!["intranet.test", "both.test", "mapped.test"]);
}

#[tokio::test]
async fn allow_private_lets_the_local_network_through() {
    let net = setup(&[]).await;
    let p = FetchPolicy { allow_private: true, ..policy() };
    assert_eq!(fetch("http://intranet.test/ok", &p, net.as_ref()).await.unwrap().bytes, b"hello");
    assert_eq!(fetch("http://127.0.0.1:9/ok", &p, net.as_ref()).await.unwrap().bytes, b"hello");
}

#[tokio::test]
async fn a_rebinding_resolver_cannot_swap_the_address() {
    // First answer public, every later one private: one lookup per hop, and the connection goes to the address
    // that was checked.
    let net = setup(&[("rebind.test", &["203.0.113.20"]), ("rebind.test", &["127.0.0.1"])]).await;
    fetch("http://rebind.test/ok", &policy(), net.as_ref()).await.unwrap();
    assert_eq!(*net.dialed.lock().unwrap(), vec!["203.0.113.20:80".parse().unwrap()]);
    let e = fetch("http://rebind.test/ok", &policy(), net.as_ref()).await.unwrap_err();
    assert!(matches!(e, MediaError::Refused { .. }), "{e}");
    assert_eq!(net.dialed.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn redirects_are_followed_and_each_one_rechecked() {
    let net = setup(&[]).await;
    let p = policy();
    assert_eq!(fetch("http://public.test/hops/4", &p, net.as_ref()).await.unwrap().bytes, b"hello");
    let e = fetch("http://public.test/hops/5", &p, net.as_ref()).await.unwrap_err().to_string();
    assert!(e.contains("more than 5 redirects"), "{e}");
    for (path, why) in [
        ("/to-private", "10.0.0.7 is a private address"),
        ("/to-private-name", "intranet.test resolves to 192.168.1.5"),
        ("/to-file", "`file:` scheme"),
        ("/to-gopher", "`gopher:` scheme"),
    ] {
        let before = net.dialed.lock().unwrap().len();
        let e = fetch(&format!("http://public.test{path}"), &p, net.as_ref()).await.unwrap_err();
        assert!(matches!(e, MediaError::Refused { .. }), "{path}: {e}");
        assert!(e.to_string().contains(why), "{path}: {e}");
        assert_eq!(net.dialed.lock().unwrap().len(), before + 1, "{path}: only the first hop connects");
    }
    let e = fetch("http://public.test/missing", &p, net.as_ref()).await.unwrap_err().to_string();
    assert!(e.contains("HTTP 404"), "{e}");
}

#[tokio::test]
async fn bodies_are_capped_and_slow_servers_timed_out() {
    let net = setup(&[]).await;
    let p = policy();
    let e = fetch("http://public.test/declared-huge", &p, net.as_ref()).await.unwrap_err();
    assert!(matches!(e, MediaError::TooLarge(_)), "{e}");
    let e = fetch("http://public.test/chunked-forever", &p, net.as_ref()).await.unwrap_err();
    assert!(matches!(e, MediaError::TooLarge(_)), "{e}");
    assert!(e.to_string().contains("1 MiB"), "{e}");
    assert_eq!(fetch("http://public.test/lying-short", &p, net.as_ref()).await.unwrap().bytes, b"hello");
    for path in ["/drip", "/stall"] {
        let t = Instant::now();
        let e = fetch(&format!("http://public.test{path}"), &p, net.as_ref()).await.unwrap_err();
        assert!(matches!(e, MediaError::Timeout { .. }), "{path}: {e}");
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(1400) && took < Duration::from_secs(5), "{path}: {took:?}");
    }
}

#[tokio::test]
async fn https_speaks_tls_to_the_checked_address() {
    // The local server speaks plain HTTP: the TLS handshake to the checked address fails, and says so.
    let net = setup(&[]).await;
    let e = fetch("https://public.test/ok", &policy(), net.as_ref()).await.unwrap_err();
    assert!(e.to_string().contains("TLS"), "{e}");
    assert_eq!(*net.dialed.lock().unwrap(), vec!["203.0.113.7:443".parse().unwrap()]);
}
