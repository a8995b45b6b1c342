//! Gateway keys (G5): with any configured, a request must present one, as
//! `authorization: Bearer KEY` or `x-api-key: KEY`.

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

/// Whether a request may pass: no gateway key is configured, or it presents one of them.
pub(crate) fn authorized(gateway_keys: &[String], headers: &HeaderMap) -> bool {
    if gateway_keys.is_empty() {
        return true;
    }
    let Some(presented) = presented_key(headers) else {
        return false;
    };
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
