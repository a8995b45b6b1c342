//! The forwarder: one client request, attempted against the route's candidates until the
//! first success or one terminal error (G2–G4, G6).
//!
//! Before the commit point (the first content-bearing event of a stream, or the whole body of
//! a non-streaming answer) nothing has reached the client, so every retry and fallback is
//! invisible. After it, upstream bytes are forwarded untouched, whole SSE events at a time; a
//! failure then ends the stream with the provider's own in-stream error event, unless the
//! client asked for `x-rebound-replay: restart`.

mod downstream;
pub(crate) mod pipe;
mod relay;
mod upstream;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use rebound_core::backoff::Jitter;
use rebound_core::status::StopReason;
use rebound_core::{
    Action, Caller, Diagnostics, Failure, RetryStatus, Safety, TransportKind, Turn,
};
use rebound_runtime::Protocol;
use tokio::sync::oneshot;

pub(crate) use downstream::{Body, Downstream, Head};
pub(crate) use upstream::relayable;
use upstream::{Attempt, FailedAttempt, attempt};

use crate::config::{Candidate, Route};
use crate::log::format_line;
use crate::server::Gateway;
use crate::shape;

/// The marker event sent to `x-rebound-replay: restart` clients before a replay.
pub const RESTART_EVENT: &str = "rebound_restart";

/// One client request.
pub(crate) struct Job {
    pub(crate) gateway: Arc<Gateway>,
    pub(crate) protocol: Protocol,
    pub(crate) route: Arc<Route>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) stream: bool,
    pub(crate) restart: bool,
}

/// Copies of header values that share no memory with the connection's read buffer.
///
/// hyper hands out header values and small bodies as slices of the connection's read buffer;
/// one kept for the life of a stream pins that whole buffer and makes the connection allocate
/// another for its next read. A stream held open for minutes keeps only what it needs.
pub(crate) fn detached(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        out.append(name.clone(), detach(value));
    }
    out
}

/// One header value, copied out of whatever buffer it shares (see [`detached`]).
pub(crate) fn detach(value: &HeaderValue) -> HeaderValue {
    let mut copy = HeaderValue::from_maybe_shared(Bytes::copy_from_slice(value.as_bytes()))
        .unwrap_or_else(|_| value.clone());
    copy.set_sensitive(value.is_sensitive());
    copy
}

/// A request body that shares no memory with the connection's read buffer (see [`detached`]).
/// Bodies larger than a read buffer were already gathered into their own allocation.
pub(crate) fn detached_body(body: Bytes) -> Bytes {
    if body.len() <= 64 << 10 {
        Bytes::copy_from_slice(&body)
    } else {
        body
    }
}

/// rebound's response headers (G6), and the name each has in [`final_figures`].
const REBOUND_HEADERS: [(&str, &str); 3] = [
    ("x-rebound-attempts", "attempts"),
    ("x-rebound-candidate", "candidate"),
    ("x-rebound-route-id", "route"),
];

/// `x-rebound-attempts`, `x-rebound-candidate` and `x-rebound-route-id` (G6).
fn rebound_headers(headers: &mut HeaderMap, attempts: u32, candidate: &Candidate, route: &Route) {
    let [attempts_name, candidate_name, route_name] = REBOUND_HEADERS.map(|(name, _)| name);
    headers.insert(
        HeaderName::from_static(attempts_name),
        count_header(attempts),
    );
    headers.insert(
        HeaderName::from_static(candidate_name),
        candidate.id_header(),
    );
    headers.insert(HeaderName::from_static(route_name), route.id_header());
}

/// rebound's headers of the attempt that reached content, as an SSE comment: for a stream
/// the countdown committed earlier, whose headers counted only the attempts made by then.
/// `: rebound attempts=3 candidate=backup route=default`
fn final_figures(headers: &HeaderMap) -> Bytes {
    let mut line = String::from(": rebound");
    for (header, name) in REBOUND_HEADERS {
        if let Some(value) = headers.get(header).and_then(|v| v.to_str().ok()) {
            line.push(' ');
            line.push_str(name);
            line.push('=');
            line.push_str(value);
        }
    }
    line.push_str("\n\n");
    Bytes::from(line)
}

