//! Anthropic Messages wire shapes: `message` bodies and event streams, with `thinking`
//! (`thinking_delta`, `signature_delta`) and `redacted_thinking` blocks.

use serde_json::{Value, json};

use crate::model::{Answer, Reply, usage};
use crate::stream::{Envelope, Frames, event};

fn stop_reason(reply: &Reply) -> &'static str {
    match reply.answer {
        Answer::Text(_) => "end_turn",
        Answer::ToolCall { .. } => "tool_use",
        Answer::Truncated => "max_tokens",
    }
}

/// The opaque payload of a `redacted_thinking` block.
fn redacted_data(signature: &str) -> String {
    format!("EmwKAhgBEgy{signature}")
}

/// The whole (non-streaming) response body.
pub fn body(envelope: &Envelope<'_>, reply: &Reply) -> Value {
    let id = envelope.id;
    let mut content = Vec::new();
    if let Some(thinking) = &reply.thinking {
        content.push(json!({"type": "thinking", "thinking": thinking.chunks.concat(), "signature": thinking.signature}));
        if thinking.redacted {
            content.push(
                json!({"type": "redacted_thinking", "data": redacted_data(&thinking.signature)}),
            );
        }
    }
    match &reply.answer {
        Answer::Text(chunks) => content.push(json!({"type": "text", "text": chunks.concat()})),
        Answer::ToolCall { name, arguments } => content.push(json!({"type": "tool_use",
            "id": format!("toolu_{id}"), "name": name,
            "input": serde_json::from_str::<Value>(arguments).unwrap_or(Value::Null)})),
        Answer::Truncated => {}
    }
    let (input, output) = usage(reply);
    json!({
        "id": id, "type": "message", "role": "assistant", "model": envelope.model,
        "content": content, "stop_reason": stop_reason(reply), "stop_sequence": null,
        "usage": {"input_tokens": input, "output_tokens": output}
    })
}

fn block_start(index: usize, block: &Value) -> String {
    event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

fn block_stop(index: usize) -> String {
    event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    )
}

fn delta(index: usize, delta: &Value) -> String {
    event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

/// The stream's frames. The first block's start is preamble; a later block's start (and the
/// stop of the one before) travel with that block's first delta.
pub fn frames(envelope: &Envelope<'_>, reply: &Reply) -> Frames {
    let id = envelope.id;
    let start = event(
        "message_start",
        &json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
            "model": envelope.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 1}}}),
    );
    let ping = event("ping", &json!({"type": "ping"}));
    // Each block: its start, then its deltas (each a content frame).
    let mut blocks: Vec<(Value, Vec<Value>)> = Vec::new();
    if let Some(thinking) = &reply.thinking {
        let mut deltas: Vec<Value> = thinking
            .chunks
            .iter()
            .map(|c| json!({"type": "thinking_delta", "thinking": c}))
            .collect();
        deltas.push(json!({"type": "signature_delta", "signature": thinking.signature}));
        blocks.push((
            json!({"type": "thinking", "thinking": "", "signature": ""}),
            deltas,
        ));
        if thinking.redacted {
            blocks.push((
                json!({"type": "redacted_thinking", "data": redacted_data(&thinking.signature)}),
                Vec::new(),
            ));
        }
    }
    match &reply.answer {
        Answer::Text(chunks) => blocks.push((
            json!({"type": "text", "text": ""}),
            chunks
                .iter()
                .map(|c| json!({"type": "text_delta", "text": c}))
                .collect(),
        )),
        Answer::ToolCall { name, arguments } => {
            let half = arguments.len() / 2;
            let (a, b) = arguments.split_at(arguments.floor_char_boundary(half));
            blocks.push((
                json!({"type": "tool_use", "id": format!("toolu_{id}"), "name": name, "input": {}}),
                [a, b]
                    .iter()
                    .map(|part| json!({"type": "input_json_delta", "partial_json": part}))
                    .collect(),
            ));
        }
        Answer::Truncated => {}
    }
    let mut preamble = vec![start];
    let mut content = Vec::new();
    let mut pending = String::new();
    for (index, (block, deltas)) in blocks.iter().enumerate() {
        if index == 0 {
            preamble.push(block_start(index, block));
            preamble.push(ping.clone());
        } else {
            pending.push_str(&block_stop(index - 1));
            pending.push_str(&block_start(index, block));
        }
        for d in deltas {
            content.push(std::mem::take(&mut pending) + &delta(index, d));
        }
    }
    if preamble.len() == 1 {
        preamble.push(ping);
    }
    // A block without deltas (redacted thinking) is content in itself.
    if !pending.is_empty() {
        content.push(pending);
    }
    let mut end = Vec::new();
    if !blocks.is_empty() {
        end.push(block_stop(blocks.len() - 1));
    }
    let (_, output) = usage(reply);
    end.push(event(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop_reason(reply), "stop_sequence": null},
            "usage": {"output_tokens": output}}),
    ));
    end.push(event("message_stop", &json!({"type": "message_stop"})));
    Frames::new(preamble, content, end)
}
