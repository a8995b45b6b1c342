//! The two provider protocols and their three APIs: how a request is sent and what an answer
//! or a stream event means.
//!
//! Requests are protocol-native JSON bodies (what the official SDKs send): rebound sets only
//! `model` and `stream`. Answers are read into one [`ModelResponse`], and a stream into
//! [`StreamItem`]s, from which the runtime and the gateway learn the commit point (the first
//! content-bearing event) and in-stream errors. Each API's reader is its own module:
//! [`chat`] (Chat Completions), [`messages`] (Anthropic Messages), [`responses`] (the
//! Responses API).
//!
//! Content is what a person watching the stream would see change: text, thinking and
//! reasoning, refusals, tool-call arguments, server-tool blocks (G9). Bookkeeping before it
//! (a message start, a role-only chunk, an empty block or item, a tool call's name whose
//! arguments have not begun) is preamble, held back by a gateway so a retry stays invisible.

use bytes::Bytes;
use http::{HeaderValue, Request, header};
use serde::Serialize;
use serde_json::Value;

mod chat;
mod messages;
mod responses;

/// Which API a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// OpenAI Chat Completions (`POST {base}/chat/completions`, base includes `/v1`).
    OpenAi,
    /// Anthropic Messages (`POST {base}/v1/messages`).
    Anthropic,
}

impl Protocol {
    /// The name, as in configuration, metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::OpenAi => "openai",
            Protocol::Anthropic => "anthropic",
        }
    }
}

/// The API a request is made in: a provider of a protocol serves one or more of them, each at
/// its own path with its own stream events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// OpenAI Chat Completions (`{base}/chat/completions`).
    ChatCompletions,
    /// The OpenAI Responses API (`{base}/responses`).
    Responses,
    /// Anthropic Messages (`{base}/v1/messages`).
    Messages,
}

impl Api {
    /// The protocol whose providers serve it.
    pub fn protocol(self) -> Protocol {
        match self {
            Api::ChatCompletions | Api::Responses => Protocol::OpenAi,
            Api::Messages => Protocol::Anthropic,
        }
    }

    /// The protocol's first API, the one its providers always serve.
    pub fn native(protocol: Protocol) -> Api {
        match protocol {
            Protocol::OpenAi => Api::ChatCompletions,
            Protocol::Anthropic => Api::Messages,
        }
    }

    /// Its path below a provider's base URL as the official SDKs take it.
    pub fn path(self) -> &'static str {
        match self {
            Api::ChatCompletions => "/chat/completions",
            Api::Responses => "/responses",
            Api::Messages => "/v1/messages",
        }
    }

    /// The name, as in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::ChatCompletions => "chat_completions",
            Api::Responses => "responses",
            Api::Messages => "messages",
        }
    }
}

/// One candidate's endpoint.
#[derive(Clone)]
pub struct Provider {
    /// The API to call (`Api::native(protocol)` for a protocol's first one); it names the
    /// protocol, the path and the stream reader.
    pub api: Api,
    /// The base URL as the official SDKs take it (OpenAI's includes `/v1`).
    pub base_url: String,
    /// The API key, if any. Never printed (see the `Debug` impl).
    pub api_key: Option<String>,
    /// The model to ask for; replaces the body's `model`.
    pub model: String,
    /// The provider name the catalogue knows (`openai`, `anthropic`, `azure`, `relay` …).
    pub name: String,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("api", &self.api)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("model", &self.model)
            .field("name", &self.name)
            .finish()
    }
}

/// A tool call the model asked for. The runtime never runs it: the caller does, once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ToolCall {
    /// The provider's call id (the Responses API's `call_id`).
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments, as JSON text.
    pub arguments: String,
}

/// A complete model response.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ModelResponse {
    /// The visible assistant message id; the same across replays (R2).
    pub message_id: String,
    /// The text (a refusal included: it is the model's answer).
    pub text: String,
    /// The thinking or reasoning text the provider showed (summaries included).
    pub reasoning: String,
    /// The tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped (`stop`, `end_turn`, `tool_calls`, `tool_use`, `completed`,
    /// `max_output_tokens` …).
    pub stop_reason: Option<String>,
}

impl ModelResponse {
    /// True when there is neither text, reasoning nor a tool call. A response with only
    /// reasoning (a model stopped at its token limit while thinking) is an answer (G9).
    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.reasoning.is_empty() && self.tool_calls.is_empty()
    }
}

