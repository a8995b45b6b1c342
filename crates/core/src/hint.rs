//! Timing hints: how long a provider asked us to wait, validated (C6, T2).
//!
//! Every parser here is total: it returns `None` for anything malformed, negative or not
//! finite, and an excessive but well-formed value is saturated at [`MAX_HINT`], so a hostile or
//! broken value can never hold a request (T2). An excessive value still says "wait long": it is
//! kept, saturated, so the class cap in [`crate::policy`] bounds it rather than backoff
//! replacing it. Caps that depend on the class live there; this module only validates values.

use std::fmt;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jiff::Timestamp;
use jiff::civil::{DateTime, Time};
use jiff::tz::{Offset, TimeZone, TimeZoneDatabase};
use serde::Serialize;

/// The longest wait any hint may ask for. Longer well-formed values are saturated at it (T2);
/// the class cap then bounds the wait.
pub const MAX_HINT: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Where a hint came from, in precedence order (T1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HintSource {
    /// The `retry-after-ms` header.
    RetryAfterMs,
    /// The `retry-after` header as seconds.
    RetryAfterSeconds,
    /// The `retry-after` header as an HTTP-date.
    RetryAfterDate,
    /// A value a catalogue rule extracted from the body or another header.
    Catalogue,
    /// The shared health ledger's deadline for a resting candidate (S2): another request's
    /// hint or circuit, not this request's evidence.
    Health,
}

impl HintSource {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            HintSource::RetryAfterMs => "retry_after_ms",
            HintSource::RetryAfterSeconds => "retry_after_seconds",
            HintSource::RetryAfterDate => "retry_after_date",
            HintSource::Catalogue => "catalogue",
            HintSource::Health => "health",
        }
    }
}

impl fmt::Display for HintSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A validated wait request: finite, not negative, at most [`MAX_HINT`], relative to the
/// `now` it was validated against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Hint {
    /// How long to wait from the moment of classification.
    #[serde(rename = "delay_ms", serialize_with = "serialize_ms")]
    pub delay: Duration,
    /// Where it came from.
    pub source: HintSource,
}

fn serialize_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The kind of value a catalogue hint extractor captured, named by its regex group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HintFormat {
    /// Decimal seconds (`20`, `2.184`).
    Seconds,
    /// Decimal milliseconds.
    Millis,
    /// Decimal minutes.
    Minutes,
    /// A Go/protobuf duration (`17s`, `1m30.5s`, `250ms`, `6m0s`).
    Duration,
    /// An absolute time: RFC 3339 (`2026-11-30T15:00:00Z`), the same in a sentence
    /// (`2026-12-01 at 00:00 UTC`) or an HTTP-date.
    At,
    /// Unix time in seconds.
    Epoch,
    /// A time of day (`3pm`, `15:00`, `3:30 PM`) in the zone of the `tz` group: UTC, GMT, Z, a
    /// numeric offset or an IANA zone name (`Europe/Warsaw`); without a zone the value is
    /// dropped.
    Clock,
    /// A duration in words, as agent CLIs print it (`4 days 2 hours 46 minutes`, `3 hours 2
    /// minutes`, `1 day, 5 hours and 3 minutes`, `45 seconds`).
    Words,
    /// A duration as a stopwatch prints it, hours, minutes and seconds (`0:01:25`, `12:00:00`).
    Hms,
}

