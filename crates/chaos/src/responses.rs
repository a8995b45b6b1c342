//! OpenAI Responses wire shapes: `response` objects and their event streams.
//!
//! A stream is `response.created`, `response.in_progress`, then per output item
//! `response.output_item.added`, its parts and deltas (`response.reasoning_summary_text.delta`,
//! `response.output_text.delta`, `response.function_call_arguments.delta`), their `.done`
//! events and `response.output_item.done`, and last `response.completed` (or
//! `response.incomplete` when the reply ran out of tokens). Every event carries `type` and a
//! `sequence_number` counted from 0, as OpenAI's do; the SSE frames name the event.

use serde_json::{Value, json};

use crate::model::{Answer, CREATED, Reply, usage};
use crate::stream::{Envelope, Frames};

/// Numbers events as the stream goes.
struct Events {
    next: usize,
}

impl Events {
    fn event(&mut self, kind: &str, mut value: Value) -> String {
        value["type"] = json!(kind);
        value["sequence_number"] = json!(self.next);
        self.next += 1;
        format!("event: {kind}\ndata: {value}\n\n")
    }
}

/// The suffix the item ids share with their response: `resp_X` → `msg_X`, `fc_X` ….
fn suffix(id: &str) -> &str {
    id.strip_prefix("resp_").unwrap_or(id)
}

fn encrypted(envelope: &Envelope<'_>) -> bool {
    envelope
        .request
        .get("include")
        .and_then(Value::as_array)
        .is_some_and(|i| i.iter().any(|v| v == "reasoning.encrypted_content"))
}

/// A `response` object in `status`, with `output` and `usage` (null while in progress).
pub fn object(envelope: &Envelope<'_>, status: &str, output: Vec<Value>, usage: Value) -> Value {
    let request = envelope.request;
    let echo = |name: &str, default: Value| request.get(name).cloned().unwrap_or(default);
    json!({
        "id": envelope.id, "object": "response", "created_at": CREATED, "status": status,
        "background": echo("background", json!(false)), "error": null, "incomplete_details": null,
        "instructions": echo("instructions", Value::Null),
        "max_output_tokens": echo("max_output_tokens", Value::Null),
        "model": envelope.model, "output": output,
        "parallel_tool_calls": echo("parallel_tool_calls", json!(true)),
        "previous_response_id": echo("previous_response_id", Value::Null),
        "reasoning": {
            "effort": request.pointer("/reasoning/effort").cloned().unwrap_or(Value::Null),
            "summary": request.pointer("/reasoning/summary").cloned().unwrap_or(Value::Null)
        },
        "store": echo("store", json!(true)),
        "temperature": echo("temperature", json!(1.0)),
        "text": echo("text", json!({"format": {"type": "text"}})),
        "tool_choice": echo("tool_choice", json!("auto")),
        "tools": echo("tools", json!([])),
        "top_p": echo("top_p", json!(1.0)),
        "truncation": echo("truncation", json!("disabled")),
        "usage": usage, "user": echo("user", Value::Null), "metadata": echo("metadata", json!({}))
    })
}

fn usage_of(reply: &Reply) -> Value {
    let (input, output) = usage(reply);
    let reasoning = reply.thinking.as_ref().map_or(0, |t| t.chunks.len());
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input + output})
}

/// The output items of a reply, completed.
fn output(envelope: &Envelope<'_>, reply: &Reply) -> Vec<Value> {
    let s = suffix(envelope.id);
    let mut items = Vec::new();
    if let Some(thinking) = &reply.thinking {
        let summary: Vec<Value> = if thinking.chunks.is_empty() {
            Vec::new()
        } else {
            vec![json!({"type": "summary_text", "text": thinking.chunks.concat()})]
        };
        let mut item = json!({"id": format!("rs_{s}"), "type": "reasoning", "summary": summary});
        if encrypted(envelope) {
            item["encrypted_content"] = json!(format!("gAAAAAB{}", thinking.signature));
        }
        items.push(item);
    }
    match &reply.answer {
        Answer::Text(chunks) => items.push(json!({"id": format!("msg_{s}"), "type": "message",
            "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": chunks.concat()}]})),
        Answer::ToolCall { name, arguments } => items.push(json!({"id": format!("fc_{s}"),
            "type": "function_call", "status": "completed", "arguments": arguments,
            "call_id": format!("call_{s}"), "name": name})),
        Answer::Truncated => {}
    }
    items
}

