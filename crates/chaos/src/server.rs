//! The HTTP server: model endpoints with faults, and the control endpoints.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::model::{self, Protocol, Reply};
use crate::script::{Step, parse_script};

/// The largest request body the chaos server reads.
const BODY_LIMIT: usize = 8 << 20;

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

type Body = BoxBody<Bytes, std::io::Error>;

#[derive(Default)]
struct Counters {
    attempts: HashMap<String, u64>,
    scripts: HashMap<String, Vec<Step>>,
}

struct State {
    config: ChaosConfig,
    counters: Mutex<Counters>,
    /// TCP connections accepted.
    connections: std::sync::atomic::AtomicU64,
}

impl State {
    /// Counts the request and returns its step.
    fn next_step(&self, key: &str) -> Step {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        let attempt = {
            let n = counters.attempts.entry(key.to_owned()).or_insert(0);
            *n += 1;
            *n
        };
        if let Some(script) = counters.scripts.get(key) {
            let index = usize::try_from(attempt - 1).unwrap_or(usize::MAX);
            return script.get(index).cloned().unwrap_or(Step::Ok);
        }
        match self.config.seed {
            Some(seed) => random_step(seed, key, attempt, self.config.fault_rate),
            None => Step::Ok,
        }
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

fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(
        Full::new(body.into())
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    full(status, "application/json", value.to_string())
}

/// Errors of the server itself: close the connection (the `reset` fault).
#[derive(Debug, thiserror::Error)]
#[error("chaos: connection reset by script")]
struct ResetByScript;

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Body>, ResetByScript> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let protocol = match (&method, path.as_str()) {
        (&Method::POST, "/v1/chat/completions") => Protocol::OpenAi,
        (&Method::POST, "/v1/messages") => Protocol::Anthropic,
        (&Method::GET, "/v1/models") => {
            return Ok(json_response(
                StatusCode::OK,
                &json!({"object": "list", "data": [{"id": "chaos-1", "object": "model", "created": 0, "owned_by": "rebound-chaos"}]}),
            ));
        }
        (&Method::GET, "/chaos/attempts") => {
            let counters = state
                .counters
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            return Ok(json_response(StatusCode::OK, &json!(counters.attempts)));
        }
        (&Method::POST, "/chaos/reset") => {
            let mut counters = state
                .counters
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            counters.attempts.clear();
            counters.scripts = state.config.scripts.clone();
            return Ok(json_response(StatusCode::OK, &json!({"reset": true})));
        }
        (&Method::POST, "/chaos/scripts") => return Ok(set_scripts(&state, req).await),
        _ => {
            return Ok(json_response(
                StatusCode::NOT_FOUND,
                &json!({"error": {"message": format!("rebound chaos has no {method} {path}"), "type": "not_found"}}),
            ));
        }
    };
    let presented_key = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| req.headers().get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::to_owned);
    let key = req
        .headers()
        .get(KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("default")
        .to_owned();
    let body = match Limited::new(req.into_body(), BODY_LIMIT).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Ok(json_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                &model::error_body(protocol, 413, false),
            ));
        }
    };
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return Ok(json_response(
            StatusCode::BAD_REQUEST,
            &model::error_body(protocol, 400, false),
        ));
    };
    let step = state.next_step(&key);
    let streaming = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let model_name = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("chaos-1")
        .to_owned();
    let id = match protocol {
        Protocol::OpenAi => format!("chatcmpl-chaos-{key}"),
        Protocol::Anthropic => format!("msg_chaos_{key}"),
    };
    let reply = model::reply(protocol, &request);
    match step {
        Step::Reset => Err(ResetByScript),
        Step::Stall(d) => {
            tokio::time::sleep(d).await;
            Ok(answer(
                &state,
                protocol,
                &id,
                &model_name,
                &reply,
                streaming,
                None,
            ))
        }
        Step::Status {
            status,
            context,
            headers,
        } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = json_response(
                code,
                &model::error_body_with_key(protocol, status, context, presented_key.as_deref()),
            );
            for (name, value) in headers {
                if let (Ok(name), Ok(value)) = (
                    http::HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(&value),
                ) {
                    response.headers_mut().insert(name, value);
                }
            }
            Ok(response)
        }
        Step::Ok => Ok(answer(
            &state,
            protocol,
            &id,
            &model_name,
            &reply,
            streaming,
            None,
        )),
        fault if streaming => Ok(answer(
            &state,
            protocol,
            &id,
            &model_name,
            &reply,
            true,
            Some(fault),
        )),
        // Stream faults on a non-streaming request: the closest whole-response failure.
        Step::ErrorAfter(_, kind) => {
            let status = if kind == "overloaded_error" { 529 } else { 500 };
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            Ok(json_response(
                code,
                &model::error_body(protocol, status, false),
            ))
        }
        Step::MalformedAfter(_) => Ok(full(
            StatusCode::OK,
            "application/json",
            "{\"id\": \"chaos\", \"choi",
        )),
        Step::StallAfter(_, d) => {
            tokio::time::sleep(d).await;
            Ok(answer(
                &state,
                protocol,
                &id,
                &model_name,
                &reply,
                false,
                None,
            ))
        }
        cut @ Step::CutAfter(_) => Ok(answer(
            &state,
            protocol,
            &id,
            &model_name,
            &reply,
            false,
            Some(cut),
        )),
    }
}

