//! Secrets never leave: redaction of provider keys and tokens in evidence (C2, G5).
//!
//! Providers echo keys back (OpenAI's "Incorrect API key provided: sk-proj-…"), proxies log
//! `Authorization` headers into bodies, Gemini puts `?key=` in URLs. Everything rebound shows
//! (excerpts, diagnostics, errors) passes through [`redact`] first. Matching itself reads the
//! raw text, so redaction never changes a classification.
//!
//! Two kinds of match: the keys this process was given, by value ([`secrets`]: any shape,
//! remembered at start-up), and the shapes below (keys of known providers, credential fields,
//! bearer tokens, URL keys) for secrets rebound was never given.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Regex, RegexSet};

use crate::evidence::Headers;

pub mod secrets;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Headers whose values are secrets whatever they hold.
pub const SECRET_HEADERS: [&str; 9] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
    "set-cookie",
    "x-amz-security-token",
    "x-rebound-key",
];

/// Patterns of secrets. Each match is replaced whole, except for the part captured as
/// `keep`, which names what was redacted.
const SOURCES: [&str; 10] = [
    // Header-like lines and JSON or form fields that name a credential.
    r#"(?i)(?P<keep>["']?(?:x-api-key|api[-_]?key|x-goog-api-key|authorization|proxy-authorization|access[-_]?token|refresh[-_]?token|client[-_]?secret|secret[-_]?key|password)["']?\s*[:=]\s*)(?:"[^"]*"|'[^']*'|(?:bearer\s+|basic\s+)?[^\s,;"'}&]+)"#,
    // Bearer and basic credentials anywhere.
    r"(?i)(?P<keep>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=\-]{8,}",
    // Keys in URL query strings.
    r"(?i)(?P<keep>[?&](?:key|api[-_]?key|token|access_token|sig)=)[^&\s#'\x22<>]+",
    // Provider key shapes: OpenAI/Anthropic/OpenRouter `sk-…` (including OpenAI's
    // masked echo `sk-proj-****…abcd`), Google `AIza…`, AWS access key ids, xAI, Groq,
    // Hugging Face, GitHub tokens.
    r"sk-[A-Za-z0-9_\-*.]{6,}",
    r"AIza[0-9A-Za-z_\-]{20,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bxai-[A-Za-z0-9]{16,}",
    r"\bgsk_[A-Za-z0-9]{16,}",
    r"\bhf_[A-Za-z0-9]{16,}",
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",
];

static PATTERNS: LazyLock<Vec<Regex>> =
    LazyLock::new(|| SOURCES.iter().filter_map(|p| Regex::new(p).ok()).collect());

/// All the patterns at once: most text holds no secret, and one pass says so.
static ANY: LazyLock<Option<RegexSet>> = LazyLock::new(|| RegexSet::new(SOURCES).ok());

/// `text` with every secret replaced by [`REDACTED`]: the keys this process holds by value
/// ([`secrets::remember`]), then every shape. Borrows when nothing was found.
pub fn redact(text: &str) -> Cow<'_, str> {
    let mut out = match secrets::known().redact(text) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        Cow::Owned(by_value) => Cow::Owned(by_value),
    };
    if ANY.as_ref().is_some_and(|any| !any.is_match(&out)) {
        return out;
    }
    for pattern in PATTERNS.iter() {
        if pattern.is_match(&out) {
            let replaced = pattern
                .replace_all(&out, |caps: &regex::Captures<'_>| {
                    let keep = caps.name("keep").map_or("", |m| m.as_str());
                    format!("{keep}{REDACTED}")
                })
                .into_owned();
            out = Cow::Owned(replaced);
        }
    }
    out
}

/// True for a header whose value is a credential.
pub fn is_secret_header(name: &str) -> bool {
    SECRET_HEADERS
        .iter()
        .any(|secret| secret.eq_ignore_ascii_case(name))
}

/// `headers` with credential headers blanked and every other value redacted.
pub fn redact_headers(headers: &Headers) -> Headers {
    headers
        .iter()
        .map(|(name, value)| {
            if is_secret_header(name) {
                (name.to_owned(), REDACTED.to_owned())
            } else {
                (name.to_owned(), redact(value).into_owned())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_compiles() {
        assert_eq!(PATTERNS.len(), SOURCES.len());
        assert!(ANY.is_some());
    }

    #[test]
    fn text_without_secrets_is_borrowed() {
        let line = "rebound route=default candidate=openai attempt=1 outcome=ok";
        assert!(matches!(redact(line), Cow::Borrowed(_)));
    }

    #[test]
    fn provider_keys_are_removed() {
        let cases = [
            "Incorrect API key provided: sk-proj-abcDEF1234567890xyz. You can find",
            "Incorrect API key provided: sk-proj-****************************WXYZ.",
            "key sk-ant-api03-Zz9_-abcdefghijklmnopqrstuvwxyz0123 rejected",
            "https://generativelanguage.googleapis.com/v1beta/models/x?key=AIzaSyA1234567890abcdefghijklmnopqrstu",
            "AIzaSyA1234567890abcdefghijklmnopqrstu is not valid",
            "credential AKIAIOSFODNN7EXAMPLE/20261130/us-east-1",
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig",
            r#"{"api_key": "hunter2-secret-value"}"#,
            "x-api-key=s3cr3t-v4lue",
            "token xai-abcdefghijklmnopqrstuvwx here",
        ];
        for case in cases {
            let out = redact(case);
            assert!(out.contains(REDACTED), "{case} -> {out}");
            for secret in [
                "abcDEF1234567890xyz",
                "WXYZ",
                "Zz9_-abc",
                "AIzaSyA1234567890",
                "AKIAIOSFODNN7EXAMPLE",
                "eyJhbGciOiJIUzI1NiJ9",
                "hunter2",
                "s3cr3t",
                "xai-abcdef",
            ] {
                assert!(!out.contains(secret), "{case} -> {out}");
            }
        }
    }

    #[test]
    fn ordinary_text_is_borrowed_untouched() {
        let text = r#"{"error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert!(matches!(redact(text), Cow::Borrowed(_)));
        let text = "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000";
        assert_eq!(redact(text), text);
    }

    #[test]
    fn secret_headers_are_blanked() {
        let headers: Headers = [
            ("Authorization", "Bearer sk-live-123456789"),
            ("x-goog-api-key", "AIza..."),
            ("retry-after", "3"),
        ]
        .into_iter()
        .collect();
        let out = redact_headers(&headers);
        assert_eq!(out.get("authorization"), Some(REDACTED));
        assert_eq!(out.get("x-goog-api-key"), Some(REDACTED));
        assert_eq!(out.get("retry-after"), Some("3"));
    }
}