/// The status a finished reply has: `completed`, or `incomplete` at the token limit.
fn final_status(reply: &Reply) -> &'static str {
    if reply.answer == Answer::Truncated {
        "incomplete"
    } else {
        "completed"
    }
}

/// The whole (non-streaming) response object.
pub fn body(envelope: &Envelope<'_>, reply: &Reply) -> Value {
    let mut object = object(
        envelope,
        final_status(reply),
        output(envelope, reply),
        usage_of(reply),
    );
    if reply.answer == Answer::Truncated {
        object["incomplete_details"] = json!({"reason": "max_output_tokens"});
    }
    object
}

/// The stream's frames.
pub fn frames(envelope: &Envelope<'_>, reply: &Reply) -> Frames {
    let mut events = Events { next: 0 };
    let in_progress = object(envelope, "in_progress", Vec::new(), Value::Null);
    let preamble = vec![
        events.event("response.created", json!({"response": in_progress})),
        events.event("response.in_progress", json!({"response": in_progress})),
    ];
    let mut content = Vec::new();
    let mut sequence = vec![events.next];
    // Each content frame, with the structural events before it; structural events after the
    // last delta of an item wait in `pending` for the next frame or the end.
    let mut pending = String::new();
    let mut push = |frame: String, events: &Events, pending: &mut String| {
        content.push(std::mem::take(pending) + &frame);
        sequence.push(events.next);
    };
    let done = output(envelope, reply);
    let s = suffix(envelope.id);
    let mut index = 0;
    if let Some(thinking) = &reply.thinking {
        let id = format!("rs_{s}");
        let added = events.event(
            "response.output_item.added",
            json!({"output_index": index, "item": {"id": id, "type": "reasoning", "summary": []}}),
        );
        pending.push_str(&added);
        if !thinking.chunks.is_empty() {
            let text = thinking.chunks.concat();
            let part = |text: &str| json!({"type": "summary_text", "text": text});
            let at = json!({"item_id": id, "output_index": index, "summary_index": 0});
            let with = |extra: Value| {
                let mut v = at.clone();
                if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
                    v.extend(extra.clone());
                }
                v
            };
            pending.push_str(&events.event(
                "response.reasoning_summary_part.added",
                with(json!({"part": part("")})),
            ));
            for chunk in &thinking.chunks {
                let frame = events.event(
                    "response.reasoning_summary_text.delta",
                    with(json!({"delta": chunk})),
                );
                push(frame, &events, &mut pending);
            }
            pending.push_str(&events.event(
                "response.reasoning_summary_text.done",
                with(json!({"text": text})),
            ));
            pending.push_str(&events.event(
                "response.reasoning_summary_part.done",
                with(json!({"part": part(&text)})),
            ));
        }
        pending.push_str(&events.event(
            "response.output_item.done",
            json!({"output_index": index, "item": done[index]}),
        ));
        index += 1;
    }
    match &reply.answer {
        Answer::Text(chunks) => {
            let id = format!("msg_{s}");
            let at = |extra: Value| {
                let mut v = json!({"item_id": id, "output_index": index, "content_index": 0});
                if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
                    v.extend(extra.clone());
                }
                v
            };
            let part = |text: &str| json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text});
            pending.push_str(&events.event(
                "response.output_item.added",
                json!({"output_index": index, "item": {"id": id, "type": "message", "status": "in_progress", "content": [], "role": "assistant"}}),
            ));
            pending.push_str(
                &events.event("response.content_part.added", at(json!({"part": part("")}))),
            );
            for chunk in chunks {
                let frame = events.event(
                    "response.output_text.delta",
                    at(json!({"delta": chunk, "logprobs": []})),
                );
                push(frame, &events, &mut pending);
            }
            let text = chunks.concat();
            pending.push_str(&events.event(
                "response.output_text.done",
                at(json!({"text": text, "logprobs": []})),
            ));
            pending.push_str(&events.event(
                "response.content_part.done",
                at(json!({"part": part(&text)})),
            ));
        }
        Answer::ToolCall { name, arguments } => {
            let id = format!("fc_{s}");
            pending.push_str(&events.event(
                "response.output_item.added",
                json!({"output_index": index, "item": {"id": id, "type": "function_call", "status": "in_progress",
                    "arguments": "", "call_id": format!("call_{s}"), "name": name}}),
            ));
            let half = arguments.floor_char_boundary(arguments.len() / 2);
            for part in [&arguments[..half], &arguments[half..]] {
                let frame = events.event(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": index, "delta": part}),
                );
                push(frame, &events, &mut pending);
            }
            pending.push_str(&events.event(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": index, "arguments": arguments}),
            ));
        }
        Answer::Truncated => {}
    }
    if let Some(item) = done.get(index) {
        pending.push_str(&events.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
    }
    let last = body(envelope, reply);
    let kind = if reply.answer == Answer::Truncated {
        "response.incomplete"
    } else {
        "response.completed"
    };
    let end = vec![pending, events.event(kind, json!({"response": last}))];
    Frames::new(preamble, content, end).with_sequence(sequence)
}

