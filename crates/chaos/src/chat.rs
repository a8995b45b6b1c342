//! OpenAI Chat Completions wire shapes: `chat.completion` bodies and `chat.completion.chunk`
//! streams, with DeepSeek-style `reasoning_content` for thinking.

use serde_json::{Value, json};

use crate::model::{Answer, CREATED, Reply, usage};
use crate::stream::{Envelope, Frames, data};

fn finish_reason(reply: &Reply) -> &'static str {
    match reply.answer {
        Answer::Text(_) => "stop",
        Answer::ToolCall { .. } => "tool_calls",
        Answer::Truncated => "length",
    }
}

fn usage_of(reply: &Reply) -> Value {
    let (input, output) = usage(reply);
    json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output})
}

/// The whole (non-streaming) response body.
pub fn body(envelope: &Envelope<'_>, reply: &Reply) -> Value {
    let id = envelope.id;
    let mut message = json!({"role": "assistant", "content": reply.answer_text(), "refusal": null});
    if let Some(thinking) = reply.thinking_text() {
        message["reasoning_content"] = json!(thinking);
    }
    if let Answer::ToolCall { name, arguments } = &reply.answer {
        message["tool_calls"] = json!([{"id": format!("call_{id}"), "type": "function",
            "function": {"name": name, "arguments": arguments}}]);
    }
    json!({
        "id": id, "object": "chat.completion", "created": CREATED, "model": envelope.model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason(reply)}],
        "usage": usage_of(reply)
    })
}

/// The stream's frames.
pub fn frames(envelope: &Envelope<'_>, reply: &Reply) -> Frames {
    let id = envelope.id;
    let chunk = |delta: Value, finish: Value| {
        data(
            &json!({"id": id, "object": "chat.completion.chunk", "created": CREATED,
            "model": envelope.model, "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]}),
        )
    };
    let preamble = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let mut content: Vec<String> = reply
        .thinking
        .iter()
        .flat_map(|t| t.chunks.iter())
        .map(|c| chunk(json!({"reasoning_content": c}), Value::Null))
        .collect();
    match &reply.answer {
        Answer::Text(chunks) => {
            content.extend(
                chunks
                    .iter()
                    .map(|c| chunk(json!({"content": c}), Value::Null)),
            );
        }
        Answer::ToolCall { name, arguments } => content.extend([
            chunk(
                json!({"tool_calls": [{"index": 0, "id": format!("call_{id}"), "type": "function",
                    "function": {"name": name, "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
                Value::Null,
            ),
        ]),
        Answer::Truncated => {}
    }
    let end = vec![
        chunk(json!({}), json!(finish_reason(reply))),
        "data: [DONE]\n\n".to_owned(),
    ];
    Frames::new(preamble, content, end)
}