const DIGITS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];

/// A count as a header value; the usual small ones without an allocation.
fn count_header(n: u32) -> HeaderValue {
    match count_text(n) {
        Cow::Borrowed(digit) => HeaderValue::from_static(digit),
        Cow::Owned(_) => HeaderValue::from(n),
    }
}

/// A count as text; the usual small ones without an allocation.
fn count_text(n: u32) -> Cow<'static, str> {
    match DIGITS.get(n as usize) {
        Some(digit) => Cow::Borrowed(digit),
        None => Cow::Owned(n.to_string()),
    }
}

/// Runs a job to its one response.
pub(crate) async fn run(job: Job, head: oneshot::Sender<Head>, body: Option<pipe::Sender>) {
    let mut down = Downstream {
        head: Some(head),
        body,
    };
    let gateway = Arc::clone(&job.gateway);
    // Made at the first failure: most requests succeed at once and never consult it.
    let mut turn: Option<Turn> = None;
    let mut attempts = 0u32;
    let mut last_class: Option<&'static str> = None;
    let protocol_name = match job.protocol {
        Protocol::OpenAi => "openai",
        Protocol::Anthropic => "anthropic",
    };
    loop {
        let next = turn.as_ref().map_or(0, Turn::candidate);
        let Some(candidate) = job.route.candidates.get(next).cloned() else {
            return;
        };
        attempts += 1;
        gateway.metrics.attempt(&candidate.id);
        // Boxed, like every step below: an open stream's task then holds only the step it is
        // in, not room for the largest one.
        let outcome = Box::pin(attempt(&job, &candidate, &mut down, attempts)).await;
        let failed = match outcome {
            Attempt::Delivered => {
                let outcome = if attempts == 1 { "ok" } else { "recovered" };
                if let Some(class) = last_class {
                    gateway.metrics.recovery(class);
                }
                gateway.metrics.request(protocol_name, outcome);
                gateway.log.line(&format_line(&[
                    ("route", job.route.id.as_str()),
                    ("candidate", candidate.id.as_str()),
                    ("attempt", &count_text(attempts)),
                    ("outcome", "ok"),
                ]));
                return;
            }
            Attempt::ClientGone => {
                gateway.metrics.request(protocol_name, "client_gone");
                return;
            }
            Attempt::Failed(failed) => failed,
        };
        let turn = turn.get_or_insert_with(|| {
            let policies = job
                .route
                .candidates
                .iter()
                .map(|c| Arc::clone(&c.policy))
                .collect();
            Turn::new(policies, Caller::Session)
        });
        let mut failure = Failed {
            job: &job,
            down: &mut down,
            turn,
            candidate: &candidate,
            attempts,
            protocol_name,
        };
        match Box::pin(failure.decide(failed)).await {
            Some(class) => last_class = Some(class),
            None => return,
        }
    }
}

/// One failed attempt, to be decided: retry after a wait, fall back, or stop.
struct Failed<'a> {
    job: &'a Job,
    down: &'a mut Downstream,
    turn: &'a mut Turn,
    candidate: &'a Candidate,
    attempts: u32,
    protocol_name: &'static str,
}

