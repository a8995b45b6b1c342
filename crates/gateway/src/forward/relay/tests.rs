//! The relay: commit points per API (G7, G9), byte-faithful forwarding, and how a committed
//! stream ends after a failure (G4).

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
        serde_json::from_str(out.trim_end().strip_prefix("event: error\ndata: ").unwrap()).unwrap();
    assert_eq!(data["error"]["type"], "authentication_error");
}

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use rebound_core::{Catalogue, Diagnostics, StopReason, TransportKind};
use rebound_runtime::http::TransportFailure;
use rebound_runtime::{Api, Attempted};
use serde_json::Value;

use super::Relay;
use crate::forward::outcome::{Attempt, FailedAttempt};
use crate::forward::terminal::stream_end;

/// A Responses stream as the API sends it: numbered events, encrypted reasoning, a field no
/// SDK knows yet.
const RESPONSES_HEAD: &str = concat!(
    "event: response.created\n",
    r#"data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_0a1b","object":"response","created_at":1764590000,"status":"in_progress","model":"gpt-5-codex","output":[],"x_future":{"a":[1,2]}}}"#,
    "\n\n",
    "event: response.in_progress\n",
    r#"data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_0a1b","status":"in_progress"}}"#,
    "\n\n",
    "event: response.output_item.added\n",
    r#"data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}"#,
    "\n\n",
);
const RESPONSES_CONTENT: &str = concat!(
    "event: response.reasoning_summary_text.delta\n",
    r#"data: {"type":"response.reasoning_summary_text.delta","sequence_number":3,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"**Reading the tree**"}"#,
    "\n\n",
    "event: response.output_item.done\n",
    r#"data: {"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"**Reading the tree**"}],"encrypted_content":"gAAAAABpQ2xvdWQtZW5jcnlwdGVkLXJlYXNvbmluZw=="}}"#,
    "\n\n",
    "event: response.output_text.delta\n",
    r#"data: {"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hello \u00e9","logprobs":[],"obfuscation":"x9"}"#,
    "\n\n",
);
const RESPONSES_END: &str = concat!(
    "event: response.completed\n",
    r#"data: {"type":"response.completed","sequence_number":6,"response":{"id":"resp_0a1b","status":"completed","usage":{"input_tokens":9,"output_tokens":3}}}"#,
    "\n\n",
);

/// What the client received from one attempt's relay.
struct Run {
    committed: bool,
    sent: Vec<u8>,
    end: Option<Attempt>,
    relay: Relay,
}

fn run(api: Api, chunks: &[&[u8]]) -> Run {
    let mut run = Run {
        committed: false,
        sent: Vec::new(),
        end: None,
        relay: Relay::new(
            api,
            false,
            StatusCode::OK,
            HeaderMap::new(),
            "openai".into(),
            Bytes::new(),
        ),
    };
    for chunk in chunks {
        let step = run.relay.chunk(chunk);
        if run.apply(step) {
            break;
        }
    }
    run
}

/// `run`, then the upstream's body ends cleanly at the HTTP level.
fn run_to_close(api: Api, chunks: &[&[u8]]) -> Run {
    let mut run = run(api, chunks);
    if run.end.is_none() {
        let step = run.relay.body_ended();
        run.apply(step);
    }
    run
}

impl Run {
    /// Applies one step as the relay loop does; true when it ends the attempt.
    fn apply(&mut self, step: super::Step) -> bool {
        if step.commit.is_some() {
            assert!(!self.committed, "committed twice");
            self.committed = true;
        }
        for bytes in step.send.into_iter().flatten() {
            assert!(self.committed, "bytes before the commit point");
            self.sent.extend_from_slice(&bytes);
        }
        match step.end {
            Some(end) => {
                self.end = Some(*end);
                true
            }
            None => false,
        }
    }
}

fn failed(end: Option<Attempt>) -> FailedAttempt {
    match end {
        Some(Attempted::Failed(failed)) => failed,
        Some(Attempted::Succeeded(())) => panic!("succeeded"),
        _ => panic!("no failure"),
    }
}

