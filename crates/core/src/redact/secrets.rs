//! Secrets by value: the keys rebound was given, found wherever they appear (G5, C2).
//!
//! Shapes ([`super::redact`]'s patterns) catch the keys of known providers, but a key of any
//! other shape — an Azure key is 32 hex digits — is only recognisable by its value. Every key
//! a process loads is [`remember`]ed once, at start-up, into one process-wide set that
//! [`super::redact`] consults before the shapes: every place that already redacted (excerpts,
//! diagnostics, in-stream errors, stored jobs, log lines, CLI messages) then removes it by
//! value too, and no call site can forget to. A set that only grows is enough: a key a
//! process once held stays a secret for the rest of its life.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

use aho_corasick::{AhoCorasick, MatchKind};

use super::REDACTED;

/// The shortest key rebound accepts: a shorter one could not be redacted by value without
/// destroying ordinary text that happens to contain it.
pub const MIN_SECRET_LEN: usize = 8;

/// Why a key cannot be accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// Shorter than [`MIN_SECRET_LEN`].
    #[error(
        "holds a key of {len} characters; a key needs at least {MIN_SECRET_LEN} to be redacted safely"
    )]
    TooShort {
        /// The key's length in characters.
        len: usize,
    },
}

/// A set of secret values, matched all at once.
#[derive(Clone, Debug, Default)]
pub struct Secrets {
    values: Vec<String>,
    matcher: Option<AhoCorasick>,
}

impl Secrets {
    /// The set of `values` (duplicates and empty values are ignored).
    pub fn new<I, S>(values: I) -> Secrets
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut values: Vec<String> = values
            .into_iter()
            .map(Into::into)
            .filter(|v| !v.is_empty())
            .collect();
        values.sort();
        values.dedup();
        // Leftmost-longest: a key that extends another is removed whole.
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&values)
            .ok()
            .filter(|_| !values.is_empty());
        Secrets { values, matcher }
    }

    /// Whether the set holds no secret.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every value of the set replaced by [`REDACTED`]. Borrows when none is there.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match &self.matcher {
            Some(matcher) if matcher.is_match(text) => {
                Cow::Owned(matcher.replace_all(text, &vec![REDACTED; self.values.len()]))
            }
            _ => Cow::Borrowed(text),
        }
    }

    /// This set with `values` added.
    fn with<I, S>(&self, values: I) -> Secrets
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Secrets::new(
            self.values
                .iter()
                .cloned()
                .chain(values.into_iter().map(Into::into)),
        )
    }
}

/// Whether `key` is long enough to be a secret rebound can redact by value.
pub fn check(key: &str) -> Result<(), SecretError> {
    let len = key.chars().count();
    if len < MIN_SECRET_LEN {
        return Err(SecretError::TooShort { len });
    }
    Ok(())
}

/// The secrets this process holds.
static KNOWN: LazyLock<RwLock<Arc<Secrets>>> = LazyLock::new(RwLock::default);

/// Adds `values` to the secrets this process redacts by value, from now on and everywhere.
pub fn remember<I, S>(values: I)
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut known = KNOWN.write().unwrap_or_else(PoisonError::into_inner);
    let grown = known.with(values);
    *known = Arc::new(grown);
}

/// The secrets this process holds now.
pub fn known() -> Arc<Secrets> {
    Arc::clone(&KNOWN.read().unwrap_or_else(PoisonError::into_inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_replaced_wherever_they_appear() {
        let secrets = Secrets::new(["0123456789abcdef0123456789abcdef", "gw-canary-key"]);
        let text =
            "Incorrect API key provided: 0123456789abcdef0123456789abcdef. key=gw-canary-key!";
        assert_eq!(
            secrets.redact(text),
            "Incorrect API key provided: [redacted]. key=[redacted]!"
        );
        assert!(matches!(secrets.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_longer_key_is_removed_whole() {
        let secrets = Secrets::new(["abcdefgh", "abcdefghijkl"]);
        assert_eq!(secrets.redact("x abcdefghijkl y"), "x [redacted] y");
    }

    #[test]
    fn short_keys_are_refused() {
        assert_eq!(check("1234567"), Err(SecretError::TooShort { len: 7 }));
        assert_eq!(check("12345678"), Ok(()));
    }

    #[test]
    fn remembered_values_are_redacted_by_the_one_redactor() {
        let key = "c0ffee00c0ffee00c0ffee00c0ffee01";
        let text = format!("Incorrect API key provided: {key}.");
        remember([key]);
        assert_eq!(
            super::super::redact(&text),
            "Incorrect API key provided: [redacted]."
        );
        assert!(!known().is_empty());
    }
}
