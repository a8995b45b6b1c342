//! Who is calling: an Anthropic client or an OpenAI one. It decides the shape of rebound's own
//! errors and 404s (G10) and which provider a passed-through path goes to (G8).

use http::HeaderMap;
use rebound_runtime::Protocol;

/// The caller's protocol: Anthropic when the request carries `anthropic-version` or
/// `x-api-key` (every Anthropic SDK sends one of them, no OpenAI SDK does) or asks for an
/// Anthropic path (`/v1/messages…`, `/v1/complete`); OpenAI otherwise.
pub(crate) fn protocol(path: &str, headers: &HeaderMap) -> Protocol {
    let anthropic_path =
        path == "/v1/messages" || path.starts_with("/v1/messages/") || path == "/v1/complete";
    if anthropic_path
        || headers.contains_key("anthropic-version")
        || headers.contains_key("x-api-key")
    {
        Protocol::Anthropic
    } else {
        Protocol::OpenAi
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue};
    use rebound_runtime::Protocol;

    use super::protocol;

    #[test]
    fn anthropic_callers_are_known_by_their_headers_or_paths() {
        let none = HeaderMap::new();
        assert_eq!(protocol("/v1/models", &none), Protocol::OpenAi);
        assert_eq!(protocol("/v1/files", &none), Protocol::OpenAi);
        assert_eq!(protocol("/v1/messages", &none), Protocol::Anthropic);
        assert_eq!(
            protocol("/v1/messages/count_tokens", &none),
            Protocol::Anthropic
        );
        assert_eq!(protocol("/v1/messagesx", &none), Protocol::OpenAi);
        for name in ["anthropic-version", "x-api-key"] {
            let mut headers = HeaderMap::new();
            headers.insert(name, HeaderValue::from_static("v"));
            assert_eq!(protocol("/v1/models", &headers), Protocol::Anthropic);
        }
    }
}
