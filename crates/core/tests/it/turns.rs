//! The turn state machine in virtual time: exact waits, exact attempt counts (B1–B6, D2–D4,
//! R3, R4, T3, T4).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rebound_core::backoff::{Backoff, Jitter};
use rebound_core::classification::{Confidence, Scope};
use rebound_core::policy::{ClassPolicy, DEFAULT_RETRIES, Exhausted, Limit, RetryPolicy};
use rebound_core::{
    Action, Caller, Class, Classification, Code, Diagnostics, Evidence, Failure, Phase, Policy,
    Safety, StopReason, Turn, UnclassifiedReason, Verdict, WaitKind,
};

use crate::{CATALOGUE, now};

fn evidence(status: u16, body: &str, phase: Phase) -> Evidence {
    Evidence {
        status: Some(status),
        body: Some(body.to_owned()),
        phase,
        ..Evidence::default()
    }
}

fn e502() -> Evidence {
    evidence(502, "Bad Gateway", Phase::Setup)
}

fn e429() -> Evidence {
    evidence(429, "Too Many Requests", Phase::Setup)
}

/// Drives one failure through the turn at virtual time `clock`.
fn fail(turn: &mut Turn, evidence: &Evidence, clock: SystemTime, draw: f64) -> Action {
    let classification = CATALOGUE.classify(evidence, clock);
    turn.on_failure(
        Failure {
            evidence,
            classification: &classification,
            safety: Safety::Replayable,
        },
        clock,
        Jitter::new(draw),
    )
}

fn stopped(action: Action) -> Diagnostics {
    match action {
        Action::Stop(d) => *d,
        other => panic!("expected a stop, got {other:?}"),
    }
}

fn waited(action: &Action) -> Duration {
    match action {
        Action::Retry(wait) => wait.delay,
        other => panic!("expected a retry, got {other:?}"),
    }
}

fn session() -> Turn {
    Turn::single(Arc::new(Policy::interactive()), Caller::Session)
}

#[test]
fn ten_502s_then_success_waits_exactly_the_transient_schedule() {
    let mut turn = session();
    let mut clock = now();
    let mut waits = Vec::new();
    for _ in 0..10 {
        let action = fail(&mut turn, &e502(), clock, 0.9);
        let delay = waited(&action);
        waits.push(delay.as_millis());
        clock += delay;
    }
    // The 11th attempt succeeds.
    assert_eq!(turn.attempt(), 11);
    turn.on_success();
    assert_eq!(
        waits,
        [1000, 2000, 4000, 8000, 8000, 8000, 8000, 8000, 8000, 8000]
    );
    assert_eq!(
        clock.duration_since(now()).unwrap(),
        Duration::from_secs(63)
    );
}

#[test]
fn eleven_502s_exhaust_with_one_stop_and_retry_attempt_10() {
    let mut turn = session();
    let mut clock = now();
    for _ in 0..10 {
        clock += waited(&fail(&mut turn, &e502(), clock, 0.0));
    }
    let d = stopped(fail(&mut turn, &e502(), clock, 0.0));
    assert_eq!(d.reason, StopReason::Exhausted);
    assert_eq!(d.retry_attempt, 10);
    assert_eq!(d.attempts, 11);
    assert_eq!(d.class, "transient");
    assert_eq!(d.code.as_ref().map(Code::as_str), Some("bad_gateway"));
    assert_eq!(d.rule_id.as_deref(), Some("generic.http_502"));
    assert_eq!(d.provider_status, Some(502));
    assert_eq!(d.waited_ms, Duration::from_secs(63));
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["retryAttempt"], 10);
    assert_eq!(json["providerStatus"], 502);
}

