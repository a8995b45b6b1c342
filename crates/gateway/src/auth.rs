//! Gateway keys (G5): with any configured, a request must present one, as
//! `authorization: Bearer KEY` or `x-api-key: KEY`. The status page, which a browser opens
//! without such headers, also takes the key from its HttpOnly cookie ([`KEY_COOKIE`]).

use http::{HeaderMap, HeaderValue, header};
use subtle::ConstantTimeEq;

/// The key a request presents, if any.
fn presented_key(headers: &HeaderMap) -> Option<&[u8]> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let bytes = value.as_bytes();
        if bytes.len() > 7 && bytes[..7].eq_ignore_ascii_case(b"bearer ") {
            return Some(&bytes[7..]);
        }
    }
    headers.get("x-api-key").map(HeaderValue::as_bytes)
}

/// The cookie the status page's login sets: the gateway key, percent-encoded.
pub(crate) const KEY_COOKIE: &str = "rebound_key";

/// Whether a request may pass: no gateway key is configured, or it presents one of them.
pub(crate) fn authorized(gateway_keys: &[String], headers: &HeaderMap) -> bool {
    if gateway_keys.is_empty() {
        return true;
    }
    presented_key(headers).is_some_and(|presented| accepted(gateway_keys, presented))
}

/// Whether a browser request of the status page may pass: [`authorized`], or its
/// [`KEY_COOKIE`] holds a gateway key.
pub(crate) fn authorized_page(gateway_keys: &[String], headers: &HeaderMap) -> bool {
    authorized(gateway_keys, headers)
        || headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .filter(|(name, _)| *name == KEY_COOKIE)
            .any(|(_, value)| {
                let key: Vec<u8> = percent_encoding::percent_decode_str(value).collect();
                accepted(gateway_keys, &key)
            })
}

/// Whether `presented` is one of the gateway keys.
pub(crate) fn accepted(gateway_keys: &[String], presented: &[u8]) -> bool {
    // Every key is compared, in constant time, whatever the result: timing tells nothing.
    gateway_keys
        .iter()
        .fold(subtle::Choice::from(0), |ok, key| {
            ok | key.as_bytes().ct_eq(presented)
        })
        .into()
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue};

    use super::authorized;

    fn headers(name: &'static str, value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn the_page_also_takes_the_key_from_its_cookie() {
        let keys = vec!["gw one;=".to_owned()];
        let page = |cookie: &'static str| super::authorized_page(&keys, &headers("cookie", cookie));
        assert!(page("theme=dark; rebound_key=gw%20one%3B%3D"));
        assert!(!page("rebound_key=gw%20one"));
        assert!(!page("other=gw%20one%3B%3D"));
        assert!(!authorized(
            &keys,
            &headers("cookie", "rebound_key=gw%20one%3B%3D")
        ));
    }

    #[test]
    fn a_configured_key_must_be_presented_exactly() {
        let keys = vec!["gw-one".to_owned(), "gw-two".to_owned()];
        assert!(authorized(
            &keys,
            &headers("authorization", "Bearer gw-two")
        ));
        assert!(authorized(
            &keys,
            &headers("authorization", "bearer gw-one")
        ));
        assert!(authorized(&keys, &headers("x-api-key", "gw-one")));
        assert!(!authorized(&keys, &headers("x-api-key", "gw-on")));
        assert!(!authorized(&keys, &headers("x-api-key", "gw-one2")));
        assert!(!authorized(&keys, &headers("authorization", "gw-one")));
        assert!(!authorized(&keys, &HeaderMap::new()));
        assert!(authorized(&[], &HeaderMap::new()));
    }
}
