//! OpenAI Chat Completions (and the many servers that copy it): a whole answer's
//! `choices[0].message`, a stream chunk's `choices[0].delta`.

use serde_json::Value;

use super::{AnswerError, ModelResponse, StreamItem, ToolCall, index_at, str_at};

/// A whole answer.
pub(super) fn answer(value: &Value) -> Result<ModelResponse, AnswerError> {
    let choice = value
        .pointer("/choices/0")
        .ok_or(AnswerError::Missing("choices"))?;
    let message = choice
        .get("message")
        .ok_or(AnswerError::Missing("choices[0].message"))?;
    let mut response = ModelResponse::default();
    for field in ["content", "refusal"] {
        if let Some(text) = message.get(field).and_then(Value::as_str) {
            response.text.push_str(text);
        }
    }
    for field in ["reasoning_content", "reasoning"] {
        if let Some(text) = message.get(field).and_then(Value::as_str) {
            response.reasoning.push_str(text);
        }
    }
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        response.tool_calls.push(ToolCall {
            id: str_at(call, "/id"),
            name: str_at(call, "/function/name"),
            arguments: str_at(call, "/function/arguments"),
        });
    }
    response.stop_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(response)
}

/// One stream chunk.
pub(super) fn items(value: &Value) -> Vec<StreamItem> {
    let Some(choice) = value.pointer("/choices/0") else {
        return vec![StreamItem::Preamble];
    };
    let mut items = Vec::new();
    let delta = choice.get("delta");
    let text_of = |field: &str| {
        delta
            .and_then(|d| d.get(field))
            .and_then(Value::as_str)
            .filter(|text| !text.is_empty())
            .map(str::to_owned)
    };
    // DeepSeek, vLLM and most relays call it `reasoning_content`; OpenRouter and Ollama
    // `reasoning`. Either is thinking shown live (G9).
    for field in ["reasoning_content", "reasoning"] {
        if let Some(text) = text_of(field) {
            items.push(StreamItem::Reasoning(text));
        }
    }
    // OpenRouter's structured reasoning (encrypted or summarised) carries no plain text.
    if delta
        .and_then(|d| d.get("reasoning_details"))
        .and_then(Value::as_array)
        .is_some_and(|details| !details.is_empty())
    {
        items.push(StreamItem::Opaque);
    }
    if let Some(text) = text_of("content") {
        items.push(StreamItem::Text(text));
    }
    if let Some(text) = text_of("refusal") {
        items.push(StreamItem::Refusal(text));
    }
    for call in delta
        .and_then(|d| d.get("tool_calls"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let index = index_at(call, "index");
        if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
            items.push(StreamItem::ToolCallStart {
                index,
                id: str_at(call, "/id"),
                name: name.to_owned(),
            });
        }
        if let Some(fragment) = call.pointer("/function/arguments").and_then(Value::as_str)
            && !fragment.is_empty()
        {
            items.push(StreamItem::ToolArguments {
                index,
                fragment: fragment.to_owned(),
            });
        }
    }
    if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
        items.push(StreamItem::Stop(reason.to_owned()));
    }
    if items.is_empty() {
        items.push(StreamItem::Preamble);
    }
    items
}
