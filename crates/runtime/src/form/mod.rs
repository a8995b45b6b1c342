//! An answer in the other form than the one asked for: a whole answer to a stream request (a
//! server that does not stream, or a proxy that gathers what it relays), or an event stream to
//! a request that does not stream (a server that streams whatever it is asked).
//!
//! The answer is there, generated and paid for: discarding it to ask another candidate, or
//! failing the request, loses it. So it is told in the form asked for, the way the API itself
//! would have sent it: a whole answer as the API's stream events ([`as_stream`]), a stream as
//! the API's whole answer ([`as_whole`]). Each API's telling is its own module: [`chat`] (Chat
//! Completions), [`messages`] (Anthropic Messages), [`responses`] (the Responses API).
//!
//! Only a complete answer is told again. A whole body that is not an answer of the API (an
//! error written as a body, another shape, an empty answer) and a stream cut before its end
//! are read as they were (`transport.json_answer_to_stream`, a cut stream), and a stream that
//! ends in its own error event is that error.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::provider::{AnswerError, Api, StreamItem, read_answer, read_event};
use crate::sse::{SseEvent, SseFramer};

mod chat;
mod messages;
mod responses;

/// One stream event to write: its `event:` name (empty for none) and its data.
struct Told {
    event: &'static str,
    data: String,
}

impl Told {
    /// An event named `event` (empty for none) with JSON data.
    fn json(event: &'static str, data: &Value) -> Told {
        Told {
            event,
            data: data.to_string(),
        }
    }

    fn write(&self, out: &mut String) {
        if !self.event.is_empty() {
            out.push_str("event: ");
            out.push_str(self.event);
            out.push('\n');
        }
        out.push_str("data: ");
        out.push_str(&self.data);
        out.push_str("\n\n");
    }
}

/// The stream `api` would have sent for the whole answer `body`, as SSE bytes; `usage_asked`
/// when a Chat Completions request asked for usage in its stream (`stream_options.
/// include_usage`). `None` when `body` is not a whole answer of the API with content or a tool
/// call in it (a Responses answer that failed is told too, ending in its `response.failed`).
pub fn as_stream(api: Api, body: &[u8], usage_asked: bool) -> Option<Bytes> {
    let value = serde_json::from_slice::<Value>(body).ok()?;
    match read_answer(api, &value) {
        Ok(answer) if !answer.is_empty() => {}
        Err(AnswerError::Failed { .. }) => {}
        _ => return None,
    }
    let Value::Object(answer) = value else {
        return None;
    };
    let told = match api {
        Api::ChatCompletions => chat::told(&answer, usage_asked),
        Api::Messages => messages::told(&answer),
        Api::Responses => responses::told(&answer)?,
    };
    let mut out = String::with_capacity(body.len() * 2);
    told.iter().for_each(|event| event.write(&mut out));
    Some(Bytes::from(out))
}

/// What a stream that answered a request that does not stream, cut before its end, says.
pub const CUT: &str = "the event stream that answered a request that does not stream ended \
                       before its final event";

/// Whether a Chat Completions request body asks for usage in its stream
/// (`"stream_options": {"include_usage": true}`).
pub fn usage_asked(request: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Request {
        stream_options: Option<StreamOptions>,
    }
    #[derive(serde::Deserialize)]
    struct StreamOptions {
        include_usage: Option<bool>,
    }
    serde_json::from_slice::<Request>(request)
        .ok()
        .and_then(|r| r.stream_options?.include_usage)
        .unwrap_or(false)
}

/// What a whole stream holds when it is complete.
#[derive(Clone, Debug, PartialEq)]
pub enum Gathered {
    /// The whole answer the API would have sent (JSON).
    Answer(Bytes),
    /// The stream's own error event: its error type or code, which the catalogue classifies,
    /// and its data.
    Error {
        /// `overloaded_error`, `server_error` …
        kind: String,
        /// The event's data, as sent.
        data: String,
    },
    /// A stream of the API cut before its end, without an error of its own: broken like any
    /// cut stream.
    Cut,
}

/// The whole answer `api` would have sent for a request that does not stream, gathered from
/// `body`, an event stream read to its end. `None` when `body` is no stream of the API (no
/// event, events of another API).
pub fn as_whole(api: Api, body: &[u8]) -> Option<Gathered> {
    let mut framer = SseFramer::new();
    let mut events = framer.push(body).ok()?;
    // A last event without its blank line is whole once the body has ended.
    events.extend(framer.push(b"\n\n").ok()?);
    if events.is_empty() {
        return None;
    }
    let answer = |answer: Map<String, Value>| {
        Gathered::Answer(Bytes::from(Value::Object(answer).to_string()))
    };
    // The stream's own error, read as a stream reader reads it.
    let error = || {
        events.iter().find_map(|event| {
            let items = read_event(api, &event.event, &event.data).items;
            items.into_iter().find_map(|item| match item {
                StreamItem::Error { kind, .. } => Some(Gathered::Error {
                    kind,
                    data: event.data.clone(),
                }),
                _ => None,
            })
        })
    };
    let gathered = match api {
        Api::ChatCompletions => error().or_else(|| chat::gathered(&events).map(answer)),
        Api::Messages => error().or_else(|| messages::gathered(&events).map(answer)),
        // A Responses `error` event is followed by `response.failed`, whose whole failed
        // response is the answer a request that does not stream gets.
        Api::Responses => responses::gathered(&events).map(answer).or_else(error),
    };
    gathered.or_else(|| opens(api, &events[0]).then_some(Gathered::Cut))
}

/// Whether `first` opens a stream of `api`: a chunk with choices, `message_start`, or a
/// `response.` event.
fn opens(api: Api, first: &SseEvent) -> bool {
    let Some((kind, data)) = event_object(first) else {
        return false;
    };
    match api {
        Api::ChatCompletions => data.contains_key("choices"),
        Api::Messages => kind == "message_start",
        Api::Responses => kind.starts_with("response."),
    }
}

/// A stream event's JSON object and its type: the `event:` name, or else the data's `type`.
fn event_object(event: &SseEvent) -> Option<(String, Map<String, Value>)> {
    let Ok(Value::Object(data)) = serde_json::from_str::<Value>(&event.data) else {
        return None;
    };
    let kind = if event.event.is_empty() {
        data.get("type").and_then(Value::as_str).unwrap_or_default()
    } else {
        &event.event
    };
    Some((kind.to_owned(), data))
}

/// Appends a string delta to the string at `key` (made if missing; a value that is not a
/// string is replaced).
fn append(map: &mut Map<String, Value>, key: &str, more: &str) {
    match map.get_mut(key) {
        Some(Value::String(text)) => text.push_str(more),
        _ => {
            map.insert(key.to_owned(), Value::String(more.to_owned()));
        }
    }
}

/// The string at `key`, empty if missing or not a string.
fn text<'a>(map: &'a Map<String, Value>, key: &str) -> &'a str {
    map.get(key).and_then(Value::as_str).unwrap_or_default()
}

#[cfg(test)]
mod tests;
