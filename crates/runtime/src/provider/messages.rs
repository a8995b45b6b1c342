//! Anthropic Messages: a whole answer's `content` blocks, a stream's block events.
//!
//! Every block is content except an empty `text` or `thinking` start and a `tool_use` start
//! (whose input has not begun): thinking, redacted thinking, signatures, citations and
//! server-tool blocks (`server_tool_use`, `web_search_tool_result` …) commit a stream (G9).
//! A block or delta type this reader does not know is content too: holding it back would
//! hide it, and a stream that ends after it would look empty.

use serde_json::Value;

use super::{AnswerError, ModelResponse, StreamItem, ToolCall, index_at, str_at};

/// A whole answer.
pub(super) fn answer(value: &Value) -> Result<ModelResponse, AnswerError> {
    let blocks = value
        .get("content")
        .and_then(Value::as_array)
        .ok_or(AnswerError::Missing("content"))?;
    let mut response = ModelResponse::default();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => response.text.push_str(&str_at(block, "/text")),
            Some("thinking") => response.reasoning.push_str(&str_at(block, "/thinking")),
            Some("tool_use") => response.tool_calls.push(ToolCall {
                id: str_at(block, "/id"),
                name: str_at(block, "/name"),
                arguments: block.get("input").map(Value::to_string).unwrap_or_default(),
            }),
            _ => {}
        }
    }
    response.stop_reason = value
        .get("stop_reason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(response)
}

/// One stream event of type `kind`.
pub(super) fn items(kind: &str, value: &Value) -> Vec<StreamItem> {
    let index = index_at(value, "index");
    match kind {
        "content_block_start" => {
            let Some(block) = value.get("content_block") else {
                return vec![StreamItem::Preamble];
            };
            match block.get("type").and_then(Value::as_str) {
                Some("tool_use") => vec![StreamItem::ToolCallStart {
                    index,
                    id: str_at(block, "/id"),
                    name: str_at(block, "/name"),
                }],
                Some("text") => text_or_preamble(StreamItem::Text(str_at(block, "/text"))),
                Some("thinking") => {
                    text_or_preamble(StreamItem::Reasoning(str_at(block, "/thinking")))
                }
                _ => vec![StreamItem::Opaque],
            }
        }
        "content_block_delta" => match value.pointer("/delta/type").and_then(Value::as_str) {
            Some("text_delta") => vec![StreamItem::Text(str_at(value, "/delta/text"))],
            Some("thinking_delta") => {
                vec![StreamItem::Reasoning(str_at(value, "/delta/thinking"))]
            }
            Some("input_json_delta") => vec![StreamItem::ToolArguments {
                index,
                fragment: str_at(value, "/delta/partial_json"),
            }],
            // `signature_delta`, `citations_delta` and kinds not known here.
            _ => vec![StreamItem::Opaque],
        },
        "message_delta" => value
            .pointer("/delta/stop_reason")
            .and_then(Value::as_str)
            .map_or_else(
                || vec![StreamItem::Preamble],
                |r| vec![StreamItem::Stop(r.to_owned())],
            ),
        "message_stop" => vec![StreamItem::Done],
        _ => vec![StreamItem::Preamble],
    }
}

fn text_or_preamble(item: StreamItem) -> Vec<StreamItem> {
    if item.is_content() {
        vec![item]
    } else {
        vec![StreamItem::Preamble]
    }
}
