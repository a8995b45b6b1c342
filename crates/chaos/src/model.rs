//! The deterministic fake model and the two protocols' wire shapes.
//!
//! The model answers with text that names the last user message, or, when the request offers
//! tools and the last message is not a tool result, with one call of the first tool. The same
//! request always gets the same answer, so tests can compare bytes.

use serde_json::{Value, json};

/// Which API a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// OpenAI Chat Completions.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

/// What the model says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Text, streamed in these chunks.
    Text(Vec<String>),
    /// A call of a tool with these JSON arguments.
    ToolCall {
        /// The tool's name.
        name: String,
        /// The arguments, as JSON text.
        arguments: String,
    },
}

impl Reply {
    /// The number of content chunks a stream of this reply carries.
    pub fn chunk_count(&self) -> usize {
        match self {
            Reply::Text(chunks) => chunks.len(),
            Reply::ToolCall { .. } => 2,
        }
    }
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| {
                p.get("text")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| p.get("content").map(text_of))
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// The model's reply to a request body.
pub fn reply(protocol: Protocol, request: &Value) -> Reply {
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let last = messages.last();
    let last_is_tool_result = last.is_some_and(|m| match protocol {
        Protocol::OpenAi => m.get("role").and_then(Value::as_str) == Some("tool"),
        Protocol::Anthropic => m
            .get("content")
            .and_then(Value::as_array)
            .is_some_and(|parts| {
                parts
                    .iter()
                    .any(|p| p.get("type").and_then(Value::as_str) == Some("tool_result"))
            }),
    });
    let last_text = last
        .and_then(|m| m.get("content"))
        .map(text_of)
        .unwrap_or_default();
    let tool = request
        .get("tools")
        .and_then(Value::as_array)
        .and_then(|tools| tools.first())
        .and_then(|t| match protocol {
            Protocol::OpenAi => t.pointer("/function/name"),
            Protocol::Anthropic => t.get("name"),
        })
        .and_then(Value::as_str);
    if let (Some(name), false) = (tool, last_is_tool_result) {
        return Reply::ToolCall {
            name: name.to_owned(),
            arguments: json!({ "input": last_text }).to_string(),
        };
    }
    let said: String = last_text.chars().take(200).collect();
    let text = if last_is_tool_result {
        format!("The tool answered: {}. Done.", said.trim_end_matches('.'))
    } else {
        format!("Hello from rebound chaos. You said: {said}")
    };
    let mut chunks = Vec::new();
    let mut current = String::new();
    for word in text.split_inclusive(' ') {
        current.push_str(word);
        if current.len() >= 8 {
            chunks.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    Reply::Text(chunks)
}

/// The whole (non-streaming) response body.
pub fn complete_body(protocol: Protocol, id: &str, model: &str, reply: &Reply) -> Value {
    match (protocol, reply) {
        (Protocol::OpenAi, Reply::Text(chunks)) => json!({
            "id": id, "object": "chat.completion", "created": 1_796_050_800u64, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": chunks.concat(), "refusal": null},
                         "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": chunks.len(), "total_tokens": 12 + chunks.len()}
        }),
        (Protocol::OpenAi, Reply::ToolCall { name, arguments }) => json!({
            "id": id, "object": "chat.completion", "created": 1_796_050_800u64, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": null,
                "tool_calls": [{"id": format!("call_{id}"), "type": "function", "function": {"name": name, "arguments": arguments}}]},
                "logprobs": null, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}
        }),
        (Protocol::Anthropic, Reply::Text(chunks)) => json!({
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": chunks.concat()}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": chunks.len()}
        }),
        (Protocol::Anthropic, Reply::ToolCall { name, arguments }) => json!({
            "id": id, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "tool_use", "id": format!("toolu_{id}"), "name": name,
                         "input": serde_json::from_str::<Value>(arguments).unwrap_or(Value::Null)}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 2}
        }),
    }
}

