//! The connection layer: the accept loop, per-connection HTTP/1.1 with a header-read timeout, a cap on open
//! connections, and the phases of a graceful shutdown (docs/design/0011-connections.md).
//!
//! - A connection has `header_timeout` to send a request's head; the same timer bounds an idle keep-alive
//!   connection between requests (hyper starts it whenever it waits for a head).
//! - At most `max_connections` are open. At the cap, a new connection takes the place of the oldest one with no
//!   request in flight (a stalled or idle connection); when every one is serving a request, the newcomer gets a
//!   503 and is closed. The default cap comes from the process's open-file limit.
//! - On shutdown: stop accepting, let every connection finish the request it is serving (idle ones close at
//!   once), and after `grace` end the generation still running (a stream sends an error event), give those
//!   responses a moment to be written, then close whatever is left.

use crate::shutdown;
use axum::body::{Body, Bytes};
use axum::http::Request;
use axum::Router;
use http_body::Body as HttpBody;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// How the server treats connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_timeout: Duration,
    pub max_connections: usize,
    pub grace: Duration,
}

/// After the grace period, how long the requests whose generation was ended get to write their last bytes.
const FINAL_WRITE: Duration = Duration::from_secs(2);

/// File descriptors kept for everything but connections (model files, the SSD tier, the runtime).
const RESERVED_FDS: usize = 128;

/// The answer to a connection over the cap when no open one can make room.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 129\r\n\r\n{\"error\":{\"message\":\"too many open connections; retry in a moment\",\"type\":\"unavailable_error\",\"param\":null,\"code\":\"server_busy\"}}";

/// The default cap on open connections: the soft open-file limit less what the rest of the server needs.
pub fn default_max_connections() -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits").ok().and_then(|t| soft_nofile(&t)).unwrap_or(1024);
    soft.saturating_sub(RESERVED_FDS).max(16)
}

/// The soft "Max open files" of a `/proc/<pid>/limits` text (None when unlimited or absent).
fn soft_nofile(limits: &str) -> Option<usize> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files").split_whitespace().next()?.parse().ok()
}

/// One open connection, as the cap sees it.
struct Conn {
    /// Requests being served (from the head's arrival to the end of the response body).
    in_flight: AtomicUsize,
    /// Tells the connection's task to close it (its place was taken).
    evict: Notify,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Registry {
    conns: Mutex<BTreeMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
}

impl Registry {
    /// A place for a new connection: a free one, or the oldest idle connection's; None when every connection is
    /// serving a request.
    fn admit(self: &Arc<Self>, max: usize) -> Option<Slot> {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        if conns.len() >= max {
            let idle = conns.iter().find(|(_, c)| c.in_flight.load(Ordering::Acquire) == 0).map(|(id, _)| *id)?;
            if let Some(c) = conns.remove(&idle) {
                c.evict.notify_one();
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn { in_flight: AtomicUsize::new(0), evict: Notify::new() });
        conns.insert(id, conn.clone());
        Some(Slot { registry: self.clone(), id, conn })
    }

    fn len(&self) -> usize {
        self.conns.lock().map(|c| c.len()).unwrap_or(0)
    }
}

/// A connection's place in the registry, given back when its task ends.
struct Slot {
    registry: Arc<Registry>,
    id: u64,
    conn: Arc<Conn>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut c) = self.registry.conns.lock() {
            c.remove(&self.id);
        }
    }
}

/// A request in flight on a connection (it cannot be evicted meanwhile).
struct Busy(Arc<Conn>);

impl Busy {
    fn enter(conn: &Arc<Conn>) -> Self {
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(conn.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that holds `guard` until the body is written or dropped (a request counted as in flight: `Busy`).
pub struct Guarded<G> {
    pub inner: Body,
    pub guard: G,
}

impl<G: Unpin> HttpBody for Guarded<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Serve `app` on `listener` until `shutdown` resolves, then shut down gracefully (see the module's doc).
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, shutdown: impl Future<Output = ()>) {
    let registry = Arc::new(Registry::default());
    let (closing_tx, closing) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => match registry.admit(limits.max_connections) {
                    Some(slot) => {
                        tasks.spawn(connection(stream, slot, app.clone(), limits, closing.clone()));
                    }
                    None => refuse(stream),
                },
                Err(e) => {
                    // Out of descriptors (or a connection that died in the backlog): wait a little, go on.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    let open = registry.len();
    tracing::info!(open, "no longer accepting connections; finishing the requests in flight");
    closing_tx.send_replace(true);
    if !join_until(&mut tasks, Instant::now() + limits.grace).await {
        eprintln!("hearth: the shutdown grace period is over; ending the requests still running");
        shutdown::end_generation();
        if !join_until(&mut tasks, Instant::now() + FINAL_WRITE).await {
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
    }
}

/// Wait for every task until `deadline`; whether all ended.
async fn join_until(tasks: &mut JoinSet<()>, deadline: Instant) -> bool {
    loop {
        match tokio::time::timeout_at(deadline, tasks.join_next()).await {
            Ok(Some(_)) => {}
            Ok(None) => return true,
            Err(_) => return false,
        }
    }
}

/// Answer a connection over the cap with a 503 (best effort, without waiting) and close it.
fn refuse(stream: TcpStream) {
    tracing::warn!("too many open connections; refusing one");
    let _ = stream.try_write(BUSY);
}

/// One connection's task.
async fn connection(stream: TcpStream, slot: Slot, app: Router, limits: Limits, mut closing: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    let conn = slot.conn.clone();
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let busy = Busy::enter(&conn);
        let mut app = app.clone();
        async move {
            let resp = tower::Service::call(&mut app, req).await?;
            Ok::<_, Infallible>(resp.map(|inner| Body::new(Guarded { inner, guard: busy })))
        }
    });
    let http = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(http);
    let mut graceful = false;
    loop {
        tokio::select! {
            r = http.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!("connection ended: {e}");
                }
                return;
            }
            _ = slot.conn.evict.notified() => {
                tracing::debug!("connection closed to make room for a new one");
                return;
            }
            _ = closing.wait_for(|c| *c), if !graceful => {
                graceful = true;
                http.as_mut().graceful_shutdown();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_open_file_limit() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max processes             95520                95520                processes \n\
                    Max open files            1024                 524288               files     \n";
        assert_eq!(soft_nofile(text), Some(1024));
        assert_eq!(soft_nofile("Max open files  unlimited unlimited files"), None);
        assert_eq!(soft_nofile(""), None);
        assert!(default_max_connections() >= 16);
    }

    #[test]
    fn the_cap_evicts_the_oldest_idle_connection() {
        let r = Arc::new(Registry::default());
        let a = r.admit(2).expect("room");
        let b = r.admit(2).expect("room");
        let _busy = Busy::enter(&a.conn);
        // Full: the oldest idle one (b; a is serving a request) makes room.
        let c = r.admit(2).expect("b makes room");
        assert_eq!(r.len(), 2);
        let _busy_c = Busy::enter(&c.conn);
        // Every connection is busy: no room.
        assert!(r.admit(2).is_none());
        drop(b);
        assert_eq!(r.len(), 2);
        drop(c);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn busy_message_is_well_formed() {
        let split = BUSY.windows(4).position(|w| w == b"\r\n\r\n").expect("head");
        let body = &BUSY[split + 4..];
        assert!(String::from_utf8_lossy(&BUSY[..split]).contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_slice(body).expect("JSON");
        assert_eq!(v["error"]["code"], "server_busy");
    }
}
