//! The parent's side: spawn the engine child, speak to it over a UNIX socket, and respawn it when it dies.
//!
//! One connection at a time. Requests get ids from a counter; the child answers each with `Accepted` or
//! `Refused`, then streams its events, which the reader task routes to the request's [`RequestStream`]. When the
//! connection ends (the child crashed, was killed, ran out of memory), every request still open ends at once: one
//! not yet admitted is refused as `Unavailable`, one running gets an `Error` event of kind
//! [`EngineErrorKind::Unavailable`] (the HTTP layer answers 502 `engine_unavailable`). The child is then respawned after a
//! backoff that doubles per crash in a row (from `BACKOFF_MIN` up to the command's cap, `--isolate-backoff-max`)
//! and resets once a child has stayed up for `STABLE_AFTER`.

use super::proto::{read_frame, write_queue, ToChild, ToParent, VERSION};
use hearth_engine::engine::{
    EngineErrorKind, EngineEvent, EngineInfo, EngineRequest, EngineStats, RequestStream, SubmitError,
};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::BufWriter;
use tokio::net::{UnixListener, UnixStream};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const STABLE_AFTER: Duration = Duration::from_secs(30);
/// How often cancellations of running requests are forwarded, and stats refreshed.
const CANCEL_POLL: Duration = Duration::from_millis(20);
const STATS_POLL: Duration = Duration::from_millis(250);

/// How to start a child: the program and its arguments (the socket path is appended as `--socket PATH`), and the
/// most time to wait before a respawn.
#[derive(Debug, Clone)]
pub struct ChildCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub backoff_max: Duration,
}

/// The engine's state, for `/health` and `GET /engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineState {
    /// The first child is loading the model.
    Starting,
    Up,
    /// The child died; a new one is on its way.
    Restarting,
    /// Evicted from a model pool: its process has ended and none follows.
    Retired,
}

/// What `GET /engine` reports of an isolated engine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EngineStatus {
    pub pid: Option<u32>,
    pub restarts: u64,
    pub state: EngineState,
    /// Why the last child ended, if one did.
    pub last_exit: Option<String>,
    /// Milliseconds from the last crash to the new child's hello, and the restarts' median and 95th percentile.
    pub last_restart_ms: Option<f64>,
    pub restart_ms_p50: Option<f64>,
    pub restart_ms_p95: Option<f64>,
}

struct Pending {
    events: mpsc::UnboundedSender<EngineEvent>,
    flags: Vec<Arc<AtomicBool>>,
    cancel_sent: Vec<bool>,
    admitted: Option<oneshot::Sender<Result<(), SubmitError>>>,
    choices_left: usize,
}

#[derive(Default)]
struct Table {
    requests: HashMap<u64, Pending>,
    queries: HashMap<u64, oneshot::Sender<ToParent>>,
}

struct Conn {
    tx: mpsc::UnboundedSender<ToChild>,
    table: Arc<Mutex<Table>>,
    pid: u32,
}

struct Status {
    conn: Option<Arc<Conn>>,
    state: EngineState,
    restarts: u64,
    last_exit: Option<String>,
    restart_ms: Vec<f64>,
}

pub struct Supervisor {
    cmd: ChildCommand,
    info: OnceLock<EngineInfo>,
    device: OnceLock<String>,
    status: Mutex<Status>,
    stats: Mutex<EngineStats>,
    next_id: AtomicU64,
    /// Retired (evicted from a model pool): refuses new requests and is not respawned.
    retired: AtomicBool,
}

impl Supervisor {
    /// Spawn the first child and wait for its hello (the model load); an error if it exits first (a model that
    /// does not load fails the server's start, as without isolation). Then keep a child running until the process
    /// ends.
    pub async fn start(cmd: ChildCommand) -> Result<Arc<Supervisor>, String> {
        let sup = Arc::new(Supervisor {
            cmd,
            info: OnceLock::new(),
            device: OnceLock::new(),
            status: Mutex::new(Status {
                conn: None,
                state: EngineState::Starting,
                restarts: 0,
                last_exit: None,
                restart_ms: Vec::new(),
            }),
            stats: Mutex::new(EngineStats::default()),
            next_id: AtomicU64::new(1),
            retired: AtomicBool::new(false),
        });
        let (child, conn_rd) = sup.spawn_and_connect().await?;
        tokio::spawn(sup.clone().supervise(child, conn_rd));
        tokio::spawn(poll_cancels(Arc::downgrade(&sup)));
        tokio::spawn(poll_stats(Arc::downgrade(&sup)));
        Ok(sup)
    }

