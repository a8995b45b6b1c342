//! The HTTP front: listening, authentication, limits, routing to the forwarder.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rebound_core::Catalogue;
use rebound_runtime::{Clock, HttpClient, Protocol, Sleeper, SystemClock, TokioSleeper};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::forward::{self, Head};
use crate::log::{LogSink, StderrLog};
use crate::metrics::Metrics;
use crate::shape;

/// Keeps one timer due within a second for as long as the server runs.
///
/// Every request arms timers (the first-byte and idle timeouts, hyper's header read timeout)
/// due seconds or minutes later. tokio wakes its driver with a system call whenever a new
/// timer is due before every timer the driver last parked for, which, with no other timer
/// armed, is every request: two extra system calls each. A timer that is always nearer
/// avoids that for one wake-up a second.
async fn timer_anchor(mut stopped: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            _ = stopped.changed() => return,
        }
    }
}

/// How long the accept loop pauses after a failed accept (out of file descriptors).
const ACCEPT_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

pub(crate) use crate::forward::Body;

/// Everything a request needs, shared.
pub struct Gateway {
    pub(crate) config: Config,
    pub(crate) client: HttpClient,
    pub(crate) catalogue: Arc<Catalogue>,
    pub(crate) metrics: Metrics,
    pub(crate) log: Arc<dyn LogSink>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) sleeper: Arc<dyn Sleeper>,
    pub(crate) rng: Mutex<fastrand::Rng>,
    pub(crate) jobs: Option<crate::jobs::Jobs>,
}

impl Gateway {
    /// A gateway for `config`, logging to standard error, on the wall clock.
    pub fn new(config: Config, client: HttpClient, catalogue: Arc<Catalogue>) -> Self {
        Gateway {
            config,
            client,
            catalogue,
            metrics: Metrics::default(),
            log: Arc::new(StderrLog),
            clock: Arc::new(SystemClock),
            sleeper: Arc::new(TokioSleeper),
            rng: Mutex::new(fastrand::Rng::new()),
            jobs: None,
        }
    }

    /// Enables durable jobs (`/v1/rebound/jobs`), kept in `store`.
    pub fn with_jobs(mut self, store: Arc<dyn rebound_store::JobStore>) -> Self {
        self.jobs = Some(crate::jobs::Jobs::new(store));
        self
    }

    /// Sends log lines to `log`.
    pub fn with_log(mut self, log: Arc<dyn LogSink>) -> Self {
        self.log = log;
        self
    }

    /// Replaces the clock and the sleeper (virtual time in tests).
    pub fn with_time(mut self, clock: Arc<dyn Clock>, sleeper: Arc<dyn Sleeper>) -> Self {
        self.clock = clock;
        self.sleeper = sleeper;
        self
    }

    /// Seeds the jitter draws.
    pub fn with_jitter_seed(self, seed: u64) -> Self {
        *self.rng.lock().unwrap_or_else(PoisonError::into_inner) = fastrand::Rng::with_seed(seed);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The metrics, as `/metrics` renders them.
    pub fn metrics_text(&self) -> String {
        self.metrics.render()
    }

    pub(crate) fn draw(&self) -> f64 {
        self.rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .f64()
    }
}

/// A running gateway.
pub struct Server {
    addr: SocketAddr,
    gateway: Arc<Gateway>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds the configured address (or `listen`, when given) and serves.
    pub async fn start(gateway: Gateway, listen: Option<SocketAddr>) -> std::io::Result<Server> {
        let listener = TcpListener::bind(listen.unwrap_or(gateway.config.listen)).await?;
        let addr = listener.local_addr()?;
        let gateway = Arc::new(gateway);
        let (stop, mut stopped) = watch::channel(false);
        let served = Arc::clone(&gateway);
        let header_timeout = gateway.config.header_read_timeout;
        let slots = Arc::new(Semaphore::new(gateway.config.connection_cap()));
        tokio::spawn(timer_anchor(stopped.clone()));
        let task = tokio::spawn(async move {
            loop {
                // At the connection cap, stop accepting: new clients wait in the listen
                // backlog while every open connection keeps being served.
                let slot = tokio::select! {
                    slot = Arc::clone(&slots).acquire_owned() => slot,
                    _ = stopped.changed() => break,
                };
                let Ok(slot) = slot else { break };
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = stopped.changed() => break,
                };
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors (or a similar resource): accepting again at
                        // once would spin. Pause, and let closing connections free some.
                        served.log.line(&crate::log::format_line(&[
                            ("event", "accept_failed".into()),
                            ("error", e.to_string()),
                        ]));
                        tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let gateway = Arc::clone(&served);
                let mut stopped = stopped.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    let service = service_fn(move |req| handle(Arc::clone(&gateway), req));
                    // Slow clients cannot hold a connection: the whole request head must
                    // arrive within the configured time, and may not exceed 64 KiB.
                    let conn = hyper::server::conn::http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(header_timeout)
                        .max_buf_size(1 << 20)
                        .max_header_size(64 << 10)
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = conn => {}
                        _ = stopped.changed() => {}
                    }
                });
            }
        });
        Ok(Server {
            addr,
            gateway,
            stop,
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The shared state (metrics, config).
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Stops accepting and closes connections.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

pub(crate) fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut response = Response::new(Body::whole(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn error(protocol: Protocol, status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    full(
        status,
        "application/json",
        shape::error_body(protocol, kind, message, None).to_string(),
    )
}

/// Constant-time equality: the time taken does not depend on where the inputs differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        diff |= usize::from(a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0));
    }
    diff == 0
}

fn presented_key(headers: &HeaderMap) -> Option<&[u8]> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let bytes = value.as_bytes();
        if bytes.len() > 7 && bytes[..7].eq_ignore_ascii_case(b"bearer ") {
            return Some(&bytes[7..]);
        }
    }
    headers.get("x-api-key").map(HeaderValue::as_bytes)
}

