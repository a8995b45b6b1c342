//! Chat Completions in the other form: a `chat.completion` told as `chat.completion.chunk`s
//! ending in `[DONE]`, and chunks gathered into a `chat.completion`, as the official SDKs
//! gather them.
//!
//! Each chunk carries the answer's own fields (`id`, `created`, `model`,
//! `system_fingerprint`, a relay's extras). A choice is told as its role, its reasoning (the
//! `reasoning_content` or `reasoning` some servers add), its text, its refusal, each tool call
//! (its id and name, then its arguments), any other field of its message, then its finish
//! reason. Usage comes in a last chunk with no choices, when the request asked for it.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Told, append, text};
use crate::sse::SseEvent;

/// A message's fields told before its text: the reasoning some servers add.
const REASONING: [&str; 3] = ["reasoning_content", "reasoning", "reasoning_details"];

/// A message's fields told in their own way, not as they are.
const TOLD: [&str; 4] = ["role", "content", "refusal", "tool_calls"];

pub(super) fn told(answer: &Map<String, Value>, usage_asked: bool) -> Vec<Told> {
    let mut base: Map<String, Value> = answer
        .iter()
        .filter(|(key, _)| !matches!(key.as_str(), "object" | "choices" | "usage"))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    base.insert("object".into(), json!("chat.completion.chunk"));
    let chunk = |choices: Value| {
        let mut chunk = base.clone();
        chunk.insert("choices".into(), choices);
        Told::json("", &Value::Object(chunk))
    };
    let mut out = Vec::new();
    let choices = answer.get("choices").and_then(Value::as_array);
    for (position, choice) in choices.into_iter().flatten().enumerate() {
        let index = choice.get("index").cloned().unwrap_or(json!(position));
        let delta = |delta: Value, logprobs: Value| {
            chunk(json!([{
                "index": index, "delta": delta, "logprobs": logprobs, "finish_reason": null
            }]))
        };
        let empty = Map::new();
        let message = choice
            .get("message")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let role = message.get("role").cloned().unwrap_or(json!("assistant"));
        out.push(delta(json!({"role": role, "content": ""}), Value::Null));
        let field = |key: &str, value: &Value| delta(json!({ key: value }), Value::Null);
        for key in REASONING {
            if let Some(value) = message.get(key).filter(|v| !v.is_null()) {
                out.push(field(key, value));
            }
        }
        let content = text(message, "content");
        if !content.is_empty() {
            let logprobs = choice.get("logprobs").cloned().unwrap_or(Value::Null);
            out.push(delta(json!({ "content": content }), logprobs));
        }
        let refusal = text(message, "refusal");
        if !refusal.is_empty() {
            out.push(field("refusal", &json!(refusal)));
        }
        let calls = message.get("tool_calls").and_then(Value::as_array);
        for (k, call) in calls.into_iter().flatten().enumerate() {
            let function = call.get("function").and_then(Value::as_object);
            let name = function.and_then(|f| f.get("name")).cloned();
            let opening = json!([{
                "index": k,
                "id": call.get("id").cloned().unwrap_or(Value::Null),
                "type": call.get("type").cloned().unwrap_or(json!("function")),
                "function": {"name": name.unwrap_or(Value::Null), "arguments": ""},
            }]);
            out.push(field("tool_calls", &opening));
            let arguments = function.map(|f| text(f, "arguments")).unwrap_or_default();
            if !arguments.is_empty() {
                let more = json!([{"index": k, "function": {"arguments": arguments}}]);
                out.push(field("tool_calls", &more));
            }
        }
        for (key, value) in message {
            let told = TOLD.contains(&key.as_str()) || REASONING.contains(&key.as_str());
            if !told && !value.is_null() {
                out.push(field(key, value));
            }
        }
        let finish = choice
            .get("finish_reason")
            .cloned()
            .unwrap_or(json!("stop"));
        out.push(chunk(json!([{
            "index": index, "delta": {}, "logprobs": null, "finish_reason": finish
        }])));
    }
    if let Some(usage) = answer.get("usage").filter(|u| usage_asked && !u.is_null()) {
        let mut last = base.clone();
        last.insert("choices".into(), json!([]));
        last.insert("usage".into(), usage.clone());
        out.push(Told::json("", &Value::Object(last)));
    }
    out.push(Told {
        event: "",
        data: "[DONE]".into(),
    });
    out
}

