//! Reading just enough of a request body: the top-level `model` and `stream`, and rewriting
//! `model` in place so every other byte is forwarded untouched (G1).

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;

/// What the gateway needs to know about a request.
#[derive(Debug, Deserialize)]
pub struct Peek<'a> {
    /// The model asked for: borrowed from the body unless it holds escapes.
    #[serde(borrow, default, deserialize_with = "borrowed")]
    pub model: Option<Cow<'a, str>>,
    /// Whether the client wants a stream.
    #[serde(default)]
    pub stream: Option<bool>,
}

/// An optional string, borrowed when it can be. (serde borrows a `Cow<str>` field, but not
/// one inside an `Option`.)
fn borrowed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    struct Text;

    impl<'de> serde::de::Visitor<'de> for Text {
        type Value = Option<Cow<'de, str>>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or null")
        }

        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }

        fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(v)))
        }

        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v.to_owned())))
        }

        fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v)))
        }
    }

    d.deserialize_option(Text)
}

/// Why a body was refused.
#[derive(Debug)]
pub enum PeekError {
    /// JSON must be UTF-8; this body is not.
    NotUtf8,
    /// Valid JSON, but not an object.
    NotObject,
    /// The body is not JSON, or `model`/`stream` have the wrong types.
    Json(serde_json::Error),
}

/// Parses the body as JSON (all of it: malformed JSON is refused) and peeks at it. The
/// whole body must be UTF-8: serde skips the strings it does not keep without checking them,
/// and a gateway must not forward what it would refuse to read.
pub fn peek(body: &[u8]) -> Result<Peek<'_>, PeekError> {
    let text = std::str::from_utf8(body).map_err(|_| PeekError::NotUtf8)?;
    let peeked = serde_json::from_str::<Peek<'_>>(text);
    // serde reads a struct from an array too (`["gpt-4o", true]`): a request is an object.
    let object = text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{');
    match peeked {
        Err(e) if e.is_syntax() || e.is_eof() => Err(PeekError::Json(e)),
        _ if !object => Err(PeekError::NotObject),
        other => other.map_err(PeekError::Json),
    }
}

/// The byte range of the top-level `"model"` value (a JSON string, quotes included) in a
/// body already known to be valid JSON.
pub fn model_span(body: &[u8]) -> Option<Range<usize>> {
    let mut i = skip_ws(body, 0);
    if body.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(body, i);
        if body.get(i) == Some(&b'}') {
            return None;
        }
        let key = string_end(body, i)?;
        let is_model = &body[i..key] == b"\"model\"";
        i = skip_ws(body, key);
        if body.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(body, i + 1);
        let end = value_end(body, i)?;
        if is_model {
            return (body.get(i) == Some(&b'"')).then_some(i..end);
        }
        i = skip_ws(body, end);
        match body.get(i) {
            Some(b',') => i += 1,
            _ => return None,
        }
    }
}

/// `body` with its top-level model replaced by `model`; every other byte kept.
pub fn rewrite_model(body: &[u8], model: &str) -> Option<Vec<u8>> {
    let span = model_span(body)?;
    let quoted = serde_json::to_string(model).ok()?;
    let mut out = Vec::with_capacity(body.len() + quoted.len());
    out.extend_from_slice(&body[..span.start]);
    out.extend_from_slice(quoted.as_bytes());
    out.extend_from_slice(&body[span.end..]);
    Some(out)
}

fn skip_ws(body: &[u8], mut i: usize) -> usize {
    while body.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
        i += 1;
    }
    i
}

/// The index after a JSON string starting at `i`.
fn string_end(body: &[u8], i: usize) -> Option<usize> {
    if body.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    while let Some(&b) = body.get(j) {
        match b {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// The index after the JSON value starting at `i`.
fn value_end(body: &[u8], i: usize) -> Option<usize> {
    match body.get(i)? {
        b'"' => string_end(body, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while let Some(&b) = body.get(j) {
                match b {
                    b'"' => {
                        j = string_end(body, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while body
                .get(j)
                .is_some_and(|b| !matches!(b, b',' | b'}' | b']') && !b.is_ascii_whitespace())
            {
                j += 1;
            }
            Some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `request_body` fuzz target: serde reads a struct from a JSON array, so
    /// `[""]` passed as a request for the model "".
    #[test]
    fn fuzz_found_a_body_that_is_not_an_object_is_refused() {
        for body in [
            &b"[\"\"]"[..],
            b" [\"gpt-4o\", true]",
            b"\"gpt-4o\"",
            b"5",
            b"null",
        ] {
            assert!(matches!(peek(body), Err(PeekError::NotObject)), "{body:?}");
        }
        assert!(matches!(peek(b"[\"gpt"), Err(PeekError::Json(e)) if e.is_eof()));
        assert!(peek(b" \n{\"model\":\"m\"}").is_ok());
    }

    #[test]
    fn the_model_is_borrowed_unless_escaped() {
        let peeked = peek(br#"{"model":"gpt-4o","stream":true}"#).unwrap();
        assert!(matches!(peeked.model, Some(Cow::Borrowed("gpt-4o"))));
        assert_eq!(peeked.stream, Some(true));
        let peeked = peek(br#"{"model":"g\u0070t"}"#).unwrap();
        assert!(matches!(peeked.model, Some(Cow::Owned(ref m)) if m == "gpt"));
        assert!(peek(br#"{"model":null}"#).unwrap().model.is_none());
        assert!(peek(br#"{"messages":[]}"#).unwrap().model.is_none());
        assert!(matches!(
            peek(br#"{"model":5}"#),
            Err(PeekError::Json(e)) if e.is_data()
        ));
    }

    #[test]
    fn rewrites_only_the_top_level_model() {
        let body = br#"{ "messages": [{"role":"user","content":"model \"x\""}], "metadata": {"model": "inner"},
  "model" : "gpt-4o",   "stream": true }"#;
        let out = rewrite_model(body, "gpt-4o-mini").unwrap();
        let expected = String::from_utf8_lossy(body).replace("\"gpt-4o\"", "\"gpt-4o-mini\"");
        assert_eq!(String::from_utf8(out).unwrap(), expected);
        let peeked = peek(body).unwrap();
        assert_eq!(peeked.model.as_deref(), Some("gpt-4o"));
        assert_eq!(peeked.stream, Some(true));
    }

    #[test]
    fn fuzz_found_invalid_utf8_in_an_ignored_key_is_refused() {
        // From the `request_body` fuzz target: `"mo\xa1\x9al"` as a key of an object that
        // serde skipped; the body used to pass the peek and be forwarded.
        let body = b"{\"model\":\"gpt-4o\",\"metadata\":{\"mo\xa1\x9al\":\"x\"}}";
        assert!(matches!(peek(body), Err(PeekError::NotUtf8)));
    }

    #[test]
    fn a_model_after_deep_nesting_is_found_and_rewritten_without_recursion() {
        let depth = 500_000;
        let body = format!(
            r#"{{"tools":{}{},"model":"gpt-x","messages":[]}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert_eq!(
            peek(body.as_bytes()).unwrap().model.as_deref(),
            Some("gpt-x")
        );
        let out = rewrite_model(body.as_bytes(), "rewritten").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            body.replace("\"gpt-x\"", "\"rewritten\"")
        );
    }

    #[test]
    fn no_model_no_rewrite() {
        assert!(rewrite_model(br#"{"messages": []}"#, "m").is_none());
        assert!(rewrite_model(br#"{"model": 5}"#, "m").is_none());
        assert!(rewrite_model(br#"[1]"#, "m").is_none());
    }
}
