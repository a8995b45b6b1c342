//! The HTTP server: its state (attempt counters, scripts, recorded requests, stored
//! responses), the accept loop and the public handle tests hold.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::record::RecordedRequest;
use crate::route::handle;
use crate::script::{Modifiers, Step};
use crate::state::{ChaosConfig, Counters, State};
use crate::stored::ResponseStore;

/// A running chaos upstream.
pub struct Chaos {
    addr: SocketAddr,
    state: Arc<State>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Chaos {
    /// Binds `listen` and serves until [`Chaos::shutdown`] or drop.
    pub async fn start(listen: SocketAddr, config: ChaosConfig) -> std::io::Result<Chaos> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            counters: Mutex::new(Counters {
                scripts: config.scripts.clone(),
                ..Counters::default()
            }),
            config,
            connections: std::sync::atomic::AtomicU64::new(0),
            requests: Mutex::new(Vec::new()),
            responses: ResponseStore::default(),
            reply: Mutex::new(Modifiers::default()),
        });
        let (stop, mut stopped) = watch::channel(false);
        let served = Arc::clone(&state);
        let task = tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = stopped.changed() => break,
                };
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                served
                    .connections
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let state = Arc::clone(&served);
                let mut stopped = stopped.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let state = Arc::clone(&state);
                        async move { handle(state, req).await }
                    });
                    // HTTP/1.1, or HTTP/2 when the client opens with its preface (prior
                    // knowledge). A fake upstream sets no limit on concurrent streams.
                    let mut builder = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    );
                    builder.http1().keep_alive(true);
                    builder.http2().max_concurrent_streams(None);
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = conn => {}
                        _ = stopped.changed() => {}
                    }
                });
            }
        });
        Ok(Chaos {
            addr,
            state,
            stop,
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many TCP connections it has accepted.
    pub fn connections(&self) -> u64 {
        self.state
            .connections
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The OpenAI base URL, as the official SDKs take it.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The Anthropic base URL, as the official SDKs take it.
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests seen for `key`.
    pub fn attempts(&self, key: &str) -> u64 {
        let counters = self
            .state
            .counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        counters.attempts.get(key).copied().unwrap_or(0)
    }

    /// Every request received so far, in arrival order: model endpoints, token counting,
    /// stored responses, the model list, echoes and unknown paths alike (the `/chaos/…`
    /// control endpoints aside).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.state
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Sets what replies hold when their step names no modifiers (plain `ok`, `cut-after-2`
    /// …, and every request past a script's end): e.g. `+tool:Read` so an agent's first turn
    /// calls a harmless tool, or `+text` so it never calls one.
    pub fn set_reply(&self, modifiers: Modifiers) {
        *self
            .state
            .reply
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = modifiers;
    }

    /// Sets the script of `key` and restarts its counter.
    pub fn set_script(&self, key: &str, steps: Vec<Step>) {
        let mut counters = self
            .state
            .counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        counters.restart(key);
        counters.scripts.insert(key.to_owned(), steps);
    }

    /// Stops accepting and closes open connections.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Chaos {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
