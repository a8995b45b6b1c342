//! The Responses API in the other form: a `response` told as the events the API streams
//! (`response.created`, each output item added, its parts and deltas, done, then
//! `response.completed`, `response.incomplete` or `response.failed`, numbered in order), and a
//! stream gathered into the `response` its last event holds.
//!
//! An item is told the way the API streams its kind: a message's parts as text (or refusal)
//! deltas with their annotations, a function call's arguments and a custom tool call's input
//! as one delta each, a reasoning item's summary parts as text deltas. Every other item (a
//! server tool's call, encrypted reasoning) is added and done whole. Each item's `done` event
//! holds it whole, every field as it came.

use serde_json::{Map, Value, json};

use super::{Told, event_object, text};
use crate::sse::SseEvent;

/// The events told so far, numbered.
struct Telling {
    out: Vec<Told>,
}

impl Telling {
    fn event(&mut self, kind: &'static str, fields: Value) {
        let mut data = json!({"type": kind, "sequence_number": self.out.len()});
        if let (Value::Object(data), Value::Object(fields)) = (&mut data, fields) {
            data.extend(fields);
        }
        self.out.push(Told::json(kind, &data));
    }

    /// A message's part `j`: an output text as its delta, annotations and done; a refusal as
    /// its delta and done; any other part added and done whole.
    fn part(&mut self, at: &Value, j: usize, part: &Value) {
        let place = |more: Value| {
            let mut place = at.clone();
            place["content_index"] = json!(j);
            if let (Value::Object(place), Value::Object(more)) = (&mut place, more) {
                place.extend(more);
            }
            place
        };
        let empty = Map::new();
        let whole = part.as_object().unwrap_or(&empty);
        let opening = match text(whole, "type") {
            "output_text" => {
                let mut opening = whole.clone();
                opening.insert("text".into(), json!(""));
                opening.insert("annotations".into(), json!([]));
                Value::Object(opening)
            }
            "refusal" => json!({"type": "refusal", "refusal": ""}),
            _ => part.clone(),
        };
        self.event(
            "response.content_part.added",
            place(json!({"part": opening})),
        );
        match text(whole, "type") {
            "output_text" => {
                let said = text(whole, "text");
                let logprobs = whole.get("logprobs").cloned().unwrap_or(json!([]));
                if !said.is_empty() {
                    let delta = json!({"delta": said, "logprobs": logprobs});
                    self.event("response.output_text.delta", place(delta));
                }
                let annotations = whole.get("annotations").and_then(Value::as_array);
                for (k, annotation) in annotations.into_iter().flatten().enumerate() {
                    let added = json!({"annotation_index": k, "annotation": annotation});
                    self.event("response.output_text.annotation.added", place(added));
                }
                let done = json!({"text": said, "logprobs": logprobs});
                self.event("response.output_text.done", place(done));
            }
            "refusal" => {
                let said = text(whole, "refusal");
                if !said.is_empty() {
                    self.event("response.refusal.delta", place(json!({"delta": said})));
                }
                self.event("response.refusal.done", place(json!({"refusal": said})));
            }
            _ => {}
        }
        self.event("response.content_part.done", place(json!({"part": part})));
    }

    /// Output item `i`, added, told and done.
    fn item(&mut self, i: usize, item: &Map<String, Value>) {
        let id = item.get("id").cloned().unwrap_or(Value::Null);
        let at = json!({"item_id": id, "output_index": i});
        let with = |more: Value| {
            let mut place = at.clone();
            if let (Value::Object(place), Value::Object(more)) = (&mut place, more) {
                place.extend(more);
            }
            place
        };
        let mut opening = item.clone();
        if opening.contains_key("status") {
            opening.insert("status".into(), json!("in_progress"));
        }
        let kind = text(item, "type");
        match kind {
            "message" => drop(opening.insert("content".into(), json!([]))),
            "function_call" => drop(opening.insert("arguments".into(), json!(""))),
            "custom_tool_call" => drop(opening.insert("input".into(), json!(""))),
            "reasoning" => drop(opening.insert("summary".into(), json!([]))),
            _ => {}
        }
        let added = json!({"output_index": i, "item": opening});
        self.event("response.output_item.added", added);
        match kind {
            "message" => {
                let parts = item.get("content").and_then(Value::as_array);
                for (j, part) in parts.into_iter().flatten().enumerate() {
                    self.part(&at, j, part);
                }
            }
            "function_call" | "custom_tool_call" => {
                // A function's arguments, or a custom tool's free-form input.
                let (field, delta_kind, done_kind) = match kind {
                    "function_call" => (
                        "arguments",
                        "response.function_call_arguments.delta",
                        "response.function_call_arguments.done",
                    ),
                    _ => (
                        "input",
                        "response.custom_tool_call_input.delta",
                        "response.custom_tool_call_input.done",
                    ),
                };
                let said = text(item, field);
                if !said.is_empty() {
                    self.event(delta_kind, with(json!({"delta": said})));
                }
                self.event(done_kind, with(json!({ field: said })));
            }
            "reasoning" => {
                let summary = item.get("summary").and_then(Value::as_array);
                for (j, part) in summary.into_iter().flatten().enumerate() {
                    let said = part.get("text").and_then(Value::as_str).unwrap_or_default();
                    let at = |more: Value| {
                        let mut place = with(more);
                        place["summary_index"] = json!(j);
                        place
                    };
                    let opening = json!({"part": {"type": "summary_text", "text": ""}});
                    self.event("response.reasoning_summary_part.added", at(opening));
                    if !said.is_empty() {
                        let delta = at(json!({"delta": said}));
                        self.event("response.reasoning_summary_text.delta", delta);
                    }
                    let done = at(json!({"text": said}));
                    self.event("response.reasoning_summary_text.done", done);
                    let done = at(json!({"part": part}));
                    self.event("response.reasoning_summary_part.done", done);
                }
            }
            _ => {}
        }
        let done = json!({"output_index": i, "item": item});
        self.event("response.output_item.done", done);
    }
}

/// `None` for a response still under way (a `background` one, queued or in progress): it has
/// no end to tell yet.
pub(super) fn told(answer: &Map<String, Value>) -> Option<Vec<Told>> {
    let last = match text(answer, "status") {
        "completed" => "response.completed",
        "incomplete" => "response.incomplete",
        "failed" => "response.failed",
        _ => return None,
    };
    let mut opening = answer.clone();
    opening.insert("status".into(), json!("in_progress"));
    opening.insert("output".into(), json!([]));
    for key in ["usage", "error", "incomplete_details", "completed_at"] {
        if opening.contains_key(key) {
            opening.insert(key.into(), Value::Null);
        }
    }
    let mut telling = Telling { out: Vec::new() };
    telling.event("response.created", json!({"response": opening}));
    telling.event("response.in_progress", json!({"response": opening}));
    let output = answer.get("output").and_then(Value::as_array);
    for (i, item) in output.into_iter().flatten().enumerate() {
        if let Some(item) = item.as_object() {
            telling.item(i, item);
        }
    }
    telling.event(last, json!({"response": answer}));
    Some(telling.out)
}

/// The response the stream's last event holds: `None` unless it ended with
/// `response.completed`, `response.incomplete` or `response.failed`.
pub(super) fn gathered(events: &[SseEvent]) -> Option<Map<String, Value>> {
    events.iter().find_map(|event| {
        let (kind, data) = event_object(event)?;
        let last = matches!(
            kind.as_str(),
            "response.completed" | "response.incomplete" | "response.failed"
        );
        data.get("response").filter(|_| last)?.as_object().cloned()
    })
}