/// Why a body with a success status is not an answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// The body is not the API's JSON.
    #[error("the body is not the API's JSON")]
    NotJson,
    /// The body is JSON, but not an answer of the API (a field it needs is missing).
    #[error("the answer has no `{0}`")]
    Missing(&'static str),
    /// The provider says the answer failed (the Responses API's `status: "failed"` with its
    /// `error`); `kind` is its error code, which the catalogue classifies like an in-stream
    /// error event's.
    #[error("the provider reports a failed response ({kind})")]
    Failed {
        /// The error's code (`server_error`, `rate_limit_exceeded` …).
        kind: String,
    },
}

impl Provider {
    /// The protocol its API belongs to.
    pub fn protocol(&self) -> Protocol {
        self.api.protocol()
    }

    /// The HTTP request for `body`, streaming or not.
    pub fn request(&self, body: &Value, stream: bool) -> Result<Request<Bytes>, http::Error> {
        let mut body = body.clone();
        if let Value::Object(map) = &mut body {
            map.insert("model".into(), Value::String(self.model.clone()));
            map.insert("stream".into(), Value::Bool(stream));
            if self.protocol() == Protocol::Anthropic && !map.contains_key("max_tokens") {
                map.insert("max_tokens".into(), Value::from(1024));
            }
        }
        let base = self.base_url.trim_end_matches('/');
        let url = format!("{base}{}", self.api.path());
        let auth = match self.protocol() {
            Protocol::OpenAi => "authorization",
            Protocol::Anthropic => "x-api-key",
        };
        let mut builder = Request::post(url)
            .header(header::CONTENT_TYPE, "application/json")
            .header(
                header::ACCEPT,
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            );
        if self.protocol() == Protocol::Anthropic {
            builder = builder.header("anthropic-version", "2023-06-01");
        }
        if let Some(key) = &self.api_key {
            let value = match self.protocol() {
                Protocol::OpenAi => format!("Bearer {key}"),
                Protocol::Anthropic => key.clone(),
            };
            let mut value = HeaderValue::from_str(&value).map_err(http::Error::from)?;
            value.set_sensitive(true);
            builder = builder.header(auth, value);
        }
        builder.body(Bytes::from(body.to_string()))
    }

    /// Reads a whole (non-streaming) answer of its API.
    pub fn parse_complete(&self, body: &[u8]) -> Result<ModelResponse, AnswerError> {
        parse_answer(self.api, body)
    }
}

/// Reads a whole (non-streaming) answer of an API.
pub fn parse_answer(api: Api, body: &[u8]) -> Result<ModelResponse, AnswerError> {
    let value: Value = serde_json::from_slice(body).map_err(|_| AnswerError::NotJson)?;
    read_answer(api, &value)
}

/// Reads a whole answer of an API that is already parsed.
pub fn read_answer(api: Api, value: &Value) -> Result<ModelResponse, AnswerError> {
    match api {
        Api::ChatCompletions => chat::answer(value),
        Api::Messages => messages::answer(value),
        Api::Responses => responses::answer(value),
    }
}