/// A stream as SSE frames: `(preamble, content, end)`. Faults cut between content frames.
pub fn stream_frames(
    protocol: Protocol,
    id: &str,
    model: &str,
    reply: &Reply,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    match protocol {
        Protocol::OpenAi => openai_frames(id, model, reply),
        Protocol::Anthropic => anthropic_frames(id, model, reply),
    }
}

fn data(value: &Value) -> String {
    format!("data: {value}\n\n")
}

fn event(name: &str, value: &Value) -> String {
    format!("event: {name}\ndata: {value}\n\n")
}

fn openai_frames(id: &str, model: &str, reply: &Reply) -> (Vec<String>, Vec<String>, Vec<String>) {
    let chunk = |delta: Value, finish: Value| {
        data(
            &json!({"id": id, "object": "chat.completion.chunk", "created": 1_796_050_800u64,
            "model": model, "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]}),
        )
    };
    let preamble = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let (content, finish) = match reply {
        Reply::Text(chunks) => (
            chunks
                .iter()
                .map(|c| chunk(json!({"content": c}), Value::Null))
                .collect(),
            "stop",
        ),
        Reply::ToolCall { name, arguments } => (
            vec![
                chunk(
                    json!({"tool_calls": [{"index": 0, "id": format!("call_{id}"), "type": "function",
                        "function": {"name": name, "arguments": ""}}]}),
                    Value::Null,
                ),
                chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
                    Value::Null,
                ),
            ],
            "tool_calls",
        ),
    };
    let end = vec![
        chunk(json!({}), json!(finish)),
        "data: [DONE]\n\n".to_owned(),
    ];
    (preamble, content, end)
}

fn anthropic_frames(
    id: &str,
    model: &str,
    reply: &Reply,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let start = event(
        "message_start",
        &json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 1}}}),
    );
    let ping = event("ping", &json!({"type": "ping"}));
    let (block, content, stop_reason) = match reply {
        Reply::Text(chunks) => (
            json!({"type": "text", "text": ""}),
            chunks
                .iter()
                .map(|c| {
                    event(
                        "content_block_delta",
                        &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": c}}),
                    )
                })
                .collect::<Vec<_>>(),
            "end_turn",
        ),
        Reply::ToolCall { name, arguments } => {
            let half = arguments.len() / 2;
            let (a, b) = arguments.split_at(arguments.floor_char_boundary(half));
            (
                json!({"type": "tool_use", "id": format!("toolu_{id}"), "name": name, "input": {}}),
                [a, b]
                    .iter()
                    .map(|part| {
                        event(
                            "content_block_delta",
                            &json!({"type": "content_block_delta", "index": 0,
                                "delta": {"type": "input_json_delta", "partial_json": part}}),
                        )
                    })
                    .collect(),
                "tool_use",
            )
        }
    };
    let block_start = event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": 0, "content_block": block}),
    );
    let end = vec![
        event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": 0}),
        ),
        event(
            "message_delta",
            &json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                "usage": {"output_tokens": 2}}),
        ),
        event("message_stop", &json!({"type": "message_stop"})),
    ];
    (vec![start, block_start, ping], content, end)
}

/// The body of an error status, shaped like the protocol's own. An OpenAI 401 echoes the key
/// it was given, as OpenAI's own message and some proxies do: a test of whether keys leak.
pub fn error_body_with_key(
    protocol: Protocol,
    status: u16,
    context: bool,
    key: Option<&str>,
) -> Value {
    let mut body = error_body(protocol, status, context);
    if let (Protocol::OpenAi, 401, Some(key)) = (protocol, status, key)
        && let Some(message) = body.pointer_mut("/error/message")
    {
        *message = json!(format!(
            "Incorrect API key provided: {key}. You can find your API key at https://platform.openai.com/account/api-keys."
        ));
    }
    body
}

