//! A success in another format than the protocol's (C5): an HTML page where the API's JSON or
//! event stream was expected (the base URL names a website, a web app's front end that answers
//! every path, or a network's sign-in page), or one JSON body where a stream was asked for that
//! is no answer of the API (an error written as a body rather than an event, another API's
//! answer). The API's own answer in the other form is the answer ([`crate::form`]).
//!
//! Read as a broken answer, such a success was retried like a cut body, minutes of waits on a
//! page that answers the same every time. A page is told by its content type or its first
//! bytes. One JSON body to a stream request is told by its content alone, once the body ended
//! without an event: some servers label a real event stream `application/json`. Their evidence
//! carries the words the catalogue reads (`transport.html_page_answer`,
//! `transport.json_answer_to_stream`), and a JSON body's own error, if it holds one, for the
//! rules that know it.

use http::{HeaderMap, StatusCode, header};
use rebound_core::{Evidence, Phase, TransportKind};

use crate::attempt::{evidence_headers, transport_evidence};
use crate::http::TransportFailure;

/// The media type of `headers`' content type, without its parameters (asked of every stream's
/// head, so it allocates nothing).
fn media_type(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    Some(value.split(';').next()?.trim())
}

/// Whether a body's first bytes are markup (`<!DOCTYPE html>`, `<html>`, `<head>`), after
/// any whitespace or byte-order mark.
fn starts_as_html(body: &[u8]) -> bool {
    let body = body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body);
    let start = body.iter().position(|b| !b.is_ascii_whitespace());
    let Some(rest) = start.map(|i| &body[i..]) else {
        return false;
    };
    let head = &rest[..rest.len().min(16)];
    let lower = head.to_ascii_lowercase();
    [b"<!doctype html".as_slice(), b"<html", b"<head", b"<body"]
        .iter()
        .any(|tag| lower.starts_with(tag))
}

/// Whether a stream's head says its body is a web page: no stream to wait for. Any other
/// content type is read as the stream it should be; a body that then holds no event is told
/// by [`unframed`].
pub fn page_head(headers: &HeaderMap) -> bool {
    media_type(headers).is_some_and(|t| {
        t.eq_ignore_ascii_case("text/html") || t.eq_ignore_ascii_case("application/xhtml+xml")
    })
}

/// Whether a whole (non-streaming) success that is not the protocol's JSON is a web page.
pub fn is_page(headers: &HeaderMap, body: &[u8]) -> bool {
    page_head(headers) || starts_as_html(body)
}

/// The longest page title quoted.
const TITLE_CHARS: usize = 80;

/// A page's `<title>`, trimmed and cut, if it has one.
fn title(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(&body[..body.len().min(16 << 10)]);
    let lower = text.to_ascii_lowercase();
    let open = lower.find("<title")?;
    let start = open + lower[open..].find('>')? + 1;
    let end = start + lower[start..].find("</title")?;
    let title: String = text[start..end]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if title.is_empty() {
        return None;
    }
    Some(match title.char_indices().nth(TITLE_CHARS) {
        Some((cut, _)) => format!("{}…", &title[..cut]),
        None => title,
    })
}

/// The message for a success that is a web page where `expected` (the API's JSON, an event
/// stream) was due.
pub fn page_message(status: StatusCode, body: &[u8], expected: &str) -> String {
    let titled = title(body).map_or_else(String::new, |t| format!(" titled '{t}'"));
    format!(
        "a {} answer that is an HTML page{titled}, not {expected}: does the base URL name a \
         website or a web app's front end, or is the network asking to sign in? ({} bytes)",
        status.as_u16(),
        body.len()
    )
}

/// Whether a body's first bytes are an event stream's (`data:`, `event:`, `id:` or a comment).
fn starts_as_stream(body: &[u8]) -> bool {
    let start = body.iter().position(|b| !b.is_ascii_whitespace());
    let rest = start.map_or(&b""[..], |i| &body[i..]);
    [b"data:".as_slice(), b"event:", b"id:", b":"]
        .iter()
        .any(|field| rest.starts_with(field))
}

/// The message for a whole (non-streaming) success whose body is not `expected` (the API's
/// JSON): a web page and an event stream (one the API's own stream would have been gathered
/// into its answer) are said to be one, any other body is described by its size.
pub fn not_json_message(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    expected: &str,
) -> String {
    if is_page(headers, body) {
        page_message(status, body, expected)
    } else if media_type(headers).is_some_and(|t| t.eq_ignore_ascii_case("text/event-stream"))
        || starts_as_stream(body)
    {
        format!(
            "a {} answer that is an event stream, not {expected} nor its stream: does the base \
             URL name a server of another API? ({} bytes)",
            status.as_u16(),
            body.len()
        )
    } else {
        format!(
            "a {} answer whose body is not {expected} ({} bytes)",
            status.as_u16(),
            body.len()
        )
    }
}

/// The evidence of a stream request's success that is a web page (a prefix of it is enough):
/// a broken answer, in the catalogue's words for a page.
pub fn page_evidence(provider: &str, status: StatusCode, body: &[u8]) -> Evidence {
    transport_evidence(
        provider,
        TransportFailure {
            kind: TransportKind::BodyDecode,
            message: page_message(status, body, "an event stream"),
        },
        Phase::Setup,
    )
}

