//! Error bodies and in-stream error events, shaped like each protocol's own.

use serde_json::{Value, json};

use crate::model::Protocol;
use crate::stream::{data, event};

/// The body of an error status, shaped like the protocol's own. An OpenAI 401 echoes the key
/// it was given, as OpenAI's own message and some proxies do: a test of whether keys leak.
pub fn error_body_with_key(
    protocol: Protocol,
    status: u16,
    context: bool,
    key: Option<&str>,
) -> Value {
    let mut body = error_body(protocol, status, context);
    if let (Protocol::OpenAi, 401, Some(key)) = (protocol, status, key)
        && let Some(message) = body.pointer_mut("/error/message")
    {
        *message = json!(format!(
            "Incorrect API key provided: {key}. You can find your API key at https://platform.openai.com/account/api-keys."
        ));
    }
    body
}

/// `body`'s `error.message` (both protocols' place for it) replaced by `message`
/// (`+message:TEXT`).
pub fn set_message(body: &mut Value, message: &str) {
    if let Some(slot) = body.pointer_mut("/error/message") {
        *slot = json!(message);
    }
}

/// An error message that echoes the key the request presented (`+echo-key`).
pub fn echoed_message(message: &str, key: &str) -> String {
    format!("{message} (request key: {key})")
}

/// `body`'s `error.message` (both protocols' place for it) echoing `key` (`+echo-key`).
pub fn echo_key(body: &mut Value, key: &str) {
    if let Some(Value::String(message)) = body.pointer_mut("/error/message") {
        *message = echoed_message(message, key);
    }
}

/// The body of an error status, shaped like the protocol's own.
pub fn error_body(protocol: Protocol, status: u16, context: bool) -> Value {
    match protocol {
        Protocol::OpenAi => {
            let (message, kind, code) = match (status, context) {
                (400, true) => (
                    "This model's maximum context length is 128000 tokens. However, your messages resulted in 130415 tokens. Please reduce the length of the messages.",
                    "invalid_request_error",
                    json!("context_length_exceeded"),
                ),
                (400, false) => ("Invalid request.", "invalid_request_error", Value::Null),
                (401, _) => (
                    "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
                    "invalid_request_error",
                    json!("invalid_api_key"),
                ),
                (429, _) => (
                    "Rate limit reached for chaos-1 in organization org-chaos on requests per min (RPM): Limit 60, Used 60, Requested 1.",
                    "requests",
                    json!("rate_limit_exceeded"),
                ),
                (502, _) => {
                    return json!({"error": {"message": "Upstream API request failed", "type": "api_error", "param": null, "code": "upstream_error"}});
                }
                (503, _) => (
                    "The engine is currently overloaded, please try again later",
                    "server_error",
                    Value::Null,
                ),
                _ => (
                    "The server had an error while processing your request. Sorry about that!",
                    "server_error",
                    Value::Null,
                ),
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
        }
        Protocol::Anthropic => {
            let (kind, message) = match (status, context) {
                (400, true) => (
                    "invalid_request_error",
                    "prompt is too long: 215047 tokens > 200000 maximum",
                ),
                (400, false) => ("invalid_request_error", "Invalid request."),
                (401, _) => ("authentication_error", "invalid x-api-key"),
                (403, _) => (
                    "permission_error",
                    "Your API key does not have permission to use the specified resource.",
                ),
                (404, _) => ("not_found_error", "model: chaos-unknown"),
                (413, _) => (
                    "request_too_large",
                    "Request exceeds the maximum allowed number of bytes.",
                ),
                (429, _) => (
                    "rate_limit_error",
                    "This request would exceed the rate limit for your organization of 50 requests per minute.",
                ),
                (529 | 503, _) => ("overloaded_error", "Overloaded"),
                _ => ("api_error", "Internal server error"),
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
    }
}

/// The in-stream error event of a protocol, carrying `kind` as its error type.
/// The message echoes `echoed`, the request's key, when given (`+echo-key`).
pub fn stream_error(protocol: Protocol, kind: &str, echoed: Option<&str>) -> String {
    let message = match kind {
        "overloaded_error" => "Overloaded",
        "rate_limit_error" | "rate_limit_exceeded" => "Rate limit reached. Please try again in 1s.",
        _ => "The server had an error while processing your request. Sorry about that!",
    };
    let message = match echoed {
        Some(key) => echoed_message(message, key),
        None => message.to_owned(),
    };
    match protocol {
        Protocol::OpenAi => {
            data(&json!({"error": {"message": message, "type": kind, "param": null, "code": null}}))
        }
        Protocol::Anthropic => event(
            "error",
            &json!({"type": "error", "error": {"type": kind, "message": message}}),
        ),
    }
}

/// A 404 for a path chaos does not serve, in the caller's protocol shape.
pub fn not_found(protocol: Protocol, method: &str, path: &str) -> Value {
    let message = format!("rebound chaos has no {method} {path}");
    match protocol {
        Protocol::OpenAi => {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": "unknown_url"}})
        }
        Protocol::Anthropic => {
            json!({"type": "error", "error": {"type": "not_found_error", "message": message}})
        }
    }
}

/// An `invalid_request_error` 400 about one field, in the caller's protocol shape.
pub fn invalid(protocol: Protocol, message: &str, param: &str, code: Value) -> Value {
    match protocol {
        Protocol::OpenAi => {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}})
        }
        Protocol::Anthropic => {
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
        }
    }
}
