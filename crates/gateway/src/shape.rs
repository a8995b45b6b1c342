//! Errors the way each provider shapes them, plus rebound's diagnostics (G2, G4).

use bytes::Bytes;
use rebound_core::Diagnostics;
use rebound_runtime::Protocol;
use rebound_runtime::provider::ResponseHead;
use serde_json::{Value, json};

/// A provider-shaped JSON error body: OpenAI's `{"error": {...}}` or Anthropic's
/// `{"type": "error", "error": {...}}`, with `rebound` holding the diagnostics when there are
/// some.
pub fn error_body(
    protocol: Protocol,
    kind: &str,
    message: &str,
    rebound: Option<&Diagnostics>,
) -> Value {
    let mut body = match protocol {
        Protocol::OpenAi => {
            json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
        }
        Protocol::Anthropic => {
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
    };
    if let (Some(d), Value::Object(map)) = (rebound, &mut body) {
        map.insert(
            "rebound".into(),
            serde_json::to_value(d).unwrap_or(Value::Null),
        );
    }
    body
}

/// Redacts every string in a JSON value: upstreams echo keys in error messages.
pub(crate) fn redact_json(value: &mut Value) {
    match value {
        Value::String(text) => {
            if let std::borrow::Cow::Owned(clean) = rebound_core::redact::redact(text) {
                *text = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_json),
        Value::Object(map) => map.values_mut().for_each(redact_json),
        _ => {}
    }
}

/// The body of an upstream's own error, with its strings redacted (an upstream may echo the
/// key rebound sent) and rebound's diagnostics added. A body that is not a JSON object is
/// wrapped in the protocol's shape, with the redacted excerpt as the message.
pub fn with_diagnostics(protocol: Protocol, upstream: &[u8], diagnostics: &Diagnostics) -> Bytes {
    match serde_json::from_slice::<Value>(upstream) {
        Ok(Value::Object(mut map)) => {
            map.values_mut().for_each(redact_json);
            map.insert(
                "rebound".into(),
                serde_json::to_value(diagnostics).unwrap_or(Value::Null),
            );
            Bytes::from(Value::Object(map).to_string())
        }
        _ => {
            let text = String::from_utf8_lossy(upstream);
            let message = diagnostics
                .error
                .clone()
                .unwrap_or_else(|| text.chars().take(512).collect());
            Bytes::from(error_body(protocol, "api_error", &message, Some(diagnostics)).to_string())
        }
    }
}

/// The protocol's in-stream error event (OpenAI: a `data:` error object; Anthropic:
/// `event: error`), carrying the diagnostics.
pub fn stream_error(
    protocol: Protocol,
    kind: &str,
    message: &str,
    rebound: Option<&Diagnostics>,
) -> Bytes {
    let body = error_body(protocol, kind, message, rebound);
    Bytes::from(match protocol {
        Protocol::OpenAi => format!("data: {body}\n\n"),
        Protocol::Anthropic => format!("event: error\ndata: {body}\n\n"),
    })
}

/// Where a committed Responses stream stood: the last `sequence_number` its client received
/// and the response `response.created` announced.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResponsesPlace<'a> {
    /// The last event's number.
    pub sequence_number: Option<u64>,
    /// The response.
    pub response: Option<&'a ResponseHead>,
    /// The upstream's own `error` event already went to the client.
    pub error_event_sent: bool,
}

/// The events that end a committed Responses stream after a failure, in the shapes the
/// OpenAI SDKs and Codex parse: an `error` event (`type`, `code`, `message`, `param`,
/// `sequence_number` at its top level; unless the upstream's own went already), then
/// `response.failed`, whose `response.error.code` Codex reads to decide what it tells the
/// user and whether it reconnects. Both are numbered after the last event the client
/// received and carry the diagnostics in `rebound`. Never a clean close (G4, G7).
pub fn responses_failure(
    kind: &str,
    message: &str,
    place: ResponsesPlace<'_>,
    rebound: Option<&Diagnostics>,
) -> Bytes {
    let diagnostics = rebound.map_or(Value::Null, |d| {
        serde_json::to_value(d).unwrap_or(Value::Null)
    });
    let mut next = place.sequence_number.map_or(0, |n| n + 1);
    let mut out = String::new();
    if !place.error_event_sent {
        let error = json!({
            "type": "error",
            "sequence_number": next,
            "code": kind,
            "message": message,
            "param": null,
            "rebound": diagnostics,
        });
        out.push_str(&format!("event: error\ndata: {error}\n\n"));
        next += 1;
    }
    let head = place.response.cloned().unwrap_or_default();
    let failed = json!({
        "type": "response.failed",
        "sequence_number": next,
        "response": {
            "id": head.id,
            "object": "response",
            "created_at": head.created_at,
            "status": "failed",
            "error": {"code": kind, "message": message},
            "incomplete_details": null,
            "instructions": null,
            "metadata": {},
            "model": head.model,
            "output": [],
            "parallel_tool_calls": true,
            "temperature": null,
            "tool_choice": "auto",
            "tools": [],
            "top_p": null,
        },
        "rebound": diagnostics,
    });
    out.push_str(&format!("event: response.failed\ndata: {failed}\n\n"));
    Bytes::from(out)
}

/// The message of a provider's error JSON (`message`, `error.message` or a Responses
/// `response.error.message`), bounded and redacted.
pub fn error_message(data: &str) -> Option<String> {
    let value = serde_json::from_str::<Value>(data).ok()?;
    let message = ["/message", "/error/message", "/response/error/message"]
        .iter()
        .find_map(|pointer| value.pointer(pointer).and_then(Value::as_str))
        .filter(|message| !message.is_empty())?;
    let bounded: String = message.chars().take(1024).collect();
    Some(rebound_core::redact::redact(&bounded).into_owned())
}

/// The HTTP status a provider answers a failure of this semantic code with, for one rebound
/// read inside a successful answer (a Responses `response.failed`, an in-stream error): a
/// quota or a rate limit is a 429, a malformed or refused request a 400 … `None` for codes
/// without one status (server failures keep rebound's 502).
pub fn status_for_code(code: &str) -> Option<u16> {
    Some(match code {
        "rate_limited" | "quota_exhausted" => 429,
        "invalid_request" | "context_overflow" | "content_filtered" => 400,
        "auth_failed" => 401,
        "billing" => 402,
        "permission_denied" | "region_unsupported" => 403,
        "model_not_found" => 404,
        "request_too_large" => 413,
        _ => return None,
    })
}

/// The error type a protocol uses for a class of failure.
pub fn kind_for(protocol: Protocol, class: &str, status: Option<u16>) -> &'static str {
    match (protocol, class, status) {
        (Protocol::Anthropic, "rate_limit", _) => "rate_limit_error",
        (Protocol::Anthropic, _, Some(529)) => "overloaded_error",
        (Protocol::Anthropic, _, _) => "api_error",
        (Protocol::OpenAi, "rate_limit", _) => "rate_limit_exceeded",
        (Protocol::OpenAi, _, _) => "server_error",
    }
}
