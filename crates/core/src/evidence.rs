//! What one failed attempt left behind.
//!
//! Evidence is the only input of classification. It is plain data, built by whoever saw the
//! failure (the runtime's HTTP client, the gateway, `rebound classify`) and never interpreted
//! here beyond normalising header names.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Bytes of body or message text that classification reads. Longer text is cut at a character
/// boundary at or below this bound before any rule sees it (C2).
pub const EVIDENCE_TEXT_LIMIT: usize = 4096;

/// When in the life of a request the failure happened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before the response is established: connect, send, status, headers, and every event
    /// before the first content-bearing one.
    #[default]
    Setup,
    /// After the first content-bearing event.
    Stream,
}

impl Phase {
    /// The wire name, as used in rule files and diagnostics.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Setup => "setup",
            Phase::Stream => "stream",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure below HTTP: the request never got a status, or its body broke off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TransportKind {
    /// The peer refused the connection.
    ConnectionRefused,
    /// The connection was reset or closed before a complete response.
    ConnectionReset,
    /// The host name could not be resolved.
    Dns,
    /// The TLS handshake or certificate check failed.
    Tls,
    /// Connecting took longer than the connect timeout.
    ConnectTimeout,
    /// No response (status line or first byte) within the request timeout.
    Timeout,
    /// A stream went quiet for longer than the allowed gap between events.
    IdleTimeout,
    /// A stream's headers came but no content (text, thinking, a tool call) within the
    /// first-content timeout: time to first token (S5).
    FirstContentTimeout,
    /// The body could not be decoded (bad gzip, invalid chunk framing, invalid UTF-8 in SSE).
    BodyDecode,
    /// The body ended before it was complete (a chunked stream without its last chunk).
    Truncated,
}

impl TransportKind {
    /// Every kind, in declaration order.
    pub const ALL: [TransportKind; 10] = [
        TransportKind::ConnectionRefused,
        TransportKind::ConnectionReset,
        TransportKind::Dns,
        TransportKind::Tls,
        TransportKind::ConnectTimeout,
        TransportKind::Timeout,
        TransportKind::IdleTimeout,
        TransportKind::FirstContentTimeout,
        TransportKind::BodyDecode,
        TransportKind::Truncated,
    ];

    /// The wire name, as used in rule files, flags and diagnostics.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::ConnectionRefused => "connection_refused",
            TransportKind::ConnectionReset => "connection_reset",
            TransportKind::Dns => "dns",
            TransportKind::Tls => "tls",
            TransportKind::ConnectTimeout => "connect_timeout",
            TransportKind::Timeout => "timeout",
            TransportKind::IdleTimeout => "idle_timeout",
            TransportKind::FirstContentTimeout => "first_content_timeout",
            TransportKind::BodyDecode => "body_decode",
            TransportKind::Truncated => "truncated",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<TransportKind> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Response headers with lower-cased names. A repeated header keeps its first value, which is
/// what retry hints and every rule want.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Headers(BTreeMap<String, String>);

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a header; the name is lower-cased and trimmed, the value trimmed. A name seen
    /// before keeps its first value.
    pub fn insert(&mut self, name: &str, value: &str) {
        let name = name.trim().to_ascii_lowercase();
        self.0
            .entry(name)
            .or_insert_with(|| value.trim().to_owned());
    }

    /// The value of a header, by case-insensitive name.
    pub fn get(&self, name: &str) -> Option<&str> {
        if name.bytes().any(|b| b.is_ascii_uppercase()) {
            self.0.get(&name.to_ascii_lowercase()).map(String::as_str)
        } else {
            self.0.get(name).map(String::as_str)
        }
    }