    /// The engine's limits (from the first child's hello).
    pub fn info(&self) -> &EngineInfo {
        self.info.get().expect("set before start returns")
    }

    pub fn device(&self) -> &str {
        self.device.get().map(String::as_str).unwrap_or("")
    }

    pub fn is_up(&self) -> bool {
        self.lock().conn.is_some()
    }

    pub fn status(&self) -> EngineStatus {
        let s = self.lock();
        let mut sorted = s.restart_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let q = |p: f64| (!sorted.is_empty()).then(|| sorted[((sorted.len() - 1) as f64 * p).round() as usize]);
        EngineStatus {
            pid: s.conn.as_ref().map(|c| c.pid),
            restarts: s.restarts,
            state: s.state,
            last_exit: s.last_exit.clone(),
            last_restart_ms: s.restart_ms.last().copied(),
            restart_ms_p50: q(0.5),
            restart_ms_p95: q(0.95),
        }
    }

    /// Requests sent to the child that have not ended yet.
    pub fn open_requests(&self) -> usize {
        self.conn().map_or(0, |c| lock_table(&c.table).requests.len())
    }

    /// The last statistics the child reported (refreshed every `STATS_POLL`).
    pub fn stats(&self) -> EngineStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn conn(&self) -> Option<Arc<Conn>> {
        self.lock().conn.clone()
    }

    /// Retire this engine (a model pool evicts it): refuse new requests, let the open ones finish (at most
    /// `grace`), write the prompt cache to the SSD tier, then end the child for good. Returns the requests the
    /// grace cut short.
    pub async fn retire(&self, grace: Duration) -> usize {
        self.retired.store(true, Ordering::Release);
        let t0 = Instant::now();
        while self.open_requests() > 0 && t0.elapsed() < grace {
            tokio::time::sleep(CANCEL_POLL).await;
        }
        let cut = self.open_requests();
        if let Err(e) = self.flush().await {
            tracing::warn!("retiring an engine: its prompt cache was not written: {e}");
        }
        if let Some(conn) = self.conn() {
            let _ = conn.tx.send(ToChild::Shutdown);
        }
        cut
    }

    /// Validate `req`, send it to the child and wait for its admission.
    pub async fn submit(&self, req: EngineRequest) -> Result<RequestStream, SubmitError> {
        if self.retired.load(Ordering::Acquire) {
            return Err(SubmitError::Unavailable);
        }
        self.info().validate(&req)?;
        let conn = self.conn().ok_or(SubmitError::Unavailable)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (events, rx) = mpsc::unbounded_channel();
        let stream = RequestStream::from_parts(rx, req.n);
        let flags = stream.cancel_flags().to_vec();
        let (admitted, answer) = oneshot::channel();
        let pending = Pending {
            events,
            cancel_sent: vec![false; flags.len()],
            flags,
            admitted: Some(admitted),
            choices_left: req.n.max(1),
        };
        lock_table(&conn.table).requests.insert(id, pending);
        if conn.tx.send(ToChild::Submit { id, request: Box::new(req) }).is_err() {
            lock_table(&conn.table).requests.remove(&id);
            return Err(SubmitError::Unavailable);
        }
        match answer.await {
            Ok(Ok(())) => Ok(stream),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(SubmitError::Unavailable),
        }
    }

    /// Ask the child to write its prompt cache to the SSD tier and wait until that is durable.
    pub async fn flush(&self) -> Result<bool, String> {
        match self.query(|query| ToChild::Flush { query }).await {
            Some(ToParent::Flushed { result, .. }) => result,
            _ => Err("the engine process stopped before the flush finished".to_string()),
        }
    }

    async fn query(&self, msg: impl FnOnce(u64) -> ToChild) -> Option<ToParent> {
        let conn = self.conn()?;
        let query = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock_table(&conn.table).queries.insert(query, tx);
        conn.tx.send(msg(query)).ok()?;
        rx.await.ok()
    }

