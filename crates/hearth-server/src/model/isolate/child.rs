//! The engine child's side: serve the parent's connection from an in-process engine until the parent closes it.
//!
//! Requests are submitted as they came to the local engine (which compiles their constraint) and answered
//! `Accepted` or `Refused`; each admitted request gets a task that forwards its events and applies the
//! parent's cancellations. Frames to the parent go through one writer task that flushes when its queue is empty,
//! so a step's tokens for many streams leave in one write.

use super::proto::{read_frame, write_queue, ToChild, ToParent, VERSION};
use hearth_engine::engine::{EngineEvent, EngineHandle, EngineRequest, RequestStream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::io::BufWriter;
use tokio::net::UnixStream;
use tokio::sync::mpsc;

type Out = mpsc::UnboundedSender<ToParent>;
/// Per admitted request: where its cancellations go (`None`: every choice).
type Cancels = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Option<usize>>>>>;

/// Serve one connection; returns when the parent closes it or asks to shut down.
pub async fn serve(stream: UnixStream, engine: EngineHandle, device: String) -> std::io::Result<()> {
    let (mut rd, wr) = stream.into_split();
    let (out, out_rx) = mpsc::unbounded_channel::<ToParent>();
    let writer = tokio::spawn(write_queue(BufWriter::new(wr), out_rx));
    let hello = ToParent::Hello { version: VERSION, pid: std::process::id(), info: engine.info.clone(), device };
    let _ = out.send(hello);
    let cancels: Cancels = Arc::default();
    let result = loop {
        let msg = match read_frame::<_, ToChild>(&mut rd).await {
            Ok(Some(m)) => m,
            Ok(None) => break Ok(()),
            Err(e) => break Err(std::io::Error::other(e.to_string())),
        };
        match msg {
            ToChild::Submit { id, request } => submit(id, *request, &engine, &out, &cancels),
            ToChild::Cancel { id, choice } => {
                if let Some(tx) = cancels.lock().ok().and_then(|c| c.get(&id).cloned()) {
                    let _ = tx.send(choice);
                }
            }
            ToChild::Stats { query } => {
                let stats = serde_json::to_value(engine.stats()).unwrap_or_default();
                let _ = out.send(ToParent::Stats { query, stats });
            }
            ToChild::Flush { query } => {
                let (engine, out) = (engine.clone(), out.clone());
                tokio::task::spawn_blocking(move || {
                    let result = crate::model::engine::flush_blocking(&engine);
                    let _ = out.send(ToParent::Flushed { query, result });
                });
            }
            ToChild::Shutdown => break Ok(()),
        }
    };
    drop(out);
    if let Ok(c) = cancels.lock() {
        for tx in c.values() {
            let _ = tx.send(None);
        }
    }
    let _ = writer.await;
    result
}

/// Submit inline, on the reader: a constraint's compile delays the frames behind it, but a `Cancel` for this
/// request never overtakes its admission.
fn submit(id: u64, req: EngineRequest, engine: &EngineHandle, out: &Out, cancels: &Cancels) {
    let choices = req.n.max(1);
    match engine.submit(req) {
        Err(error) => {
            let _ = out.send(ToParent::Refused { id, error });
        }
        Ok(stream) => {
            let (tx, rx) = mpsc::unbounded_channel();
            if let Ok(mut c) = cancels.lock() {
                c.insert(id, tx);
            }
            let _ = out.send(ToParent::Accepted { id });
            tokio::spawn(forward(id, stream, choices, rx, out.clone(), cancels.clone()));
        }
    }
}

/// Forward one request's events until every choice finished or it failed; apply cancellations meanwhile.
async fn forward(
    id: u64,
    mut stream: RequestStream,
    choices: usize,
    mut cancel: mpsc::UnboundedReceiver<Option<usize>>,
    out: Out,
    cancels: Cancels,
) {
    let mut finished = 0;
    let mut cancel_open = true;
    loop {
        tokio::select! {
            ev = stream.next() => {
                let Some(event) = ev else {
                    // The engine dropped the request without ending it: say so, or the parent's stream would wait.
                    let event = EngineEvent::internal("the engine stopped before the request finished");
                    let _ = out.send(ToParent::Event { id, event });
                    break;
                };
                let last = match &event {
                    EngineEvent::Finished { .. } => {
                        finished += 1;
                        finished >= choices
                    }
                    EngineEvent::Error { .. } => true,
                    EngineEvent::Token { .. } | EngineEvent::PromptLogprobs { .. } => false,
                };
                if out.send(ToParent::Event { id, event }).is_err() || last {
                    break;
                }
            }
            c = cancel.recv(), if cancel_open => match c {
                Some(Some(choice)) => stream.cancel_choice(choice),
                Some(None) => stream.cancel(),
                None => cancel_open = false,
            },
        }
    }
    if let Ok(mut c) = cancels.lock() {
        c.remove(&id);
    }
}
