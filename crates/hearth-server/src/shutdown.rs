//! Shutdown: the signals that start it, and the switch that ends the generation still running when the grace
//! period is over.
//!
//! The first SIGTERM or SIGINT starts a graceful shutdown (`conns::serve` stops accepting, lets requests finish
//! within the grace period, then calls [`end_generation`]); any further one exits the process at once. Signals are
//! process-wide, and so is the switch: every `Generation` of the process watches it.

use std::sync::LazyLock;
use tokio::sync::watch;

/// The message of the error that ends a request still generating when the grace period is over.
pub const SHUTTING_DOWN: &str = "the server is shutting down; the request was ended before it finished";

/// Exit status of a shutdown forced by a second signal.
pub const FORCED_EXIT_STATUS: i32 = 130;

/// Set once generation must end (the grace period is over).
static END_GENERATION: LazyLock<watch::Sender<bool>> = LazyLock::new(|| watch::channel(false).0);

/// End every generation in flight: each yields an error with [`SHUTTING_DOWN`] (a stream sends it as its error
/// event), and its engine work is cancelled when the request drops it.
pub fn end_generation() {
    END_GENERATION.send_replace(true);
}

/// Resolves once [`end_generation`] was called (at once if it already was).
pub async fn generation_ended() {
    let mut rx = END_GENERATION.subscribe();
    let _ = rx.wait_for(|ended| *ended).await;
}

/// Resolves on the first SIGINT (Ctrl-C) or SIGTERM; from then on, another one exits the process at once with
/// [`FORCED_EXIT_STATUS`].
pub async fn signal() {
    let mut signals = Signals::new();
    signals.recv().await;
    eprintln!("hearth: shutting down (send the signal again to exit at once)");
    tokio::spawn(async move {
        signals.recv().await;
        eprintln!("hearth: second signal, exiting now");
        std::process::exit(FORCED_EXIT_STATUS);
    });
}

/// SIGINT and SIGTERM, registered once so that none is lost between the first and the second.
struct Signals {
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let int = signal(SignalKind::interrupt()).ok();
            let term = signal(SignalKind::terminate()).ok();
            if int.is_none() || term.is_none() {
                tracing::warn!("could not listen for SIGINT/SIGTERM; stop the server with SIGKILL");
            }
            Self { int, term }
        }
        #[cfg(not(unix))]
        Self {}
    }

    #[cfg(unix)]
    async fn recv(&mut self) {
        let Self { int, term } = self;
        let int = async {
            match int.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        let term = async {
            match term.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = int => {},
            _ = term => {},
        }
    }

    #[cfg(not(unix))]
    async fn recv(&mut self) {
        let _ = tokio::signal::ctrl_c().await;
    }
}