/// The OpenAI error code a script's error type stands for in a Responses failure.
fn code(kind: &str) -> &str {
    match kind {
        "overloaded_error" | "api_error" => "server_error",
        "rate_limit_error" => "rate_limit_exceeded",
        other => other,
    }
}

fn message(kind: &str) -> &'static str {
    match code(kind) {
        "rate_limit_exceeded" => {
            "Rate limit reached for chaos-1 in organization org-chaos on tokens per min (TPM): Limit 30000, Used 30000, Requested 100. Please try again in 1s."
        }
        "context_length_exceeded" => {
            "Your input exceeds the context window of this model. Please adjust your input and try again."
        }
        _ => {
            "An error occurred while processing your request. You can retry your request, or contact us through our help center at help.openai.com if the error persists."
        }
    }
}

/// The in-stream failure at `sequence`: a `response.failed` event whose response carries
/// `error.code`, or (`bare`) an `error` event.
pub fn stream_error(
    envelope: &Envelope<'_>,
    kind: &str,
    bare: bool,
    sequence: usize,
    echoed: Option<&str>,
) -> String {
    let mut events = Events { next: sequence };
    let message = match echoed {
        Some(key) => crate::error_shape::echoed_message(message(kind), key),
        None => message(kind).to_owned(),
    };
    if bare {
        return events.event(
            "error",
            json!({"code": code(kind), "message": message, "param": null}),
        );
    }
    let mut failed = object(envelope, "failed", Vec::new(), Value::Null);
    failed["error"] = json!({"code": code(kind), "message": message});
    events.event("response.failed", json!({"response": failed}))
}

/// The request's input as items with ids, for `GET /v1/responses/{id}/input_items`.
pub fn input_items(id: &str, request: &Value) -> Vec<Value> {
    let s = suffix(id);
    let items = match request.get("input") {
        Some(Value::String(text)) => vec![json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]})],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, mut item)| {
            if item.get("id").is_none() {
                item["id"] = json!(format!("in_{s}_{i}"));
            }
            if item.get("type").is_none() {
                item["type"] = json!("message");
            }
            if item.get("type") == Some(&json!("message")) && item.get("status").is_none() {
                item["status"] = json!("completed");
            }
            if let Some(Value::String(text)) = item.get("content").cloned() {
                item["content"] = json!([{"type": "input_text", "text": text}]);
            }
            item
        })
        .collect()
}