fn diagnostics(failed: &FailedAttempt) -> Diagnostics {
    let catalogue = Catalogue::shipped().unwrap();
    let classification = catalogue.classify(&failed.evidence, SystemTime::UNIX_EPOCH);
    Diagnostics::new(
        StopReason::Unsafe,
        &failed.evidence,
        &classification,
        0,
        1,
        0,
        Duration::ZERO,
    )
}

/// The `(event, data)` pairs of an SSE text.
fn events(text: &[u8]) -> Vec<(String, Value)> {
    let mut framer = rebound_runtime::sse::SseFramer::new();
    framer
        .push(text)
        .unwrap()
        .into_iter()
        .map(|e| (e.event, serde_json::from_str(&e.data).unwrap()))
        .collect()
}

#[test]
fn a_responses_stream_is_relayed_byte_for_byte_however_it_is_cut() {
    let whole = format!("{RESPONSES_HEAD}{RESPONSES_CONTENT}{RESPONSES_END}");
    let whole = whole.as_bytes();
    for cut in 0..whole.len() {
        let run = run(Api::Responses, &[&whole[..cut], &whole[cut..]]);
        assert!(
            matches!(run.end, Some(Attempted::Succeeded(()))),
            "cut {cut}"
        );
        assert!(run.committed);
        assert_eq!(run.sent, whole, "cut at {cut}");
    }
    // One byte at a time: nothing goes before the first reasoning delta is whole.
    let mut relay = Relay::new(
        Api::Responses,
        false,
        StatusCode::OK,
        HeaderMap::new(),
        "openai".into(),
        Bytes::new(),
    );
    let commit_at = RESPONSES_HEAD.len()
        + RESPONSES_CONTENT
            .find("\n\n")
            .expect("the first content event ends")
        + 2;
    for (at, byte) in whole.iter().enumerate() {
        let step = relay.chunk(std::slice::from_ref(byte));
        assert_eq!(step.commit.is_some(), at + 1 == commit_at, "byte {at}");
    }
}

#[test]
fn a_responses_failure_in_the_preamble_reaches_nobody() {
    // The text Codex users saw (just-every/code#42) in the event that carries it.
    let failed_event = concat!(
        "event: response.failed\n",
        r#"data: {"type":"response.failed","sequence_number":3,"response":{"id":"resp_0a1b","status":"failed","error":{"code":"insufficient_quota","message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."}}}"#,
        "\n\n",
    );
    let run = run(
        Api::Responses,
        &[RESPONSES_HEAD.as_bytes(), failed_event.as_bytes()],
    );
    assert!(!run.committed);
    assert!(run.sent.is_empty());
    let failed = failed(run.end);
    assert!(!failed.delivered);
    assert_eq!(
        failed.evidence.sse_event.as_deref(),
        Some("insufficient_quota")
    );
    let diagnostics = diagnostics(&failed);
    assert_eq!(diagnostics.class, "hard");
    assert_eq!(
        diagnostics.rule_id.as_deref(),
        Some("openai.stream_insufficient_quota")
    );
}

