//! What a stream means, per API, end to end: the Responses API's commit point and its ending
//! after a failure (G4, G7), thinking and reasoning as content (G9), every byte relayed as
//! sent.

use serde_json::Value;

use crate::{SIMPLE, anthropic_body, chaos, direct, gateway, openai_body, send};

const JSON: (&str, &str) = ("content-type", "application/json");

/// A Responses request that asks for reasoning summaries and encrypted reasoning.
fn responses_body(stream: bool) -> String {
    format!(
        r#"{{"model":"gpt-test","stream":{stream},"input":"hi","reasoning":{{"effort":"low","summary":"auto"}},"include":["reasoning.encrypted_content"]}}"#
    )
}

/// The `(event, data)` of every event of an SSE text, comments left out.
fn events(text: &str) -> Vec<(String, Value)> {
    let mut framer = rebound_runtime::sse::SseFramer::new();
    framer
        .push(text.as_bytes())
        .unwrap()
        .into_iter()
        .map(|e| (e.event, serde_json::from_str(&e.data).unwrap()))
        .collect()
}

/// Chaos names a response after its attempt: the n-th attempt's bytes, as the first's.
fn as_first_attempt(text: &str, attempt: u32) -> String {
    text.replace(&format!("_{attempt}\""), "_1\"")
}

#[tokio::test]
async fn a_responses_stream_reaches_the_client_byte_for_byte() {
    let expected = direct("/v1/responses", &responses_body(true)).await;
    let text = String::from_utf8_lossy(&expected).into_owned();
    assert!(
        text.contains("encrypted_content") && text.contains("sequence_number"),
        "{text}"
    );
    let chaos = chaos("ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/responses", &responses_body(true)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.body, expected);
    assert_eq!(chaos.attempts("default"), 1);
}

#[tokio::test]
async fn responses_failures_in_the_preamble_are_retried_invisibly() {
    let expected =
        String::from_utf8_lossy(&direct("/v1/responses", &responses_body(true)).await).into_owned();
    // A response.failed right after response.in_progress, then a bare error event there.
    let chaos = chaos("error-after-0:server_error, error-event-after-0:rate_limit_error, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/responses", &responses_body(true)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        as_first_attempt(&reply.text(), 3),
        expected,
        "the held-back preambles of the failed attempts never reached the client"
    );
    assert_eq!(reply.header("x-rebound-attempts"), "3");
    assert_eq!(chaos.attempts("default"), 3);
}

/// The last events of a committed Responses stream that failed, with what came before.
fn ending(text: &str) -> (Vec<(String, Value)>, Vec<String>) {
    let events = events(text);
    let names = events.iter().map(|(name, _)| name.clone()).collect();
    (events, names)
}