/// One choice as its chunks tell it.
#[derive(Default)]
struct Choice {
    message: Map<String, Value>,
    /// Tool calls by their index.
    calls: BTreeMap<u64, Map<String, Value>>,
    logprobs: Vec<Value>,
    finish_reason: Option<Value>,
}

impl Choice {
    fn add(&mut self, choice: &Map<String, Value>) {
        if let Some(finish) = choice.get("finish_reason").filter(|f| !f.is_null()) {
            self.finish_reason = Some(finish.clone());
        }
        if let Some(Value::Array(more)) = choice.get("logprobs").and_then(|l| l.get("content")) {
            self.logprobs.extend(more.iter().cloned());
        }
        let Some(delta) = choice.get("delta").and_then(Value::as_object) else {
            return;
        };
        for (key, value) in delta {
            match value {
                Value::Null => {}
                Value::Array(calls) if key == "tool_calls" => {
                    calls.iter().for_each(|c| self.call(c));
                }
                // The role is said once; every other string is a fragment of its field.
                Value::String(more) if key != "role" => append(&mut self.message, key, more),
                _ => {
                    self.message.insert(key.clone(), value.clone());
                }
            }
        }
    }

    /// A tool call's fragment: its id, type and name when they come, more of its arguments.
    fn call(&mut self, fragment: &Value) {
        let index = fragment.get("index").and_then(Value::as_u64).unwrap_or(0);
        let call = self.calls.entry(index).or_default();
        for key in ["id", "type"] {
            if let Some(value) = fragment.get(key).filter(|v| !v.is_null()) {
                call.insert(key.into(), value.clone());
            }
        }
        let Some(function) = fragment.get("function").and_then(Value::as_object) else {
            return;
        };
        let whole = call
            .entry("function")
            .or_insert_with(|| json!({"name": "", "arguments": ""}));
        if let Value::Object(whole) = whole {
            for key in ["name", "arguments"] {
                if let Some(more) = function.get(key).and_then(Value::as_str) {
                    append(whole, key, more);
                }
            }
        }
    }

    fn whole(mut self, index: u64) -> Value {
        let calls: Vec<Value> = self.calls.into_values().map(Value::Object).collect();
        let message = &mut self.message;
        message.entry("role").or_insert_with(|| json!("assistant"));
        let content = message.entry("content").or_insert(Value::Null);
        // A message that only calls tools has no text: `null`, as the API sends it.
        if content.as_str().is_some_and(str::is_empty) && !calls.is_empty() {
            *content = Value::Null;
        } else if content.is_null() && calls.is_empty() {
            *content = json!("");
        }
        message.entry("refusal").or_insert(Value::Null);
        if !calls.is_empty() {
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        let logprobs = if self.logprobs.is_empty() {
            Value::Null
        } else {
            json!({"content": self.logprobs})
        };
        json!({
            "index": index,
            "message": self.message,
            "logprobs": logprobs,
            "finish_reason": self.finish_reason.unwrap_or(Value::Null),
        })
    }
}

/// The chunks gathered: `None` unless a choice finished or `[DONE]` came.
pub(super) fn gathered(events: &[SseEvent]) -> Option<Map<String, Value>> {
    let mut answer = Map::new();
    let mut choices: BTreeMap<u64, Choice> = BTreeMap::new();
    let mut usage = None;
    let mut done = false;
    for event in events {
        if event.data.trim() == "[DONE]" {
            done = true;
            break;
        }
        let Ok(Value::Object(chunk)) = serde_json::from_str::<Value>(&event.data) else {
            continue;
        };
        for (key, value) in &chunk {
            match key.as_str() {
                "choices" | "object" => {}
                "usage" => usage = Some(value.clone()).filter(|u| !u.is_null()).or(usage),
                _ => {
                    answer.entry(key.clone()).or_insert_with(|| value.clone());
                }
            }
        }
        let said = chunk.get("choices").and_then(Value::as_array);
        for choice in said.into_iter().flatten().filter_map(Value::as_object) {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            choices.entry(index).or_default().add(choice);
        }
    }
    let finished = choices.values().any(|c| c.finish_reason.is_some());
    if !(done || finished) || choices.is_empty() {
        return None;
    }
    answer.insert("object".into(), json!("chat.completion"));
    let whole: Vec<Value> = choices
        .into_iter()
        .map(|(index, choice)| choice.whole(index))
        .collect();
    answer.insert("choices".into(), Value::Array(whole));
    if let Some(usage) = usage {
        answer.insert("usage".into(), usage);
    }
    Some(answer)
}
