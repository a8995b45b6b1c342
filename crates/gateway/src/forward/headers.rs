//! Headers on both sides of a forwarded request: what is relayed, rebound's own (G6), and copies
//! that share no memory with a connection's read buffer.

use std::borrow::Cow;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, header};

use rebound_core::redact::secrets::{self, Secrets};

use crate::config::{Candidate, Route};
use crate::state::Gateway;

/// Request headers never forwarded upstream.
const HOP_BY_HOP: [&str; 11] = [
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "accept-encoding",
];

/// Credential headers, replaced by the candidate's key when it has one.
const AUTH_HEADERS: [&str; 3] = ["authorization", "x-api-key", "api-key"];

/// The client's request headers as they go to `candidate`: without hop-by-hop headers and
/// rebound's own (`x-rebound-*`), with the candidate's `Host` and credential. The client's
/// credential goes along only when the candidate has no key of its own and no gateway key is
/// configured (then it is the provider's key, not rebound's). Under gateway keys no client
/// credential goes at all: every header of [`crate::config::CLIENT_CREDENTIAL_HEADERS`] and
/// those the configuration names (`strip_headers`) stay with rebound.
pub(crate) fn forwarded_headers(
    headers: &mut HeaderMap,
    client: &HeaderMap,
    candidate: &Candidate,
    key: usize,
    gateway: &Gateway,
) {
    let strip_auth = candidate.api_key.is_some();
    let config = &gateway.config;
    // Room for the client's headers and the few added here, so the map grows at most once.
    headers.reserve(client.len() + 4);
    for (name, value) in client {
        let name_str = name.as_str();
        if HOP_BY_HOP.contains(&name_str) || name_str.starts_with("x-rebound-") {
            continue;
        }
        if (strip_auth && AUTH_HEADERS.contains(&name_str)) || config.strips(name) {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    if let Some(host) = candidate.host() {
        headers.insert(header::HOST, host);
    }
    candidate.authorize_with(headers, key);
}

/// Upstream response headers a client may see; `detach`ed (see [`super::detached`]) when
/// they will wait for a stream's commit point.
/// A value that holds a key rebound holds is redacted (an upstream may echo it).
pub(crate) fn relayable(upstream: &HeaderMap, detach_values: bool) -> HeaderMap {
    let secrets = secrets::known();
    // Room for the `x-rebound-*` headers added next.
    let mut out = HeaderMap::with_capacity(upstream.len() + 3);
    for (name, value) in upstream {
        if HOP_BY_HOP.contains(&name.as_str()) || name == header::CONTENT_ENCODING {
            continue;
        }
        let value = match without_secrets(value, &secrets) {
            Some(clean) => clean,
            None if detach_values => detach(value),
            None => value.clone(),
        };
        out.append(name.clone(), value);
    }
    out
}

/// `value` with every key of `secrets` redacted, when it holds one. Only by value: a header's
/// shape-like text (a signed URL's `sig=`) is the client's to have.
fn without_secrets(value: &HeaderValue, secrets: &Secrets) -> Option<HeaderValue> {
    if secrets.is_empty() {
        return None;
    }
    let text = String::from_utf8_lossy(value.as_bytes());
    match secrets.redact(&text) {
        Cow::Borrowed(_) => None,
        Cow::Owned(clean) => Some(
            HeaderValue::from_str(&clean)
                .unwrap_or(HeaderValue::from_static(rebound_core::redact::REDACTED)),
        ),
    }
}

/// Copies of header values that share no memory with the connection's read buffer.
///
/// hyper hands out header values and small bodies as slices of the connection's read buffer;
/// one kept for the life of a stream pins that whole buffer and makes the connection allocate
/// another for its next read. A stream held open for minutes keeps only what it needs.
pub(crate) fn detached(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        out.append(name.clone(), detach(value));
    }
    out
}

/// One header value, copied out of whatever buffer it shares (see [`detached`]).
pub(crate) fn detach(value: &HeaderValue) -> HeaderValue {
    let mut copy = HeaderValue::from_maybe_shared(Bytes::copy_from_slice(value.as_bytes()))
        .unwrap_or_else(|_| value.clone());
    copy.set_sensitive(value.is_sensitive());
    copy
}

/// A request body that shares no memory with the connection's read buffer (see [`detached`]).
/// Bodies larger than a read buffer were already gathered into their own allocation.
pub(crate) fn detached_body(body: Bytes) -> Bytes {
    if body.len() <= 64 << 10 {
        Bytes::copy_from_slice(&body)
    } else {
        body
    }
}

/// The upstream's response headers a give-up keeps (G10): when to come back, which request
/// failed, and the rate-limit state. Everything else of a failed attempt's head (its length,
/// encoding, connection and cookies) belonged to that attempt's body, which rebound rewrites.
const KEPT_ON_GIVE_UP: [&str; 4] = [
    "retry-after",
    "retry-after-ms",
    "x-request-id",
    "request-id",
];

/// The prefixes of the rate-limit headers a give-up keeps (G10).
const KEPT_PREFIXES_ON_GIVE_UP: [&str; 2] = ["x-ratelimit-", "anthropic-ratelimit-"];

/// The headers of a failed attempt's response that rebound's final error keeps (G10).
pub(super) fn kept_on_give_up(upstream: &HeaderMap) -> HeaderMap {
    let secrets = secrets::known();
    let mut kept = HeaderMap::new();
    for (name, value) in upstream {
        let name_str = name.as_str();
        if KEPT_ON_GIVE_UP.contains(&name_str)
            || KEPT_PREFIXES_ON_GIVE_UP
                .iter()
                .any(|prefix| name_str.starts_with(prefix))
        {
            let value = without_secrets(value, &secrets).unwrap_or_else(|| detach(value));
            kept.append(name.clone(), value);
        }
    }
    kept
}

/// The header the official OpenAI and Anthropic SDKs read before any retry of their own.
pub(super) const SHOULD_RETRY: &str = "x-should-retry";

/// Marks a response as rebound's give-up (G10): the client must not start rebound's loop
/// over, so `x-should-retry: false`, whatever the upstream said.
pub(super) fn give_up(headers: &mut HeaderMap) {
    headers.insert(
        HeaderName::from_static(SHOULD_RETRY),
        HeaderValue::from_static("false"),
    );
}

/// rebound's response headers (G6), and the name each has in [`final_figures`].
const REBOUND_HEADERS: [(&str, &str); 3] = [
    ("x-rebound-attempts", "attempts"),
    ("x-rebound-candidate", "candidate"),
    ("x-rebound-route-id", "route"),
];

/// `x-rebound-attempts`, `x-rebound-candidate` and `x-rebound-route-id` (G6).
pub(crate) fn rebound_headers(
    headers: &mut HeaderMap,
    attempts: u32,
    candidate: &Candidate,
    route: &Route,
) {
    let [attempts_name, candidate_name, route_name] = REBOUND_HEADERS.map(|(name, _)| name);
    headers.insert(
        HeaderName::from_static(attempts_name),
        count_header(attempts),
    );
    headers.insert(
        HeaderName::from_static(candidate_name),
        candidate.id_header(),
    );
    headers.insert(HeaderName::from_static(route_name), route.id_header());
}

/// The header that names the candidates a request passed over because they rested in the
/// shared health ledger (S2), in order: `x-rebound-skipped: primary,secondary`.
pub(super) const SKIPPED: &str = "x-rebound-skipped";

/// The header that says the upstream answered in the other form and rebound told its answer
/// in the form asked for: `x-rebound-retold: stream` (a whole answer told as the API's
/// stream) or `x-rebound-retold: whole` (a stream gathered into the API's whole answer).
pub(super) const RETOLD: HeaderName = HeaderName::from_static("x-rebound-retold");

/// `skipped` with candidate `id` added.
pub(super) fn skip(skipped: Option<HeaderValue>, id: &str) -> Option<HeaderValue> {
    let list = match skipped.as_ref().and_then(|v| v.to_str().ok()) {
        Some(list) => format!("{list},{id}"),
        None => id.to_owned(),
    };
    HeaderValue::from_str(&list).ok().or(skipped)
}

/// Adds `x-rebound-skipped` when the request passed a candidate over.
pub(super) fn skipped_header(headers: &mut HeaderMap, skipped: Option<&HeaderValue>) {
    if let Some(value) = skipped {
        headers.insert(HeaderName::from_static(SKIPPED), value.clone());
    }
}

/// rebound's headers of the attempt that reached content, as an SSE comment: for a stream
/// the countdown committed earlier, whose headers counted only the attempts made by then.
/// `: rebound attempts=3 candidate=backup route=default`
pub(super) fn final_figures(headers: &HeaderMap) -> Bytes {
    let mut line = String::from(": rebound");
    for (header, name) in REBOUND_HEADERS {
        if let Some(value) = headers.get(header).and_then(|v| v.to_str().ok()) {
            line.push(' ');
            line.push_str(name);
            line.push('=');
            line.push_str(value);
        }
    }
    line.push_str("\n\n");
    Bytes::from(line)
}

const DIGITS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];

