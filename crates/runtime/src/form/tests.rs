use serde_json::{Value, json};

use super::*;
use crate::provider::{StreamItem, stream_items};
use crate::sse::SseFramer;

/// The events of an SSE body.
fn events(body: &[u8]) -> Vec<SseEvent> {
    SseFramer::new().push(body).unwrap()
}

/// What a stream reader makes of a told stream, in order.
fn items(api: Api, body: &[u8]) -> Vec<StreamItem> {
    events(body)
        .iter()
        .flat_map(|e| stream_items(api, &e.event, &e.data))
        .filter(|item| !matches!(item, StreamItem::Preamble))
        .collect()
}

fn whole(api: Api, stream: &[u8]) -> Value {
    match as_whole(api, stream) {
        Some(Gathered::Answer(bytes)) => serde_json::from_slice(&bytes).unwrap(),
        other => panic!("{other:?}"),
    }
}

/// A whole answer told as a stream and gathered again is the answer it was.
fn round_trip(api: Api, answer: &Value) -> Bytes {
    let stream = as_stream(api, answer.to_string().as_bytes(), true).unwrap();
    assert_eq!(&whole(api, &stream), answer);
    stream
}

fn chat_answer() -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_764_800_000,
        "model": "deepseek-reasoner", "system_fingerprint": "fp_1",
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant", "content": "Looking.", "refusal": null,
                "reasoning_content": "The user wants the weather.",
                "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "now", "arguments": ""}},
                ],
            },
            "logprobs": null, "finish_reason": "tool_calls",
        }],
        "usage": {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21},
    })
}

#[test]
fn a_chat_completion_is_told_as_its_chunks_and_gathered_again() {
    let stream = round_trip(Api::ChatCompletions, &chat_answer());
    let text = String::from_utf8_lossy(&stream);
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert!(!text.contains("event:"), "Chat Completions names no events");
    assert_eq!(
        items(Api::ChatCompletions, &stream),
        vec![
            StreamItem::Reasoning("The user wants the weather.".into()),
            StreamItem::Text("Looking.".into()),
            StreamItem::ToolCallStart {
                index: 0,
                id: "call_1".into(),
                name: "weather".into()
            },
            StreamItem::ToolArguments {
                index: 0,
                fragment: "{\"city\":\"Oslo\"}".into()
            },
            StreamItem::ToolCallStart {
                index: 1,
                id: "call_2".into(),
                name: "now".into()
            },
            StreamItem::Stop("tool_calls".into()),
            StreamItem::Done,
        ]
    );
    // Every chunk is the answer's: its id, model and fingerprint, object `chat.completion.chunk`.
    for event in events(&stream).iter().filter(|e| e.data != "[DONE]") {
        let chunk: Value = serde_json::from_str(&event.data).unwrap();
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(
            (&chunk["id"], &chunk["model"], &chunk["system_fingerprint"]),
            (
                &json!("chatcmpl-1"),
                &json!("deepseek-reasoner"),
                &json!("fp_1")
            )
        );
    }
}

#[test]
fn usage_is_told_only_when_the_request_asked_for_it() {
    let body = chat_answer().to_string();
    let usage_chunk = |asked| {
        let stream = as_stream(Api::ChatCompletions, body.as_bytes(), asked).unwrap();
        events(&stream)
            .iter()
            .filter(|e| e.data.contains("\"usage\""))
            .count()
    };
    assert_eq!((usage_chunk(true), usage_chunk(false)), (1, 0));
}

#[test]
fn a_plain_chat_answer_keeps_its_text_and_null_fields() {
    let answer = json!({
        "id": "c", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi", "refusal": null},
                     "logprobs": null, "finish_reason": "stop"}],
    });
    round_trip(Api::ChatCompletions, &answer);
}

fn message_answer() -> Value {
    json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "Plan it.", "signature": "c2ln"},
            {"type": "redacted_thinking", "data": "ZW5j"},
            {"type": "text", "text": "Oslo is cold.", "citations": [
                {"type": "char_location", "cited_text": "cold", "document_index": 0,
                 "document_title": null, "start_char_index": 0, "end_char_index": 4}]},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}},
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 20, "output_tokens": 30, "cache_read_input_tokens": 0},
    })
}

