//! Attempt timeouts (S5): `[timeouts]` for the whole gateway, `timeouts = { … }` on a
//! candidate for its own. Each expiry is `transient` evidence with its own code; a candidate
//! that stays silent (first byte, first content) hands over to the next one on its route.

use std::time::Duration;

use rebound_runtime::Timeouts;
use serde::Deserialize;

/// A `timeouts` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TimeoutsFile {
    /// Establishing the connection (gateway-wide: the connection pool is shared).
    connect_ms: Option<u64>,
    /// Sending a non-streaming request to its response headers, which come with the whole
    /// answer.
    first_byte_ms: Option<u64>,
    /// Sending a streaming request to its response headers.
    stream_first_byte_ms: Option<u64>,
    /// A stream's headers to its first content: time to first token.
    first_content_ms: Option<u64>,
    /// The longest quiet gap in a stream.
    stream_idle_ms: Option<u64>,
}

/// Timeouts that replace the client's where set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeoutOverrides {
    /// Non-streaming request to response headers.
    pub first_byte: Option<Duration>,
    /// Streaming request to response headers.
    pub stream_first_byte: Option<Duration>,
    /// Stream headers to first content.
    pub first_content: Option<Duration>,
    /// Quiet gap in a stream.
    pub idle: Option<Duration>,
}

impl TimeoutOverrides {
    /// `base` with these overrides.
    pub fn resolve(&self, base: Timeouts) -> Timeouts {
        Timeouts {
            connect: base.connect,
            first_byte: self.first_byte.unwrap_or(base.first_byte),
            stream_first_byte: self.stream_first_byte.unwrap_or(base.stream_first_byte),
            first_content: self.first_content.unwrap_or(base.first_content),
            idle: self.idle.unwrap_or(base.idle),
        }
    }

    /// These overrides, falling back to `outer`'s where unset.
    pub(super) fn or(self, outer: TimeoutOverrides) -> TimeoutOverrides {
        TimeoutOverrides {
            first_byte: self.first_byte.or(outer.first_byte),
            stream_first_byte: self.stream_first_byte.or(outer.stream_first_byte),
            first_content: self.first_content.or(outer.first_content),
            idle: self.idle.or(outer.idle),
        }
    }
}

/// The overrides of `file` at `table` (`timeouts`, `candidate.a.timeouts`), and its connect
/// timeout where `connect` allows one. Errors name the key.
pub(super) fn overrides(
    file: &TimeoutsFile,
    table: &str,
    connect: bool,
) -> Result<(TimeoutOverrides, Option<Duration>), (String, String)> {
    let positive = |value: Option<u64>, key: &str| match value {
        Some(0) => Err((format!("{table}.{key}"), "must be more than 0".to_owned())),
        Some(ms) => Ok(Some(Duration::from_millis(ms))),
        None => Ok(None),
    };
    if !connect && file.connect_ms.is_some() {
        return Err((
            format!("{table}.connect_ms"),
            "is gateway-wide (one connection pool serves every candidate): set it in [timeouts]"
                .to_owned(),
        ));
    }
    Ok((
        TimeoutOverrides {
            first_byte: positive(file.first_byte_ms, "first_byte_ms")?,
            stream_first_byte: positive(file.stream_first_byte_ms, "stream_first_byte_ms")?,
            first_content: positive(file.first_content_ms, "first_content_ms")?,
            idle: positive(file.stream_idle_ms, "stream_idle_ms")?,
        },
        positive(file.connect_ms, "connect_ms")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, connect: bool) -> Result<(TimeoutOverrides, Option<Duration>), String> {
        overrides(&toml::from_str(text).unwrap(), "timeouts", connect).map_err(|(key, _)| key)
    }

    #[test]
    fn set_keys_replace_the_base_and_unset_ones_keep_it() {
        let (set, connect) = parse("first_content_ms = 20000\nconnect_ms = 3000", true).unwrap();
        assert_eq!(connect, Some(Duration::from_secs(3)));
        let resolved = set.resolve(Timeouts::default());
        assert_eq!(resolved.first_content, Duration::from_secs(20));
        assert_eq!(resolved.first_byte, Timeouts::default().first_byte);
        let candidate = TimeoutOverrides {
            idle: Some(Duration::from_secs(5)),
            ..TimeoutOverrides::default()
        };
        let merged = candidate.or(set);
        assert_eq!(merged.idle, Some(Duration::from_secs(5)));
        assert_eq!(merged.first_content, Some(Duration::from_secs(20)));
    }

    #[test]
    fn bad_values_name_their_key() {
        assert_eq!(
            parse("stream_idle_ms = 0", true).unwrap_err(),
            "timeouts.stream_idle_ms"
        );
        assert_eq!(
            parse("connect_ms = 100", false).unwrap_err(),
            "timeouts.connect_ms"
        );
    }
}
