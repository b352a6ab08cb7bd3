//! The SSRF-hardened fetch of a remote image: http(s) only, every resolved address checked against the policy
//! ([`crate::policy`]) and the connection made to the checked address itself (no second DNS lookup: a rebinding
//! resolver cannot swap the address between check and connect), redirects followed by hand and each one
//! re-checked, one wall-clock limit over the whole fetch, and the body read as a stream under the byte cap (a
//! declared length over the cap is refused before reading; a lying or absent one cannot get past it).
//!
//! The network is a seam ([`Net`]): the server uses the system's resolver and TCP ([`SystemNet`]); tests inject a
//! resolver that answers what they need and a dialer that maps test addresses to local servers.

use crate::policy::{refusal, FetchPolicy};
use crate::url::{self, Host, MediaUrl, Scheme};
use crate::MediaError;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::header::{HeaderValue, ACCEPT, ACCEPT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HOST, LOCATION, USER_AGENT};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A boxed future of the network seam.
pub type NetFuture<'a, T> = Pin<Box<dyn Future<Output = io::Result<T>> + Send + 'a>>;

/// How the fetch reaches the network.
pub trait Net: Send + Sync {
    /// The addresses of a domain name.
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> NetFuture<'a, Vec<IpAddr>>;
    /// A TCP connection to exactly this address.
    fn connect(&self, addr: SocketAddr) -> NetFuture<'_, TcpStream>;
}

/// The system's resolver and TCP.
pub struct SystemNet;

impl Net for SystemNet {
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> NetFuture<'a, Vec<IpAddr>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.map(|a| a.ip()).collect()) })
    }
    fn connect(&self, addr: SocketAddr) -> NetFuture<'_, TcpStream> {
        Box::pin(TcpStream::connect(addr))
    }
}

/// What a fetch brought back.
#[derive(Debug)]
pub struct Fetched {
    pub bytes: Vec<u8>,
    /// The response's `Content-Type`, if any (informational: the decoder reads the bytes' own signature).
    pub content_type: Option<String>,
    /// The URL that answered, after redirects.
    pub url: String,
}

/// Fetch `url` under `policy`.
pub async fn fetch(url: &str, policy: &FetchPolicy, net: &dyn Net) -> Result<Fetched, MediaError> {
    let first = url::parse(url)?;
    let shown = first.to_string();
    match tokio::time::timeout(policy.timeout, follow(first, policy, net)).await {
        Ok(r) => r,
        Err(_) => Err(MediaError::Timeout { url: shown, secs: policy.timeout.as_secs_f64() }),
    }
}

/// One hop's answer.
enum Hop {
    Redirect(String),
    Body(Fetched),
}

async fn follow(mut at: MediaUrl, policy: &FetchPolicy, net: &dyn Net) -> Result<Fetched, MediaError> {
    let mut redirects = 0;
    loop {
        match hop(&at, policy, net).await? {
            Hop::Body(f) => return Ok(f),
            Hop::Redirect(location) => {
                redirects += 1;
                if redirects > policy.max_redirects {
                    return Err(MediaError::Fetch {
                        url: at.to_string(),
                        why: format!("more than {} redirects", policy.max_redirects),
                    });
                }
                at = url::join(&at, &location).map_err(|e| match e {
                    MediaError::BadUrl(why) => MediaError::Refused {
                        url: at.to_string(),
                        reason: format!("it redirects to an unusable URL {why}"),
                    },
                    other => other,
                })?;
            }
        }
    }
}

/// The addresses of a URL's host, every one checked: any refused address refuses the host.
async fn checked_addresses(at: &MediaUrl, policy: &FetchPolicy, net: &dyn Net) -> Result<Vec<IpAddr>, MediaError> {
    let addrs = match &at.host {
        Host::Ip(ip) => vec![*ip],
        Host::Domain(d) => net
            .resolve(d, at.port)
            .await
            .map_err(|e| MediaError::Fetch { url: at.to_string(), why: format!("cannot resolve {d}: {e}") })?,
    };
    if addrs.is_empty() {
        return Err(MediaError::Fetch { url: at.to_string(), why: format!("{} has no addresses", at.host) });
    }
    if !policy.allow_private {
        for ip in &addrs {
            if let Some(why) = refusal(*ip) {
                let reason = match &at.host {
                    Host::Ip(_) => format!("{ip} is {why}"),
                    Host::Domain(d) => format!("{d} resolves to {ip}, {why}"),
                };
                return Err(MediaError::Refused {
                    url: at.to_string(),
                    reason: format!(
                        "{reason} (start the server with --allow-private-media to fetch from the local network)"
                    ),
                });
            }
        }
    }
    Ok(addrs)
}

