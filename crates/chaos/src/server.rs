//! The HTTP server: its state (attempt counters, scripts, recorded requests, stored
//! responses), the accept loop and the public handle tests hold.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::record::RecordedRequest;
use crate::route::handle;
use crate::script::{Modifiers, Step};
use crate::stored::ResponseStore;

/// The request header that names the attempt counter and script a request belongs to.
pub const KEY_HEADER: &str = "x-chaos-key";

/// How the server behaves for keys without a script.
#[derive(Clone, Debug, Default)]
pub struct ChaosConfig {
    /// Scripts by key, set at start.
    pub scripts: HashMap<String, Vec<Step>>,
    /// Probabilistic faults for keys without a script: the seed of the draw.
    pub seed: Option<u64>,
    /// Probabilistic faults: the share of requests that fail, in [0, 1].
    pub fault_rate: f64,
    /// Pause between streamed content chunks.
    pub chunk_delay: Duration,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) attempts: HashMap<String, u64>,
    pub(crate) scripts: HashMap<String, Vec<Step>>,
}

pub(crate) struct State {
    pub(crate) config: ChaosConfig,
    pub(crate) counters: Mutex<Counters>,
    /// TCP connections accepted.
    connections: std::sync::atomic::AtomicU64,
    /// Every request received, control endpoints aside.
    pub(crate) requests: Mutex<Vec<RecordedRequest>>,
    /// Responses the Responses API created.
    pub(crate) responses: ResponseStore,
    /// What replies hold when their step names no modifiers.
    pub(crate) reply: Mutex<Modifiers>,
}

impl State {
    /// Counts a request of `key` and returns its step and its attempt number (from 1).
    pub(crate) fn next_step(&self, key: &str) -> (Step, u64) {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        let attempt = {
            let n = counters.attempts.entry(key.to_owned()).or_insert(0);
            *n += 1;
            *n
        };
        if let Some(script) = counters.scripts.get(key) {
            let index = usize::try_from(attempt - 1).unwrap_or(usize::MAX);
            return (script.get(index).cloned().unwrap_or(Step::Ok), attempt);
        }
        let step = match self.config.seed {
            Some(seed) => random_step(seed, key, attempt, self.config.fault_rate),
            None => Step::Ok,
        };
        (step, attempt)
    }

    pub(crate) fn record(&self, request: RecordedRequest) {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request);
    }
}

/// SplitMix64: a deterministic draw per (seed, key, attempt), whatever the arrival order.
fn draw(seed: u64, key: &str, attempt: u64) -> u64 {
    let mut x = seed ^ attempt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in key.bytes() {
        x = (x ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn random_step(seed: u64, key: &str, attempt: u64, rate: f64) -> Step {
    let x = draw(seed, key, attempt);
    let unit = (x >> 11) as f64 / (1u64 << 53) as f64;
    if unit >= rate.clamp(0.0, 1.0) {
        return Step::Ok;
    }
    let status = |status: u16, headers: Vec<(String, String)>| Step::Status {
        status,
        context: false,
        headers,
    };
    match (x >> 3) % 9 {
        0 => status(
            429,
            vec![(
                "retry-after-ms".into(),
                format!("{}", 100 + (x >> 20) % 400),
            )],
        ),
        1 => status(429, vec![]),
        2 => status(500, vec![]),
        3 => status(502, vec![]),
        4 => status(503, vec![("retry-after".into(), "1".into())]),
        5 => Step::Reset,
        6 => Step::CutAfter(1 + ((x >> 24) % 3) as usize),
        7 => Step::ErrorAfter(((x >> 24) % 2) as usize, "overloaded_error".into()),
        _ => Step::MalformedAfter(1),
    }
}

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
        counters.attempts.remove(key);
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
