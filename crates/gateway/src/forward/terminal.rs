//! The one terminal error of a request whose recovery stopped (G2, G4): before the commit
//! point, one response shaped like the provider's own error; after it, the provider's own
//! in-stream error event.
//!
//! The error is rebound's give-up (G10): it says `x-should-retry: false`, so a client's SDK
//! does not run rebound's whole loop again, and keeps the failed attempt's `retry-after`,
//! request id and rate-limit headers, so the client still learns when to come back; a reset
//! the upstream gave only in its body becomes the `retry-after`.

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use rebound_core::{Diagnostics, Evidence, TransportKind};
use rebound_runtime::Api;

use super::LiveRequest;
use super::downstream::{Downstream, Head};
use super::headers::{give_up, rebound_headers, skipped_header};
use super::outcome::FailedAttempt;
use crate::config::Candidate;
use crate::shape;

/// How a committed stream ends after a failure (G4): with the protocol's own in-stream error
/// event, unless the upstream's already ended it. A Responses stream ends with `error` and
/// `response.failed` events numbered after the last one its client received (G7).
pub(super) fn stream_end(
    api: Api,
    failed: &FailedAttempt,
    diagnostics: &Diagnostics,
) -> Option<Bytes> {
    if failed.detail.error_forwarded {
        return None;
    }
    let protocol = api.protocol();
    let kind = failed.evidence.sse_event.clone().unwrap_or_else(|| {
        shape::kind_for(protocol, diagnostics.class, diagnostics.provider_status).to_owned()
    });
    let message = message(
        &failed.evidence,
        diagnostics,
        "rebound: the upstream stream failed",
    );
    Some(match api {
        Api::Responses => {
            let position = failed.detail.position.as_deref();
            let place = shape::ResponsesPlace {
                sequence_number: position.and_then(|p| p.sequence_number),
                response: position.and_then(|p| p.response.as_ref()),
                error_event_sent: position.is_some_and(|p| p.error_event_sent),
            };
            shape::responses_failure(&kind, &message, place, Some(diagnostics))
        }
        Api::ChatCompletions | Api::Messages => {
            shape::stream_error(protocol, &kind, &message, Some(diagnostics))
        }
    })
}

/// The final error's message: an upstream error event's own message reads better than its
/// whole data (and Codex reads a rate limit's wait from it); else the evidence's excerpt.
fn message(evidence: &Evidence, diagnostics: &Diagnostics, otherwise: &str) -> String {
    evidence
        .body
        .as_deref()
        .filter(|_| evidence.sse_event.is_some())
        .and_then(shape::error_message)
        .or_else(|| diagnostics.error.clone())
        .unwrap_or_else(|| otherwise.to_owned())
}

/// The one terminal error (G2, G4).
pub(super) async fn terminal(
    request: &LiveRequest,
    down: &mut Downstream,
    failed: FailedAttempt,
    diagnostics: &Diagnostics,
    candidate: &Candidate,
    attempts: u32,
    resting: bool,
) {
    let protocol = request.api.protocol();
    let class = diagnostics.class;
    if down.committed() {
        if let Some(end) = stream_end(request.api, &failed, diagnostics) {
            let _ = down.send(end).await;
        }
        return;
    }
    let FailedAttempt {
        evidence, detail, ..
    } = failed;
    // A stop at a candidate resting in the shared health ledger (S2) sent nothing. It answers
    // like the failure that set the rest, with the time left as `retry-after`. (Told by the
    // decision, not by the evidence's shape: one JSON body in place of a stream is evidence
    // with no status, transport or event either, and is no rest.)
    let (status, body) = match &detail.upstream_error {
        Some((status, body)) => (
            *status,
            shape::with_diagnostics(protocol, body, diagnostics),
        ),
        None => {
            let status = match (evidence.sse_event.as_deref(), evidence.transport) {
                _ if resting && waits_for_a_reset(class) => 429,
                _ if resting => 503,
                (Some("overloaded_error"), _) => 529,
                (Some(kind), _) if kind.contains("rate_limit") => 429,
                (
                    _,
                    Some(
                        TransportKind::Timeout
                        | TransportKind::IdleTimeout
                        | TransportKind::FirstContentTimeout
                        | TransportKind::ConnectTimeout,
                    ),
                ) => 504,
                // An error inside a success (a Responses `response.failed`): the status the
                // provider gives the same failure over HTTP, so clients read it alike.
                _ => diagnostics
                    .code
                    .as_ref()
                    .filter(|_| evidence.sse_event.is_some())
                    .and_then(|code| shape::status_for_code(code.as_str()))
                    .unwrap_or(502),
            };
            let kind = evidence
                .sse_event
                .clone()
                .unwrap_or_else(|| shape::kind_for(protocol, class, Some(status)).to_owned());
            let message = message(&evidence, diagnostics, "rebound: the upstream failed");
            let body = shape::error_body(protocol, &kind, &message, Some(diagnostics)).to_string();
            (
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                Bytes::from(body),
            )
        }
    };
    let mut headers = detail.kept_headers;
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    give_up(&mut headers);
    rebound_headers(&mut headers, attempts, candidate, &request.route);
    skipped_header(&mut headers, request.skipped.as_ref());
    // When to come back: the time a rest has left, or a wait the upstream said only in its
    // words (a quota wall's reset date, C9), in the header clients read. The upstream's own
    // `retry-after` is kept as it is.
    let told = resting || (waits_for_a_reset(class) && !headers.contains_key(header::RETRY_AFTER));
    if told && let Some(ms) = diagnostics.hint_ms {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(ms.div_ceil(1000)));
    }
    down.respond(Head {
        status,
        headers,
        body: Some(body),
    });
}

/// A class whose failure lasts until a reset the upstream may name: a rate limit or a wall
/// (C9). Such a give-up is answered as a 429 while the candidate rests, and says its reset.
fn waits_for_a_reset(class: &str) -> bool {
    matches!(class, "rate_limit" | "hard")
}