impl Failed<'_> {
    /// Classifies, decides and carries the decision out: `Some(class)` to attempt again,
    /// `None` when the job has ended (stopped, or the client went away).
    async fn decide(&mut self, failed: FailedAttempt) -> Option<&'static str> {
        let (job, attempts, protocol_name) = (self.job, self.attempts, self.protocol_name);
        let candidate = self.candidate;
        let gateway = &job.gateway;
        let now = gateway.clock.now();
        let classification = gateway.catalogue.classify(&failed.evidence, now);
        let safety = if failed.delivered && !job.restart {
            Safety::Ambiguous
        } else {
            Safety::Replayable
        };
        let action = self.turn.on_failure(
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
                if failed.delivered && !restart_marker(job, self.down, attempts, "retry").await {
                    gateway.metrics.request(protocol_name, "client_gone");
                    return None;
                }
                if !wait_for(
                    job,
                    self.down,
                    wait.delay,
                    &wait.status,
                    candidate,
                    attempts,
                )
                .await
                {
                    gateway.metrics.request(protocol_name, "client_gone");
                    return None;
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
                if failed.delivered && !restart_marker(job, self.down, attempts, "fallback").await {
                    gateway.metrics.request(protocol_name, "client_gone");
                    return None;
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
                terminal(job, self.down, failed, &diagnostics, candidate, attempts).await;
                return None;
            }
        }
        Some(class)
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
fn commit_stream(
    down: &mut Downstream,
    candidate: &Candidate,
    route: &Route,
    attempts: u32,
) -> bool {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    rebound_headers(&mut headers, attempts, candidate, route);
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
            if !down.committed() && !commit_stream(down, candidate, &job.route, attempts) {
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
    rebound_headers(&mut headers, attempts, candidate, &job.route);
    down.respond(Head {
        status,
        headers,
        body: Some(body),
    });
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::{HeaderMap, HeaderValue};

    fn inside(buffer: &Bytes, bytes: &[u8]) -> bool {
        buffer.as_ptr_range().contains(&bytes.as_ptr())
    }

    #[test]
    fn counts_read_the_same_in_headers_and_logs() {
        for n in [0, 1, 9, 10, 12, 4_000_000_000] {
            assert_eq!(super::count_header(n), n.to_string().as_str());
            assert_eq!(super::count_text(n), n.to_string());
        }
    }

    #[test]
    fn detached_headers_and_small_bodies_share_nothing_with_the_read_buffer() {
        let buffer = Bytes::from(b"x-api-key: secret-value\r\n{\"model\":\"m\"}".to_vec());
        let mut headers = HeaderMap::new();
        let mut value = HeaderValue::from_maybe_shared(buffer.slice(11..23)).unwrap();
        value.set_sensitive(true);
        headers.insert("x-api-key", value);
        assert!(inside(&buffer, headers["x-api-key"].as_bytes()));

        let copy = super::detached(&headers);
        assert_eq!(copy["x-api-key"], "secret-value");
        assert!(copy["x-api-key"].is_sensitive());
        assert!(!inside(&buffer, copy["x-api-key"].as_bytes()));

        let body = super::detached_body(buffer.slice(25..));
        assert_eq!(&body[..], b"{\"model\":\"m\"}");
        assert!(!inside(&buffer, &body));
    }

    /// Every open stream holds one forwarder task: its future is the job's memory, so the
    /// steps it is not in are boxed rather than reserved (#4's per-stream memory).
    #[test]
    fn an_open_streams_forwarder_stays_small() {
        use std::sync::Arc;

        let config = crate::config::load(
            "test",
            crate::config::DEFAULT_CONFIG,
            &crate::config::Overrides::default(),
            &crate::config::ProcessEnv,
        )
        .unwrap();
        let client =
            rebound_runtime::HttpClient::new(rebound_runtime::Timeouts::default()).unwrap();
        let catalogue = Arc::new(rebound_core::Catalogue::shipped().unwrap());
        let gateway = Arc::new(crate::server::Gateway::new(config, client, catalogue));
        let route = gateway
            .config
            .route("gpt-4o", rebound_runtime::Protocol::OpenAi)
            .unwrap();
        let candidate = Arc::clone(&route.candidates[0]);
        let job = || super::Job {
            gateway: Arc::clone(&gateway),
            protocol: rebound_runtime::Protocol::OpenAi,
            route: route.clone(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
            stream: true,
            restart: false,
        };
        let (head, _) = tokio::sync::oneshot::channel();
        let (body, _) = super::pipe::pipe();
        let run = std::mem::size_of_val(&super::run(job(), head, Some(body)));
        let (head, _) = tokio::sync::oneshot::channel();
        let (body, _) = super::pipe::pipe();
        let mut down = super::Downstream {
            head: Some(head),
            body: Some(body),
        };
        let job = job();
        let attempt =
            std::mem::size_of_val(&super::upstream::attempt(&job, &candidate, &mut down, 1));
        assert!(run <= 1024, "the forwarder's future is {run} bytes");
        assert!(attempt <= 1024, "an attempt's future is {attempt} bytes");
    }
}