#[test]
fn rate_limit_schedule_with_fixed_draws() {
    let mut turn = session();
    let waits: Vec<u128> = (0..10)
        .map(|_| waited(&fail(&mut turn, &e429(), now(), 1.0)).as_millis())
        .collect();
    assert_eq!(
        waits,
        [
            2500, 5000, 10_000, 20_000, 30_000, 30_000, 30_000, 30_000, 30_000, 30_000
        ]
    );
    assert_eq!(
        stopped(fail(&mut turn, &e429(), now(), 1.0)).retry_attempt,
        10
    );
}

#[test]
fn server_hints_are_honoured_and_capped() {
    let mut turn = session();
    let mut hinted = e429();
    hinted.headers.insert("retry-after-ms", "300");
    let action = fail(&mut turn, &hinted, now(), 1.0);
    assert_eq!(waited(&action), Duration::from_millis(300));
    let Action::Retry(wait) = action else {
        unreachable!()
    };
    assert_eq!(wait.kind, WaitKind::Hint);
    let mut long = e502();
    long.headers.insert("retry-after", "120");
    assert_eq!(
        waited(&fail(&mut turn, &long, now(), 0.0)),
        Duration::from_secs(8)
    );
}

#[test]
fn classes_keep_separate_budgets() {
    let mut turn = session();
    for _ in 0..10 {
        waited(&fail(&mut turn, &e429(), now(), 0.0));
        waited(&fail(&mut turn, &e502(), now(), 0.0));
    }
    assert_eq!(turn.retries(Class::RateLimit), 10);
    assert_eq!(turn.retries(Class::Transient), 10);
    assert_eq!(
        stopped(fail(&mut turn, &e429(), now(), 0.0)).retry_attempt,
        10
    );
}

#[test]
fn setup_and_stream_share_one_counter() {
    let mut turn = session();
    for i in 0..10 {
        let phase = if i % 2 == 0 {
            Phase::Setup
        } else {
            Phase::Stream
        };
        let action = fail(&mut turn, &evidence(502, "", phase), now(), 0.0);
        waited(&action);
        assert_eq!(turn.retries(Class::Transient), i + 1);
    }
    let mut cut = Evidence {
        transport: Some(rebound_core::TransportKind::Truncated),
        phase: Phase::Stream,
        ..Evidence::default()
    };
    cut.body = Some("end of file before message length reached".into());
    let d = stopped(fail(&mut turn, &cut, now(), 0.0));
    assert_eq!(d.retry_attempt, 10);
    assert_eq!(d.phase, Phase::Stream);
}

#[test]
fn a_complete_response_resets_both_counters_and_partial_output_does_not() {
    let mut turn = session();
    for _ in 0..10 {
        waited(&fail(&mut turn, &e502(), now(), 0.0));
    }
    // A stream that delivered partial output and then broke is not a success: the host does
    // not call on_success, and the next failure exhausts.
    let d = stopped(fail(
        &mut turn,
        &evidence(502, "", Phase::Stream),
        now(),
        0.0,
    ));
    assert_eq!(d.retry_attempt, 10);

    let mut turn = session();
    for _ in 0..10 {
        waited(&fail(&mut turn, &e502(), now(), 0.0));
        waited(&fail(&mut turn, &e429(), now(), 0.0));
    }
    turn.on_success(); // a tool-call response completed
    assert_eq!(turn.retries(Class::Transient), 0);
    assert_eq!(turn.retries(Class::RateLimit), 0);
    assert_eq!(turn.attempt(), 1);
    assert_eq!(
        waited(&fail(&mut turn, &e502(), now(), 0.0)),
        Duration::from_secs(1)
    );
}

#[test]
fn infinite_is_for_sessions_and_subagents_only() {
    let policy = Arc::new(Policy::interactive().with_infinite_retries());
    for caller in [Caller::Session, Caller::Subagent] {
        let mut turn = Turn::single(Arc::clone(&policy), caller);
        for _ in 0..100 {
            assert!(waited(&fail(&mut turn, &e502(), now(), 0.0)) <= Duration::from_secs(8));
        }
        let Action::Retry(wait) = fail(&mut turn, &e502(), now(), 0.0) else {
            panic!()
        };
        assert_eq!(wait.status.text(now()), "Retrying in 8s · attempt 101");
    }
    let mut one_shot = Turn::single(policy, Caller::OneShot);
    for _ in 0..DEFAULT_RETRIES {
        waited(&fail(&mut one_shot, &e502(), now(), 0.0));
    }
    assert_eq!(
        stopped(fail(&mut one_shot, &e502(), now(), 0.0)).retry_attempt,
        10
    );
}

