//! The two provider protocols: how a request is sent and how its answer is read.
//!
//! Requests are protocol-native JSON bodies (what the official SDKs send): rebound sets only
//! `model` and `stream`. Answers are read into one [`ModelResponse`], and a stream into
//! [`StreamItem`]s, from which the runtime learns the commit point (the first content-bearing
//! event) and in-stream errors.

use bytes::Bytes;
use http::{HeaderValue, Request, header};
use serde::Serialize;
use serde_json::Value;

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
    /// The protocol.
    pub protocol: Protocol,
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
            .field("protocol", &self.protocol)
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
    /// The provider's call id.
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
    /// The text.
    pub text: String,
    /// The tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped (`stop`, `end_turn`, `tool_calls`, `tool_use` …).
    pub stop_reason: Option<String>,
}

impl ModelResponse {
    /// True when there is neither text nor a tool call.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.tool_calls.is_empty()
    }
}

impl Provider {
    /// The HTTP request for `body`, streaming or not.
    pub fn request(&self, body: &Value, stream: bool) -> Result<Request<Bytes>, http::Error> {
        let mut body = body.clone();
        if let Value::Object(map) = &mut body {
            map.insert("model".into(), Value::String(self.model.clone()));
            map.insert("stream".into(), Value::Bool(stream));
            if self.protocol == Protocol::Anthropic && !map.contains_key("max_tokens") {
                map.insert("max_tokens".into(), Value::from(1024));
            }
        }
        let base = self.base_url.trim_end_matches('/');
        let (url, auth) = match self.protocol {
            Protocol::OpenAi => (format!("{base}/chat/completions"), "authorization"),
            Protocol::Anthropic => (format!("{base}/v1/messages"), "x-api-key"),
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
        if self.protocol == Protocol::Anthropic {
            builder = builder.header("anthropic-version", "2023-06-01");
        }
        if let Some(key) = &self.api_key {
            let value = match self.protocol {
                Protocol::OpenAi => format!("Bearer {key}"),
                Protocol::Anthropic => key.clone(),
            };
            let mut value = HeaderValue::from_str(&value).map_err(http::Error::from)?;
            value.set_sensitive(true);
            builder = builder.header(auth, value);
        }
        builder.body(Bytes::from(body.to_string()))
    }

    /// Reads a whole (non-streaming) response body.
    pub fn parse_complete(&self, body: &[u8]) -> Option<ModelResponse> {
        let value: Value = serde_json::from_slice(body).ok()?;
        let mut response = ModelResponse::default();
        match self.protocol {
            Protocol::OpenAi => {
                let choice = value.pointer("/choices/0")?;
                let message = choice.get("message")?;
                response.text = message
                    .get("content")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
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
            }
            Protocol::Anthropic => {
                for block in value.get("content")?.as_array()? {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => response.text.push_str(&str_at(block, "/text")),
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
            }
        }
        Some(response)
    }
}

fn str_at(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// What one stream event means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamItem {
    /// Protocol bookkeeping before any content (`message_start`, `ping`, an empty
    /// `content_block_start`, an OpenAI role-only chunk). Not a commit point.
    Preamble,
    /// Text.
    Text(String),
    /// A tool call begins (content: commits the stream).
    ToolCallStart {
        /// Position among the response's tool calls.
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
    /// The stream is complete.
    Done,
    /// An in-stream error event with its error type.
    Error {
        /// `overloaded_error`, `server_error` …
        kind: String,
    },
    /// Data that does not parse as the protocol's JSON.
    Malformed,
}

impl StreamItem {
    /// True for the items that put content in front of a consumer: the commit point.
    pub fn is_content(&self) -> bool {
        match self {
            StreamItem::Text(text) => !text.is_empty(),
            StreamItem::ToolCallStart { .. } | StreamItem::ToolArguments { .. } => true,
            _ => false,
        }
    }
}

/// Reads one SSE event of an API's stream into items.
pub fn stream_items(api: Api, event: &str, data: &str) -> Vec<StreamItem> {
    if api == Api::ChatCompletions && data.trim() == "[DONE]" {
        return vec![StreamItem::Done];
    }
    let Ok(value) = serde_json::from_str::<Value>(data) else {
        return vec![StreamItem::Malformed];
    };
    if let Some(error) = value.get("error").filter(|e| e.is_object()) {
        let kind = error
            .get("type")
            .and_then(Value::as_str)
            .or_else(|| error.get("code").and_then(Value::as_str))
            .unwrap_or("error")
            .to_owned();
        return vec![StreamItem::Error { kind }];
    }
    match api {
        Api::ChatCompletions => openai_items(&value),
        // Read by the Responses API's own reader once it is served.
        Api::Responses => vec![StreamItem::Preamble],
        Api::Messages => {
            let kind = if event.is_empty() {
                value
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            } else {
                event
            };
            anthropic_items(kind, &value)
        }
    }
}

fn openai_items(value: &Value) -> Vec<StreamItem> {
    let Some(choice) = value.pointer("/choices/0") else {
        return vec![StreamItem::Preamble];
    };
    let mut items = Vec::new();
    let delta = choice.get("delta");
    if let Some(text) = delta.and_then(|d| d.get("content")).and_then(Value::as_str)
        && !text.is_empty()
    {
        items.push(StreamItem::Text(text.to_owned()));
    }
    for call in delta
        .and_then(|d| d.get("tool_calls"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .unwrap_or(0);
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

fn anthropic_items(kind: &str, value: &Value) -> Vec<StreamItem> {
    let index = value
        .get("index")
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok())
        .unwrap_or(0);
    match kind {
        "content_block_start" => {
            let block = value.get("content_block");
            match block.and_then(|b| b.get("type")).and_then(Value::as_str) {
                Some("tool_use") => vec![StreamItem::ToolCallStart {
                    index,
                    id: block.map(|b| str_at(b, "/id")).unwrap_or_default(),
                    name: block.map(|b| str_at(b, "/name")).unwrap_or_default(),
                }],
                Some("text") => {
                    let text = block.map(|b| str_at(b, "/text")).unwrap_or_default();
                    if text.is_empty() {
                        vec![StreamItem::Preamble]
                    } else {
                        vec![StreamItem::Text(text)]
                    }
                }
                _ => vec![StreamItem::Preamble],
            }
        }
        "content_block_delta" => match value.pointer("/delta/type").and_then(Value::as_str) {
            Some("text_delta") => vec![StreamItem::Text(str_at(value, "/delta/text"))],
            Some("input_json_delta") => vec![StreamItem::ToolArguments {
                index,
                fragment: str_at(value, "/delta/partial_json"),
            }],
            _ => vec![StreamItem::Preamble],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_role_chunk_is_preamble_and_content_commits() {
        let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        assert_eq!(
            stream_items(Api::ChatCompletions, "", role),
            vec![StreamItem::Preamble]
        );
        let text = r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#;
        let items = stream_items(Api::ChatCompletions, "", text);
        assert!(items[0].is_content());
        assert_eq!(
            stream_items(Api::ChatCompletions, "", "[DONE]"),
            vec![StreamItem::Done]
        );
        let err = r#"{"error":{"message":"boom","type":"server_error"}}"#;
        assert_eq!(
            stream_items(Api::ChatCompletions, "", err),
            vec![StreamItem::Error {
                kind: "server_error".into()
            }]
        );
    }

    #[test]
    fn anthropic_preambles_and_errors() {
        for (event, data) in [
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"m"}}"#,
            ),
            ("ping", r#"{"type":"ping"}"#),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
        ] {
            assert_eq!(
                stream_items(Api::Messages, event, data),
                vec![StreamItem::Preamble],
                "{event}"
            );
        }
        let err = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            stream_items(Api::Messages, "error", err),
            vec![StreamItem::Error {
                kind: "overloaded_error".into()
            }]
        );
        assert_eq!(
            stream_items(Api::Messages, "", "{not json"),
            vec![StreamItem::Malformed]
        );
    }

    #[test]
    fn keys_are_sent_sensitive_and_never_debug_printed() {
        let p = Provider {
            protocol: Protocol::Anthropic,
            base_url: "http://127.0.0.1:1".into(),
            api_key: Some("sk-ant-secret-canary".into()),
            model: "m".into(),
            name: "anthropic".into(),
        };
        assert!(!format!("{p:?}").contains("canary"));
        let req = p
            .request(&serde_json::json!({"messages": []}), true)
            .unwrap();
        assert!(req.headers()["x-api-key"].is_sensitive());
        assert_eq!(req.uri().path(), "/v1/messages");
        assert!(!format!("{:?}", req.headers()).contains("canary"));
    }
}