async fn hop(at: &MediaUrl, policy: &FetchPolicy, net: &dyn Net) -> Result<Hop, MediaError> {
    let addrs = checked_addresses(at, policy, net).await?;
    let fail = |why: String| MediaError::Fetch { url: at.to_string(), why };
    let mut last = None;
    let mut stream = None;
    for ip in addrs {
        match net.connect(SocketAddr::new(ip, at.port)).await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(format!("cannot connect to {}: {e}", SocketAddr::new(ip, at.port))),
        }
    }
    let tcp = stream.ok_or_else(|| fail(last.unwrap_or_else(|| "no address to connect to".into())))?;
    match at.scheme {
        Scheme::Http => exchange(tcp, at, policy).await,
        Scheme::Https => {
            let name = match &at.host {
                Host::Ip(ip) => rustls::pki_types::ServerName::IpAddress((*ip).into()),
                Host::Domain(d) => rustls::pki_types::ServerName::try_from(d.clone())
                    .map_err(|e| fail(format!("not a TLS server name: {e}")))?,
            };
            let tls = tls_connector().connect(name, tcp).await.map_err(|e| fail(format!("TLS: {e}")))?;
            exchange(tls, at, policy).await
        }
    }
}

/// The TLS client, built once: the Mozilla root store (webpki-roots), TLS 1.2 and 1.3.
fn tls_connector() -> tokio_rustls::TlsConnector {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        // ring's provider (aws-lc-rs would add a cmake build); its lack of post-quantum key exchange does not
        // matter for fetching a public image.
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap_or_else(|_| rustls::ClientConfig::builder());
        Arc::new(builder.with_root_certificates(roots).with_no_client_auth())
    });
    tokio_rustls::TlsConnector::from(config.clone())
}

/// One GET on an open connection.
async fn exchange<S>(io: S, at: &MediaUrl, policy: &FetchPolicy) -> Result<Hop, MediaError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let fail = |why: String| MediaError::Fetch { url: at.to_string(), why };
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(io))
        .await
        .map_err(|e| fail(e.to_string()))?;
    // The connection's driver; aborted when the hop ends (one request per connection).
    let driver = AbortOnDrop(tokio::spawn(async move {
        let _ = conn.await;
    }));
    let req = hyper::Request::get(at.target.as_str())
        .header(HOST, at.authority())
        .header(USER_AGENT, concat!("hearth/", env!("CARGO_PKG_VERSION")))
        .header(ACCEPT, "image/*, */*;q=0.5")
        .header(ACCEPT_ENCODING, "identity")
        .body(Empty::new())
        .map_err(|e| fail(format!("bad request: {e}")))?;
    let resp = sender.send_request(req).await.map_err(|e| fail(e.to_string()))?;
    let status = resp.status();
    if status.is_redirection() {
        if let Some(loc) = resp.headers().get(LOCATION) {
            let loc = loc.to_str().map_err(|_| fail("a redirect's Location is not text".into()))?;
            return Ok(Hop::Redirect(loc.to_string()));
        }
    }
    if !status.is_success() {
        return Err(fail(format!("the server answered HTTP {status}")));
    }
    let declared = resp.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > policy.max_bytes as u64) {
        return Err(too_large(at, policy));
    }
    let content_type = resp.headers().get(CONTENT_TYPE).and_then(|v: &HeaderValue| v.to_str().ok()).map(str::to_string);
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| fail(format!("reading the body: {e}")))?;
        if let Some(data) = frame.data_ref() {
            if bytes.len() + data.len() > policy.max_bytes {
                return Err(too_large(at, policy));
            }
            bytes.extend_from_slice(data);
        }
    }
    drop(driver);
    Ok(Hop::Body(Fetched { bytes, content_type, url: at.to_string() }))
}

fn too_large(at: &MediaUrl, policy: &FetchPolicy) -> MediaError {
    MediaError::TooLarge(format!(
        "the image at {at} is larger than the limit of {}",
        crate::fmt_bytes(policy.max_bytes)
    ))
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
