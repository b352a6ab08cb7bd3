//! `/health` polled while the model loads answers 503 without an ERROR log line per poll: a 503 is a state the
//! server is in, not a fault. (One test in this file: it installs the process's tracing subscriber.)

mod common;

use common::{call, start};
use hearth_server::ServerConfig;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Every event's level and message.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<(Level, String)>>>);

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Lines {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut m = Message(String::new());
        event.record(&mut m);
        if let Ok(mut lines) = self.0.lock() {
            lines.push((*event.metadata().level(), m.0));
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn health_while_loading_is_a_503_without_an_error_line() {
    let lines = Lines::default();
    tracing::subscriber::set_global_default(lines.clone()).expect("the only subscriber of this test binary");
    let s = start(ServerConfig::default());
    for _ in 0..5 {
        let (status, _, body) = call(s.port, "GET", "/health", &[], b"");
        assert_eq!((status, body.as_str()), (503, r#"{"status":"loading"}"#));
    }
    let seen = lines.0.lock().map(|l| l.clone()).unwrap_or_default();
    let responses = seen.iter().filter(|(level, m)| *level == Level::INFO && m.contains("finished processing")).count();
    assert!(responses >= 5, "each response is logged (at INFO): {seen:?}");
    let errors: Vec<_> = seen.iter().filter(|(level, _)| *level == Level::ERROR).collect();
    assert!(errors.is_empty(), "no ERROR line for a 503 /health: {errors:?}");
}
