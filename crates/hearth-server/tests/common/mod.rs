//! A router without a model on a loopback port, for the tests of what answers before (or without) one.

use hearth_server::{AppState, ServerConfig};

pub struct Running {
    pub port: u16,
    _rt: tokio::runtime::Runtime,
}

pub fn start(cfg: ServerConfig) -> Running {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    rt.spawn(hearth_server::serve(listener, AppState::new(cfg)));
    Running { port, _rt: rt }
}