    /// Spawn a child, accept its connection and read its hello. Fails when the child exits first.
    async fn spawn_and_connect(&self) -> Result<(Child, tokio::net::unix::OwnedReadHalf), String> {
        // A fresh private directory per child, gone once the child is connected (a socket path is needed only to
        // connect): nothing is left in the temporary directory, whatever way this process ends.
        let dir = private_dir().map_err(|e| format!("creating the engine socket's directory: {e}"))?;
        let path = dir.join("engine.sock");
        let spawned = self.spawn_on(&path).await;
        let _ = std::fs::remove_dir_all(&dir);
        let (mut child, stream) = spawned?;
        let (mut rd, wr) = stream.into_split();
        let hello = tokio::select! {
            h = read_frame::<_, ToParent>(&mut rd) => h.map_err(|e| e.to_string()),
            s = child.wait() => Err(format!("the engine process exited while loading ({})", describe_exit(s))),
        };
        let (version, pid, info, device) = match hello {
            Ok(Some(ToParent::Hello { version, pid, info, device })) => (version, pid, info, device),
            Ok(other) => return Err(format!("the engine process sent {other:?} instead of its hello")),
            Err(e) => return Err(e),
        };
        if version != super::proto::VERSION {
            return Err(format!("the engine process speaks protocol {version}, this server {VERSION}"));
        }
        if let Some(first) = self.info.get() {
            if *first != info {
                tracing::warn!("the restarted engine reports other limits than the first: {info:?} vs {first:?}");
            }
        }
        let _ = self.info.set(info);
        let _ = self.device.set(device);
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_queue(BufWriter::new(wr), rx));
        let conn = Arc::new(Conn { tx, table: Arc::default(), pid });
        let mut s = self.lock();
        s.conn = Some(conn);
        s.state = EngineState::Up;
        Ok((child, rd))
    }

    /// Listen on `path`, start a child told to connect there, and accept its connection (an error if it exits
    /// first).
    async fn spawn_on(&self, path: &std::path::Path) -> Result<(Child, UnixStream), String> {
        let listener = UnixListener::bind(path).map_err(|e| format!("binding {}: {e}", path.display()))?;
        let mut child = Command::new(&self.cmd.program)
            .args(&self.cmd.args)
            .arg("--socket")
            .arg(path)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting the engine process {}: {e}", self.cmd.program.display()))?;
        let accepted = tokio::select! {
            a = listener.accept() => a.map_err(|e| format!("accepting the engine's connection: {e}")),
            s = child.wait() => Err(format!("the engine process exited while loading ({})", describe_exit(s))),
        };
        let (stream, _) = accepted?;
        Ok((child, stream))
    }

    /// Route the child's messages until its connection ends, then fail what was open, respawn, repeat.
    async fn supervise(self: Arc<Self>, mut child: Child, mut rd: tokio::net::unix::OwnedReadHalf) {
        let mut crashes_in_a_row = 0u32;
        loop {
            let up_since = Instant::now();
            let table = self.conn().map(|c| c.table.clone()).unwrap_or_default();
            let why = tokio::select! {
                r = route(&mut rd, &table) => r,
                s = child.wait() => format!("it exited ({})", describe_exit(s)),
            };
            let died = Instant::now();
            if self.retired.load(Ordering::Acquire) {
                // Asked to end: give it a moment to exit on its own, then make sure.
                let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                let _ = child.start_kill();
                let _ = child.wait().await;
                fail_open(&table, "the engine was retired from the model pool");
                let mut s = self.lock();
                s.conn = None;
                s.state = EngineState::Retired;
                return;
            }
            let _ = child.start_kill();
            let exit = describe_exit(child.wait().await);
            let why = format!("{why}; {exit}");
            tracing::error!("the engine process stopped: {why}; restarting it");
            {
                let mut s = self.lock();
                s.conn = None;
                s.state = EngineState::Restarting;
                s.last_exit = Some(why.clone());
            }
            fail_open(&table, &why);
            if up_since.elapsed() >= STABLE_AFTER {
                crashes_in_a_row = 0;
            }
            loop {
                let backoff = BACKOFF_MIN.saturating_mul(1 << crashes_in_a_row.min(16)).min(self.cmd.backoff_max);
                crashes_in_a_row = crashes_in_a_row.saturating_add(1);
                tokio::time::sleep(backoff).await;
                match self.spawn_and_connect().await {
                    Ok((c, r)) => {
                        (child, rd) = (c, r);
                        let mut s = self.lock();
                        s.restarts += 1;
                        s.restart_ms.push(died.elapsed().as_secs_f64() * 1e3);
                        break;
                    }
                    Err(e) => {
                        tracing::error!("restarting the engine process failed: {e}");
                        self.lock().last_exit = Some(e);
                    }
                }
            }
        }
    }
}