#[test]
fn a_committed_responses_stream_cut_ends_with_its_own_failure_events() {
    let run = run(
        Api::Responses,
        &[RESPONSES_HEAD.as_bytes(), RESPONSES_CONTENT.as_bytes()],
    );
    // Everything before the cut went as sent.
    assert_eq!(
        run.sent,
        format!("{RESPONSES_HEAD}{RESPONSES_CONTENT}").as_bytes()
    );
    let failed = failed(Some(run.relay.failed(TransportFailure {
        kind: TransportKind::Truncated,
        message: "the stream ended before its final event".into(),
    })));
    assert!(failed.delivered);
    let diagnostics = diagnostics(&failed);
    let end = stream_end(Api::Responses, &failed, &diagnostics).expect("an end");
    let end = events(&end);
    let names: Vec<&str> = end.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names, ["error", "response.failed"]);
    let (_, error) = &end[0];
    assert_eq!(error["type"], "error");
    assert_eq!(error["sequence_number"], 6);
    assert_eq!(error["code"], "server_error");
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
    let (_, failed_event) = &end[1];
    assert_eq!(failed_event["type"], "response.failed");
    assert_eq!(failed_event["sequence_number"], 7);
    let response = &failed_event["response"];
    assert_eq!(response["id"], "resp_0a1b");
    assert_eq!(response["created_at"], 1_764_590_000);
    assert_eq!(response["model"], "gpt-5-codex");
    assert_eq!(response["status"], "failed");
    assert_eq!(response["error"]["code"], "server_error");
    assert_eq!(failed_event["rebound"]["class"], "transient");
}

#[test]
fn an_upstream_error_event_after_the_commit_point_is_relayed_then_the_response_fails() {
    let error_event = concat!(
        "event: error\n",
        r#"data: {"type":"error","sequence_number":6,"code":"rate_limit_exceeded","message":"Rate limit reached for gpt-5 in organization <ORG> on tokens per min (TPM): Limit 30000, Used 6899, Requested 24050. Please try again in 1.898s. Visit https://platform.openai.com/account/rate-limits to learn more.","param":null}"#,
        "\n\n",
    );
    let run = run(
        Api::Responses,
        &[
            RESPONSES_HEAD.as_bytes(),
            RESPONSES_CONTENT.as_bytes(),
            error_event.as_bytes(),
        ],
    );
    assert_eq!(
        run.sent,
        format!("{RESPONSES_HEAD}{RESPONSES_CONTENT}{error_event}").as_bytes()
    );
    let failed = failed(run.end);
    assert!(
        !failed.detail.error_forwarded,
        "response.failed is still owed"
    );
    let diagnostics = diagnostics(&failed);
    assert_eq!(diagnostics.class, "rate_limit");
    let end = events(&stream_end(Api::Responses, &failed, &diagnostics).expect("an end"));
    assert_eq!(end.len(), 1, "the error event is not sent twice");
    assert_eq!(end[0].0, "response.failed");
    assert_eq!(end[0].1["sequence_number"], 7);
    assert_eq!(end[0].1["response"]["error"]["code"], "rate_limit_exceeded");
    // The upstream's own words, where Codex looks for how long to wait.
    assert_eq!(
        end[0].1["response"]["error"]["message"],
        "Rate limit reached for gpt-5 in organization <ORG> on tokens per min (TPM): Limit 30000, Used 6899, Requested 24050. Please try again in 1.898s. Visit https://platform.openai.com/account/rate-limits to learn more."
    );
}

#[test]
fn an_upstream_response_failed_after_the_commit_point_ends_the_stream_as_sent() {
    // openai/codex#1002's message.
    let failed_event = concat!(
        "event: response.failed\n",
        r#"data: {"type":"response.failed","sequence_number":6,"response":{"id":"resp_0a1b","status":"failed","error":{"code":"server_error","message":"An error occurred while processing your request. You can retry your request, or contact us through our help center at help.openai.com if the error persists. Please include the request ID req_4f9d5f7f18f5423fe068bbc88d7e3e7d in your message."}}}"#,
        "\n\n",
    );
    let run = run(
        Api::Responses,
        &[
            RESPONSES_HEAD.as_bytes(),
            format!("{RESPONSES_CONTENT}{failed_event}").as_bytes(),
        ],
    );
    assert_eq!(
        run.sent,
        format!("{RESPONSES_HEAD}{RESPONSES_CONTENT}{failed_event}").as_bytes()
    );
    let failed = failed(run.end);
    assert!(failed.detail.error_forwarded);
    assert_eq!(
        stream_end(Api::Responses, &failed, &diagnostics(&failed)),
        None
    );
}