#[test]
fn status_counts_down_to_the_last_retry() {
    let mut turn = session();
    let mut last = None;
    for _ in 0..9 {
        last = Some(fail(&mut turn, &e502(), now(), 0.0));
    }
    let Some(Action::Retry(wait)) = last else {
        panic!()
    };
    assert_eq!(wait.status.text(now()), "Retrying in 8s · attempt 9/10");
    assert_eq!(
        wait.status.text(now() + Duration::from_millis(7400)),
        "Retrying in 1s · attempt 9/10"
    );
    assert_eq!(
        wait.status.text(now() + Duration::from_secs(8)),
        "Retrying in 0s · attempt 9/10"
    );
    let json = serde_json::to_value(&wait.status).unwrap();
    assert_eq!(json["retryDelayMs"], 8000);
    assert_eq!(json["budget"], 10);
}

#[test]
fn terminal_unclassified_unsafe_and_forbidden_stop_at_once() {
    let mut turn = session();
    let overflow = evidence(
        400,
        r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","code":"context_length_exceeded"}}"#,
        Phase::Setup,
    );
    let d = stopped(fail(&mut turn, &overflow, now(), 0.0));
    assert_eq!(
        (d.reason, d.retry_attempt, d.attempts),
        (StopReason::Terminal, 0, 1)
    );

    let d = stopped(fail(
        &mut session(),
        &evidence(418, "teapot", Phase::Setup),
        now(),
        0.0,
    ));
    assert_eq!(d.reason, StopReason::Unclassified);
    assert_eq!(d.class, "unclassified");

    let e = e502();
    let c = CATALOGUE.classify(&e, now());
    let d = stopped(session().on_failure(
        Failure {
            evidence: &e,
            classification: &c,
            safety: Safety::Ambiguous,
        },
        now(),
        Jitter::NONE,
    ));
    assert_eq!(d.reason, StopReason::Unsafe);

    let mut forbidden = e502();
    forbidden.headers.insert("x-should-retry", "false");
    let d = stopped(fail(&mut session(), &forbidden, now(), 0.0));
    assert_eq!(d.reason, StopReason::RetryForbidden);

    let auth = evidence(401, r#"{"error":{"code":"invalid_api_key"}}"#, Phase::Setup);
    let d = stopped(fail(&mut session(), &auth, now(), 0.0));
    assert_eq!((d.reason, d.class), (StopReason::Exhausted, "hard"));
}

/// Candidate 0 waits for resets up to 60 s for `hard` and `rate_limit`, retries rate limits
/// twice, then skips; candidate 1 is a new dynamic candidate (immediate skip).
fn durable_route() -> Turn {
    let first = Policy {
        rate_limit: ClassPolicy::retrying(
            RetryPolicy::new(
                Limit::Count(2),
                Backoff::doubling(Duration::from_secs(1), Duration::from_secs(4)),
            ),
            Exhausted::Skip,
        )
        .with_reset_wait(Duration::from_secs(60)),
        transient: ClassPolicy::immediate(Exhausted::Stop),
        hard: ClassPolicy::immediate(Exhausted::Skip).with_reset_wait(Duration::from_secs(60)),
    };
    Turn::new(
        vec![Arc::new(first), Arc::new(Policy::immediate_skip())],
        Caller::Session,
    )
}

fn quota(retry_after: &str) -> Evidence {
    let mut e = evidence(
        429,
        r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
        Phase::Setup,
    );
    e.headers.insert("retry-after", retry_after);
    e
}

#[test]
fn reset_wait_just_inside_the_maximum_is_waited_once_without_spending_budget() {
    let mut turn = durable_route();
    let Action::Retry(wait) = fail(&mut turn, &quota("60"), now(), 0.0) else {
        panic!()
    };
    assert_eq!(
        (wait.kind, wait.delay),
        (WaitKind::ResetWait, Duration::from_secs(60))
    );
    assert_eq!(turn.retries(Class::Hard), 0);
    // The same candidate and class may not reset-wait twice in one route cycle: skip.
    assert_eq!(
        fail(&mut turn, &quota("60"), now(), 0.0),
        Action::Fallback {
            candidate: 1,
            class: Class::Hard
        }
    );
    // The last candidate skips too: the route ends.
    let d = stopped(fail(&mut turn, &quota("60"), now(), 0.0));
    assert_eq!((d.reason, d.candidate), (StopReason::RouteEnded, 1));
}

#[test]
fn reset_wait_just_outside_the_maximum_skips() {
    let mut turn = durable_route();
    assert_eq!(
        fail(&mut turn, &quota("61"), now(), 0.0),
        Action::Fallback {
            candidate: 1,
            class: Class::Hard
        }
    );
}

#[test]
fn reset_wait_then_retry_budget_then_skip() {
    let mut turn = durable_route();
    let mut limited = e429();
    limited.headers.insert("retry-after", "30");
    let kinds: Vec<WaitKind> = (0..3)
        .map(|_| match fail(&mut turn, &limited, now(), 0.0) {
            Action::Retry(w) => w.kind,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, [WaitKind::ResetWait, WaitKind::Hint, WaitKind::Hint]);
    assert_eq!(turn.retries(Class::RateLimit), 2);
    assert_eq!(
        fail(&mut turn, &limited, now(), 0.0),
        Action::Fallback {
            candidate: 1,
            class: Class::RateLimit
        }
    );
    assert_eq!(turn.retries(Class::RateLimit), 0);
}

#[test]
fn every_code_drives_its_class_pipeline() {
    for (code, class) in CATALOGUE.codes() {
        let classification = Classification {
            verdict: class.map_or(
                Verdict::Unclassified(UnclassifiedReason::NoClass),
                Verdict::Classified,
            ),
            code: Some(code.clone()),
            confidence: Confidence::High,
            scope: Scope::Request,
            rule_id: None,
            catalogue_version: CATALOGUE.version().into(),
            hint: None,
            retry_forbidden: false,
            phase: Phase::Setup,
            status: None,
        };
        let e = Evidence::default();
        let action = session().on_failure(
            Failure {
                evidence: &e,
                classification: &classification,
                safety: Safety::Replayable,
            },
            now(),
            Jitter::NONE,
        );
        match (class, action) {
            (Some(Class::RateLimit), Action::Retry(w)) => {
                assert_eq!(w.delay, Duration::from_secs(2), "{code}")
            }
            (Some(Class::Transient), Action::Retry(w)) => {
                assert_eq!(w.delay, Duration::from_secs(1), "{code}")
            }
            (Some(Class::Hard), Action::Stop(d)) => {
                assert_eq!(d.reason, StopReason::Exhausted, "{code}")
            }
            (Some(Class::Terminal), Action::Stop(d)) => {
                assert_eq!(d.reason, StopReason::Terminal, "{code}")
            }
            (None, Action::Stop(d)) => assert_eq!(d.reason, StopReason::Unclassified, "{code}"),
            (class, action) => panic!("{code} ({class:?}) → {action:?}"),
        }
    }
}

#[test]
fn one_policy_object_serves_every_caller() {
    let policy = Arc::new(Policy::interactive());
    let schedules: Vec<Vec<u128>> = [Caller::Session, Caller::Subagent, Caller::OneShot]
        .into_iter()
        .map(|caller| {
            let mut turn = Turn::single(Arc::clone(&policy), caller);
            (0..10)
                .map(|_| waited(&fail(&mut turn, &e502(), now(), 0.0)).as_millis())
                .collect()
        })
        .collect();
    assert_eq!(schedules[0], schedules[1]);
    assert_eq!(schedules[1], schedules[2]);
}

#[test]
fn a_snapshot_restores_the_same_decisions() {
    let policy = Arc::new(Policy::interactive());
    let mut turn = Turn::single(Arc::clone(&policy), Caller::Session);
    for _ in 0..4 {
        waited(&fail(&mut turn, &e502(), now(), 0.0));
    }
    let snapshot = turn.snapshot();
    let json = serde_json::to_string(&snapshot).unwrap();
    let mut restored = Turn::restore(
        vec![policy],
        Caller::Session,
        &serde_json::from_str(&json).unwrap(),
    );
    assert_eq!(restored.retries(Class::Transient), 4);
    assert_eq!(
        waited(&fail(&mut restored, &e502(), now(), 0.0)),
        waited(&fail(&mut turn, &e502(), now(), 0.0))
    );
    assert_eq!(restored.snapshot(), turn.snapshot());
}

#[test]
fn a_deadline_stops_before_a_wait_that_would_end_after_it_whatever_the_budget() {
    let mut turn = session();
    let start = now();
    turn.set_deadline(Some(start + Duration::from_secs(3)));
    // 502s: 1 s, then 2 s (ending exactly at the deadline: that attempt may start).
    let mut clock = start;
    for expected in [1, 2] {
        let delay = waited(&fail(&mut turn, &e502(), clock, 0.0));
        assert_eq!(delay, Duration::from_secs(expected));
        clock += delay;
    }
    // The next wait (4 s) would end after the deadline: stop now, budget left or not.
    let diagnostics = stopped(fail(&mut turn, &e502(), clock, 0.0));
    assert_eq!(diagnostics.reason, StopReason::Deadline);
    assert_eq!(diagnostics.reason.as_str(), "deadline");
    assert_eq!(diagnostics.attempts, 3);
    // Lifted, the same turn retries on.
    turn.set_deadline(None);
    waited(&fail(&mut turn, &e502(), clock, 0.0));
}

#[test]
fn a_deadline_that_has_passed_starts_no_fallback() {
    let route = vec![
        Arc::new(Policy::immediate_skip()),
        Arc::new(Policy::interactive()),
    ];
    let mut turn = Turn::new(route.clone(), Caller::Session);
    turn.set_deadline(Some(now()));
    let late = now() + Duration::from_millis(1);
    assert_eq!(
        stopped(fail(&mut turn, &e502(), late, 0.0)).reason,
        StopReason::Deadline
    );
    let mut turn = Turn::new(route, Caller::Session);
    turn.set_deadline(Some(now()));
    assert!(matches!(
        fail(&mut turn, &e502(), now(), 0.0),
        Action::Fallback { .. }
    ));
}

#[test]
fn a_context_overflow_switches_to_the_first_larger_target_ahead_and_never_back() {
    let overflow = Code::new("context_overflow");
    let switches = rebound_core::Switches {
        by_code: vec![(overflow.clone(), vec![1, 2, 0])],
        windows: vec![Some(128_000), Some(100_000), Some(1_000_000)],
    };
    // Position 1 is no larger than 0: skipped; 2 is.
    assert_eq!(switches.target(&overflow, 0, 3), Some(2));
    // From the largest, nothing ahead: no switch, and never back to 0.
    assert_eq!(switches.target(&overflow, 2, 3), None);
    assert_eq!(switches.target(&Code::new("invalid_request"), 0, 3), None);
    // Undeclared windows do not block a switch.
    let undeclared = rebound_core::Switches {
        by_code: vec![(overflow.clone(), vec![1])],
        windows: vec![None, None],
    };
    assert_eq!(undeclared.target(&overflow, 0, 2), Some(1));
}
