//! Anthropic Messages in the other form: a `message` told as `message_start`, each content
//! block's start, deltas and stop, `message_delta` and `message_stop`; and those events
//! gathered into a `message`, as the official SDKs gather them.
//!
//! A block is told the way the API streams its kind: text as `text_delta` (its citations as
//! `citations_delta`), thinking as `thinking_delta` then `signature_delta`, a tool's input as
//! one `input_json_delta`. A block of any other kind (redacted thinking, a server tool's
//! result) starts whole and stops.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Told, append, event_object, text};
use crate::sse::SseEvent;

/// The block kinds whose input is told as JSON text.
const TOOL_USE: [&str; 3] = ["tool_use", "server_tool_use", "mcp_tool_use"];

/// A block's opening and its deltas.
fn block(block: &Map<String, Value>) -> (Value, Vec<Value>) {
    let kind = text(block, "type");
    let mut start = block.clone();
    let mut deltas = Vec::new();
    match kind {
        "text" => {
            start.insert("text".into(), json!(""));
            let said = text(block, "text");
            if !said.is_empty() {
                deltas.push(json!({"type": "text_delta", "text": said}));
            }
            if let Some(Value::Array(citations)) = block.get("citations") {
                start.insert("citations".into(), json!([]));
                deltas.extend(
                    citations
                        .iter()
                        .map(|c| json!({"type": "citations_delta", "citation": c})),
                );
            }
        }
        "thinking" => {
            start.insert("thinking".into(), json!(""));
            start.insert("signature".into(), json!(""));
            let thought = text(block, "thinking");
            if !thought.is_empty() {
                deltas.push(json!({"type": "thinking_delta", "thinking": thought}));
            }
            let signature = text(block, "signature");
            if !signature.is_empty() {
                deltas.push(json!({"type": "signature_delta", "signature": signature}));
            }
        }
        kind if TOOL_USE.contains(&kind) => {
            start.insert("input".into(), json!({}));
            let input = block
                .get("input")
                .filter(|i| i.as_object().is_none_or(|o| !o.is_empty()) && !i.is_null());
            if let Some(input) = input {
                let json = input.to_string();
                deltas.push(json!({"type": "input_json_delta", "partial_json": json}));
            }
        }
        _ => {}
    }
    (Value::Object(start), deltas)
}

pub(super) fn told(answer: &Map<String, Value>) -> Vec<Told> {
    let mut opening = answer.clone();
    opening.insert("content".into(), json!([]));
    opening.insert("stop_reason".into(), Value::Null);
    opening.insert("stop_sequence".into(), Value::Null);
    let mut out = vec![Told::json(
        "message_start",
        &json!({"type": "message_start", "message": opening}),
    )];
    let blocks = answer.get("content").and_then(Value::as_array);
    for (index, whole) in blocks.into_iter().flatten().enumerate() {
        let Some(whole) = whole.as_object() else {
            continue;
        };
        let (start, deltas) = block(whole);
        out.push(Told::json(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        for delta in deltas {
            out.push(Told::json(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        out.push(Told::json(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    let field = |key: &str| answer.get(key).cloned().unwrap_or(Value::Null);
    let mut end = json!({
        "type": "message_delta",
        "delta": {"stop_reason": field("stop_reason"), "stop_sequence": field("stop_sequence")},
    });
    if let Some(usage) = answer.get("usage").filter(|u| u.is_object()) {
        end["usage"] = usage.clone();
    }
    out.push(Told::json("message_delta", &end));
    out.push(Told::json("message_stop", &json!({"type": "message_stop"})));
    out
}

/// A block being gathered, with its input's JSON text so far.
struct Block {
    block: Map<String, Value>,
    input: String,
}

/// The events gathered: `None` unless `message_start` and `message_stop` came.
pub(super) fn gathered(events: &[SseEvent]) -> Option<Map<String, Value>> {
    let mut message: Option<Map<String, Value>> = None;
    let mut blocks: BTreeMap<u64, Block> = BTreeMap::new();
    let mut stopped = false;
    for event in events {
        let Some((kind, data)) = event_object(event) else {
            continue;
        };
        let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind.as_str() {
            "message_start" => message = data.get("message")?.as_object().cloned(),
            "content_block_start" => {
                let block = data.get("content_block")?.as_object()?.clone();
                let input = String::new();
                blocks.insert(index, Block { block, input });
            }
            "content_block_delta" => {
                let delta = data.get("delta")?.as_object()?;
                let block = blocks.get_mut(&index)?;
                match text(delta, "type") {
                    "text_delta" => append(&mut block.block, "text", text(delta, "text")),
                    "thinking_delta" => {
                        append(&mut block.block, "thinking", text(delta, "thinking"));
                    }
                    "signature_delta" => {
                        append(&mut block.block, "signature", text(delta, "signature"))
                    }
                    "input_json_delta" => block.input.push_str(text(delta, "partial_json")),
                    "citations_delta" => {
                        let citation = delta.get("citation").cloned().unwrap_or(Value::Null);
                        let citations = block.block.entry("citations").or_insert(json!([]));
                        if let Value::Array(list) = citations {
                            list.push(citation);
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                let message = message.as_mut()?;
                let said = data.get("delta").and_then(Value::as_object);
                for (key, value) in said.into_iter().flatten() {
                    message.insert(key.clone(), value.clone());
                }
                if let Some(Value::Object(more)) = data.get("usage") {
                    let usage = message.entry("usage").or_insert(json!({}));
                    if let Value::Object(usage) = usage {
                        for (key, value) in more.iter().filter(|(_, v)| !v.is_null()) {
                            usage.insert(key.clone(), value.clone());
                        }
                    }
                }
            }
            "message_stop" => stopped = true,
            _ => {}
        }
    }
    let mut message = message.filter(|_| stopped)?;
    let mut content = Vec::with_capacity(blocks.len());
    for Block { mut block, input } in blocks.into_values() {
        if !input.is_empty() {
            // A tool's input that is not JSON is a broken stream, as it is to the SDKs.
            block.insert("input".into(), serde_json::from_str(&input).ok()?);
        }
        content.push(Value::Object(block));
    }
    message.insert("content".into(), Value::Array(content));
    Some(message)
}