/// The body of an error status, shaped like the protocol's own.
pub fn error_body(protocol: Protocol, status: u16, context: bool) -> Value {
    match protocol {
        Protocol::OpenAi => {
            let (message, kind, code) = match (status, context) {
                (400, true) => (
                    "This model's maximum context length is 128000 tokens. However, your messages resulted in 130415 tokens. Please reduce the length of the messages.",
                    "invalid_request_error",
                    json!("context_length_exceeded"),
                ),
                (400, false) => ("Invalid request.", "invalid_request_error", Value::Null),
                (401, _) => (
                    "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
                    "invalid_request_error",
                    json!("invalid_api_key"),
                ),
                (429, _) => (
                    "Rate limit reached for chaos-1 in organization org-chaos on requests per min (RPM): Limit 60, Used 60, Requested 1.",
                    "requests",
                    json!("rate_limit_exceeded"),
                ),
                (502, _) => {
                    return json!({"error": {"message": "Upstream API request failed", "type": "api_error", "param": null, "code": "upstream_error"}});
                }
                (503, _) => (
                    "The engine is currently overloaded, please try again later",
                    "server_error",
                    Value::Null,
                ),
                _ => (
                    "The server had an error while processing your request. Sorry about that!",
                    "server_error",
                    Value::Null,
                ),
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
        }
        Protocol::Anthropic => {
            let (kind, message) = match (status, context) {
                (400, true) => (
                    "invalid_request_error",
                    "prompt is too long: 215047 tokens > 200000 maximum",
                ),
                (400, false) => ("invalid_request_error", "Invalid request."),
                (401, _) => ("authentication_error", "invalid x-api-key"),
                (403, _) => (
                    "permission_error",
                    "Your API key does not have permission to use the specified resource.",
                ),
                (404, _) => ("not_found_error", "model: chaos-unknown"),
                (413, _) => (
                    "request_too_large",
                    "Request exceeds the maximum allowed number of bytes.",
                ),
                (429, _) => (
                    "rate_limit_error",
                    "This request would exceed the rate limit for your organization of 50 requests per minute.",
                ),
                (529 | 503, _) => ("overloaded_error", "Overloaded"),
                _ => ("api_error", "Internal server error"),
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
    }
}

/// The in-stream error event of a protocol, carrying `kind` as its error type.
pub fn stream_error(protocol: Protocol, kind: &str) -> String {
    let message = match kind {
        "overloaded_error" => "Overloaded",
        "rate_limit_error" | "rate_limit_exceeded" => "Rate limit reached. Please try again in 1s.",
        _ => "The server had an error while processing your request. Sorry about that!",
    };
    match protocol {
        Protocol::OpenAi => {
            data(&json!({"error": {"message": message, "type": kind, "param": null, "code": null}}))
        }
        Protocol::Anthropic => event(
            "error",
            &json!({"type": "error", "error": {"type": kind, "message": message}}),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_request_gets_the_same_reply() {
        let req = json!({"model": "m", "messages": [{"role": "user", "content": "hi there"}]});
        assert_eq!(reply(Protocol::OpenAi, &req), reply(Protocol::OpenAi, &req));
        let Reply::Text(chunks) = reply(Protocol::OpenAi, &req) else {
            panic!()
        };
        assert_eq!(
            chunks.concat(),
            "Hello from rebound chaos. You said: hi there"
        );
        assert!(chunks.len() >= 3);
    }

    #[test]
    fn tools_are_called_once_then_answered() {
        let req = json!({"model": "m", "tools": [{"type": "function", "function": {"name": "clock"}}],
            "messages": [{"role": "user", "content": "what time"}]});
        assert!(
            matches!(reply(Protocol::OpenAi, &req), Reply::ToolCall { ref name, .. } if name == "clock")
        );
        let after = json!({"model": "m", "tools": [{"type": "function", "function": {"name": "clock"}}],
            "messages": [{"role": "user", "content": "what time"}, {"role": "tool", "tool_call_id": "c", "content": "noon"}]});
        let Reply::Text(chunks) = reply(Protocol::OpenAi, &after) else {
            panic!()
        };
        assert_eq!(chunks.concat(), "The tool answered: noon. Done.");
        let anthropic = json!({"model": "m", "tools": [{"name": "clock", "input_schema": {}}],
            "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "noon"}]}]});
        assert!(matches!(
            reply(Protocol::Anthropic, &anthropic),
            Reply::Text(_)
        ));
    }
}
