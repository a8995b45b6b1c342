//! One attempt's outcome, and the evidence a failed one leaves behind (C1, C5).
//!
//! Every host of the recovery loop (the runtime's [`TurnDriver`](crate::TurnDriver), the
//! gateway's live requests, its durable jobs) reads an upstream answer through these: one
//! error-body limit, one builder of evidence from a response or a transport failure.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use rebound_core::{Evidence, Headers, Phase, Safety};

use crate::http::{ResponseBody, TransportFailure, read_body};

/// The most of an error response body that is read: kept as evidence and relayed to a client.
pub const ERROR_BODY_LIMIT: usize = 256 << 10;

/// The largest complete (non-streaming) answer accepted.
pub const RESPONSE_LIMIT: usize = 64 << 20;

/// How one attempt ended.
#[derive(Debug)]
pub enum Attempted<S, D> {
    /// A complete success, delivered to whoever waits for it.
    Succeeded(S),
    /// A failure, for the loop to decide.
    Failed(Failed<D>),
    /// Whoever waited went away (the client hung up, the caller aborted): nothing to decide.
    Ended,
}

/// A failed attempt: its evidence, whether a replay is safe, and what the host needs to end the
/// request if recovery stops (`detail`).
#[derive(Debug)]
pub struct Failed<D> {
    /// What the attempt left behind.
    pub evidence: Evidence,
    /// Content of this attempt already reached the consumer.
    pub delivered: bool,
    /// Whether replaying could duplicate an effect (D4).
    pub safety: Safety,
    /// The host's own record of the failure.
    pub detail: D,
}

/// The evidence of a provider's error response (C5: status and headers are evidence even when
/// the body is empty or broken).
pub fn response_evidence(
    provider: &str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> Evidence {
    Evidence {
        provider: Some(provider.to_owned()),
        status: Some(status.as_u16()),
        headers: evidence_headers(headers),
        body: Some(String::from_utf8_lossy(body).into_owned()),
        ..Evidence::default()
    }
}

/// The evidence of a failure below HTTP in `phase`.
pub fn transport_evidence(provider: &str, failure: TransportFailure, phase: Phase) -> Evidence {
    Evidence {
        provider: Some(provider.to_owned()),
        transport: Some(failure.kind),
        body: Some(failure.message),
        phase,
        ..Evidence::default()
    }
}

/// Response headers as evidence.
pub fn evidence_headers(headers: &HeaderMap) -> Headers {
    headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// How reading an error body ended.
#[derive(Debug)]
pub enum ErrorBody {
    /// The body, or as much of it as [`ERROR_BODY_LIMIT`] allows. A body that broke off gives
    /// what arrived: the status and headers are evidence enough (C5).
    Read(Bytes),
    /// `cancelled` completed first.
    Cancelled,
}

/// Reads an error response's body, at most [`ERROR_BODY_LIMIT`] bytes, with at most `idle`
/// between two pieces, until `cancelled` completes.
pub async fn read_error_body<F: Future<Output = ()>>(
    body: &mut ResponseBody,
    idle: std::time::Duration,
    cancelled: F,
) -> ErrorBody {
    match read_body(body, ERROR_BODY_LIMIT, idle, cancelled).await {
        Ok(bytes) => ErrorBody::Read(bytes),
        Err(None) => ErrorBody::Cancelled,
        Err(Some(_)) => ErrorBody::Read(Bytes::new()),
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue, StatusCode};
    use rebound_core::{Phase, TransportKind};

    use super::*;

    #[test]
    fn an_error_response_keeps_status_headers_and_body() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("7"));
        let evidence = response_evidence(
            "openai",
            StatusCode::TOO_MANY_REQUESTS,
            &headers,
            b"{\"e\":1}",
        );
        assert_eq!(evidence.provider.as_deref(), Some("openai"));
        assert_eq!(evidence.status, Some(429));
        assert_eq!(evidence.headers.get("retry-after"), Some("7"));
        assert_eq!(evidence.body.as_deref(), Some("{\"e\":1}"));
        assert_eq!(evidence.phase, Phase::Setup);
    }

    #[test]
    fn a_transport_failure_keeps_its_kind_message_and_phase() {
        let failure = TransportFailure {
            kind: TransportKind::Truncated,
            message: "cut".into(),
        };
        let evidence = transport_evidence("anthropic", failure, Phase::Stream);
        assert_eq!(evidence.transport, Some(TransportKind::Truncated));
        assert_eq!(evidence.body.as_deref(), Some("cut"));
        assert_eq!(evidence.phase, Phase::Stream);
        assert_eq!(evidence.status, None);
    }
}