fn authorized(gateway: &Gateway, headers: &HeaderMap) -> bool {
    if gateway.config.gateway_keys.is_empty() {
        return true;
    }
    let Some(presented) = presented_key(headers) else {
        return false;
    };
    // Compare against every key, whatever the result, so timing tells nothing.
    gateway
        .config
        .gateway_keys
        .iter()
        .fold(false, |ok, key| same(key.as_bytes(), presented) | ok)
}

async fn handle(
    gateway: Arc<Gateway>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let protocol = match req.uri().path() {
        "/v1/messages" => Protocol::Anthropic,
        _ => Protocol::OpenAi,
    };
    if !authorized(&gateway, req.headers()) {
        return Ok(error(
            protocol,
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "rebound: a valid gateway key is required",
        ));
    }
    match (req.method(), req.uri().path()) {
        (&Method::POST, "/v1/chat/completions" | "/v1/messages") => {
            Ok(model_request(gateway, protocol, req).await)
        }
        (&Method::GET, "/v1/models") => Ok(crate::models::models(&gateway).await),
        (&Method::GET, "/metrics") => Ok(full(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            gateway.metrics.render(),
        )),
        (&Method::GET, "/healthz") => Ok(full(StatusCode::OK, "text/plain", "ok\n")),
        (&Method::GET, "/v1/rebound/policies") => Ok(policies(&gateway)),
        (method, p) if p == "/v1/rebound/jobs" || p.starts_with("/v1/rebound/jobs/") => {
            let (method, path) = (method.clone(), p.to_owned());
            let limit = gateway.config.body_limit;
            let body = match Limited::new(req.into_body(), limit).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(_) => {
                    return Ok(error(
                        protocol,
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "invalid_request_error",
                        "rebound: the job is too large",
                    ));
                }
            };
            Ok(crate::jobs::handle(gateway, &method, &path, body).await)
        }
        _ => Ok(error(
            protocol,
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!(
                "rebound serves POST /v1/chat/completions, POST /v1/messages, GET /v1/models and GET /metrics, not {} {}",
                req.method(),
                req.uri().path()
            ),
        )),
    }
}

/// Every candidate's policy as a version-1 policy document (D1): what jobs snapshot.
fn policies(gateway: &Gateway) -> Response<Body> {
    let mut candidates = serde_json::Map::new();
    for candidate in gateway
        .config
        .routes
        .iter()
        .flat_map(|r| r.candidates.iter())
    {
        let document = rebound_core::policy::document::PolicyDocument::of(&candidate.policy);
        candidates.insert(
            candidate.id.clone(),
            serde_json::to_value(document).unwrap_or(serde_json::Value::Null),
        );
    }
    full(
        StatusCode::OK,
        "application/json",
        serde_json::json!({"candidates": candidates}).to_string(),
    )
}

async fn model_request(
    gateway: Arc<Gateway>,
    protocol: Protocol,
    req: Request<Incoming>,
) -> Response<Body> {
    let limit = gateway.config.body_limit;
    let too_large = || {
        error(
            protocol,
            StatusCode::PAYLOAD_TOO_LARGE,
            match protocol {
                Protocol::Anthropic => "request_too_large",
                Protocol::OpenAi => "invalid_request_error",
            },
            &format!("rebound: the request body is larger than {limit} bytes"),
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return too_large();
    }
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            return too_large();
        }
        Err(_) => {
            return error(
                protocol,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "rebound: the request body could not be read",
            );
        }
    };
    let peeked = match crate::body::peek(&body) {
        Ok(peeked) => peeked,
        Err(e) => {
            let reason = match e {
                crate::body::PeekError::NotUtf8 => {
                    "the request body is not UTF-8, as JSON must be".to_owned()
                }
                crate::body::PeekError::NotObject => {
                    "the request body must be a JSON object".to_owned()
                }
                crate::body::PeekError::Json(e) if e.is_syntax() || e.is_eof() => format!(
                    "the request body is not valid JSON (line {}, column {})",
                    e.line(),
                    e.column()
                ),
                crate::body::PeekError::Json(_) => {
                    "`model` must be a string and `stream` a boolean".to_owned()
                }
            };
            return error(
                protocol,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &format!("rebound: {reason}"),
            );
        }
    };
    let Some(model) = peeked.model.as_deref() else {
        return error(
            protocol,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "rebound: `model` is required",
        );
    };
    let stream = peeked.stream.unwrap_or(false);
    let Some(route) = gateway.config.route(model, protocol) else {
        return error(
            protocol,
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!("rebound: no route serves model `{model}` on this protocol"),
        );
    };
    let restart = parts
        .headers
        .get("x-rebound-replay")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"restart"));
    let (head_tx, head_rx) = oneshot::channel::<Head>();
    // Only a stream's body goes through a pipe; a whole answer goes with its head.
    let (body_tx, body_rx) = if stream {
        let (tx, rx) = forward::pipe::pipe();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let job = forward::Job {
        gateway,
        protocol,
        route,
        // A stream keeps its request for minutes: detached from the connection's read buffer
        // (the head, its URI included, is dropped at once).
        headers: if stream {
            let headers = forward::detached(&parts.headers);
            drop(parts);
            headers
        } else {
            parts.headers
        },
        body: if stream {
            forward::detached_body(body)
        } else {
            body
        },
        stream,
        restart,
    };
    tokio::spawn(forward::run(job, head_tx, body_tx));
    match head_rx.await {
        Ok(head) => head.into_response(body_rx),
        Err(_) => error(
            protocol,
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "rebound: the request was dropped",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_equality() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        assert!(!same(b"", b"a"));
        assert!(same(b"", b""));
    }
}