#[test]
fn a_message_is_told_as_its_events_and_gathered_again() {
    let stream = round_trip(Api::Messages, &message_answer());
    let told = events(&stream);
    let names: Vec<&str> = told.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    assert_eq!(
        names
            .iter()
            .filter(|n| **n == "content_block_start")
            .count(),
        5
    );
    let start: Value = serde_json::from_str(&told[0].data).unwrap();
    assert_eq!(start["message"]["content"], json!([]));
    assert_eq!(start["message"]["stop_reason"], Value::Null);
    let read = items(Api::Messages, &stream);
    assert_eq!(read[0], StreamItem::Reasoning("Plan it.".into()));
    assert!(read.contains(&StreamItem::Text("Oslo is cold.".into())));
    assert!(read.contains(&StreamItem::ToolArguments {
        index: 3,
        fragment: "{\"city\":\"Oslo\"}".into()
    }));
    assert_eq!(read.last(), Some(&StreamItem::Done));
}

fn response_answer(status: &str) -> Value {
    json!({
        "id": "resp_1", "object": "response", "created_at": 1_764_800_000, "status": status,
        "model": "gpt-5-codex", "error": null, "incomplete_details": null,
        "output": [
            {"id": "rs_1", "type": "reasoning", "encrypted_content": "gAAA",
             "summary": [{"type": "summary_text", "text": "**Reading** the file"}]},
            {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": "Done.", "logprobs": [], "annotations": [
                 {"type": "url_citation", "url": "https://example.com", "title": "x",
                  "start_index": 0, "end_index": 4}]}]},
            {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1",
             "name": "shell", "arguments": "{\"command\":[\"ls\"]}"},
            {"id": "ctc_1", "type": "custom_tool_call", "status": "completed",
             "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch"},
            {"id": "ws_1", "type": "web_search_call", "status": "completed",
             "action": {"type": "search", "query": "oslo"}},
        ],
        "usage": {"input_tokens": 10, "output_tokens": 20, "total_tokens": 30},
    })
}

#[test]
fn a_response_is_told_as_its_numbered_events_and_gathered_again() {
    let stream = round_trip(Api::Responses, &response_answer("completed"));
    let told = events(&stream);
    for (n, event) in told.iter().enumerate() {
        let data: Value = serde_json::from_str(&event.data).unwrap();
        assert_eq!(data["sequence_number"], n, "{}", event.data);
        assert_eq!(data["type"], event.event.as_str());
    }
    let first: Value = serde_json::from_str(&told[0].data).unwrap();
    assert_eq!(told[0].event, "response.created");
    assert_eq!(first["response"]["status"], "in_progress");
    assert_eq!(first["response"]["output"], json!([]));
    assert_eq!(first["response"]["usage"], Value::Null);
    assert_eq!(told.last().unwrap().event, "response.completed");
    // Each item's done event holds it whole, encrypted reasoning included.
    let done: Vec<Value> = told
        .iter()
        .filter(|e| e.event == "response.output_item.done")
        .map(|e| serde_json::from_str::<Value>(&e.data).unwrap()["item"].clone())
        .collect();
    assert_eq!(
        done,
        response_answer("completed")["output"]
            .as_array()
            .unwrap()
            .clone()
    );
    let read = items(Api::Responses, &stream);
    assert!(read.contains(&StreamItem::Reasoning("**Reading** the file".into())));
    assert!(read.contains(&StreamItem::Text("Done.".into())));
    assert_eq!(read.last(), Some(&StreamItem::Done));
}

#[test]
fn an_incomplete_response_ends_as_incomplete_and_a_failed_one_as_failed() {
    let stream = round_trip(Api::Responses, &response_answer("incomplete"));
    assert_eq!(events(&stream).last().unwrap().event, "response.incomplete");
    let failed = json!({
        "id": "resp_2", "object": "response", "status": "failed", "output": [],
        "error": {"code": "server_error", "message": "An error occurred"},
    });
    let stream = as_stream(Api::Responses, failed.to_string().as_bytes(), false).unwrap();
    let read = items(Api::Responses, &stream);
    assert_eq!(
        read.last(),
        Some(&StreamItem::Error {
            kind: "server_error".into(),
            ends_stream: true
        })
    );
}