/// A count as a header value; the usual small ones without an allocation.
fn count_header(n: u32) -> HeaderValue {
    match count_text(n) {
        Cow::Borrowed(digit) => HeaderValue::from_static(digit),
        Cow::Owned(_) => HeaderValue::from(n),
    }
}

/// A count as text; the usual small ones without an allocation.
fn count_text(n: u32) -> Cow<'static, str> {
    match DIGITS.get(n as usize) {
        Some(digit) => Cow::Borrowed(digit),
        None => Cow::Owned(n.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::{HeaderMap, HeaderValue};

    fn inside(buffer: &Bytes, bytes: &[u8]) -> bool {
        buffer.as_ptr_range().contains(&bytes.as_ptr())
    }

    #[test]
    fn a_give_up_keeps_when_to_come_back_which_request_and_the_rate_limits_only() {
        let mut upstream = HeaderMap::new();
        for (name, value) in [
            ("retry-after", "7"),
            ("retry-after-ms", "6500"),
            ("x-request-id", "req_1"),
            ("request-id", "req_2"),
            ("x-ratelimit-remaining-requests", "0"),
            ("anthropic-ratelimit-tokens-reset", "2026-12-01T07:00:00Z"),
            ("x-should-retry", "true"),
            ("content-length", "12"),
            ("set-cookie", "a=b"),
            ("content-type", "application/json"),
        ] {
            upstream.append(name, HeaderValue::from_static(value));
        }
        let mut kept = super::kept_on_give_up(&upstream);
        let mut names: Vec<&str> = kept.keys().map(http::HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "anthropic-ratelimit-tokens-reset",
                "request-id",
                "retry-after",
                "retry-after-ms",
                "x-ratelimit-remaining-requests",
                "x-request-id",
            ]
        );
        assert_eq!(kept["retry-after-ms"], "6500");
        super::give_up(&mut kept);
        assert_eq!(kept["x-should-retry"], "false");
    }

    #[test]
    fn counts_read_the_same_in_headers_and_logs() {
        for n in [0, 1, 9, 10, 12, 4_000_000_000] {
            assert_eq!(super::count_header(n), n.to_string().as_str());
            assert_eq!(super::count_text(n), n.to_string());
        }
    }

    #[test]
    fn detached_headers_and_small_bodies_share_nothing_with_the_read_buffer() {
        let buffer = Bytes::from(b"x-api-key: secret-value\r\n{\"model\":\"m\"}".to_vec());
        let mut headers = HeaderMap::new();
        let mut value = HeaderValue::from_maybe_shared(buffer.slice(11..23)).unwrap();
        value.set_sensitive(true);
        headers.insert("x-api-key", value);
        assert!(inside(&buffer, headers["x-api-key"].as_bytes()));

        let copy = super::detached(&headers);
        assert_eq!(copy["x-api-key"], "secret-value");
        assert!(copy["x-api-key"].is_sensitive());
        assert!(!inside(&buffer, copy["x-api-key"].as_bytes()));

        let body = super::detached_body(buffer.slice(25..));
        assert_eq!(&body[..], b"{\"model\":\"m\"}");
        assert!(!inside(&buffer, &body));
    }
}
