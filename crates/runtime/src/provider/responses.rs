//! The OpenAI Responses API: a whole answer's `output` items, a stream's typed events.
//!
//! Commit point: `response.created`, `response.in_progress`, `response.queued` and an output
//! item or content part added empty are preamble; the first delta of text, refusal,
//! reasoning (summary or text), function-call or custom-tool arguments commits, and so does
//! any other non-empty delta (audio, code, MCP arguments) or a non-empty item (a reasoning
//! item with its encrypted content, a server tool's call). `response.completed` and
//! `response.incomplete` end a stream normally: an incomplete response is an answer. A
//! `response.failed` event (its `response.error.code`) and an `error` event (its `code`)
//! are in-stream errors the catalogue classifies.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::{
    AnswerError, EventReading, ModelResponse, ResponseHead, StreamItem, ToolCall, index_at, str_at,
};

/// The events that open a stream and echo the whole response object (its instructions and
/// tools included, often many kilobytes): preamble by their name, read for the response's
/// head and the event's number only, without building the object they carry.
const OPENING: [&str; 3] = [
    "response.created",
    "response.in_progress",
    "response.queued",
];

#[derive(Deserialize)]
struct Opening<'a> {
    #[serde(borrow)]
    response: Option<OpeningResponse<'a>>,
    sequence_number: Option<u64>,
}

#[derive(Deserialize)]
struct OpeningResponse<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    created_at: Option<i64>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
}

/// An opening event named by its SSE `event:` line, read without a JSON tree; `None` for any
/// other event, or one whose fields are not of the usual types (the general reader then
/// reads it).
pub(super) fn read_opening(event: &str, data: &str) -> Option<EventReading> {
    if !OPENING.contains(&event) {
        return None;
    }
    let opening: Opening<'_> = serde_json::from_str(data).ok()?;
    Some(EventReading {
        items: vec![StreamItem::Preamble],
        sequence_number: opening.sequence_number,
        response: opening.response.map(|r| ResponseHead {
            id: r.id.map(Cow::into_owned).unwrap_or_default(),
            created_at: r.created_at,
            model: r.model.map(Cow::into_owned).unwrap_or_default(),
        }),
    })
}

/// One stream event of type `kind`.
pub(super) fn read(kind: &str, value: &Value) -> EventReading {
    let items = match kind {
        "response.output_text.delta" => vec![StreamItem::Text(delta(value))],
        "response.refusal.delta" => vec![StreamItem::Refusal(delta(value))],
        "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
            vec![StreamItem::Reasoning(delta(value))]
        }
        "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
            vec![StreamItem::ToolArguments {
                index: index_at(value, "output_index"),
                fragment: delta(value),
            }]
        }
        "response.output_item.added" | "response.output_item.done" => {
            item_items(value, kind == "response.output_item.done")
        }
        "response.content_part.added"
        | "response.content_part.done"
        | "response.reasoning_summary_part.added"
        | "response.reasoning_summary_part.done" => {
            if value.get("part").is_some_and(has_text) {
                vec![StreamItem::Opaque]
            } else {
                vec![StreamItem::Preamble]
            }
        }
        "response.completed" => vec![StreamItem::Stop("completed".into()), StreamItem::Done],
        "response.incomplete" => {
            let reason = value
                .pointer("/response/incomplete_details/reason")
                .and_then(Value::as_str)
                .unwrap_or("incomplete");
            vec![StreamItem::Stop(reason.to_owned()), StreamItem::Done]
        }
        "response.failed" => vec![StreamItem::Error {
            kind: value
                .get("response")
                .and_then(|r| r.get("error"))
                .and_then(error_kind)
                .unwrap_or_else(|| "response.failed".to_owned()),
            ends_stream: true,
        }],
        "error" => vec![StreamItem::Error {
            kind: error_kind(value)
                .or_else(|| value.get("error").and_then(error_kind))
                .unwrap_or_else(|| "error".to_owned()),
            ends_stream: false,
        }],
        // Deltas of kinds not named above (audio, code interpreter code, MCP arguments …)
        // are content when they carry something.
        other if other.ends_with(".delta") => {
            if value.get("delta").is_some_and(|d| !is_empty(d)) {
                vec![StreamItem::Opaque]
            } else {
                vec![StreamItem::Preamble]
            }
        }
        "response.image_generation_call.partial_image" => vec![StreamItem::Opaque],
        _ => vec![StreamItem::Preamble],
    };
    let response = match kind {
        "response.created" | "response.in_progress" | "response.queued" => {
            value.get("response").map(|r| ResponseHead {
                id: str_at(r, "/id"),
                created_at: r.get("created_at").and_then(Value::as_i64),
                model: str_at(r, "/model"),
            })
        }
        _ => None,
    };
    EventReading {
        items,
        sequence_number: value.get("sequence_number").and_then(Value::as_u64),
        response,
    }
}

