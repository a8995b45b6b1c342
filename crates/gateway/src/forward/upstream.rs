//! The upstream side of a forwarded request: one attempt, answered whole or handed to the
//! stream relay (`relay.rs`).

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use rebound_core::{Evidence, Headers, Phase, TransportKind};
use rebound_runtime::http::{TransportFailure, read_body, read_whole};

use super::downstream::{Downstream, Head};
use super::{Job, rebound_headers};
use crate::config::Candidate;

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

/// How an attempt ended.
pub(super) enum Attempt {
    /// A complete success went to the client.
    Delivered,
    /// The client went away.
    ClientGone,
    /// A failure, with what is needed to decide and to shape the terminal error.
    Failed(FailedAttempt),
}

pub(super) struct FailedAttempt {
    pub(super) evidence: Evidence,
    /// Content already reached the client.
    pub(super) delivered: bool,
    /// The upstream's own error event already reached the client.
    pub(super) error_forwarded: bool,
    /// An upstream error response (status, headers, body), relayed when recovery stops.
    pub(super) upstream_error: Option<(StatusCode, Bytes)>,
}

/// Upstream response headers a client may see; `detach`ed (see [`super::detached`]) when
/// they will wait for a stream's commit point.
pub(crate) fn relayable(upstream: &HeaderMap, detach: bool) -> HeaderMap {
    // Room for the `x-rebound-*` headers added next.
    let mut out = HeaderMap::with_capacity(upstream.len() + 3);
    for (name, value) in upstream {
        if HOP_BY_HOP.contains(&name.as_str()) || name == header::CONTENT_ENCODING {
            continue;
        }
        let value = if detach {
            super::detach(value)
        } else {
            value.clone()
        };
        out.append(name.clone(), value);
    }
    out
}

fn upstream_request(job: &Job, candidate: &Candidate) -> Result<Request<Bytes>, http::Error> {
    let mut request = Request::post(candidate.endpoint())
        .version(candidate.version())
        .body(candidate.body_for(&job.body))?;
    let strip_auth = candidate.api_key.is_some() || !job.gateway.config.gateway_keys.is_empty();
    // Room for the client's headers and the few added here, so the map grows at most once.
    let headers = request.headers_mut();
    headers.reserve(job.headers.len() + 4);
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
    if let Some(host) = candidate.host() {
        headers.insert(header::HOST, host);
    }
    if !headers.contains_key(header::CONTENT_TYPE) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    candidate.authorize(headers);
    Ok(request)
}

fn transport_failure(
    base: Evidence,
    failure: TransportFailure,
    phase: Phase,
    delivered: bool,
) -> Attempt {
    Attempt::Failed(FailedAttempt {
        evidence: Evidence {
            transport: Some(failure.kind),
            body: Some(failure.message),
            phase,
            ..base
        },
        delivered,
        error_forwarded: false,
        upstream_error: None,
    })
}

pub(super) async fn attempt(
    job: &Job,
    candidate: &Candidate,
    down: &mut Downstream,
    attempts: u32,
) -> Attempt {
    let gateway = &job.gateway;
    // Evidence starts from this; made only when needed, as most attempts succeed.
    let base = || Evidence {
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
            return transport_failure(base(), failure, Phase::Setup, false);
        }
    };
    let sent = tokio::select! {
        biased;
        _ = down.gone() => return Attempt::ClientGone,
        sent = Box::pin(gateway.client.send(request)) => sent,
    };
    let response = match sent {
        Ok(response) => response,
        Err(failure) => return transport_failure(base(), failure, Phase::Setup, false),
    };
    let (parts, mut body) = response.into_parts();
    let idle = gateway.client.timeouts().idle;
    if !parts.status.is_success() {
        let bytes = match Box::pin(read_body(&mut body, ERROR_BODY_LIMIT, idle, down.gone())).await
        {
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
                ..base()
            },
            delivered: false,
            error_forwarded: false,
            upstream_error: Some((parts.status, bytes)),
        });
    }
    // A stream's headers wait for the commit point. Over HTTP/2 they are detached first: their
    // values can be slices of a frame's buffer (see `detached`). rebound's HTTP/1.1 client
    // gives each value its own allocation already.
    let mut headers = relayable(&parts.headers, job.stream && candidate.http2);
    let status = parts.status;
    // A stream does not keep the upstream's head.
    drop(parts);
    rebound_headers(&mut headers, attempts, candidate, &job.route);
    if !job.stream {
        let bytes = match Box::pin(read_whole(&mut body, RESPONSE_LIMIT, idle, down.gone())).await {
            Ok(bytes) => bytes,
            Err(None) => return Attempt::ClientGone,
            Err(Some(failure)) => return transport_failure(base(), failure, Phase::Setup, false),
        };
        // A success that is not JSON is a broken answer, not an answer: it has not reached
        // the client yet, so it is retried like a cut body.
        if serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_err() {
            let failure = TransportFailure {
                kind: TransportKind::BodyDecode,
                message: format!(
                    "a {} answer whose body is not JSON ({} bytes)",
                    status.as_u16(),
                    bytes.len()
                ),
            };
            return transport_failure(base(), failure, Phase::Setup, false);
        }
        headers.remove(header::CONTENT_LENGTH);
        return if down.respond(Head {
            status,
            headers,
            body: Some(bytes),
        }) {
            Attempt::Delivered
        } else {
            Attempt::ClientGone
        };
    }
    let relay = super::relay::Relay::new(job.protocol, job.restart, status, headers, base());
    Box::pin(super::relay::relay(job, relay, &mut body, down)).await
}
