//! What stream events and whole answers mean, per API (G7, G9).

use super::*;

#[test]
fn openai_role_chunk_is_preamble_and_content_commits() {
    let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
    assert_eq!(
        stream_items(Api::ChatCompletions, "", role),
        vec![StreamItem::Preamble]
    );
    let text = r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#;
    let items = stream_items(Api::ChatCompletions, "", text);
    assert!(items[0].is_content());
    assert_eq!(
        stream_items(Api::ChatCompletions, "", "[DONE]"),
        vec![StreamItem::Done]
    );
    let err = r#"{"error":{"message":"boom","type":"server_error"}}"#;
    assert_eq!(
        stream_items(Api::ChatCompletions, "", err),
        vec![StreamItem::Error {
            kind: "server_error".into(),
            ends_stream: true,
        }]
    );
}

#[test]
fn anthropic_preambles_and_errors() {
    for (event, data) in [
        (
            "message_start",
            r#"{"type":"message_start","message":{"id":"m"}}"#,
        ),
        ("ping", r#"{"type":"ping"}"#),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
    ] {
        assert_eq!(
            stream_items(Api::Messages, event, data),
            vec![StreamItem::Preamble],
            "{event}"
        );
    }
    let err = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    assert_eq!(
        stream_items(Api::Messages, "error", err),
        vec![StreamItem::Error {
            kind: "overloaded_error".into(),
            ends_stream: true,
        }]
    );
    assert_eq!(
        stream_items(Api::Messages, "", "{not json"),
        vec![StreamItem::Malformed]
    );
}

#[test]
fn keys_are_sent_sensitive_and_never_debug_printed() {
    let p = Provider {
        api: Api::Messages,
        base_url: "http://127.0.0.1:1".into(),
        api_key: Some("sk-ant-secret-canary".into()),
        model: "m".into(),
        name: "anthropic".into(),
    };
    assert!(!format!("{p:?}").contains("canary"));
    let req = p
        .request(&serde_json::json!({"messages": []}), true)
        .unwrap();
    assert!(req.headers()["x-api-key"].is_sensitive());
    assert_eq!(req.uri().path(), "/v1/messages");
    assert!(!format!("{:?}", req.headers()).contains("canary"));
}

fn content(api: Api, event: &str, data: &str) -> bool {
    stream_items(api, event, data)
        .iter()
        .any(StreamItem::is_content)
}

/// Events a gateway holds back: none commits, none ends the stream.
fn assert_preamble(api: Api, events: &[(&str, &str)]) {
    for (event, data) in events {
        let items = stream_items(api, event, data);
        assert!(
            items.iter().all(|i| !i.is_content()
                && !matches!(
                    i,
                    StreamItem::Done | StreamItem::Error { .. } | StreamItem::Malformed
                )),
            "{event}: {items:?}"
        );
    }
}

#[test]
fn responses_preamble_is_held_back() {
    assert_preamble(
        Api::Responses,
        &[
            (
                "response.created",
                r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1764590000,"status":"in_progress","model":"gpt-5","output":[]}}"#,
            ),
            (
                "response.in_progress",
                r#"{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","status":"in_progress","output":[]}}"#,
            ),
            (
                "response.output_item.added",
                r#"{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}"#,
            ),
            (
                "response.output_item.added",
                r#"{"type":"response.output_item.added","sequence_number":3,"output_index":1,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}"#,
            ),
            (
                "response.content_part.added",
                r#"{"type":"response.content_part.added","sequence_number":4,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}}"#,
            ),
            (
                "response.reasoning_summary_part.added",
                r#"{"type":"response.reasoning_summary_part.added","sequence_number":5,"item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""}}"#,
            ),
            // A function call's name before its arguments.
            (
                "response.output_item.added",
                r#"{"type":"response.output_item.added","sequence_number":6,"output_index":2,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_1","name":"shell"}}"#,
            ),
            ("", r#"{"type":"response.output_text.delta","delta":""}"#),
            ("keepalive", ""),
        ],
    );
}