fn lock_table(t: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

/// Read the child's messages into the table until the connection ends; returns why it ended.
async fn route(rd: &mut tokio::net::unix::OwnedReadHalf, table: &Mutex<Table>) -> String {
    loop {
        let msg = match read_frame::<_, ToParent>(rd).await {
            Ok(Some(m)) => m,
            Ok(None) => return "its connection closed".into(),
            Err(e) => return format!("its connection failed: {e}"),
        };
        let mut t = lock_table(table);
        match msg {
            ToParent::Accepted { id } => {
                if let Some(tx) = t.requests.get_mut(&id).and_then(|p| p.admitted.take()) {
                    let _ = tx.send(Ok(()));
                }
            }
            ToParent::Refused { id, error } => {
                if let Some(tx) = t.requests.remove(&id).and_then(|mut p| p.admitted.take()) {
                    let _ = tx.send(Err(error));
                }
            }
            ToParent::Event { id, event } => {
                let Some(p) = t.requests.get_mut(&id) else { continue };
                let last = match &event {
                    EngineEvent::Finished { .. } => {
                        p.choices_left = p.choices_left.saturating_sub(1);
                        p.choices_left == 0
                    }
                    EngineEvent::Error { .. } => true,
                    EngineEvent::Token { .. } | EngineEvent::PromptLogprobs { .. } => false,
                };
                let _ = p.events.send(event);
                if last {
                    t.requests.remove(&id);
                }
            }
            ToParent::Stats { query, .. } | ToParent::Flushed { query, .. } => {
                if let Some(tx) = t.queries.remove(&query) {
                    let _ = tx.send(msg);
                }
            }
            ToParent::Hello { .. } => {}
        }
    }
}

/// End every request and query of a connection that is gone.
fn fail_open(table: &Mutex<Table>, why: &str) {
    let mut t = lock_table(table);
    for (_, mut p) in t.requests.drain() {
        match p.admitted.take() {
            Some(tx) => {
                let _ = tx.send(Err(SubmitError::Unavailable));
            }
            None => {
                let message = format!("the engine process stopped ({why}); the request was not completed");
                let _ = p.events.send(EngineEvent::Error { kind: EngineErrorKind::Unavailable, message });
            }
        }
    }
    t.queries.clear();
}

/// Forward the cancellations of running requests (a dropped stream sets its flags) to the child.
async fn poll_cancels(sup: std::sync::Weak<Supervisor>) {
    let mut tick = tokio::time::interval(CANCEL_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(sup) = sup.upgrade() else { return };
        let Some(conn) = sup.conn() else { continue };
        let mut t = lock_table(&conn.table);
        for (&id, p) in t.requests.iter_mut() {
            if p.admitted.is_some() {
                continue;
            }
            let set: Vec<bool> = p.flags.iter().map(|f| f.load(Ordering::Relaxed)).collect();
            if set.iter().zip(&p.cancel_sent).all(|(&s, &sent)| !s || sent) {
                continue;
            }
            if set.iter().all(|&s| s) {
                p.cancel_sent.fill(true);
                let _ = conn.tx.send(ToChild::Cancel { id, choice: None });
                continue;
            }
            for (choice, (&s, sent)) in set.iter().zip(p.cancel_sent.iter_mut()).enumerate() {
                if s && !*sent {
                    *sent = true;
                    let _ = conn.tx.send(ToChild::Cancel { id, choice: Some(choice) });
                }
            }
        }
    }
}

/// Keep the parent's copy of the child's statistics fresh.
async fn poll_stats(sup: std::sync::Weak<Supervisor>) {
    let mut tick = tokio::time::interval(STATS_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(sup) = sup.upgrade() else { return };
        if let Some(ToParent::Stats { stats, .. }) = sup.query(|query| ToChild::Stats { query }).await {
            if let (Ok(s), Ok(mut mine)) = (serde_json::from_value::<EngineStats>(stats), sup.stats.lock()) {
                *mine = s;
            }
        }
    }
}

fn describe_exit(s: std::io::Result<std::process::ExitStatus>) -> String {
    match s {
        Ok(s) => {
            #[cfg(unix)]
            if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&s) {
                return format!("killed by signal {sig}");
            }
            format!("exit status {}", s.code().map_or("unknown".into(), |c| c.to_string()))
        }
        Err(e) => format!("its status is unknown: {e}"),
    }
}

/// A directory only this user can enter, for the engine's socket.
fn private_dir() -> std::io::Result<PathBuf> {
    let base = std::env::temp_dir();
    let nonce =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let dir = base.join(format!("hearth-engine-{}-{nonce:08x}", std::process::id()));
    let mut b = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(&dir)?;
    Ok(dir)
}