fn delta(value: &Value) -> String {
    str_at(value, "/delta")
}

/// An error object's code, else its type: the Responses API names its errors by code.
fn error_kind(error: &Value) -> Option<String> {
    ["code", "type"]
        .iter()
        .filter_map(|field| error.get(*field).and_then(Value::as_str))
        .find(|kind| !kind.is_empty() && *kind != "error")
        .map(str::to_owned)
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(text) => text.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

/// A content part or summary part with text in it.
fn has_text(part: &Value) -> bool {
    ["text", "refusal"]
        .iter()
        .any(|field| part.get(*field).is_some_and(|t| !is_empty(t)))
}

/// An output item added or done: a function call names its tool (and commits only with its
/// arguments), an empty message or reasoning item is preamble, anything else is content.
/// A `done` item repeats what its deltas said, so it adds no text of its own.
fn item_items(value: &Value, done: bool) -> Vec<StreamItem> {
    let Some(item) = value.get("item") else {
        return vec![StreamItem::Preamble];
    };
    let index = index_at(value, "output_index");
    match item.get("type").and_then(Value::as_str).unwrap_or_default() {
        kind @ ("function_call" | "custom_tool_call") => {
            let arguments = if kind == "function_call" {
                "arguments"
            } else {
                "input"
            };
            let mut items = vec![StreamItem::ToolCallStart {
                index,
                id: str_at(item, "/call_id"),
                name: str_at(item, "/name"),
            }];
            if item.get(arguments).is_some_and(|a| !is_empty(a)) {
                items.push(if done {
                    StreamItem::Opaque
                } else {
                    StreamItem::ToolArguments {
                        index,
                        fragment: str_at(item, &format!("/{arguments}")),
                    }
                });
            }
            items
        }
        "message" => {
            let parts = item.get("content").and_then(Value::as_array);
            if parts.is_some_and(|parts| parts.iter().any(has_text)) {
                vec![StreamItem::Opaque]
            } else {
                vec![StreamItem::Preamble]
            }
        }
        "reasoning" => {
            let shown = ["summary", "content"].iter().any(|field| {
                item.get(*field)
                    .and_then(Value::as_array)
                    .is_some_and(|parts| parts.iter().any(has_text))
            });
            if shown || item.get("encrypted_content").is_some_and(|e| !is_empty(e)) {
                vec![StreamItem::Opaque]
            } else {
                vec![StreamItem::Preamble]
            }
        }
        // A server tool's call (web search, file search, code interpreter, image
        // generation, MCP …) or an item kind not known here.
        _ => vec![StreamItem::Opaque],
    }
}

/// A whole answer: a `response` object.
pub(super) fn answer(value: &Value) -> Result<ModelResponse, AnswerError> {
    if let Some(failed) = failure(value) {
        return Err(failed);
    }
    let output = value
        .get("output")
        .and_then(Value::as_array)
        .ok_or(AnswerError::Missing("output"))?;
    let mut response = ModelResponse::default();
    for item in output {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    for field in ["text", "refusal"] {
                        if let Some(text) = part.get(field).and_then(Value::as_str) {
                            response.text.push_str(text);
                        }
                    }
                }
            }
            Some("reasoning") => {
                for field in ["summary", "content"] {
                    for part in item
                        .get(field)
                        .and_then(Value::as_array)
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                    {
                        response.reasoning.push_str(&str_at(part, "/text"));
                    }
                }
            }
            Some("function_call") => response.tool_calls.push(ToolCall {
                id: str_at(item, "/call_id"),
                name: str_at(item, "/name"),
                arguments: str_at(item, "/arguments"),
            }),
            Some("custom_tool_call") => response.tool_calls.push(ToolCall {
                id: str_at(item, "/call_id"),
                name: str_at(item, "/name"),
                arguments: str_at(item, "/input"),
            }),
            _ => {}
        }
    }
    response.stop_reason = match value.get("status").and_then(Value::as_str) {
        Some("incomplete") => Some(
            value
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
                .unwrap_or("incomplete")
                .to_owned(),
        ),
        status => status.map(str::to_owned),
    };
    Ok(response)
}

/// A `response` object whose `status` is `failed`: its error's code.
pub(super) fn failure(value: &Value) -> Option<AnswerError> {
    if value.get("status").and_then(Value::as_str) != Some("failed") {
        return None;
    }
    let kind = value
        .get("error")
        .and_then(error_kind)
        .unwrap_or_else(|| "response.failed".to_owned());
    Some(AnswerError::Failed { kind })
}
