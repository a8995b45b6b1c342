//! The upstream side of a forwarded request: one attempt, whole or streamed, read up to the
//! commit point and relayed untouched after it.

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use rebound_core::{Evidence, Headers, Phase, TransportKind};
use rebound_runtime::http::{TransportFailure, body_failure, read_body};
use rebound_runtime::provider::{StreamItem, stream_items};
use rebound_runtime::sse::SseFramer;

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

/// Upstream response headers a client may see, detached from the upstream connection's read
/// buffer (see [`super::detached`]).
pub(crate) fn relayable(upstream: &HeaderMap) -> HeaderMap {
    let mut out = super::detached(upstream);
    for name in HOP_BY_HOP.iter().copied().chain(["content-encoding"]) {
        out.remove(name);
    }
    out
}

fn upstream_request(job: &Job, candidate: &Candidate) -> Result<Request<Full<Bytes>>, http::Error> {
    let mut request = Request::post(candidate.endpoint())
        .version(candidate.version())
        .body(Full::new(candidate.body_for(&job.body)))?;
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
    candidate.authorize(headers).map_err(http::Error::from)?;
    Ok(request)
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

pub(super) async fn attempt(
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
        sent = Box::pin(gateway.client.send(request)) => sent,
    };
    let response = match sent {
        Ok(response) => response,
        Err(failure) => return transport_failure(&base, failure, Phase::Setup, false),
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
                ..base
            },
            delivered: false,
            error_forwarded: false,
            upstream_error: Some((parts.status, bytes)),
        });
    }
    let mut headers = relayable(&parts.headers);
    let status = parts.status;
    // The upstream's head shares the connection's read buffer; a stream does not keep it.
    drop(parts);
    rebound_headers(&mut headers, attempts, &candidate.id, &job.route.id);
    if !job.stream {
        let bytes = match Box::pin(read_body(&mut body, RESPONSE_LIMIT, idle, down.gone())).await {
            Ok(bytes) => bytes,
            Err(None) => return Attempt::ClientGone,
            Err(Some(failure)) => return transport_failure(&base, failure, Phase::Setup, false),
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
            return transport_failure(&base, failure, Phase::Setup, false);
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
    Box::pin(relay_stream(job, status, headers, &mut body, down, &base)).await
}

/// An SSE event re-written with every string of its JSON data redacted.
fn redacted_event(event: &rebound_runtime::sse::SseEvent) -> Bytes {
    let data = match serde_json::from_str::<serde_json::Value>(&event.data) {
        Ok(mut value) => {
            crate::shape::redact_json(&mut value);
            value.to_string()
        }
        Err(_) => rebound_core::redact::redact(&event.data).into_owned(),
    };
    Bytes::from(if event.event.is_empty() {
        format!("data: {data}\n\n")
    } else {
        format!("event: {}\ndata: {data}\n\n", event.event)
    })
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
                        // Earlier whole events of this chunk go as they came …
                        if let Some(upto) = forward_to {
                            let upto = usize::try_from(upto - pending_base)
                                .unwrap_or(0)
                                .min(pending.len());
                            if !down.send(pending.split_to(upto).freeze()).await {
                                return Attempt::ClientGone;
                            }
                        }
                        // … and the provider's own error event with its strings redacted: it
                        // may echo a key.
                        if forwarded && !down.send(redacted_event(&event)).await {
                            return Attempt::ClientGone;
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

#[cfg(test)]
mod tests {
    use rebound_runtime::sse::SseEvent;

    use super::redacted_event;

    #[test]
    fn a_forwarded_error_event_loses_echoed_keys_and_keeps_its_shape() {
        let event = SseEvent {
            event: "error".into(),
            data: r#"{"type":"error","error":{"type":"authentication_error","message":"key sk-ant-api03-EchoedCanary0123456789 rejected"}}"#.into(),
            end: 0,
        };
        let out = String::from_utf8(redacted_event(&event).to_vec()).unwrap();
        assert!(!out.contains("EchoedCanary"), "{out}");
        assert!(out.starts_with("event: error\ndata: {"), "{out}");
        let data: serde_json::Value =
            serde_json::from_str(out.trim_end().strip_prefix("event: error\ndata: ").unwrap())
                .unwrap();
        assert_eq!(data["error"]["type"], "authentication_error");
    }
}
