//! The requests chaos received, for tests of what a gateway forwards.

use bytes::Bytes;

/// One request as chaos received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The method, e.g. `POST`.
    pub method: String,
    /// The path with its query string, e.g. `/v1/messages/count_tokens?beta=true`.
    pub path: String,
    /// The headers in arrival order, names in lower case, values as text (lossy).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Bytes,
}

impl RecordedRequest {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body's length in bytes.
    pub fn body_len(&self) -> usize {
        self.body.len()
    }
}
