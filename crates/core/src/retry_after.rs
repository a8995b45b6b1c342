//! Server retry hints from response headers (T1, T2).
//!
//! Precedence: `retry-after-ms`, then `retry-after` as seconds, then `retry-after` as an
//! HTTP-date (IMF-fixdate, RFC 850 and asctime forms). A malformed value is skipped and the next
//! source is tried; an HTTP-date in the past means "now" (zero); an excessive value is saturated
//! at [`crate::hint::MAX_HINT`], and the class cap bounds it (T2). Headers are read only for
//! statuses that can carry a usable delay: 429, 408, 409 and every 5xx.

use std::time::{Duration, SystemTime};

use crate::evidence::Headers;
use crate::hint::{Hint, HintSource, parse_decimal_duration, saturate};

/// True for the statuses whose retry headers are read (T1).
pub fn status_carries_hint(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500..=599)
}

/// The first valid server hint in precedence order, or `None`.
pub fn header_hint(status: Option<u16>, headers: &Headers, now: SystemTime) -> Option<Hint> {
    if !status.is_some_and(status_carries_hint) {
        return None;
    }
    if let Some(delay) = headers
        .get("retry-after-ms")
        .and_then(|v| parse_decimal_duration(v.trim(), 1_000_000))
        .map(saturate)
    {
        return Some(Hint {
            delay,
            source: HintSource::RetryAfterMs,
        });
    }
    let value = headers.get("retry-after")?.trim();
    if let Some(delay) = parse_decimal_duration(value, 1_000_000_000).map(saturate) {
        return Some(Hint {
            delay,
            source: HintSource::RetryAfterSeconds,
        });
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let delay = at.duration_since(now).unwrap_or(Duration::ZERO);
    Some(Hint {
        delay: saturate(delay),
        source: HintSource::RetryAfterDate,
    })
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::hint::MAX_HINT;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs.iter().copied().collect()
    }

    // Mon, 30 Nov 2026 15:00:00 GMT
    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_796_050_800)
    }

    fn hint(status: u16, pairs: &[(&str, &str)]) -> Option<(u128, HintSource)> {
        header_hint(Some(status), &headers(pairs), now()).map(|h| (h.delay.as_millis(), h.source))
    }

    #[test]
    fn precedence_is_ms_then_seconds_then_date() {
        let all = [("retry-after-ms", "1500.5"), ("retry-after", "7")];
        assert_eq!(hint(429, &all), Some((1500, HintSource::RetryAfterMs)));
        assert_eq!(
            hint(429, &[("retry-after", "7")]),
            Some((7000, HintSource::RetryAfterSeconds))
        );
        assert_eq!(
            hint(429, &[("retry-after", "Mon, 30 Nov 2026 15:00:12 GMT")]),
            Some((12_000, HintSource::RetryAfterDate))
        );
    }

    #[test]
    fn all_three_http_date_forms() {
        for date in [
            "Mon, 30 Nov 2026 15:00:30 GMT",
            "Monday, 30-Nov-26 15:00:30 GMT",
            "Mon Nov 30 15:00:30 2026",
        ] {
            assert_eq!(
                hint(503, &[("retry-after", date)]),
                Some((30_000, HintSource::RetryAfterDate)),
                "{date}"
            );
        }
    }

    #[test]
    fn malformed_values_fall_through_to_the_next_source() {
        assert_eq!(
            hint(429, &[("retry-after-ms", "NaN"), ("retry-after", "2")]),
            Some((2000, HintSource::RetryAfterSeconds))
        );
        assert_eq!(
            hint(429, &[("retry-after-ms", "-5"), ("retry-after", "-5")]),
            None
        );
        assert_eq!(hint(429, &[("retry-after", "soon")]), None);
        assert_eq!(hint(429, &[("retry-after", "1e9")]), None);
    }

    #[test]
    fn excessive_values_are_saturated_not_dropped() {
        // T2: an absurd but well-formed hint still asks for a long wait; the class cap bounds it.
        let max = MAX_HINT.as_millis();
        assert_eq!(
            hint(429, &[("retry-after-ms", "999999999999")]),
            Some((max, HintSource::RetryAfterMs))
        );
        assert_eq!(
            hint(429, &[("retry-after", "99999999999")]),
            Some((max, HintSource::RetryAfterSeconds))
        );
        assert_eq!(
            hint(503, &[("retry-after", "Fri, 01 Jan 9999 00:00:00 GMT")]),
            Some((max, HintSource::RetryAfterDate))
        );
    }

    #[test]
    fn a_past_date_means_zero() {
        assert_eq!(
            hint(429, &[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")]),
            Some((0, HintSource::RetryAfterDate))
        );
    }

    #[test]
    fn only_statuses_that_carry_a_delay_are_read() {
        for status in [408, 409, 429, 500, 502, 503, 504, 529, 599] {
            assert!(hint(status, &[("retry-after", "1")]).is_some(), "{status}");
        }
        for status in [200, 400, 401, 403, 404, 422] {
            assert!(hint(status, &[("retry-after", "1")]).is_none(), "{status}");
        }
        assert!(header_hint(None, &headers(&[("retry-after", "1")]), now()).is_none());
    }
}
