//! The forwarder: one client request, attempted against the route's candidates until the
//! first success or one terminal error (G2–G4, G6).
//!
//! Before the commit point (the first content-bearing event of a stream, or the whole body of
//! a non-streaming answer) nothing has reached the client, so every retry and fallback is
//! invisible. After it, upstream bytes are forwarded untouched, whole SSE events at a time; a
//! failure then ends the stream with the provider's own in-stream error event, unless the
//! client asked for `x-rebound-replay: restart`.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use rebound_core::backoff::Jitter;
use rebound_core::status::StopReason;
use rebound_core::{
    Action, Caller, Diagnostics, Evidence, Failure, Headers, Phase, RetryStatus, Safety,
    TransportKind, Turn,
};
use rebound_runtime::Protocol;
use rebound_runtime::http::{TransportFailure, body_failure, read_body};
use rebound_runtime::provider::{StreamItem, stream_items};
use rebound_runtime::sse::SseFramer;
use tokio::sync::{mpsc, oneshot};

use crate::body::rewrite_model;
use crate::config::{Candidate, Route};
use crate::log::format_line;
use crate::server::{Body, Gateway, full};
use crate::shape;

/// The most of an upstream error body kept as evidence and relayed.
const ERROR_BODY_LIMIT: usize = 256 << 10;

/// The largest non-streaming answer relayed.
const RESPONSE_LIMIT: usize = 64 << 20;

/// Request headers never forwarded upstream.
const HOP_BY_HOP: [&str; 11] = [
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "accept-encoding",
];

/// Credential headers, replaced by the candidate's key or dropped under gateway keys.
const AUTH_HEADERS: [&str; 3] = ["authorization", "x-api-key", "api-key"];

/// The marker event sent to `x-rebound-replay: restart` clients before a replay.
pub const RESTART_EVENT: &str = "rebound_restart";

/// What the handler answers with.
pub(crate) struct Head {
    status: StatusCode,
    headers: HeaderMap,
    /// The whole body; `None` for a stream fed through the channel.
    body: Option<Bytes>,
}

impl Head {
    pub(crate) fn into_response(
        self,
        rx: mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>,
    ) -> Response<Body> {
        let mut response = match self.body {
            Some(bytes) => Response::new(Full::new(bytes).map_err(|never| match never {}).boxed()),
            None => Response::new(BodyExt::boxed(ChannelBody(rx))),
        };
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        response
    }
}

/// A response body fed by a channel.
pub(crate) struct ChannelBody(mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>);

impl ChannelBody {
    pub(crate) fn new(rx: mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>) -> Self {
        ChannelBody(rx)
    }
}

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

/// One client request.
pub(crate) struct Job {
    pub(crate) gateway: Arc<Gateway>,
    pub(crate) protocol: Protocol,
    pub(crate) route: Route,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) stream: bool,
    pub(crate) restart: bool,
}

/// The client side: the head goes once, then body frames.
struct Downstream {
    head: Option<oneshot::Sender<Head>>,
    body: mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>,
}

impl Downstream {
    fn committed(&self) -> bool {
        self.head.is_none()
    }

    fn respond(&mut self, head: Head) -> bool {
        self.head.take().is_some_and(|tx| tx.send(head).is_ok())
    }

    /// Sends body bytes; `false` when the client went away.
    async fn send(&mut self, bytes: Bytes) -> bool {
        bytes.is_empty() || self.body.send(Ok(Frame::data(bytes))).await.is_ok()
    }

    /// Completes when the client has gone away.
    async fn gone(&mut self) {
        match &mut self.head {
            Some(head) => head.closed().await,
            None => self.body.closed().await,
        }
    }
}

/// How an attempt ended.
enum Attempt {
    /// A complete success went to the client.
    Delivered,
    /// The client went away.
    ClientGone,
    /// A failure, with what is needed to decide and to shape the terminal error.
    Failed(FailedAttempt),
}

struct FailedAttempt {
    evidence: Evidence,
    /// Content already reached the client.
    delivered: bool,
    /// The upstream's own error event already reached the client.
    error_forwarded: bool,
    /// An upstream error response (status, headers, body), relayed when recovery stops.
    upstream_error: Option<(StatusCode, Bytes)>,
}