async fn set_scripts(state: &State, req: Request<Incoming>) -> Response<Body> {
    let bad = |message: String| {
        json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"message": message}}),
        )
    };
    let Ok(body) = Limited::new(req.into_body(), 1 << 20).collect().await else {
        return bad("the script body is too large".into());
    };
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(&body.to_bytes()) else {
        return bad("expected a JSON object of key: \"step, step, …\"".into());
    };
    let mut parsed = Vec::new();
    for (key, script) in map {
        let Some(script) = script.as_str() else {
            return bad(format!("script of `{key}` is not a string"));
        };
        match parse_script(script) {
            Ok(steps) => parsed.push((key, steps)),
            Err(e) => return bad(format!("script of `{key}`: {e}")),
        }
    }
    let mut counters = state
        .counters
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    for (key, steps) in parsed {
        counters.attempts.remove(&key);
        counters.scripts.insert(key, steps);
    }
    json_response(StatusCode::OK, &json!({"scripts": counters.scripts.len()}))
}

/// A 200 answer, whole or streamed, with an optional mid-response fault.
fn answer(
    state: &State,
    protocol: Protocol,
    id: &str,
    model_name: &str,
    reply: &Reply,
    streaming: bool,
    fault: Option<Step>,
) -> Response<Body> {
    let delay = state.config.chunk_delay;
    if !streaming {
        let body = model::complete_body(protocol, id, model_name, reply).to_string();
        if !matches!(fault, Some(Step::CutAfter(_))) {
            return full(StatusCode::OK, "application/json", body);
        }
        // A body that breaks off: half of it, then the connection is cut.
        let half = body.len() / 2;
        let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
        let first = Bytes::copy_from_slice(&body.as_bytes()[..half]);
        tokio::spawn(async move {
            let _ = tx.send(Ok(Frame::data(first))).await;
            abort(&tx, std::io::ErrorKind::ConnectionReset, "chaos: cut").await;
        });
        let mut response = Response::new(BodyExt::boxed(ChannelBody(rx)));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return response;
    }
    let (preamble, content, end) = model::stream_frames(protocol, id, model_name, reply);
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(8);
    tokio::spawn(async move {
        let send = |text: String| {
            let tx = tx.clone();
            async move { tx.send(Ok(Frame::data(Bytes::from(text)))).await.is_ok() }
        };
        for frame in preamble {
            if !send(frame).await {
                return;
            }
        }
        let cut_at = match &fault {
            Some(
                Step::CutAfter(n)
                | Step::StallAfter(n, _)
                | Step::ErrorAfter(n, _)
                | Step::MalformedAfter(n),
            ) => *n,
            _ => usize::MAX,
        };
        for (i, frame) in content.into_iter().enumerate() {
            if i == cut_at {
                break;
            }
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if !send(frame).await {
                return;
            }
        }
        match fault {
            Some(Step::CutAfter(_)) => {
                abort(&tx, std::io::ErrorKind::ConnectionReset, "chaos: cut").await;
                return;
            }
            Some(Step::StallAfter(_, d)) => {
                tokio::time::sleep(d).await;
                return;
            }
            Some(Step::ErrorAfter(_, kind)) => {
                let _ = send(model::stream_error(protocol, &kind)).await;
                return;
            }
            Some(Step::MalformedAfter(_)) => {
                let _ = send(
                    "data: {\"choices\": [{\"delta\": {\"content\": \"tru\n\nnot sse at all\n\n"
                        .to_owned(),
                )
                .await;
                abort(&tx, std::io::ErrorKind::InvalidData, "chaos: malformed").await;
                return;
            }
            _ => {}
        }
        for frame in end {
            if !send(frame).await {
                return;
            }
        }
    });
    let mut response = Response::new(BodyExt::boxed(ChannelBody(rx)));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Aborts a response mid-body, after the chunks sent so far have left.
async fn abort(
    tx: &mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>,
    kind: std::io::ErrorKind,
    message: &'static str,
) {
    flush_pause().await;
    let _ = tx.send(Err(std::io::Error::new(kind, message))).await;
}

/// hyper writes what the body produced when the body next waits; a cut that follows its
/// chunks at once could abort the connection before they left. This pause lets them go.
async fn flush_pause() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// A response body fed by a channel; an `Err` aborts the response mid-body.
struct ChannelBody(mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.0.poll_recv(cx)
    }
}