#[test]
fn thinking_commits_and_a_stream_of_only_thinking_is_an_answer() {
    let stream = concat!(
        "event: message_start\n",
        r#"data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null}}"#,
        "\n\n",
        "event: content_block_start\n",
        r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me work through"}}"#,
        "\n\n",
        "event: message_delta\n",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":16}}"#,
        "\n\n",
        "event: message_stop\n",
        r#"data: {"type":"message_stop"}"#,
        "\n\n",
    );
    let cut = stream.find("event: content_block_delta").unwrap();
    let delta_end = cut + stream[cut..].find("\n\n").unwrap() + 2;
    let mut relay = Relay::new(
        Api::Messages,
        false,
        StatusCode::OK,
        HeaderMap::new(),
        "anthropic".into(),
        Bytes::new(),
    );
    // The thinking delta goes live, before the stream ends.
    let step = relay.chunk(&stream.as_bytes()[..delta_end]);
    assert!(step.commit.is_some());
    let live: Vec<u8> = step.send.into_iter().flatten().flatten().collect();
    assert_eq!(live, &stream.as_bytes()[..delta_end]);
    let step = relay.chunk(&stream.as_bytes()[delta_end..]);
    assert!(matches!(
        step.end.as_deref(),
        Some(Attempted::Succeeded(()))
    ));
}

#[test]
fn a_tool_call_without_arguments_is_an_answer_and_a_bare_preamble_is_not() {
    let tool_call = concat!(
        r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"list_files","arguments":""}}]}}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        "\n\n",
        "data: [DONE]\n\n",
    );
    let answered = run(Api::ChatCompletions, &[tool_call.as_bytes()]);
    assert!(matches!(answered.end, Some(Attempted::Succeeded(()))));
    assert_eq!(answered.sent, tool_call.as_bytes());

    let empty = concat!(
        r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        "\n\n",
        "data: [DONE]\n\n",
    );
    let run = run(Api::ChatCompletions, &[empty.as_bytes()]);
    assert!(!run.committed);
    assert!(run.sent.is_empty());
    let failed = failed(run.end);
    assert_eq!(
        diagnostics(&failed).code.as_ref().map(|c| c.as_str()),
        Some("empty_response")
    );
}

/// A Chat Completions stream as a provider that never sends `[DONE]` ends it: a finish
/// reason, the usage chunk, then the body closes cleanly.
const CHAT_WITHOUT_DONE: &str = concat!(
    r#"data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"Hello"}}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#,
    "\n\n",
);

#[test]
fn a_chat_stream_that_finished_and_closed_without_done_is_complete_byte_for_byte() {
    let run = run_to_close(Api::ChatCompletions, &[CHAT_WITHOUT_DONE.as_bytes()]);
    assert!(matches!(run.end, Some(Attempted::Succeeded(()))));
    assert_eq!(run.sent, CHAT_WITHOUT_DONE.as_bytes());
}

#[test]
fn a_chat_stream_closed_before_its_finish_reason_is_truncated() {
    let cut = CHAT_WITHOUT_DONE
        .split_inclusive("\n\n")
        .take(2)
        .collect::<String>();
    let run = run_to_close(Api::ChatCompletions, &[cut.as_bytes()]);
    let failed = failed(run.end);
    assert_eq!(failed.evidence.transport, Some(TransportKind::Truncated));
    assert!(failed.delivered);
}

#[test]
fn a_messages_stream_closed_without_message_stop_is_still_truncated() {
    let stream = concat!(
        "event: message_start\n",
        r#"data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[]}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        "\n\n",
        "event: message_delta\n",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#,
        "\n\n",
    );
    let run = run_to_close(Api::Messages, &[stream.as_bytes()]);
    assert_eq!(
        failed(run.end).evidence.transport,
        Some(TransportKind::Truncated)
    );
}