impl HintFormat {
    /// Every format, with the regex group name that selects it.
    pub const GROUPS: [(&'static str, HintFormat); 9] = [
        ("seconds", HintFormat::Seconds),
        ("ms", HintFormat::Millis),
        ("minutes", HintFormat::Minutes),
        ("duration", HintFormat::Duration),
        ("at", HintFormat::At),
        ("epoch", HintFormat::Epoch),
        ("clock", HintFormat::Clock),
        ("words", HintFormat::Words),
        ("hms", HintFormat::Hms),
    ];

    /// Turns a captured value into a wait from `now`. Absolute times in the past are not
    /// believed (C6): a provider that says "resets at" a past moment is confused.
    pub fn parse(self, value: &str, tz: Option<&str>, now: SystemTime) -> Option<Duration> {
        let value = value.trim();
        let delay = match self {
            HintFormat::Seconds => parse_decimal_duration(value, 1_000_000_000)?,
            HintFormat::Millis => parse_decimal_duration(value, 1_000_000)?,
            HintFormat::Minutes => parse_decimal_duration(value, 60_000_000_000)?,
            HintFormat::Duration => parse_go_duration(value)?,
            HintFormat::At => {
                let at =
                    parse_timestamp(value).or_else(|| httpdate::parse_http_date(value).ok())?;
                at.duration_since(now).ok()?
            }
            HintFormat::Epoch => {
                let secs: u64 = value.parse().ok()?;
                let at = UNIX_EPOCH.checked_add(Duration::from_secs(secs))?;
                at.duration_since(now).ok()?
            }
            HintFormat::Clock => clock_delay(value, tz?, now)?,
            HintFormat::Words => parse_words_duration(value)?,
            HintFormat::Hms => parse_hms_duration(value)?,
        };
        Some(saturate(delay))
    }
}

/// The delay, saturated at [`MAX_HINT`]: an excessive hint is capped, not ignored (T2).
pub fn saturate(delay: Duration) -> Duration {
    delay.min(MAX_HINT)
}

/// Parses an unsigned decimal number (`12`, `0.5`, `2.184`) scaled by `unit_nanos` per unit.
/// Signs, exponents, `NaN`, `inf` and anything else are refused.
pub fn parse_decimal_duration(value: &str, unit_nanos: u128) -> Option<Duration> {
    let (int, frac) = match value.split_once('.') {
        Some((int, frac)) => (int, frac),
        None => (value, ""),
    };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if value.ends_with('.') || int.len() > 15 {
        return None;
    }
    let int: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut nanos = int.checked_mul(unit_nanos)?;
    // Fraction digits beyond nanosecond precision of the unit add nothing.
    let mut scale = unit_nanos;
    for digit in frac.bytes().take(18) {
        scale /= 10;
        nanos = nanos.checked_add(u128::from(digit - b'0') * scale)?;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    let sub = u32::try_from(nanos % 1_000_000_000).ok()?;
    Some(Duration::new(secs, sub))
}

/// Parses a duration in words: one or more `<integer> <unit>` with units `week`, `day`,
/// `hour`, `minute`, `second` (singular or plural, or `hr`, `hrs`, `min`, `mins`, `sec`,
/// `secs`), separated by spaces, commas or `and` (`4 days 2 hours 46 minutes`). A unit may
/// appear once; anything else is refused.
pub fn parse_words_duration(value: &str) -> Option<Duration> {
    const UNITS: [(&[&str], u64); 5] = [
        (&["week", "weeks", "wk", "wks"], 7 * 86_400),
        (&["day", "days"], 86_400),
        (&["hour", "hours", "hr", "hrs", "h"], 3_600),
        (&["minute", "minutes", "min", "mins", "m"], 60),
        (&["second", "seconds", "sec", "secs", "s"], 1),
    ];
    let lower = value.to_ascii_lowercase();
    let mut words = lower
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty() && *w != "and");
    let mut seen = [false; UNITS.len()];
    let mut total: u64 = 0;
    let mut any = false;
    while let Some(number) = words.next() {
        if number.is_empty() || number.len() > 9 || !number.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u64 = number.parse().ok()?;
        let unit = words.next()?;
        let slot = UNITS.iter().position(|(names, _)| names.contains(&unit))?;
        if std::mem::replace(&mut seen[slot], true) {
            return None;
        }
        total = total.checked_add(n.checked_mul(UNITS[slot].1)?)?;
        any = true;
    }
    any.then(|| Duration::from_secs(total))
}

/// Parses hours, minutes and seconds as a stopwatch prints them (`0:01:25`, `12:00:00`): one
/// to three digits of hours, then two digits each of minutes and seconds, both under 60.
pub fn parse_hms_duration(value: &str) -> Option<Duration> {
    let mut parts = value.split(':');
    let (hours, minutes, seconds) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |part: &str, len: std::ops::RangeInclusive<usize>| {
        (len.contains(&part.len()) && part.bytes().all(|b| b.is_ascii_digit()))
            .then(|| part.parse::<u64>().ok())
            .flatten()
    };
    let (hours, minutes, seconds) = (
        digits(hours, 1..=3)?,
        digits(minutes, 2..=2)?,
        digits(seconds, 2..=2)?,
    );
    if parts.next().is_some() || minutes >= 60 || seconds >= 60 {
        return None;
    }
    Some(Duration::from_secs(hours * 3_600 + minutes * 60 + seconds))
}

/// Parses a Go or protobuf duration: one or more `<decimal><unit>` with units `h`, `m`, `s`,
/// `ms`, `us`, `µs`, `ns` (`17s`, `1m30.5s`, `250ms`, `6m0s`, `0.5s`).
pub fn parse_go_duration(value: &str) -> Option<Duration> {
    let mut rest = value;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let (number, tail) = rest.split_at(num_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            "us" | "µs" => 1_000,
            "ns" => 1,
            _ => return None,
        };
        total = total.checked_add(parse_decimal_duration(number, unit_nanos)?)?;
        rest = tail;
    }
    Some(total)
}

