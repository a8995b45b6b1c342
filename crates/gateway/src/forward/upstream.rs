//! The upstream side of a forwarded request: one attempt, answered whole or handed to the
//! stream relay (`relay.rs`).

use bytes::Bytes;
use http::{HeaderValue, Request, header};
use rebound_core::{Phase, TransportKind};
use rebound_runtime::Attempted;
use rebound_runtime::attempt::{
    ErrorBody, RESPONSE_LIMIT, read_error_body, response_evidence, transport_evidence,
};
use rebound_runtime::foreign;
use rebound_runtime::form::{self, Gathered};
use rebound_runtime::http::{TransportFailure, read_whole};
use rebound_runtime::provider::{AnswerError, answer_failure};

use super::LiveRequest;
use super::downstream::{Downstream, Head};
use super::headers::{
    RETOLD, forwarded_headers, kept_on_give_up, rebound_headers, relayable, skipped_header,
};
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
    forwarded_headers(
        headers,
        &request.headers,
        candidate,
        request.key,
        &request.gateway,
    );
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

/// A whole stream where one body was due (the upstream streams whatever it is asked): the
/// answer the API would have sent whole, gathered from it and labelled so; or the attempt's
/// end, for the stream's own error or a stream cut short; `Ok(None)` for no stream of the API.
fn gathered(
    request: &LiveRequest,
    candidate: &Candidate,
    status: http::StatusCode,
    headers: &mut http::HeaderMap,
    stream: &[u8],
) -> Result<Option<Bytes>, Box<Attempt>> {
    match form::as_whole(request.api, stream) {
        Some(Gathered::Answer(answer)) => {
            let json = HeaderValue::from_static("application/json");
            headers.insert(header::CONTENT_TYPE, json);
            headers.insert(RETOLD, HeaderValue::from_static("whole"));
            request.gateway.metrics.retold(&candidate.id, "whole");
            Ok(Some(answer))
        }
        Some(Gathered::Error { kind, data }) => {
            let evidence = rebound_core::Evidence {
                sse_event: Some(kind),
                body: Some(data),
                ..response_evidence(&candidate.provider, status, headers, b"")
            };
            Err(Box::new(failure(evidence, false, false, Detail::default())))
        }
        Some(Gathered::Cut) => Err(Box::new(transport_failure(
            candidate,
            TransportFailure {
                kind: TransportKind::Truncated,
                message: form::CUT.into(),
            },
        ))),
        None => Ok(None),
    }
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
    // The candidate's own timeouts over the client's (S5).
    let timeouts = candidate.timeouts.resolve(gateway.client.timeouts());
    // A candidate that answers stream requests whole sends its headers with the whole answer.
    let first_byte = if request.stream && !gateway.unstreamed.knows(&candidate.id) {
        timeouts.stream_first_byte
    } else {
        timeouts.first_byte
    };
    let sent = tokio::select! {
        biased;
        _ = down.gone() => return Attempted::Ended,
        sent = Box::pin(gateway.client.send_within(upstream, first_byte)) => sent,
    };
    let response = match sent {
        Ok(response) => response,
        Err(failure) => return transport_failure(candidate, failure),
    };
    let (parts, mut body) = response.into_parts();
    let idle = timeouts.idle;
    // A stream request answered with a web page has no stream to relay.
    let page = parts.status.is_success() && request.stream && foreign::page_head(&parts.headers);
    if !parts.status.is_success() || page {
        let bytes = match Box::pin(read_error_body(&mut body, idle, down.gone())).await {
            ErrorBody::Read(bytes) => bytes,
            ErrorBody::Cancelled => return Attempted::Ended,
        };
        if page {
            // rebound's own terminal error, not the upstream's 200, if recovery stops.
            let evidence = foreign::page_evidence(&candidate.provider, parts.status, &bytes);
            return failure(evidence, false, false, Detail::default());
        }
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
    skipped_header(&mut headers, request.skipped.as_ref());
    if !request.stream {
        let mut bytes =
            match Box::pin(read_whole(&mut body, RESPONSE_LIMIT, idle, down.gone())).await {
                Ok(bytes) => bytes,
                Err(None) => return Attempted::Ended,
                Err(Some(failure)) => return transport_failure(candidate, failure),
            };
        // Parsed once: every whole answer passes here.
        let mut json = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_ok();
        if !json {
            match gathered(request, candidate, status, &mut headers, &bytes) {
                // Written as JSON by the gathering.
                Ok(Some(answer)) => (bytes, json) = (answer, true),
                Ok(None) => {}
                Err(attempt) => return *attempt,
            }
        }
        // A success that is not JSON is a broken answer, not an answer: it has not reached
        // the client yet, so it is retried like a cut body; a web page or another API's event
        // stream is said to be one (the base URL names no API, or another).
        if !json {
            let message = foreign::not_json_message(status, &headers, &bytes, "the API's JSON");
            let failure = TransportFailure {
                kind: TransportKind::BodyDecode,
                message,
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
    let mut relay_state = Relay::new(
        request.api,
        request.restart,
        status,
        headers,
        candidate.provider.clone(),
        request.body.clone(),
    );
    let limits = super::relay::Limits {
        idle,
        first_content: timeouts.first_content,
    };
    let attempt = Box::pin(relay(&mut relay_state, limits, &mut body, down)).await;
    let (retold, candidate) = (relay_state.retold(), candidate.id.as_str());
    if retold {
        gateway.metrics.retold(candidate, "stream");
    }
    // What the candidate does with stream requests, learned from this one (`unstreamed.rs`).
    if (retold || relay_state.streamed()) && gateway.unstreamed.answered(candidate, retold) {
        let event = if retold {
            "candidate_answers_streams_whole"
        } else {
            "candidate_streams_again"
        };
        tracing::info!(event, candidate);
    }
    attempt
}

#[cfg(test)]
mod tests {
    //! A whole Responses answer that says it failed (`status: "failed"` in an HTTP 200), and a
    //! whole stream where the answer was due.

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, UNIX_EPOCH};

    use bytes::Bytes;
    use http::{HeaderMap, StatusCode};
    use rebound_runtime::{Api, Protocol, VirtualTime};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use crate::forward::{Head, LiveRequest, run};

    // openai/codex#7250
    const FLAGGED: &str = r#"{"id":"resp_1","object":"response","status":"failed","error":{"code":"invalid_prompt","message":"Invalid prompt: your prompt was flagged as potentially violating our usage policy. Please try again with a different prompt: https://platform.openai.com/docs/guides/reasoning#advice-on-prompting"},"output":[]}"#;
    // openai/codex#1002
    const SERVER_ERROR: &str = r#"{"id":"resp_1","object":"response","status":"failed","error":{"code":"server_error","message":"An error occurred while processing your request. You can retry your request, or contact us through our help center at help.openai.com if the error persists. Please include the request ID req_4f9d5f7f18f5423fe068bbc88d7e3e7d in your message."},"output":[]}"#;
    const COMPLETED: &str = r#"{"id":"resp_2","object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hi"}]}]}"#;

    /// A loopback upstream that answers its n-th request with `bodies[n]` (HTTP 200, one
    /// request a connection), counting requests.
    async fn upstream(bodies: &'static [&'static str]) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let count = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&count);
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // The head, then as many body bytes as it announces.
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = socket.read(&mut buf).await.unwrap();
                    request.extend_from_slice(&buf[..n]);
                }
                let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
                let head_len = text.find("\r\n\r\n").unwrap() + 4;
                let length: usize = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                while request.len() < head_len + length {
                    let n = socket.read(&mut buf).await.unwrap();
                    request.extend_from_slice(&buf[..n]);
                }
                let n = seen.fetch_add(1, Ordering::SeqCst);
                let body = bodies[n.min(bodies.len() - 1)];
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                socket.write_all(response.as_bytes()).await.unwrap();
            }
        });
        (base, count)
    }

    async fn answer(bodies: &'static [&'static str]) -> (Head, usize) {
        let (base, count) = upstream(bodies).await;
        let text = format!(
            "[[candidate]]\nid = \"oa\"\nprotocol = \"openai\"\nbase_url = \"{base}\"\n\n[[route]]\nid = \"main\"\nmodels = [\"*\"]\ncandidates = [\"oa\"]\n"
        );
        let config = crate::config::load(
            "test.toml",
            &text,
            &crate::config::Overrides::default(),
            &[("UNUSED", "")],
        )
        .unwrap();
        let time = VirtualTime::starting_at(UNIX_EPOCH + Duration::from_secs(1_796_050_800));
        let client =
            rebound_runtime::HttpClient::new(rebound_runtime::Timeouts::default()).unwrap();
        let catalogue = Arc::new(rebound_core::Catalogue::shipped().unwrap());
        let gateway = Arc::new(
            crate::state::Gateway::new(config, client, catalogue)
                .with_time(time.clone(), time.clone()),
        );
        let route = gateway.config.route("gpt-test", Protocol::OpenAi).unwrap();
        let request = LiveRequest {
            gateway,
            api: Api::Responses,
            route,
            headers: HeaderMap::new(),
            query: None,
            body: Bytes::from_static(br#"{"model":"gpt-test","input":"hi"}"#),
            stream: false,
            restart: false,
            skipped: None,
            key: 0,
        };
        let (head, head_rx) = tokio::sync::oneshot::channel();
        run(request, head, None).await;
        (head_rx.await.unwrap(), count.load(Ordering::SeqCst))
    }

    const STREAM_CREATED: &str = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_3\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[]}}\n\n";
    const STREAM_COMPLETED: &str = "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":1,\"response\":{\"id\":\"resp_3\",\"object\":\"response\",\"status\":\"completed\",\"output\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hi\"}]}]}}\n\n";
    const STREAM_ERROR: &str = "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"The server had an error\",\"sequence_number\":1}\n\n";

    /// A request that does not stream, answered with a whole stream: gathered into the
    /// response its last event holds, on the first attempt.
    #[tokio::test]
    async fn a_whole_stream_is_gathered_into_its_answer() {
        let stream = format!("{STREAM_CREATED}{STREAM_COMPLETED}").leak();
        let (head, attempts) = answer(Vec::leak(vec![&*stream])).await;
        assert_eq!((head.status, attempts), (StatusCode::OK, 1));
        assert_eq!(head.headers["x-rebound-retold"], "whole");
        assert_eq!(head.headers["content-type"], "application/json");
        let body: serde_json::Value = serde_json::from_slice(&head.body.unwrap()).unwrap();
        assert_eq!(
            (&body["id"], &body["status"]),
            (&"resp_3".into(), &"completed".into())
        );
    }

    /// Such a stream that ends in its own error event is that error (a server error: retried),
    /// and one cut before its end a cut answer (retried): the next attempt's answer is the
    /// client's.
    #[tokio::test]
    async fn a_whole_stream_that_failed_or_was_cut_is_retried() {
        for first in [
            format!("{STREAM_CREATED}{STREAM_ERROR}"),
            STREAM_CREATED.to_owned(),
        ] {
            let (head, attempts) = answer(Vec::leak(vec![&*first.leak(), COMPLETED])).await;
            assert_eq!((head.status, attempts), (StatusCode::OK, 2));
            assert_eq!(head.body.as_deref(), Some(COMPLETED.as_bytes()));
        }
    }

    #[tokio::test]
    async fn a_failed_answer_is_retried_like_the_streams_response_failed() {
        let (head, attempts) = answer(&[SERVER_ERROR, COMPLETED]).await;
        assert_eq!(head.status, StatusCode::OK);
        assert_eq!(head.body.as_deref(), Some(COMPLETED.as_bytes()));
        assert_eq!(attempts, 2);
    }

    #[tokio::test]
    async fn a_terminal_failed_answer_is_relayed_as_sent_with_the_diagnostics() {
        let (head, attempts) = answer(&[FLAGGED, COMPLETED]).await;
        assert_eq!(attempts, 1, "a flagged prompt is flagged again");
        assert_eq!(head.status, StatusCode::OK);
        let body: serde_json::Value = serde_json::from_slice(&head.body.unwrap()).unwrap();
        assert_eq!(body["status"], "failed");
        assert_eq!(body["error"]["code"], "invalid_prompt");
        assert_eq!(body["rebound"]["code"], "content_filtered");
        assert_eq!(body["rebound"]["class"], "terminal");
    }
}
