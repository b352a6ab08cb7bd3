//! Crash isolation (`hearth serve --isolate`): the HTTP server, the web chat and request parsing stay in this
//! process; the engine runs in a child process (the same binary) reached over a UNIX socket ([`proto`]), and is
//! respawned when it dies ([`supervisor`]); [`child`] is the child's side. `model::Engine::Isolated` holds the
//! supervisor. Design: docs/design/0012-isolation.md.

pub mod child;
pub mod proto;
pub mod supervisor;

pub use supervisor::{ChildCommand, EngineState, EngineStatus, Supervisor};