#[tokio::test]
async fn a_committed_responses_stream_that_is_cut_ends_with_response_failed() {
    let chaos = chaos("cut-after-2-chunks, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/responses", &responses_body(true)).await;
    assert_eq!(reply.status, 200);
    let (events, names) = ending(&reply.text());
    assert!(
        !names.iter().any(|n| n == "response.completed"),
        "a cut stream must not look complete: {names:?}"
    );
    assert_eq!(names[names.len() - 2..], ["error", "response.failed"]);
    // Numbered after the last event the client received, without a gap.
    let numbers: Vec<u64> = events
        .iter()
        .map(|(_, data)| data["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
    let (_, failed) = &events[events.len() - 1];
    let (_, created) = &events[0];
    assert_eq!(failed["response"]["id"], created["response"]["id"]);
    assert_eq!(failed["response"]["status"], "failed");
    assert_eq!(failed["response"]["error"]["code"], "server_error");
    assert_eq!(failed["rebound"]["class"], "transient");
    assert_eq!(
        chaos.attempts("default"),
        1,
        "content reached the client: no replay without restart"
    );
}

#[tokio::test]
async fn an_upstream_error_event_after_content_is_relayed_and_the_response_fails() {
    let chaos = chaos("error-event-after-2:server_error, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/responses", &responses_body(true)).await;
    let (events, names) = ending(&reply.text());
    assert_eq!(names[names.len() - 2..], ["error", "response.failed"]);
    assert_eq!(names.iter().filter(|n| *n == "error").count(), 1);
    let (_, error) = &events[events.len() - 2];
    assert!(
        error.get("rebound").is_none(),
        "the upstream's own error event, as sent: {error}"
    );
    let (_, failed) = &events[events.len() - 1];
    assert_eq!(
        failed["sequence_number"].as_u64(),
        error["sequence_number"].as_u64().map(|n| n + 1)
    );
    assert_eq!(failed["response"]["error"]["code"], "server_error");
    assert_eq!(chaos.attempts("default"), 1);
}

#[tokio::test]
async fn an_upstream_response_failed_after_content_ends_the_stream_once() {
    let chaos = chaos("error-after-2:rate_limit_error, ok").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/responses", &responses_body(true)).await;
    let (events, names) = ending(&reply.text());
    assert_eq!(names.last().map(String::as_str), Some("response.failed"));
    assert_eq!(
        names.iter().filter(|n| *n == "response.failed").count(),
        1,
        "{names:?}"
    );
    let (_, failed) = &events[events.len() - 1];
    assert_eq!(failed["response"]["error"]["code"], "rate_limit_exceeded");
    assert_eq!(chaos.attempts("default"), 1);
}

#[tokio::test]
async fn a_stream_of_only_thinking_is_an_answer_in_every_api() {
    for (path, body, end) in [
        ("/v1/messages", anthropic_body(true), "message_stop"),
        ("/v1/chat/completions", openai_body(true), "[DONE]"),
        ("/v1/responses", responses_body(true), "response.incomplete"),
    ] {
        let expected = chaos("thinking-only").await;
        let expected = send(expected.addr(), "POST", path, &[JSON], &body)
            .await
            .body;
        let chaos = chaos("thinking-only, ok").await;
        let g = gateway(SIMPLE, &chaos).await;
        let reply = g.post(path, &body).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        assert!(reply.text().contains(end), "{path}: {}", reply.text());
        assert_eq!(reply.body, expected, "{path}");
        assert_eq!(
            chaos.attempts("default"),
            1,
            "{path}: a thinking-only answer is no empty_response to retry"
        );
    }
}

#[tokio::test]
async fn thinking_commits_the_stream_and_flows_live() {
    // Cut after the first thinking delta: the client has seen thinking, so rebound ends the
    // stream with an error event instead of replaying it (it would repeat the thinking).
    for (path, body, delta) in [
        ("/v1/messages", anthropic_body(true), "thinking_delta"),
        ("/v1/chat/completions", openai_body(true), "reasoning"),
        (
            "/v1/responses",
            responses_body(true),
            "response.reasoning_summary_text.delta",
        ),
    ] {
        let chaos = chaos("cut-after-1-chunks+thinking, ok").await;
        let g = gateway(SIMPLE, &chaos).await;
        let reply = g.post(path, &body).await;
        let text = reply.text();
        assert_eq!(reply.status, 200, "{path}: {text}");
        assert!(text.contains(delta), "{path}: {text}");
        assert_eq!(chaos.attempts("default"), 1, "{path}: {text}");
    }
}

#[tokio::test]
async fn a_response_failed_before_content_that_no_retry_repairs_is_answered_with_its_status() {
    for (code, status, class) in [
        ("insufficient_quota", 429, "hard"),
        ("invalid_prompt", 400, "terminal"),
    ] {
        let chaos = chaos(&format!("error-after-0:{code}, ok")).await;
        let g = gateway(SIMPLE, &chaos).await;
        let reply = g.post("/v1/responses", &responses_body(true)).await;
        assert_eq!(reply.status, status, "{code}: {}", reply.text());
        let body: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(body["error"]["type"], code);
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("An error occurred")),
            "the upstream's own message: {body}"
        );
        assert_eq!(body["rebound"]["class"], class);
        assert_eq!(chaos.attempts("default"), 1, "{code}");
    }
}

/// What chaos sends directly under `script` for one request: the bytes a client connected
/// directly would read.
async fn direct_under(script: &str, path: &str, body: &str) -> bytes::Bytes {
    let chaos = chaos(script).await;
    send(chaos.addr(), "POST", path, &[JSON], body).await.body
}

#[tokio::test]
async fn a_chat_stream_without_done_reaches_the_client_complete_byte_for_byte() {
    let expected = direct_under("no-done", "/v1/chat/completions", &openai_body(true)).await;
    let text = String::from_utf8_lossy(&expected);
    assert!(
        !text.contains("[DONE]") && text.contains("finish_reason\":\"stop"),
        "{text}"
    );
    let chaos = chaos("no-done").await;
    let g = gateway(SIMPLE, &chaos).await;
    let reply = g.post("/v1/chat/completions", &openai_body(true)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.body, expected, "{}", reply.text());
    assert_eq!(chaos.attempts("default"), 1);
}

#[tokio::test]
async fn a_stream_with_one_malformed_event_reaches_the_client_complete_byte_for_byte() {
    for (path, body) in [
        ("/v1/chat/completions", openai_body(true)),
        ("/v1/messages", anthropic_body(true)),
    ] {
        let script = "malformed-event-at-1";
        let expected = direct_under(script, path, &body).await;
        assert!(
            String::from_utf8_lossy(&expected).contains(rebound_chaos::stream::MALFORMED_EVENT),
            "{path}"
        );
        let chaos = chaos(script).await;
        let g = gateway(SIMPLE, &chaos).await;
        let reply = g.post(path, &body).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        assert_eq!(reply.body, expected, "{path}: {}", reply.text());
        assert_eq!(chaos.attempts("default"), 1, "{path}");
    }
}