#[test]
fn responses_first_delta_of_any_content_commits() {
    for (event, data) in [
        (
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hi","logprobs":[]}"#,
        ),
        (
            "response.refusal.delta",
            r#"{"type":"response.refusal.delta","sequence_number":7,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"I can't"}"#,
        ),
        (
            "response.reasoning_summary_text.delta",
            r#"{"type":"response.reasoning_summary_text.delta","sequence_number":7,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"**Planning**"}"#,
        ),
        (
            "response.reasoning_text.delta",
            r#"{"type":"response.reasoning_text.delta","sequence_number":7,"item_id":"rs_1","output_index":0,"content_index":0,"delta":"Let me"}"#,
        ),
        (
            "response.function_call_arguments.delta",
            r#"{"type":"response.function_call_arguments.delta","sequence_number":7,"item_id":"fc_1","output_index":2,"delta":"{\"cmd\""}"#,
        ),
        (
            "response.custom_tool_call_input.delta",
            r#"{"type":"response.custom_tool_call_input.delta","sequence_number":7,"item_id":"ctc_1","output_index":2,"delta":"*** Begin Patch"}"#,
        ),
        // The SSE event name is optional: the data's `type` says the same.
        ("", r#"{"type":"response.output_text.delta","delta":"Hi"}"#),
        // Reasoning kept encrypted is still reasoning.
        (
            "response.output_item.done",
            r#"{"type":"response.output_item.done","sequence_number":9,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"gAAAAABo..."}}"#,
        ),
        // A server tool's call is content, like an Anthropic server-tool block.
        (
            "response.output_item.added",
            r#"{"type":"response.output_item.added","sequence_number":3,"output_index":0,"item":{"id":"ws_1","type":"web_search_call","status":"in_progress"}}"#,
        ),
        (
            "response.audio.delta",
            r#"{"type":"response.audio.delta","sequence_number":3,"delta":"UklGR"}"#,
        ),
    ] {
        assert!(content(Api::Responses, event, data), "{event}: {data}");
    }
}

#[test]
fn responses_ends_and_errors() {
    assert_eq!(
        stream_items(
            Api::Responses,
            "response.completed",
            r#"{"type":"response.completed","sequence_number":20,"response":{"id":"resp_1","status":"completed"}}"#
        ),
        vec![StreamItem::Stop("completed".into()), StreamItem::Done]
    );
    // Incomplete is an answer that stopped early, not a failure.
    assert_eq!(
        stream_items(
            Api::Responses,
            "response.incomplete",
            r#"{"type":"response.incomplete","sequence_number":20,"response":{"id":"resp_1","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}"#
        ),
        vec![
            StreamItem::Stop("max_output_tokens".into()),
            StreamItem::Done
        ]
    );
    // The message is the one Codex users saw (openai/codex#1002).
    assert_eq!(
        stream_items(
            Api::Responses,
            "response.failed",
            r#"{"type":"response.failed","sequence_number":12,"response":{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"An error occurred while processing your request. You can retry your request, or contact us through our help center at help.openai.com if the error persists. Please include the request ID req_4f9d5f7f18f5423fe068bbc88d7e3e7d in your message."}}}"#
        ),
        vec![StreamItem::Error {
            kind: "server_error".into(),
            ends_stream: true,
        }]
    );
    assert_eq!(
        stream_items(
            Api::Responses,
            "error",
            r#"{"type":"error","sequence_number":3,"code":"rate_limit_exceeded","message":"Rate limit reached for gpt-5 on tokens per min (TPM). Please try again in 1.898s.","param":null}"#
        ),
        vec![StreamItem::Error {
            kind: "rate_limit_exceeded".into(),
            ends_stream: false,
        }]
    );
    // Relays nest it as in Chat Completions.
    assert_eq!(
        stream_items(
            Api::Responses,
            "error",
            r#"{"type":"error","sequence_number":3,"error":{"type":"invalid_request_error","code":"invalid_prompt","message":"Invalid prompt"}}"#
        ),
        vec![StreamItem::Error {
            kind: "invalid_prompt".into(),
            ends_stream: false,
        }]
    );
    assert_eq!(
        stream_items(Api::Responses, "", "[DONE]"),
        vec![StreamItem::Done]
    );
    assert_eq!(
        stream_items(Api::Responses, "response.created", "{cut"),
        vec![StreamItem::Malformed]
    );
}

#[test]
fn responses_events_tell_their_place() {
    let created = read_event(
        Api::Responses,
        "response.created",
        r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_67c","object":"response","created_at":1764590000,"model":"gpt-5-codex","output":[]}}"#,
    );
    assert_eq!(created.sequence_number, Some(0));
    assert_eq!(
        created.response,
        Some(ResponseHead {
            id: "resp_67c".into(),
            created_at: Some(1_764_590_000),
            model: "gpt-5-codex".into(),
        })
    );
    let delta = read_event(
        Api::Responses,
        "response.output_text.delta",
        r#"{"type":"response.output_text.delta","sequence_number":41,"delta":"x"}"#,
    );
    assert_eq!((delta.sequence_number, delta.response), (Some(41), None));
}

#[test]
fn responses_whole_answers() {
    let body = br#"{"id":"resp_1","object":"response","status":"completed","output":[
        {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Thinking."}],"encrypted_content":"gAAA"},
        {"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]},{"type":"output_text","text":" world","annotations":[]}]},
        {"type":"function_call","id":"fc_1","call_id":"call_9","name":"shell","arguments":"{\"cmd\":[\"ls\"]}"}
    ]}"#;
    let response = parse_answer(Api::Responses, body).unwrap();
    assert_eq!(response.text, "Hello world");
    assert_eq!(response.reasoning, "Thinking.");
    assert_eq!(
        response.tool_calls,
        vec![ToolCall {
            id: "call_9".into(),
            name: "shell".into(),
            arguments: r#"{"cmd":["ls"]}"#.into(),
        }]
    );
    assert_eq!(response.stop_reason.as_deref(), Some("completed"));
    assert_eq!(answer_failure(Api::Responses, body), None);

    let incomplete = br#"{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"Half a thought"}]}]}"#;
    let response = parse_answer(Api::Responses, incomplete).unwrap();
    assert!(!response.is_empty(), "reasoning alone is an answer");
    assert_eq!(response.stop_reason.as_deref(), Some("max_output_tokens"));
    assert_eq!(answer_failure(Api::Responses, incomplete), None);

    let failed = br#"{"id":"resp_1","object":"response","status":"failed","error":{"code":"rate_limit_exceeded","message":"Rate limit reached"},"output":[]}"#;
    let expected = AnswerError::Failed {
        kind: "rate_limit_exceeded".into(),
    };
    assert_eq!(parse_answer(Api::Responses, failed), Err(expected.clone()));
    assert_eq!(answer_failure(Api::Responses, failed), Some(expected));
    // Only the Responses API reports failures in a success.
    assert_eq!(answer_failure(Api::ChatCompletions, failed), None);
    assert_eq!(
        parse_answer(Api::Responses, br#"{"id":"resp_1"}"#),
        Err(AnswerError::Missing("output"))
    );
}

#[test]
fn chat_reasoning_and_refusals_are_content() {
    for data in [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"Let me think"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"","reasoning":"Hmm"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"refusal":"I can't help with that."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_details":[{"type":"reasoning.encrypted","data":"eyJ"}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]}}]}"#,
    ] {
        assert!(content(Api::ChatCompletions, "", data), "{data}");
    }
    // A tool call's name before its arguments is preamble.
    assert_preamble(
        Api::ChatCompletions,
        &[
            (
                "",
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}"#,
            ),
            (
                "",
                r#"{"choices":[{"index":0,"delta":{"reasoning_content":""}}]}"#,
            ),
        ],
    );
}

#[test]
fn anthropic_thinking_and_server_tools_are_content() {
    for (event, data) in [
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me analyze"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM"}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix"}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_01","content":[]}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\":"}}"#,
        ),
    ] {
        assert!(content(Api::Messages, event, data), "{data}");
    }
    assert_preamble(
        Api::Messages,
        &[
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":1}"#,
            ),
        ],
    );
}