/// The failure a whole answer with a success status reports, if it reports one: the Responses
/// API's `status: "failed"` object. Other APIs' answers report failures with an error status,
/// so this reads (and parses) only a Responses answer.
pub fn answer_failure(api: Api, body: &[u8]) -> Option<AnswerError> {
    if api != Api::Responses {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    responses::failure(&value)
}

fn str_at(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn index_at(value: &Value, key: &str) -> usize {
    value
        .get(key)
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
        .unwrap_or(0)
}

/// What one stream event means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamItem {
    /// Protocol bookkeeping before any content (`message_start`, `ping`, an empty
    /// `content_block_start`, an OpenAI role-only chunk, `response.created`, an empty
    /// output item). Not a commit point.
    Preamble,
    /// Text.
    Text(String),
    /// Thinking or reasoning text (Anthropic `thinking_delta`, OpenAI-compatible
    /// `reasoning_content` / `reasoning`, Responses reasoning deltas). Content (G9).
    Reasoning(String),
    /// A refusal's text (Chat Completions `refusal`, `response.refusal.delta`). Content.
    Refusal(String),
    /// Content with no text the runtime keeps: a thinking signature, redacted thinking, a
    /// server tool's block, a citation, an encrypted reasoning item, audio, or a kind of
    /// delta this reader does not know. It commits the stream like text (G9).
    Opaque,
    /// A tool call begins: its id and name, before its arguments. Not a commit point by
    /// itself (its first argument fragment is), but it makes a complete stream an answer.
    ToolCallStart {
        /// Position among the response's tool calls (the Responses API's `output_index`).
        index: usize,
        /// The call id.
        id: String,
        /// The tool.
        name: String,
    },
    /// More arguments of a tool call.
    ToolArguments {
        /// Position among the response's tool calls.
        index: usize,
        /// The JSON text fragment.
        fragment: String,
    },
    /// The stop reason.
    Stop(String),
    /// The stream is complete (`[DONE]`, `message_stop`, `response.completed`,
    /// `response.incomplete`).
    Done,
    /// An in-stream error event with its error type or code, which the catalogue classifies.
    Error {
        /// `overloaded_error`, `server_error`, `rate_limit_exceeded` …
        kind: String,
        /// The event ends the stream in the protocol's terms. A Responses `error` event does
        /// not: clients (Codex) wait for `response.failed`.
        ends_stream: bool,
    },
    /// Data that does not parse as the protocol's JSON.
    Malformed,
}

impl StreamItem {
    /// True for the items that put content in front of a consumer: the commit point.
    pub fn is_content(&self) -> bool {
        match self {
            StreamItem::Text(text) | StreamItem::Reasoning(text) | StreamItem::Refusal(text) => {
                !text.is_empty()
            }
            StreamItem::ToolArguments { fragment, .. } => !fragment.is_empty(),
            StreamItem::Opaque => true,
            _ => false,
        }
    }
}

/// The response a Responses stream announced (`response.created`): what a gateway needs to
/// end the stream with a `response.failed` event of the same response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResponseHead {
    /// `resp_…`.
    pub id: String,
    /// Unix seconds.
    pub created_at: Option<i64>,
    /// The model that answers.
    pub model: String,
}

/// One stream event read: its items, and where it stands in its stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventReading {
    /// What it means.
    pub items: Vec<StreamItem>,
    /// The Responses API's `sequence_number`: events a gateway writes itself follow it.
    pub sequence_number: Option<u64>,
    /// The response a Responses stream's `response.created` / `response.in_progress`
    /// announced.
    pub response: Option<ResponseHead>,
}

impl EventReading {
    fn items(items: Vec<StreamItem>) -> Self {
        EventReading {
            items,
            ..EventReading::default()
        }
    }
}

/// Reads one SSE event of an API's stream into items.
pub fn stream_items(api: Api, event: &str, data: &str) -> Vec<StreamItem> {
    read_event(api, event, data).items
}

/// Reads one SSE event of an API's stream: its items and its place in the stream.
pub fn read_event(api: Api, event: &str, data: &str) -> EventReading {
    let trimmed = data.trim();
    if api != Api::Messages && trimmed == "[DONE]" {
        return EventReading::items(vec![StreamItem::Done]);
    }
    // An event with a name and no data (`event: keepalive`) carries nothing.
    if trimmed.is_empty() {
        return EventReading::items(vec![StreamItem::Preamble]);
    }
    if api == Api::Responses
        && let Some(reading) = responses::read_opening(event, data)
    {
        return reading;
    }
    let Ok(value) = serde_json::from_str::<Value>(data) else {
        return EventReading::items(vec![StreamItem::Malformed]);
    };
    let kind = if event.is_empty() {
        value
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
    } else {
        event
    };
    match api {
        Api::Responses => responses::read(kind, &value),
        Api::ChatCompletions | Api::Messages => {
            if let Some(error) = value.get("error").filter(|e| e.is_object()) {
                let kind = error
                    .get("type")
                    .and_then(Value::as_str)
                    .or_else(|| error.get("code").and_then(Value::as_str))
                    .unwrap_or("error")
                    .to_owned();
                return EventReading::items(vec![StreamItem::Error {
                    kind,
                    ends_stream: true,
                }]);
            }
            EventReading::items(if api == Api::Messages {
                messages::items(kind, &value)
            } else {
                chat::items(&value)
            })
        }
    }
}

#[cfg(test)]
mod tests;
