//! The upstream side of a forwarded request: one attempt, answered whole or handed to the
//! stream relay (`relay.rs`).

use bytes::Bytes;
use http::{HeaderValue, Request, header};
use rebound_core::{Phase, TransportKind};
use rebound_runtime::Attempted;
use rebound_runtime::attempt::{
    ErrorBody, RESPONSE_LIMIT, read_error_body, response_evidence, transport_evidence,
};
use rebound_runtime::http::{TransportFailure, read_whole};
use rebound_runtime::provider::{AnswerError, answer_failure};

use super::LiveRequest;
use super::downstream::{Downstream, Head};
use super::headers::{forwarded_headers, kept_on_give_up, rebound_headers, relayable};
use super::outcome::{Attempt, Detail, failure};
use super::relay::{Relay, relay};
use crate::config::Candidate;

fn upstream_request(
    request: &LiveRequest,
    candidate: &Candidate,
) -> Result<Request<Bytes>, http::Error> {
    // The route holds only candidates of the API's protocol, and each serves its APIs.
    let endpoint = candidate
        .endpoint_for(request.api)
        .unwrap_or_else(|| candidate.endpoint());
    let endpoint = match &request.query {
        None => endpoint,
        Some(query) => format!("{endpoint}?{query}").parse::<http::Uri>()?,
    };
    let mut upstream = Request::post(endpoint)
        .version(candidate.version())
        .body(candidate.body_for(&request.body))?;
    let headers = upstream.headers_mut();
    forwarded_headers(headers, &request.headers, candidate, &request.gateway);
    if !headers.contains_key(header::CONTENT_TYPE) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    Ok(upstream)
}

/// A failure below HTTP before anything reached the client.
fn transport_failure(candidate: &Candidate, failure_: TransportFailure) -> Attempt {
    let evidence = transport_evidence(&candidate.provider, failure_, Phase::Setup);
    failure(evidence, false, false, Detail::default())
}

/// Attempt number `attempts` of `request` to `candidate`; a success goes to the client.
pub(super) async fn attempt(
    request: &LiveRequest,
    candidate: &Candidate,
    down: &mut Downstream,
    attempts: u32,
) -> Attempt {
    let gateway = &request.gateway;
    let upstream = match upstream_request(request, candidate) {
        Ok(upstream) => upstream,
        Err(e) => {
            let failure = TransportFailure {
                kind: TransportKind::ConnectionRefused,
                message: format!("the upstream request could not be built: {e}"),
            };
            return transport_failure(candidate, failure);
        }
    };
    let sent = tokio::select! {
        biased;
        _ = down.gone() => return Attempted::Ended,
        sent = Box::pin(gateway.client.send(upstream)) => sent,
    };
    let response = match sent {
        Ok(response) => response,
        Err(failure) => return transport_failure(candidate, failure),
    };
    let (parts, mut body) = response.into_parts();
    let idle = gateway.client.timeouts().idle;
    if !parts.status.is_success() {
        let bytes = match Box::pin(read_error_body(&mut body, idle, down.gone())).await {
            ErrorBody::Read(bytes) => bytes,
            ErrorBody::Cancelled => return Attempted::Ended,
        };
        let evidence = response_evidence(&candidate.provider, parts.status, &parts.headers, &bytes);
        let detail = Detail {
            upstream_error: Some((parts.status, bytes)),
            kept_headers: kept_on_give_up(&parts.headers),
            ..Detail::default()
        };
        return failure(evidence, false, false, detail);
    }
    // A stream's headers wait for the commit point. Over HTTP/2 they are detached first: their
    // values can be slices of a frame's buffer (see `detached`). rebound's HTTP/1.1 client
    // gives each value its own allocation already.
    let mut headers = relayable(&parts.headers, request.stream && candidate.http2);
    let status = parts.status;
    // A stream does not keep the upstream's head.
    drop(parts);
    rebound_headers(&mut headers, attempts, candidate, &request.route);
    if !request.stream {
        let bytes = match Box::pin(read_whole(&mut body, RESPONSE_LIMIT, idle, down.gone())).await {
            Ok(bytes) => bytes,
            Err(None) => return Attempted::Ended,
            Err(Some(failure)) => return transport_failure(candidate, failure),
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
            return transport_failure(candidate, failure);
        }
        // A Responses answer can say it failed in a success (`status: "failed"`): classified
        // by its error code like the stream's `response.failed`, and relayed as sent if
        // recovery stops.
        if let Some(AnswerError::Failed { kind }) = answer_failure(request.api, &bytes) {
            let evidence = rebound_core::Evidence {
                sse_event: Some(kind),
                ..response_evidence(&candidate.provider, status, &headers, &bytes)
            };
            let detail = Detail {
                upstream_error: Some((status, bytes)),
                ..Detail::default()
            };
            return failure(evidence, false, false, detail);
        }
        headers.remove(header::CONTENT_LENGTH);
        return if down.respond(Head {
            status,
            headers,
            body: Some(bytes),
        }) {
            Attempted::Succeeded(())
        } else {
            Attempted::Ended
        };
    }
    let relay_state = Relay::new(
        request.api,
        request.restart,
        status,
        headers,
        candidate.provider.clone(),
    );
    Box::pin(relay(relay_state, idle, &mut body, down)).await
}