/// The evidence of a stream's body that ended without one event, when it is a page or one
/// JSON value; `None` for anything else (a stream cut before its first event). The JSON body
/// is read as the text it is, with no status (the 200 says nothing of an error it holds),
/// after words that say what came instead of the stream.
pub fn unframed(
    provider: &str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<Evidence> {
    if starts_as_html(body) {
        return Some(page_evidence(provider, status, body));
    }
    let json = serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|v| v.is_object() || v.is_array());
    json.then(|| Evidence {
        provider: Some(provider.to_owned()),
        headers: evidence_headers(headers),
        body: Some(format!(
            "a {} answer to a stream request that is one JSON body, not an event stream: {}",
            status.as_u16(),
            String::from_utf8_lossy(body)
        )),
        ..Evidence::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(content_type: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, content_type.parse().unwrap());
        h
    }

    #[test]
    fn a_stream_head_is_a_page_only_when_it_names_one() {
        assert!(page_head(&headers("text/html; charset=utf-8")));
        assert!(page_head(&headers(" Text/HTML ")));
        for stream in [
            "text/event-stream",
            "text/event-stream; charset=utf-8",
            "text/plain",
            "Application/JSON",
        ] {
            assert!(!page_head(&headers(stream)), "{stream}");
        }
        assert!(!page_head(&HeaderMap::new()));
    }

    #[test]
    fn a_page_is_told_by_its_type_or_its_first_bytes_and_named_by_its_title() {
        let page = b"\xef\xbb\xbf\n  <!DOCTYPE HTML><html><head><title>\n Sign in to\n Guest Wi-Fi </title>";
        assert!(is_page(&HeaderMap::new(), page));
        assert!(is_page(&headers("text/html"), b"oops"));
        assert!(!is_page(&headers("application/json"), b"{\"a\":"));
        assert!(!is_page(&HeaderMap::new(), b"<3 not a page"));
        assert_eq!(
            page_message(StatusCode::OK, page, "the API's JSON"),
            format!(
                "a 200 answer that is an HTML page titled 'Sign in to Guest Wi-Fi', not the \
                 API's JSON: does the base URL name a website or a web app's front end, or is \
                 the network asking to sign in? ({} bytes)",
                page.len()
            )
        );
        let long = format!("<html><title>{}</title>", "x".repeat(200));
        assert!(
            page_message(StatusCode::OK, long.as_bytes(), "JSON")
                .contains(&format!("titled '{}…'", "x".repeat(TITLE_CHARS)))
        );
        assert!(
            page_message(StatusCode::OK, b"<html><title></title>", "JSON").contains("page, not")
        );
    }

    #[test]
    fn a_whole_answer_that_is_not_json_says_what_it_is() {
        let said = |headers: &HeaderMap, body: &[u8]| {
            not_json_message(StatusCode::OK, headers, body, "the API's JSON")
        };
        assert!(
            said(&HeaderMap::new(), b"<html><title>Hi</title>")
                .contains("an HTML page titled 'Hi'")
        );
        for (headers, body) in [
            (HeaderMap::new(), &b"\ndata: {\"choices\":[]}\n\n"[..]),
            (HeaderMap::new(), b": keep-alive\n\n"),
            (headers("text/event-stream"), b"{}"),
        ] {
            assert!(
                said(&headers, body).starts_with(
                    "a 200 answer that is an event stream, not the API's JSON nor its stream: \
                     does the base URL name a server of another API?"
                ),
                "{body:?}"
            );
        }
        assert_eq!(
            said(&HeaderMap::new(), b"{\"cho"),
            "a 200 answer whose body is not the API's JSON (5 bytes)"
        );
    }

    #[test]
    fn a_body_without_an_event_is_told_by_its_content() {
        let none = HeaderMap::new();
        let json = unframed("openai", StatusCode::OK, &none, b" {\"error\":{}}\n").unwrap();
        assert!(
            json.body
                .unwrap()
                .contains("one JSON body, not an event stream")
        );
        let page = unframed("openai", StatusCode::OK, &none, b"<html><body>x").unwrap();
        assert_eq!(page.transport, Some(TransportKind::BodyDecode));
        for cut in [&b""[..], b"data: {\"choices\":[", b"\"text\"", b"42"] {
            assert!(
                unframed("openai", StatusCode::OK, &none, cut).is_none(),
                "{cut:?}"
            );
        }
    }

    #[test]
    fn one_json_body_to_a_stream_is_read_as_text_with_no_status_and_a_page_as_broken() {
        let body = br#"{"error":{"type":"overloaded_error"}}"#;
        let json = unframed(
            "anthropic",
            StatusCode::OK,
            &headers("application/json"),
            body,
        )
        .unwrap();
        assert_eq!(json.status, None, "a 200 says nothing of an error it holds");
        assert_eq!(json.transport, None);
        assert_eq!(
            json.body.as_deref(),
            Some(
                "a 200 answer to a stream request that is one JSON body, not an event stream: \
                 {\"error\":{\"type\":\"overloaded_error\"}}"
            )
        );
        let page = page_evidence("openai", StatusCode::OK, b"<html><title>Hi</title>");
        assert_eq!(page.transport, Some(TransportKind::BodyDecode));
        assert!(page.body.as_deref().is_some_and(|b| {
            b.starts_with("a 200 answer that is an HTML page titled 'Hi', not an event stream")
        }));
    }
}