fn rebound_headers(headers: &mut HeaderMap, attempts: u32, candidate: &str, route: &str) {
    let mut put = |name: &'static str, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    };
    put("x-rebound-attempts", attempts.to_string());
    put("x-rebound-candidate", candidate.to_owned());
    put("x-rebound-route-id", route.to_owned());
}

/// Upstream response headers a client may see.
fn relayable(upstream: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in upstream {
        if HOP_BY_HOP.contains(&name.as_str()) || name == header::CONTENT_ENCODING {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

fn upstream_request(job: &Job, candidate: &Candidate) -> Result<Request<Full<Bytes>>, http::Error> {
    let base = &candidate.base_url;
    let url = match job.protocol {
        Protocol::OpenAi => format!("{base}/chat/completions"),
        Protocol::Anthropic => format!("{base}/v1/messages"),
    };
    let body = candidate
        .model
        .as_deref()
        .and_then(|model| rewrite_model(&job.body, model))
        .map_or_else(|| job.body.clone(), Bytes::from);
    let mut request = Request::post(url).body(Full::new(body))?;
    let strip_auth = candidate.api_key.is_some() || !job.gateway.config.gateway_keys.is_empty();
    let headers = request.headers_mut();
    for (name, value) in &job.headers {
        let name_str = name.as_str();
        if HOP_BY_HOP.contains(&name_str) || name_str.starts_with("x-rebound-") {
            continue;
        }
        if strip_auth && AUTH_HEADERS.contains(&name_str) {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    if !headers.contains_key(header::CONTENT_TYPE) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if let Some(key) = &candidate.api_key {
        let (name, value) = match job.protocol {
            Protocol::OpenAi => (header::AUTHORIZATION, format!("Bearer {key}")),
            Protocol::Anthropic => (HeaderName::from_static("x-api-key"), key.clone()),
        };
        let mut value = HeaderValue::from_str(&value).map_err(http::Error::from)?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    if job.protocol == Protocol::Anthropic && !headers.contains_key("anthropic-version") {
        headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
    }
    Ok(request)
}

/// Runs a job to its one response.
pub(crate) async fn run(
    job: Job,
    head: oneshot::Sender<Head>,
    body: mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>,
) {
    let mut down = Downstream {
        head: Some(head),
        body,
    };
    let gateway = Arc::clone(&job.gateway);
    let policies = job
        .route
        .candidates
        .iter()
        .map(|c| Arc::clone(&c.policy))
        .collect();
    let mut turn = Turn::new(policies, Caller::Session);
    let mut attempts = 0u32;
    let mut last_class: Option<&'static str> = None;
    let protocol_name = match job.protocol {
        Protocol::OpenAi => "openai",
        Protocol::Anthropic => "anthropic",
    };
    loop {
        let Some(candidate) = job.route.candidates.get(turn.candidate()).cloned() else {
            return;
        };
        attempts += 1;
        gateway.metrics.attempt(&candidate.id);
        let outcome = attempt(&job, &candidate, &mut down, attempts).await;
        let failed = match outcome {
            Attempt::Delivered => {
                let outcome = if attempts == 1 { "ok" } else { "recovered" };
                if let Some(class) = last_class {
                    gateway.metrics.recovery(class);
                }
                gateway.metrics.request(protocol_name, outcome);
                gateway.log.line(&format_line(&[
                    ("route", job.route.id.clone()),
                    ("candidate", candidate.id.clone()),
                    ("attempt", attempts.to_string()),
                    ("outcome", "ok".into()),
                ]));
                return;
            }
            Attempt::ClientGone => {
                gateway.metrics.request(protocol_name, "client_gone");
                return;
            }
            Attempt::Failed(failed) => failed,
        };
        let now = gateway.clock.now();
        let classification = gateway.catalogue.classify(&failed.evidence, now);
        let safety = if failed.delivered && !job.restart {
            Safety::Ambiguous
        } else {
            Safety::Replayable
        };
        let action = turn.on_failure(
            Failure {
                evidence: &failed.evidence,
                classification: &classification,
                safety,
            },
            now,
            Jitter::new(gateway.draw()),
        );
        let class = classification.verdict.label();
        let code = classification
            .code
            .as_ref()
            .map_or("-", |c| c.as_str())
            .to_owned();
        last_class = Some(class);
        let mut line = vec![
            ("route", job.route.id.clone()),
            ("candidate", candidate.id.clone()),
            ("attempt", attempts.to_string()),
            ("outcome", "failed".into()),
            ("phase", failed.evidence.phase.as_str().to_owned()),
            (
                "status",
                failed
                    .evidence
                    .status
                    .map(|s| s.to_string())
                    .unwrap_or_default(),
            ),
            (
                "transport",
                failed
                    .evidence
                    .transport
                    .map(|t| t.as_str().to_owned())
                    .unwrap_or_default(),
            ),
            (
                "sse_event",
                failed.evidence.sse_event.clone().unwrap_or_default(),
            ),
            ("code", code.clone()),
            ("class", class.to_owned()),
            (
                "rule",
                classification
                    .rule_id
                    .as_deref()
                    .unwrap_or_default()
                    .to_owned(),
            ),
        ];
        match action {
            Action::Retry(wait) => {
                gateway.metrics.retry(class, &code, wait.delay);
                line.push(("action", "retry".into()));
                line.push(("delay_ms", wait.delay.as_millis().to_string()));
                gateway.log.line(&format_line(&line));
                if failed.delivered && !restart_marker(&job, &mut down, attempts, "retry").await {
                    gateway.metrics.request(protocol_name, "client_gone");
                    return;
                }
                if !wait_for(
                    &job,
                    &mut down,
                    wait.delay,
                    &wait.status,
                    &candidate,
                    attempts,
                )
                .await
                {
                    gateway.metrics.request(protocol_name, "client_gone");
                    return;
                }
            }
            Action::Fallback {
                candidate: next, ..
            } => {
                gateway.metrics.fallback(class, &code);
                line.push(("action", "fallback".into()));
                line.push((
                    "next",
                    job.route
                        .candidates
                        .get(next)
                        .map(|c| c.id.clone())
                        .unwrap_or_default(),
                ));
                gateway.log.line(&format_line(&line));
                if failed.delivered && !restart_marker(&job, &mut down, attempts, "fallback").await
                {
                    gateway.metrics.request(protocol_name, "client_gone");
                    return;
                }
            }
            Action::Stop(diagnostics) => {
                if matches!(
                    diagnostics.reason,
                    StopReason::Exhausted | StopReason::RouteEnded
                ) {
                    gateway.metrics.exhaustion(class, &code);
                }
                line.push(("action", "stop".into()));
                line.push(("reason", format!("{:?}", diagnostics.reason).to_lowercase()));
                gateway.log.line(&format_line(&line));
                gateway.metrics.request(protocol_name, "error");
                terminal(&job, &mut down, failed, &diagnostics, &candidate, attempts).await;
                return;
            }
        }
    }
}

/// Tells a restart client to discard the partial message.
async fn restart_marker(job: &Job, down: &mut Downstream, attempts: u32, reason: &str) -> bool {
    let data =
        serde_json::json!({"type": RESTART_EVENT, "reason": reason, "attempt": attempts + 1});
    let event = format!("event: {RESTART_EVENT}\ndata: {data}\n\n");
    let _ = job;
    down.send(Bytes::from(event)).await
}

/// Commits a streaming response with rebound's own headers (a keep-alive before content).
fn commit_stream(down: &mut Downstream, candidate: &Candidate, route: &str, attempts: u32) -> bool {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    rebound_headers(&mut headers, attempts, &candidate.id, route);
    down.respond(Head {
        status: StatusCode::OK,
        headers,
        body: None,
    })
}

/// Waits `delay`; a streaming client hears `: Retrying in 4s · attempt 2/10` each second once
/// the wait passes a second (G3). `false` when the client went away.
async fn wait_for(
    job: &Job,
    down: &mut Downstream,
    delay: Duration,
    status: &RetryStatus,
    candidate: &Candidate,
    attempts: u32,
) -> bool {
    let gateway = &job.gateway;
    let mut remaining = delay;
    while !remaining.is_zero() {
        let step = remaining.min(Duration::from_secs(1));
        tokio::select! {
            biased;
            _ = down.gone() => return false,
            _ = gateway.sleeper.sleep(step) => {}
        }
        remaining -= step;
        if job.stream && !remaining.is_zero() {
            if !down.committed() && !commit_stream(down, candidate, &job.route.id, attempts) {
                return false;
            }
            let comment = format!(": {}\n\n", status.text(gateway.clock.now()));
            if !down.send(Bytes::from(comment)).await {
                return false;
            }
        }
    }
    true
}

/// The one terminal error (G2, G4).
async fn terminal(
    job: &Job,
    down: &mut Downstream,
    failed: FailedAttempt,
    diagnostics: &Diagnostics,
    candidate: &Candidate,
    attempts: u32,
) {
    let protocol = job.protocol;
    let class = diagnostics.class;
    if down.committed() {
        if !failed.error_forwarded {
            let kind = failed.evidence.sse_event.clone().unwrap_or_else(|| {
                shape::kind_for(protocol, class, diagnostics.provider_status).to_owned()
            });
            let message = diagnostics
                .error
                .clone()
                .unwrap_or_else(|| "rebound: the upstream stream failed".to_owned());
            let _ = down
                .send(shape::stream_error(
                    protocol,
                    &kind,
                    &message,
                    Some(diagnostics),
                ))
                .await;
        }
        return;
    }
    let (status, body) = match &failed.upstream_error {
        Some((status, body)) => (
            *status,
            shape::with_diagnostics(protocol, body, diagnostics),
        ),
        None => {
            let status = match (
                failed.evidence.sse_event.as_deref(),
                failed.evidence.transport,
            ) {
                (Some("overloaded_error"), _) => 529,
                (Some(kind), _) if kind.contains("rate_limit") => 429,
                (
                    _,
                    Some(
                        TransportKind::Timeout
                        | TransportKind::IdleTimeout
                        | TransportKind::ConnectTimeout,
                    ),
                ) => 504,
                _ => 502,
            };
            let kind = failed
                .evidence
                .sse_event
                .clone()
                .unwrap_or_else(|| shape::kind_for(protocol, class, Some(status)).to_owned());
            let message = diagnostics
                .error
                .clone()
                .unwrap_or_else(|| "rebound: the upstream failed".to_owned());
            let body = shape::error_body(protocol, &kind, &message, Some(diagnostics)).to_string();
            (
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                Bytes::from(body),
            )
        }
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    rebound_headers(&mut headers, attempts, &candidate.id, &job.route.id);
    down.respond(Head {
        status,
        headers,
        body: Some(body),
    });
}

fn transport_failure(
    base: &Evidence,
    failure: TransportFailure,
    phase: Phase,
    delivered: bool,
) -> Attempt {
    Attempt::Failed(FailedAttempt {
        evidence: Evidence {
            transport: Some(failure.kind),
            body: Some(failure.message),
            phase,
            ..base.clone()
        },
        delivered,
        error_forwarded: false,
        upstream_error: None,
    })
}

async fn attempt(
    job: &Job,
    candidate: &Candidate,
    down: &mut Downstream,
    attempts: u32,
) -> Attempt {
    let gateway = &job.gateway;
    let base = Evidence {
        provider: Some(candidate.provider.clone()),
        ..Evidence::default()
    };
    let request = match upstream_request(job, candidate) {
        Ok(request) => request,
        Err(e) => {
            let failure = TransportFailure {
                kind: TransportKind::ConnectionRefused,
                message: format!("the upstream request could not be built: {e}"),
            };
            return transport_failure(&base, failure, Phase::Setup, false);
        }
    };
    let sent = tokio::select! {
        biased;
        _ = down.gone() => return Attempt::ClientGone,
        sent = gateway.client.send(request) => sent,
    };
    let response = match sent {
        Ok(response) => response,
        Err(failure) => return transport_failure(&base, failure, Phase::Setup, false),
    };
    let (parts, mut body) = response.into_parts();
    let idle = gateway.client.timeouts().idle;
    if !parts.status.is_success() {
        let bytes = match read_body(&mut body, ERROR_BODY_LIMIT, idle, down.gone()).await {
            Ok(bytes) => bytes,
            Err(None) => return Attempt::ClientGone,
            Err(Some(_)) => Bytes::new(),
        };
        let headers: Headers = parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        return Attempt::Failed(FailedAttempt {
            evidence: Evidence {
                status: Some(parts.status.as_u16()),
                headers,
                body: Some(String::from_utf8_lossy(&bytes).into_owned()),
                ..base
            },
            delivered: false,
            error_forwarded: false,
            upstream_error: Some((parts.status, bytes)),
        });
    }
    let mut headers = relayable(&parts.headers);
    rebound_headers(&mut headers, attempts, &candidate.id, &job.route.id);
    if !job.stream {
        let bytes = match read_body(&mut body, RESPONSE_LIMIT, idle, down.gone()).await {
            Ok(bytes) => bytes,
            Err(None) => return Attempt::ClientGone,
            Err(Some(failure)) => return transport_failure(&base, failure, Phase::Setup, false),
        };
        headers.remove(header::CONTENT_LENGTH);
        return if down.respond(Head {
            status: parts.status,
            headers,
            body: Some(bytes),
        }) {
            Attempt::Delivered
        } else {
            Attempt::ClientGone
        };
    }
    relay_stream(job, parts.status, headers, &mut body, down, &base).await
}

/// Relays a stream: holds bytes back until the commit point, then forwards whole events.
async fn relay_stream(
    job: &Job,
    status: StatusCode,
    mut headers: HeaderMap,
    body: &mut Incoming,
    down: &mut Downstream,
    base: &Evidence,
) -> Attempt {
    let idle = job.gateway.client.timeouts().idle;
    headers.remove(header::CONTENT_LENGTH);
    let mut framer = SseFramer::new();
    let mut pending = BytesMut::new();
    let mut pending_base: u64 = 0;
    let mut content_seen = false;
    let mut headers = Some(headers);
    loop {
        let frame = tokio::select! {
            biased;
            _ = down.gone() => return Attempt::ClientGone,
            frame = tokio::time::timeout(idle, body.frame()) => frame,
        };
        let phase = if content_seen {
            Phase::Stream
        } else {
            Phase::Setup
        };
        let data = match frame {
            Err(_) => {
                let failure = TransportFailure {
                    kind: TransportKind::IdleTimeout,
                    message: format!("no stream event for {} s", idle.as_secs_f64()),
                };
                return transport_failure(base, failure, phase, content_seen);
            }
            Ok(None) => {
                let failure = TransportFailure {
                    kind: TransportKind::Truncated,
                    message: "the stream ended before its final event".into(),
                };
                return transport_failure(base, failure, phase, content_seen);
            }
            Ok(Some(Err(e))) => {
                return transport_failure(base, body_failure(&e), phase, content_seen);
            }
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
        };
        pending.extend_from_slice(&data);
        let events = match framer.push(&data) {
            Ok(events) => events,
            Err(e) => {
                let failure = TransportFailure {
                    kind: TransportKind::BodyDecode,
                    message: e.to_string(),
                };
                return transport_failure(base, failure, phase, content_seen);
            }
        };
        let mut forward_to: Option<u64> = None;
        let mut done = false;
        for event in events {
            for item in stream_items(job.protocol, &event.event, &event.data) {
                if item.is_content() && !content_seen {
                    content_seen = true;
                    if let Some(headers) = headers.take()
                        && !down.committed()
                        && !down.respond(Head {
                            status,
                            headers,
                            body: None,
                        })
                    {
                        return Attempt::ClientGone;
                    }
                }
                match item {
                    StreamItem::Error { kind } => {
                        let forwarded = content_seen && !job.restart;
                        if forwarded {
                            let upto = usize::try_from(event.end - pending_base)
                                .unwrap_or(pending.len())
                                .min(pending.len());
                            if !down.send(pending.split_to(upto).freeze()).await {
                                return Attempt::ClientGone;
                            }
                        } else if let Some(upto) = forward_to {
                            let upto = usize::try_from(upto - pending_base)
                                .unwrap_or(0)
                                .min(pending.len());
                            if !down.send(pending.split_to(upto).freeze()).await {
                                return Attempt::ClientGone;
                            }
                        }
                        let phase = if content_seen {
                            Phase::Stream
                        } else {
                            Phase::Setup
                        };
                        return Attempt::Failed(FailedAttempt {
                            evidence: Evidence {
                                status: Some(status.as_u16()),
                                sse_event: Some(kind),
                                body: Some(event.data.clone()),
                                phase,
                                ..base.clone()
                            },
                            delivered: content_seen,
                            error_forwarded: forwarded,
                            upstream_error: None,
                        });
                    }
                    StreamItem::Malformed => {
                        let failure = TransportFailure {
                            kind: TransportKind::BodyDecode,
                            message: "an SSE event's data is not the protocol's JSON".into(),
                        };
                        let phase = if content_seen {
                            Phase::Stream
                        } else {
                            Phase::Setup
                        };
                        return transport_failure(base, failure, phase, content_seen);
                    }
                    StreamItem::Done => done = true,
                    _ => {}
                }
            }
            if content_seen {
                forward_to = Some(event.end);
            }
        }
        if done {
            if !content_seen {
                // A complete stream without content: empty, and not yet shown to anyone.
                return Attempt::Failed(FailedAttempt {
                    evidence: Evidence {
                        status: Some(status.as_u16()),
                        body: Some(String::new()),
                        ..base.clone()
                    },
                    delivered: false,
                    error_forwarded: false,
                    upstream_error: None,
                });
            }
            if !down.send(pending.split().freeze()).await {
                return Attempt::ClientGone;
            }
            return Attempt::Delivered;
        }
        if let Some(upto) = forward_to {
            let upto = usize::try_from(upto - pending_base)
                .unwrap_or(0)
                .min(pending.len());
            pending_base += upto as u64;
            if !down.send(pending.split_to(upto).freeze()).await {
                return Attempt::ClientGone;
            }
        }
    }
}

/// `GET /v1/models`: the first OpenAI candidate's list, relayed; or the configured names.
pub(crate) async fn models(gateway: &Gateway) -> Response<Body> {
    let candidate = gateway
        .config
        .routes
        .iter()
        .flat_map(|r| r.candidates.iter())
        .find(|c| c.protocol == Protocol::OpenAi);
    let listed = || {
        let mut names: Vec<String> = gateway
            .config
            .routes
            .iter()
            .flat_map(|r| {
                r.models
                    .iter()
                    .filter(|m| !m.contains('*'))
                    .cloned()
                    .chain(r.candidates.iter().filter_map(|c| c.model.clone()))
            })
            .collect();
        names.sort();
        names.dedup();
        let data: Vec<_> = names
            .iter()
            .map(|id| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": "rebound"}))
            .collect();
        full(
            StatusCode::OK,
            "application/json",
            serde_json::json!({"object": "list", "data": data}).to_string(),
        )
    };
    let Some(candidate) = candidate else {
        return listed();
    };
    let mut request = match Request::get(format!("{}/models", candidate.base_url))
        .body(Full::new(Bytes::new()))
    {
        Ok(request) => request,
        Err(_) => return listed(),
    };
    if let Some(key) = &candidate.api_key
        && let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {key}"))
    {
        value.set_sensitive(true);
        request.headers_mut().insert(header::AUTHORIZATION, value);
    }
    match gateway.client.send(request).await {
        Ok(response) if response.status().is_success() => {
            let (parts, body) = response.into_parts();
            match body.collect().await {
                Ok(collected) => {
                    let mut response = full(parts.status, "application/json", collected.to_bytes());
                    *response.headers_mut() = relayable(&parts.headers);
                    response.headers_mut().remove(header::CONTENT_LENGTH);
                    response
                }
                Err(_) => listed(),
            }
        }
        _ => listed(),
    }
}