#[test]
fn a_body_that_is_no_whole_answer_is_not_told() {
    for (api, body) in [
        (
            Api::ChatCompletions,
            json!({"error": {"message": "overloaded", "type": "server_error"}}),
        ),
        (
            Api::ChatCompletions,
            json!({"id": "c", "object": "chat.completion", "choices": []}),
        ),
        (
            Api::Messages,
            json!({"type": "error", "error": {"type": "overloaded_error"}}),
        ),
        (
            Api::Messages,
            json!({"type": "message", "content": [], "stop_reason": "end_turn"}),
        ),
        (
            Api::Responses,
            json!({"id": "r", "object": "response", "status": "queued", "output": []}),
        ),
        (
            Api::Responses,
            json!({"id": "r", "object": "response", "status": "in_progress",
                                "output": [{"type": "message", "content": [{"type": "output_text", "text": "x"}]}]}),
        ),
        (Api::ChatCompletions, json!([1, 2])),
    ] {
        assert_eq!(
            as_stream(api, body.to_string().as_bytes(), false),
            None,
            "{body}"
        );
    }
}

#[test]
fn a_stream_cut_before_its_end_is_not_gathered() {
    for api in [Api::ChatCompletions, Api::Messages, Api::Responses] {
        let answer = match api {
            Api::ChatCompletions => chat_answer(),
            Api::Messages => message_answer(),
            Api::Responses => response_answer("completed"),
        };
        let stream = as_stream(api, answer.to_string().as_bytes(), false).unwrap();
        let told = events(&stream);
        // Every event but the last two: no finish reason, no `message_stop`, no final event.
        let cut = told[told.len() - 3].end as usize;
        assert_eq!(
            as_whole(api, &stream[..cut]),
            Some(Gathered::Cut),
            "{api:?}"
        );
        // The whole stream without its blank line at the end is still whole.
        assert!(
            matches!(
                as_whole(api, stream.trim_ascii_end()),
                Some(Gathered::Answer(_))
            ),
            "{api:?}"
        );
    }
    // No event, or another API's.
    assert_eq!(as_whole(Api::ChatCompletions, b"{\"id\": 1}"), None);
    assert_eq!(as_whole(Api::Messages, b""), None);
    let chat = as_stream(
        Api::ChatCompletions,
        chat_answer().to_string().as_bytes(),
        false,
    );
    assert_eq!(as_whole(Api::Messages, &chat.unwrap()), None);
}

#[test]
fn a_chat_stream_that_finished_without_done_is_whole() {
    let stream = as_stream(
        Api::ChatCompletions,
        chat_answer().to_string().as_bytes(),
        false,
    )
    .unwrap();
    let text = String::from_utf8_lossy(&stream).replace("data: [DONE]\n\n", "");
    let gathered = whole(Api::ChatCompletions, text.as_bytes());
    assert_eq!(gathered["choices"], chat_answer()["choices"]);
}

#[test]
fn a_stream_that_ends_in_its_own_error_is_that_error() {
    let overloaded = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[]}}\n\n\
        event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    assert_eq!(
        as_whole(Api::Messages, overloaded.as_bytes()),
        Some(Gathered::Error {
            kind: "overloaded_error".into(),
            data: "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}".into()
        })
    );
    let chat = "data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"rate_limit_exceeded\"}}\n\n";
    assert!(matches!(
        as_whole(Api::ChatCompletions, chat.as_bytes()),
        Some(Gathered::Error { kind, .. }) if kind == "rate_limit_exceeded"
    ));
    // A Responses `error` event is followed by `response.failed`: its failed response is the
    // answer, as a request that does not stream gets it; alone, the error is the error.
    let error = "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"x\",\"sequence_number\":2}\n\n";
    let failed = "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":\"r\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\"}}}\n\n";
    let both = format!("{error}{failed}");
    assert_eq!(whole(Api::Responses, both.as_bytes())["status"], "failed");
    assert!(matches!(
        as_whole(Api::Responses, error.as_bytes()),
        Some(Gathered::Error { kind, .. }) if kind == "server_error"
    ));
}