    /// All headers, by lower-cased name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'de> Deserialize<'de> for Headers {
    /// Accepts a map (`{"retry-after": "3"}`) or a list of pairs (`[["retry-after", "3"]]`).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Map(BTreeMap<String, String>),
            Pairs(Vec<(String, String)>),
        }
        let mut headers = Headers::new();
        match Wire::deserialize(deserializer)? {
            Wire::Map(map) => map.iter().for_each(|(k, v)| headers.insert(k, v)),
            Wire::Pairs(pairs) => pairs.iter().for_each(|(k, v)| headers.insert(k, v)),
        }
        Ok(headers)
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut headers = Headers::new();
        for (k, v) in iter {
            headers.insert(k.as_ref(), v.as_ref());
        }
        headers
    }
}

/// Everything one failed attempt left behind.
///
/// Every field is optional but `phase`: an HTTP failure has a status, headers and a body; a
/// transport failure has a kind and its message as `body`; an in-stream error event has its
/// error type as `sse_event` and its data as `body`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Evidence {
    /// The provider that answered (`openai`, `anthropic`, `gemini`, `azure`, `bedrock`,
    /// `openrouter`, `relay`, or any name a user's rules use). Lower-case.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// When the failure happened.
    pub phase: Phase,
    /// The HTTP status, when one arrived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Response headers, lower-cased names.
    #[serde(skip_serializing_if = "Headers::is_empty")]
    pub headers: Headers,
    /// Response body, error message or in-stream event data. Only the first
    /// [`EVIDENCE_TEXT_LIMIT`] bytes are read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The transport failure, when the request broke below HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<TransportKind>,
    /// The error type of an in-stream error event (Anthropic's `error.type`, OpenAI's
    /// `error.type` or `error.code`), e.g. `overloaded_error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sse_event: Option<String>,
    /// The invocation (attempt chain) that produced this evidence; evidence from another
    /// invocation than the one being decided is stale (C4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invocation: Option<String>,
}

impl Evidence {
    /// The body text as classification reads it: at most [`EVIDENCE_TEXT_LIMIT`] bytes, cut at
    /// a character boundary.
    pub fn bounded_text(&self) -> &str {
        bound_text(self.body.as_deref().unwrap_or(""), EVIDENCE_TEXT_LIMIT)
    }
}

/// The longest prefix of `text` of at most `limit` bytes that ends on a character boundary.
pub fn bound_text(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_are_case_insensitive_and_first_value_wins() {
        let headers: Headers = [("Retry-After", " 3 "), ("retry-after", "9")]
            .into_iter()
            .collect();
        assert_eq!(headers.get("retry-after"), Some("3"));
        assert_eq!(headers.get("RETRY-AFTER"), Some("3"));
    }

    #[test]
    fn headers_deserialize_from_map_or_pairs() {
        let map: Headers = serde_json::from_str(r#"{"X-Should-Retry":"false"}"#).unwrap();
        let pairs: Headers = serde_json::from_str(r#"[["X-Should-Retry","false"]]"#).unwrap();
        assert_eq!(map, pairs);
        assert_eq!(map.get("x-should-retry"), Some("false"));
    }

    #[test]
    fn text_is_bounded_at_a_char_boundary() {
        let text = "é".repeat(EVIDENCE_TEXT_LIMIT);
        let evidence = Evidence {
            body: Some(text),
            ..Evidence::default()
        };
        let bounded = evidence.bounded_text();
        assert!(bounded.len() <= EVIDENCE_TEXT_LIMIT);
        assert_eq!(bounded.len(), EVIDENCE_TEXT_LIMIT);
        assert_eq!(bound_text("abc", 2), "ab");
        assert_eq!(bound_text("aé", 2), "a");
    }

    #[test]
    fn unknown_evidence_fields_are_refused() {
        let err = serde_json::from_str::<Evidence>(r#"{"stauts":429}"#).unwrap_err();
        assert!(err.to_string().contains("stauts"), "{err}");
    }

    #[test]
    fn transport_kinds_round_trip() {
        for kind in TransportKind::ALL {
            assert_eq!(TransportKind::parse(kind.as_str()), Some(kind));
        }
    }
}