#[test]
fn an_event_rebound_cannot_read_is_relayed_as_sent_and_the_stream_goes_on() {
    let stream = concat!(
        r#"data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
        "\n\n",
        "data: {\"choices\": [{\"delta\": {\"content\": \"tru\n\n",
        r#"data: {"choices":[{"index":0,"delta":{"content":"lo"}}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        "\n\n",
        "data: [DONE]\n\n",
    );
    let run = run(Api::ChatCompletions, &[stream.as_bytes()]);
    assert!(matches!(run.end, Some(Attempted::Succeeded(()))));
    assert_eq!(run.sent, stream.as_bytes());
    // Before the commit point too: held back with the rest, then sent as it came.
    let early = concat!(
        "data: not json\n\n",
        r#"data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#,
        "\n\n",
        "data: [DONE]\n\n",
    );
    let run = run_to_close(Api::ChatCompletions, &[early.as_bytes()]);
    assert!(matches!(run.end, Some(Attempted::Succeeded(()))));
    assert_eq!(run.sent, early.as_bytes());
}

/// A stream request answered with one JSON body and no event (an error written as a body, a
/// server that does not stream), whatever its content type said, that is no answer: read for
/// the error it holds, with no status (the 200 says nothing of it), or as a candidate that
/// cannot serve the stream. It had been read as a stream cut before its first event, and
/// retried.
#[test]
fn one_json_body_in_place_of_a_stream_is_read_for_what_it_holds() {
    let limit = br#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;
    let other = br#"{"object":"list","data":[{"id":"gpt-4o","object":"model"}]}"#;
    for (body, code, rule) in [
        (
            &limit[..],
            "rate_limited",
            "openai.rate_limit_reached_prose",
        ),
        (
            &other[..],
            "provider_config",
            "transport.json_answer_to_stream",
        ),
    ] {
        // In two pieces, as a body may come.
        let (a, b) = body.split_at(body.len() / 2);
        let run = run_to_close(Api::ChatCompletions, &[a, b]);
        assert!(!run.committed && run.sent.is_empty());
        let failed = failed(run.end);
        assert_eq!(failed.evidence.status, None);
        assert!(!failed.delivered);
        let d = diagnostics(&failed);
        assert_eq!(
            (d.code.as_ref().map(|c| c.as_str()), d.rule_id.as_deref()),
            (Some(code), Some(rule))
        );
    }
}

/// A stream request answered with the whole answer (a server that does not stream): the
/// answer is told as the stream the API would have sent, labelled an event stream and said to
/// be retold, with usage when the request asked for it. It had been thrown away for the next
/// candidate, or failed the request.
#[test]
fn a_whole_answer_in_place_of_a_stream_is_told_as_its_stream() {
    let whole = br#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
    for (request, usage) in [
        (
            &br#"{"stream":true,"stream_options":{"include_usage":true}}"#[..],
            true,
        ),
        (&br#"{"stream":true}"#[..], false),
    ] {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", "application/json".parse().unwrap());
        let mut run = Run {
            committed: false,
            sent: Vec::new(),
            end: None,
            relay: Relay::new(
                Api::ChatCompletions,
                false,
                StatusCode::OK,
                headers,
                "openai".into(),
                Bytes::copy_from_slice(request),
            ),
        };
        let (a, b) = whole.split_at(40);
        assert!(run.relay.chunk(a).commit.is_none());
        assert!(run.relay.chunk(b).commit.is_none());
        let step = run.relay.body_ended();
        let head = step.commit.clone().expect("committed at the body's end");
        assert_eq!(head["content-type"], "text/event-stream");
        assert_eq!(head["x-rebound-retold"], "stream");
        run.apply(step);
        assert!(matches!(run.end, Some(Attempted::Succeeded(()))));
        let sent = String::from_utf8(run.sent).unwrap();
        assert!(sent.contains(r#""delta":{"content":"Hi"}"#), "{sent}");
        assert!(sent.ends_with("data: [DONE]\n\n"), "{sent}");
        assert_eq!(sent.contains(r#""usage":{"#), usage, "{sent}");
    }
}