#[test]
fn whole_answers_keep_reasoning() {
    let anthropic = br#"{"content":[{"type":"thinking","thinking":"Step one","signature":"x"}],"stop_reason":"max_tokens"}"#;
    let response = parse_answer(Api::Messages, anthropic).unwrap();
    assert_eq!(response.reasoning, "Step one");
    assert!(!response.is_empty());
    let chat = br#"{"choices":[{"message":{"role":"assistant","content":null,"reasoning_content":"Hmm"},"finish_reason":"length"}]}"#;
    let response = parse_answer(Api::ChatCompletions, chat).unwrap();
    assert_eq!(response.reasoning, "Hmm");
    assert!(!response.is_empty());
}

/// A Responses stream's opening events are read by their name without a JSON tree; what
/// they mean is exactly what the general reader makes of them (G7).
#[test]
fn an_opening_event_read_by_name_means_what_the_general_reader_reads() {
    let long = "x".repeat(20_000);
    for (event, data) in [
        (
            "response.created",
            format!(
                r#"{{"type":"response.created","sequence_number":0,"response":{{"id":"resp_\u0031","object":"response","created_at":1764590000,"status":"in_progress","model":"gpt-5","instructions":"{long}","tools":[{{"type":"function","name":"shell","parameters":{{"type":"object"}}}}],"output":[]}}}}"#
            ),
        ),
        (
            "response.in_progress",
            r#"{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","status":"in_progress","output":[]}}"#.to_owned(),
        ),
        (
            "response.queued",
            r#"{"type":"response.queued","sequence_number":0,"response":{"id":"resp_2","created_at":null,"model":"m"}}"#.to_owned(),
        ),
        ("response.created", r#"{"type":"response.created"}"#.to_owned()),
        // Not the usual types: read by the general reader.
        (
            "response.created",
            r#"{"type":"response.created","sequence_number":"0","response":{"id":7}}"#.to_owned(),
        ),
    ] {
        let by_name = read_event(Api::Responses, event, &data);
        let general = read_event(Api::Responses, "", &data);
        assert_eq!(by_name, general, "{event}: {data:.200}");
        assert_eq!(by_name.items, vec![StreamItem::Preamble]);
    }
    let reading = read_event(
        Api::Responses,
        "response.created",
        r#"{"type":"response.created","sequence_number":4,"response":{"id":"resp_\u0031","created_at":5,"model":"gpt-5"}}"#,
    );
    assert_eq!(reading.sequence_number, Some(4));
    assert_eq!(
        reading.response,
        Some(ResponseHead {
            id: "resp_1".into(),
            created_at: Some(5),
            model: "gpt-5".into(),
        })
    );
}