/// Parses a date and time with its zone, as RFC 3339 writes it (`2026-11-30T15:04:05Z`,
/// `2026-11-30 15:04:05.25+02:00`) or as a sentence does (`2026-12-01 at 00:00 UTC`, where the
/// seconds may be left out). The zone is `Z`, `UTC`, `GMT` or a numeric offset; a time without
/// one names no moment and is refused.
pub fn parse_timestamp(value: &str) -> Option<SystemTime> {
    let value = value.trim();
    let at = match value.parse::<Timestamp>() {
        Ok(at) => at,
        Err(_) => {
            // A zone jiff's RFC 3339 reader does not take (` UTC`, ` +02:00` after a space),
            // or the sentence form: the civil time, then the zone.
            let (civil, zone) = value.rsplit_once(' ')?;
            let civil: DateTime = civil.replacen(" at ", "T", 1).parse().ok()?;
            let zone = TimeZone::fixed(Offset::from_seconds(parse_offset(zone)?).ok()?);
            civil.to_zoned_datetime(zone).ok()?.timestamp()
        }
    };
    SystemTime::try_from(at).ok()
}

/// `Z`, `UTC`, `GMT`, `+02:00`, `-0530` → offset east of UTC in seconds, at most 18 hours.
fn parse_offset(zone: &str) -> Option<i32> {
    let zone = zone.trim();
    if matches!(zone, "Z" | "z" | "UTC" | "GMT" | "utc" | "gmt") {
        return Some(0);
    }
    let (sign, rest) = match zone.as_bytes() {
        [b'+', rest @ ..] => (1, rest),
        [b'-', rest @ ..] => (-1, rest),
        _ => return None,
    };
    let ([h1, h2], [m1, m2]) = match *rest {
        [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => ([h1, h2], [m1, m2]),
        _ => return None,
    };
    let two = |tens: u8, ones: u8| {
        (tens.is_ascii_digit() && ones.is_ascii_digit())
            .then(|| i32::from(tens - b'0') * 10 + i32::from(ones - b'0'))
    };
    let (hours, minutes) = (two(h1, h2)?, two(m1, m2)?);
    (hours <= 18 && minutes <= 59).then_some(sign * (hours * 3600 + minutes * 60))
}

/// The zone a time of day is read in: `UTC`, `GMT`, `Z` or a numeric offset, or a name of the
/// IANA time zone database (`Europe/Warsaw`, `America/Los_Angeles`), whose rules the binary
/// carries, so the answer does not depend on the machine. Abbreviations such as `PST` name no
/// zone there and are refused.
fn zone(name: &str) -> Option<TimeZone> {
    static ZONES: LazyLock<TimeZoneDatabase> = LazyLock::new(TimeZoneDatabase::bundled);
    if let Some(seconds) = parse_offset(name) {
        return Some(TimeZone::fixed(Offset::from_seconds(seconds).ok()?));
    }
    let zone = ZONES.get(name.trim()).ok()?;
    zone.iana_name()
        .is_some_and(|n| n != "Etc/Unknown")
        .then_some(zone)
}

/// The wait until the next occurrence of a time of day (`3pm`, `3:30 pm`, `15:00`) in a zone.
/// A time a clock change skips or repeats is read as the zone's rules place it (the later
/// offset for a gap, the earlier for a repeat).
fn clock_delay(value: &str, tz: &str, now: SystemTime) -> Option<Duration> {
    let zone = zone(tz)?;
    let lower = value.to_ascii_lowercase();
    let (clock, meridiem) = if let Some(c) = lower.strip_suffix("am") {
        (c.trim(), Some(false))
    } else if let Some(c) = lower.strip_suffix("pm") {
        (c.trim(), Some(true))
    } else {
        (lower.trim(), None)
    };
    let (hour, minute) = match clock.split_once(':') {
        Some((h, m)) => (h.parse::<i8>().ok()?, m.parse::<i8>().ok()?),
        None => (clock.parse::<i8>().ok()?, 0),
    };
    let hour = match meridiem {
        Some(pm) if (1..=12).contains(&hour) => hour % 12 + if pm { 12 } else { 0 },
        Some(_) => return None,
        None if !clock.contains(':') => return None,
        None => hour,
    };
    let time = Time::new(hour, minute, 0, 0).ok()?;
    let now = Timestamp::try_from(now).ok()?;
    let today = now.to_zoned_datetime(zone.clone()).date();
    let mut target = today
        .to_datetime(time)
        .to_zoned_datetime(zone.clone())
        .ok()?;
    if target.timestamp() <= now {
        target = today
            .tomorrow()
            .ok()?
            .to_datetime(time)
            .to_zoned_datetime(zone)
            .ok()?;
    }
    Duration::try_from(target.timestamp().duration_since(now)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn decimals_parse_exactly_and_refuse_garbage() {
        let s = 1_000_000_000;
        assert_eq!(
            parse_decimal_duration("2.184", s),
            Some(Duration::from_millis(2184))
        );
        assert_eq!(
            parse_decimal_duration("20", s),
            Some(Duration::from_secs(20))
        );
        assert_eq!(
            parse_decimal_duration("1.5", 1_000_000),
            Some(Duration::from_micros(1500))
        );
        for bad in [
            "", ".", "1.", "-1", "+1", "1e3", "NaN", "inf", "1,5", " 1", "0x10",
        ] {
            assert_eq!(parse_decimal_duration(bad, s), None, "{bad:?}");
        }
        assert_eq!(parse_decimal_duration("9999999999999999999999", s), None);
    }

    #[test]
    fn durations_in_words() {
        let d = |days: u64, hours: u64, minutes: u64| {
            Duration::from_secs(days * 86_400 + hours * 3_600 + minutes * 60)
        };
        assert_eq!(
            parse_words_duration("4 days 2 hours 46 minutes"),
            Some(d(4, 2, 46))
        );
        assert_eq!(parse_words_duration("3 hours 2 minutes"), Some(d(0, 3, 2)));
        assert_eq!(
            parse_words_duration("5 days 22 hours 11\nminutes"),
            Some(d(5, 22, 11))
        );
        assert_eq!(
            parse_words_duration("1 day, 5 hours and 3 minutes"),
            Some(d(1, 5, 3))
        );
        assert_eq!(
            parse_words_duration("45 Seconds"),
            Some(Duration::from_secs(45))
        );
        assert_eq!(parse_words_duration("2 weeks"), Some(d(14, 0, 0)));
        for bad in [
            "",
            "days",
            "4",
            "4 fortnights",
            "2 hours 3 hours",
            "-1 hours",
            "1.5 hours",
            "four days",
        ] {
            assert_eq!(parse_words_duration(bad), None, "{bad:?}");
        }
        assert_eq!(
            HintFormat::Words.parse("9 weeks", None, at(0)),
            Some(MAX_HINT),
            "saturated, not dropped"
        );
    }

    #[test]
    fn stopwatch_durations() {
        for (text, secs) in [
            ("0:01:25", 85),
            ("12:00:00", 43_200),
            ("100:00:01", 360_001),
        ] {
            assert_eq!(
                parse_hms_duration(text),
                Some(Duration::from_secs(secs)),
                "{text}"
            );
        }
        for bad in [
            "1:60:00",
            "1:00:60",
            "1:5:00",
            "1:00",
            "1:00:00:00",
            "1000:00:00",
            ":00:00",
            "-1:00:00",
            "1:00:0x",
        ] {
            assert_eq!(parse_hms_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("17s"), Some(Duration::from_secs(17)));
        assert_eq!(
            parse_go_duration("1m30.5s"),
            Some(Duration::from_millis(90_500))
        );
        assert_eq!(parse_go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("1h2m3s"), Some(Duration::from_secs(3723)));
        assert_eq!(parse_go_duration("0.5s"), Some(Duration::from_millis(500)));
        for bad in ["", "s", "17", "17x", "1m-3s", "1.2.3s", "ms"] {
            assert_eq!(parse_go_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some(at(0)));
        assert_eq!(
            parse_timestamp("2026-11-30T15:00:00Z"),
            Some(at(1_796_050_800))
        );
        assert_eq!(
            parse_timestamp("2026-11-30T17:00:00+02:00"),
            Some(at(1_796_050_800))
        );
        assert_eq!(
            parse_timestamp("2026-11-30 15:00:00.5Z"),
            Some(at(1_796_050_800) + Duration::from_millis(500))
        );
        assert_eq!(
            parse_timestamp("2026-11-30T09:30:00-0530"),
            Some(at(1_796_050_800))
        );
        assert_eq!(
            parse_timestamp("2026-11-30 at 15:00 UTC"),
            Some(at(1_796_050_800))
        );
        assert_eq!(
            parse_timestamp("2026-11-30 at 17:00:00 +02:00"),
            Some(at(1_796_050_800))
        );
        // Minutes and seconds may be left out, as ISO 8601 allows; the moment is still named.
        assert_eq!(
            parse_timestamp("2026-11-30 at 15 UTC"),
            Some(at(1_796_050_800))
        );
        assert_eq!(
            parse_timestamp("2026-11-30T15:00Z"),
            Some(at(1_796_050_800))
        );
        assert_eq!(
            parse_timestamp("2026-11-30 15:00:00 UTC"),
            Some(at(1_796_050_800))
        );
        for bad in [
            "2026-11-30 at 15:00",
            "2026-11-30 at 15:00 PST",
            "2026-11-30T15:00:00.Z",
            "2026-11-30T15:00:00+0é0",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-11-30T25:00:00Z",
            "2026-11-30T15:00:00",
            "2026-11-30T15:00:00+2",
            "not a date at all, no",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn absolute_hints_in_the_past_are_dropped() {
        let now = at(1_796_050_800);
        assert_eq!(
            HintFormat::At.parse("2026-11-30T14:00:00Z", None, now),
            None
        );
        assert_eq!(
            HintFormat::At.parse("2026-11-30T15:00:20Z", None, now),
            Some(Duration::from_secs(20))
        );
        assert_eq!(
            HintFormat::At.parse("Mon, 30 Nov 2026 15:01:00 GMT", None, now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            HintFormat::Epoch.parse("1796050860", None, now),
            Some(Duration::from_secs(60))
        );
    }

    #[test]
    fn excessive_hints_are_saturated_and_malformed_ones_dropped() {
        let now = at(0);
        assert_eq!(
            HintFormat::Seconds.parse("604800", None, now),
            Some(MAX_HINT)
        );
        assert_eq!(
            HintFormat::Seconds.parse("604801", None, now),
            Some(MAX_HINT)
        );
        assert_eq!(
            HintFormat::Duration.parse("999999h", None, now),
            Some(MAX_HINT)
        );
        assert_eq!(HintFormat::Seconds.parse("1e9", None, now), None);
        assert_eq!(HintFormat::Seconds.parse("-5", None, now), None);
    }

    #[test]
    fn clock_times_need_a_zone_and_roll_to_the_next_day() {
        // 2026-11-30T14:00:00Z
        let now = at(1_796_047_200);
        assert_eq!(
            HintFormat::Clock.parse("3pm", Some("UTC"), now),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(
            HintFormat::Clock.parse("3:30 PM", Some("Z"), now),
            Some(Duration::from_secs(5400))
        );
        assert_eq!(
            HintFormat::Clock.parse("13:00", Some("+00:00"), now),
            Some(Duration::from_secs(23 * 3600))
        );
        assert_eq!(
            HintFormat::Clock.parse("5pm", Some("+02:00"), now),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(HintFormat::Clock.parse("3pm", None, now), None);
        assert_eq!(HintFormat::Clock.parse("3pm", Some("PST"), now), None);
        assert_eq!(HintFormat::Clock.parse("13pm", Some("UTC"), now), None);
        assert_eq!(HintFormat::Clock.parse("15", Some("UTC"), now), None);
    }

    #[test]
    fn clock_times_in_a_named_zone_follow_its_rules() {
        let clock = |value, zone, now| HintFormat::Clock.parse(value, Some(zone), at(now));
        let hours = |h: f64| Some(Duration::from_secs_f64(h * 3600.0));
        // 2026-11-30T14:00:00Z: Warsaw is at +01:00, Los Angeles at -08:00.
        let winter = 1_796_047_200;
        assert_eq!(clock("5pm", "Europe/Warsaw", winter), hours(2.0));
        assert_eq!(clock("3pm", "America/Los_Angeles", winter), hours(9.0));
        assert_eq!(clock("5pm", "europe/warsaw", winter), hours(2.0));
        // 2026-07-01T12:00:00Z: Warsaw keeps summer time, +02:00.
        assert_eq!(clock("5pm", "Europe/Warsaw", 1_782_907_200), hours(3.0));
        // 2026-03-29T00:00:00Z, 01:00 in Warsaw: its clocks skip 02:00–03:00 that night, so
        // 2:30 is read as 03:30 summer time.
        assert_eq!(clock("2:30am", "Europe/Warsaw", 1_774_742_400), hours(1.5));
        // 2026-10-25T00:00:00Z, 02:00 summer time in Warsaw: 02:30 comes twice; the first.
        assert_eq!(clock("2:30am", "Europe/Warsaw", 1_792_886_400), hours(0.5));
        // Names the database does not hold, and abbreviations, are no zone.
        for zone in ["PST", "Mars/Olympus", "Etc/Unknown", "", "Europe/"] {
            assert_eq!(clock("5pm", zone, winter), None, "{zone:?}");
        }
    }
}
