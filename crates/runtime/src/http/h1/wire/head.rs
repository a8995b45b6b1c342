//! Heads: the request head rebound writes, the response head it reads, and what a response
//! head says about its body's framing and its connection.

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, Version, header};

use super::{Framing, WireError};

/// The largest response head (status line and headers) accepted.
pub const MAX_HEAD: usize = 64 << 10;

/// The most headers a response head may have.
const MAX_HEADERS: usize = 128;

/// Writes the head of a request with a body of `body_len` bytes: the request line, the headers
/// (a `host` from the URI when there is none; framing headers are rebound's own), and a
/// `content-length` unless it is a body-less `GET` or `HEAD`. The buffer has `room` bytes of
/// capacity to spare at its end, for a body that goes out in the same write.
pub fn encode_request_head(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body_len: usize,
    room: usize,
) -> Vec<u8> {
    let target = match uri.path_and_query().map(http::uri::PathAndQuery::as_str) {
        Some(target) if !target.is_empty() => target,
        _ => "/",
    };
    let size: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    // The request line's and host's lengths, the headers', and 64 for the fixed text and the
    // content-length line.
    let host = uri.authority().map_or(0, |a| a.as_str().len());
    let mut out =
        Vec::with_capacity(method.as_str().len() + target.len() + host + size + 64 + room);
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if !headers.contains_key(header::HOST)
        && let Some(host) = uri.host()
    {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(host.as_bytes());
        let default_port = if uri.scheme() == Some(&http::uri::Scheme::HTTPS) {
            443
        } else {
            80
        };
        if let Some(port) = uri.port_u16().filter(|&p| p != default_port) {
            out.extend_from_slice(format!(":{port}").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in headers {
        if name == header::CONTENT_LENGTH
            || name == header::TRANSFER_ENCODING
            || name == header::CONNECTION
        {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if body_len > 0 || !(method == Method::GET || method == Method::HEAD) {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(body_len.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// A parsed response head.
#[derive(Debug)]
pub struct ResponseHead {
    /// The status.
    pub status: StatusCode,
    /// HTTP/1.1 or HTTP/1.0.
    pub version: Version,
    /// The headers, copied out of the read buffer.
    pub headers: HeaderMap,
}

impl ResponseHead {
    /// An interim (1xx) response that a final one follows. `101 Switching Protocols` is not
    /// one: rebound never asks to switch.
    pub fn is_interim(&self) -> bool {
        self.status.is_informational() && self.status != StatusCode::SWITCHING_PROTOCOLS
    }

    /// How the body is delimited, for a response to a request with this method.
    pub fn framing(&self, method: &Method) -> Result<Framing, WireError> {
        if method == Method::HEAD
            || self.status.is_informational()
            || self.status == StatusCode::NO_CONTENT
            || self.status == StatusCode::NOT_MODIFIED
        {
            return Ok(Framing::Empty);
        }
        if self.headers.contains_key(header::TRANSFER_ENCODING) {
            let last = self
                .headers
                .get_all(header::TRANSFER_ENCODING)
                .iter()
                .flat_map(|v| v.as_bytes().split(|&b| b == b','))
                .map(<[u8]>::trim_ascii)
                .rfind(|coding| !coding.is_empty());
            return Ok(match last {
                Some(coding) if coding.eq_ignore_ascii_case(b"chunked") => Framing::Chunked,
                // Any other last coding: the body runs to the end of the connection.
                _ => Framing::Close,
            });
        }
        let mut length: Option<u64> = None;
        for value in self.headers.get_all(header::CONTENT_LENGTH) {
            for part in value.as_bytes().split(|&b| b == b',') {
                let part = part.trim_ascii();
                let parsed = parse_decimal(part).ok_or_else(|| {
                    WireError::new(format!(
                        "invalid content-length header `{}`",
                        String::from_utf8_lossy(value.as_bytes())
                    ))
                })?;
                match length {
                    Some(seen) if seen != parsed => {
                        return Err(WireError::new(format!(
                            "content-length headers disagree ({seen} and {parsed})"
                        )));
                    }
                    _ => length = Some(parsed),
                }
            }
        }
        Ok(length.map_or(Framing::Close, Framing::Length))
    }

    /// Whether the connection may carry another request after this response (given a body
    /// that is read to its end).
    pub fn keep_alive(&self) -> bool {
        self.version == Version::HTTP_11
            && !self
                .headers
                .get_all(header::CONNECTION)
                .iter()
                .flat_map(|v| v.as_bytes().split(|&b| b == b','))
                .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
            // Both framings at once is a response to distrust: never reused.
            && !(self.headers.contains_key(header::TRANSFER_ENCODING)
                && self.headers.contains_key(header::CONTENT_LENGTH))
    }
}

fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Parses a response head at the start of `buf`: `Ok(None)` while it is incomplete, else the
/// head and its length in bytes.
pub fn parse_response_head(buf: &[u8]) -> Result<Option<(ResponseHead, usize)>, WireError> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut slots);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return Err(WireError::new(format!(
                "the response head is larger than {} KiB",
                MAX_HEAD >> 10
            )));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(WireError::new(format!(
                "the response has more than {MAX_HEADERS} headers"
            )));
        }
        Err(e) => return Err(WireError::new(format!("malformed response head: {e}"))),
    };
    if len > MAX_HEAD {
        return Err(WireError::new(format!(
            "the response head is larger than {} KiB",
            MAX_HEAD >> 10
        )));
    }
    let status = response
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or_else(|| WireError::new("malformed response head: invalid status code"))?;
    let version = match response.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let mut headers = HeaderMap::with_capacity(response.headers.len());
    for h in response.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| WireError::new(format!("invalid response header name `{}`", h.name)))?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|_| WireError::new(format!("invalid value of response header `{name}`")))?;
        headers.append(name, value);
    }
    Ok(Some((
        ResponseHead {
            status,
            version,
            headers,
        },
        len,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> ResponseHead {
        match parse_response_head(text.as_bytes()) {
            Ok(Some((head, len))) => {
                assert_eq!(len, text.len());
                head
            }
            other => panic!("no head: {other:?}"),
        }
    }

    #[test]
    fn request_heads_carry_host_length_and_the_callers_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer k"));
        headers.insert("content-length", HeaderValue::from_static("999"));
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        let uri: Uri = "http://127.0.0.1:8080/v1/chat/completions?x=1"
            .parse()
            .unwrap();
        let head = encode_request_head(&Method::POST, &uri, &headers, 12, 12);
        // The body fits in behind the head without the buffer growing, long host or not.
        assert!(head.capacity() - head.len() >= 12);
        let long: Uri =
            "https://a-rather-long-resource-name-for-a-deployment.openai.azure.com:8443\
                         /openai/deployments/x/chat/completions?api-version=2024-10-21"
                .parse()
                .unwrap();
        let long_head = encode_request_head(&Method::POST, &long, &HeaderMap::new(), 9, 300);
        assert!(long_head.capacity() - long_head.len() >= 300);
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: 127.0.0.1:8080\r\n\
             authorization: Bearer k\r\ncontent-length: 12\r\n\r\n"
        );
        let uri: Uri = "https://api.example.com".parse().unwrap();
        let head = encode_request_head(&Method::GET, &uri, &HeaderMap::new(), 0, 0);
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET / HTTP/1.1\r\nhost: api.example.com\r\n\r\n"
        );
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("upstream.example"));
        let uri: Uri = "https://api.example.com:443/v1/models".parse().unwrap();
        let head = encode_request_head(&Method::GET, &uri, &headers, 0, 0);
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /v1/models HTTP/1.1\r\nhost: upstream.example\r\n\r\n"
        );
    }

    #[test]
    fn heads_parse_whole_or_wait_for_more() {
        let text = "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nX-A: 1\r\nx-a: 2\r\n\r\n";
        let parsed = head(text);
        assert_eq!(parsed.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(parsed.headers["retry-after"], "3");
        assert_eq!(parsed.headers.get_all("x-a").iter().count(), 2);
        for cut in 0..text.len() {
            assert!(
                matches!(parse_response_head(&text.as_bytes()[..cut]), Ok(None)),
                "{cut}"
            );
        }
        let with_body = format!("{text}body");
        assert_eq!(
            parse_response_head(with_body.as_bytes())
                .unwrap()
                .unwrap()
                .1,
            text.len()
        );
    }

    #[test]
    fn bad_heads_are_named() {
        let err = |text: &[u8]| parse_response_head(text).unwrap_err().to_string();
        assert!(err(b"HTTP/1.1 2000 OK\r\n\r\n").starts_with("malformed response head"));
        assert!(err(b"SMTP ready\r\n\r\n").starts_with("malformed response head"));
        let many = format!("HTTP/1.1 200 OK\r\n{}\r\n", "a: b\r\n".repeat(200));
        assert_eq!(
            err(many.as_bytes()),
            "the response has more than 128 headers"
        );
        let huge = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD + 1));
        assert_eq!(
            err(huge.as_bytes()),
            "the response head is larger than 64 KiB"
        );
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let post = Method::POST;
        let framing = |text: &str| head(text).framing(&post);
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"),
            Ok(Framing::Length(5))
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\ncontent-length: 5\r\n\r\n"),
            Ok(Framing::Length(5))
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n")
                .unwrap_err()
                .to_string(),
            "content-length headers disagree (5 and 6)"
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n")
                .unwrap_err()
                .to_string(),
            "invalid content-length header `-1`"
        );
        assert_eq!(
            framing(
                "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, Chunked\r\ncontent-length: 3\r\n\r\n"
            ),
            Ok(Framing::Chunked)
        );
        assert_eq!(
            framing("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n"),
            Ok(Framing::Close)
        );
        assert_eq!(framing("HTTP/1.1 200 OK\r\n\r\n"), Ok(Framing::Close));
        assert_eq!(
            framing("HTTP/1.1 204 No Content\r\ncontent-length: 3\r\n\r\n"),
            Ok(Framing::Empty)
        );
        assert_eq!(
            head("HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n").framing(&Method::HEAD),
            Ok(Framing::Empty)
        );
        assert!(head("HTTP/1.1 100 Continue\r\n\r\n").is_interim());
        assert!(!head("HTTP/1.1 101 Switching Protocols\r\n\r\n").is_interim());
    }

    #[test]
    fn keep_alive_needs_http_1_1_without_close_or_mixed_framing() {
        assert!(head("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").keep_alive());
        assert!(!head("HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\n\r\n").keep_alive());
        assert!(!head("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n").keep_alive());
        assert!(
            !head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n")
                .keep_alive()
        );
    }
}
