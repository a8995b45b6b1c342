//! Property tests of the invariants: every delay within its cap; never more than budget + 1
//! attempts per class; a phase change never resets; classes never share (T2–T4, B1–B3).

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use rebound_core::backoff::Jitter;
use rebound_core::hint::{Hint, HintSource};
use rebound_core::{
    Action, Caller, Catalogue, Class, Classification, Evidence, Failure, Phase, Policy, Safety,
    Turn,
};

use crate::{CATALOGUE, now};

#[derive(Clone, Debug)]
enum Event {
    Fail {
        status: u16,
        phase: Phase,
        hint_ms: Option<u64>,
    },
    Success,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        8 => (
            prop::sample::select(vec![429u16, 502, 503, 500, 529, 408]),
            prop::bool::ANY,
            prop::option::of(0u64..200_000),
        )
            .prop_map(|(status, stream, hint_ms)| Event::Fail {
                status,
                phase: if stream { Phase::Stream } else { Phase::Setup },
                hint_ms,
            }),
        1 => Just(Event::Success),
    ]
}

fn caller() -> impl Strategy<Value = Caller> {
    prop::sample::select(vec![Caller::Session, Caller::Subagent, Caller::OneShot])
}

fn classify(
    catalogue: &Catalogue,
    status: u16,
    phase: Phase,
    hint_ms: Option<u64>,
) -> (Evidence, Classification) {
    let evidence = Evidence {
        status: Some(status),
        phase,
        ..Evidence::default()
    };
    let mut c = catalogue.classify(&evidence, now());
    c.hint = hint_ms.map(|ms| Hint {
        delay: Duration::from_millis(ms),
        source: HintSource::RetryAfterMs,
    });
    (evidence, c)
}

fn cap(class: Class) -> Duration {
    match class {
        Class::RateLimit => Duration::from_secs(30),
        _ => Duration::from_secs(8),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn delays_stay_within_their_cap(
        retry in 1u32..=10,
        draw in any::<f64>(),
        hint_ms in prop::option::of(any::<u64>()),
    ) {
        let policy = Policy::interactive();
        for class in [Class::RateLimit, Class::Transient] {
            let hint = hint_ms.map(Duration::from_millis);
            let d = policy
                .for_class(class)
                .unwrap()
                .retry_delay(Caller::Session, retry, hint, Jitter::new(draw))
                .unwrap();
            prop_assert!(d <= cap(class), "{class} retry {retry}: {d:?}");
        }
    }

    #[test]
    fn hint_parsers_never_panic_and_never_exceed_the_bound(value in ".{0,40}", tz in ".{0,8}") {
        use rebound_core::hint::{HintFormat, MAX_HINT};
        for (_, format) in HintFormat::GROUPS {
            if let Some(d) = format.parse(&value, Some(&tz), now()) {
                prop_assert!(d <= MAX_HINT);
            }
        }
        let headers: rebound_core::Headers =
            [("retry-after", value.as_str()), ("retry-after-ms", tz.as_str())].into_iter().collect();
        if let Some(h) = rebound_core::retry_after::header_hint(Some(429), &headers, now()) {
            prop_assert!(h.delay <= MAX_HINT);
        }
    }

    /// C6, C9: a time of day in a named zone is the next such moment there: always found, and
    /// never more than a day and a clock change away, whatever the day and the zone's rules.
    #[test]
    fn a_time_of_day_in_a_named_zone_is_within_a_day(
        zone in prop::sample::select(vec![
            "Europe/Warsaw", "America/Los_Angeles", "Asia/Kolkata", "Australia/Lord_Howe",
            "Pacific/Chatham", "America/St_Johns", "Africa/Casablanca", "UTC",
        ]),
        hour in 1u32..=12,
        minute in 0u32..60,
        pm in any::<bool>(),
        secs in 1_700_000_000u64..2_100_000_000,
    ) {
        use rebound_core::hint::HintFormat;
        let value = format!("{hour}:{minute:02} {}", if pm { "pm" } else { "am" });
        let at = std::time::UNIX_EPOCH + Duration::from_secs(secs);
        let wait = HintFormat::Clock.parse(&value, Some(zone), at);
        prop_assert!(wait.is_some(), "{value} {zone} at {secs}");
        let wait = wait.unwrap_or_default();
        prop_assert!(wait > Duration::ZERO && wait <= Duration::from_secs(25 * 3600), "{wait:?}");
    }

    #[test]
    fn classification_never_panics_on_arbitrary_evidence(
        status in prop::option::of(any::<u16>()),
        body in ".{0,300}",
        header in ".{0,60}",
        provider in prop::option::of("[a-zA-Z]{0,10}"),
    ) {
        let evidence = Evidence {
            status,
            body: Some(body),
            provider,
            headers: [("retry-after", header.as_str()), ("x-should-retry", header.as_str())].into_iter().collect(),
            ..Evidence::default()
        };
        let c = CATALOGUE.classify(&evidence, now());
        prop_assert_eq!(c.class().is_none(), matches!(c.verdict, rebound_core::Verdict::Unclassified(_)));
    }

    #[test]
    fn attempt_numbering_is_one_based(retry in 0u32..64) {
        let p = Policy::interactive().transient;
        let d = p.retry_delay(Caller::Session, retry, None, Jitter::NONE);
        if retry == 0 || retry > 10 {
            prop_assert!(d.is_none());
        } else {
            let expected = Duration::from_secs(1u64 << (retry - 1).min(3));
            prop_assert_eq!(d, Some(expected));
        }
    }

    #[test]
    fn budgets_hold_across_phases_and_classes(
        events in prop::collection::vec(event(), 1..120),
        caller in caller(),
        draw in 0.0f64..=1.0,
    ) {
        let catalogue = &*CATALOGUE;
        let mut turn = Turn::single(Arc::new(Policy::interactive()), caller);
        // Attempts per class since the last complete response, the first one included.
        let mut failed = [0u32; 2];
        for event in events {
            match event {
                Event::Success => {
                    turn.on_success();
                    failed = [0, 0];
                }
                Event::Fail { status, phase, hint_ms } => {
                    let (evidence, c) = classify(catalogue, status, phase, hint_ms);
                    let class = c.class().unwrap();
                    let slot = usize::from(class != Class::RateLimit);
                    let other = if class == Class::RateLimit { Class::Transient } else { Class::RateLimit };
                    let before = (turn.retries(class), turn.retries(other));
                    let action = turn.on_failure(
                        Failure { evidence: &evidence, classification: &c, safety: Safety::Replayable },
                        now(),
                        Jitter::new(draw),
                    );
                    failed[slot] += 1;
                    prop_assert!(failed[slot] <= 11, "{class}: {} failed attempts", failed[slot]);
                    // Classes never share: the other counter did not move.
                    prop_assert_eq!(turn.retries(other), before.1);
                    match action {
                        Action::Retry(wait) => {
                            // A phase change never resets: the counter only grows.
                            prop_assert_eq!(turn.retries(class), before.0 + 1);
                            prop_assert!(wait.delay <= cap(class));
                        }
                        Action::Stop(d) => {
                            prop_assert_eq!(d.retry_attempt, 10);
                            prop_assert_eq!(failed[slot], 11);
                            return Ok(());
                        }
                        Action::Fallback { .. } => prop_assert!(false, "a single candidate cannot fall back"),
                    }
                }
            }
        }
    }
}
