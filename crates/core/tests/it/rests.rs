//! A turn before a candidate that rests in the shared health ledger (S2), or after one that
//! stayed silent (S5). A resting candidate is passed over when
//! another candidate can serve, waited for within the policy when it is the last, a stop at
//! once (with the deadline) beyond it. No rest counts as an attempt.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rebound_core::{
    Action, Caller, Class, Classification, Evidence, Policy, Rest, StopReason, Turn, WaitKind,
};

use crate::{CATALOGUE, now};

fn ledger_evidence() -> Evidence {
    Evidence {
        body: Some("rebound: candidate `primary` cools down".to_owned()),
        ..Evidence::default()
    }
}

fn rest(turn: &mut Turn, class: Class, until: SystemTime, behind_probe: bool) -> Action {
    let evidence = ledger_evidence();
    let classification: Classification = CATALOGUE.classify(&evidence, now());
    turn.on_rest(
        Rest {
            until,
            class,
            behind_probe,
            evidence: &evidence,
            classification: &classification,
        },
        now(),
    )
}

fn route(candidates: usize) -> Turn {
    let policies = (0..candidates)
        .map(|_| Arc::new(Policy::interactive()))
        .collect();
    Turn::new(policies, Caller::Session)
}

#[test]
fn a_resting_candidate_with_another_after_it_is_passed_over_without_an_attempt() {
    let mut turn = route(2);
    let action = rest(
        &mut turn,
        Class::RateLimit,
        now() + Duration::from_secs(20),
        false,
    );
    assert_eq!(
        action,
        Action::Fallback {
            candidate: 1,
            class: Class::RateLimit
        }
    );
    assert_eq!(turn.candidate(), 1);
    assert_eq!(turn.attempt(), 1, "no attempt was sent");
    // Behind another request's probe, too.
    let mut turn = route(2);
    let action = rest(
        &mut turn,
        Class::Transient,
        now() + Duration::from_secs(60),
        true,
    );
    assert!(matches!(action, Action::Fallback { candidate: 1, .. }));
}

#[test]
fn the_last_candidate_waits_out_a_cooldown_its_retry_cap_accepts_spending_a_retry() {
    let mut turn = route(1);
    let Action::Retry(wait) = rest(
        &mut turn,
        Class::RateLimit,
        now() + Duration::from_secs(2),
        false,
    ) else {
        panic!("expected a wait");
    };
    assert_eq!(wait.delay, Duration::from_secs(2));
    assert_eq!(wait.kind, WaitKind::Cooldown);
    assert_eq!(
        wait.status.text(now()),
        "Retrying in 2s · attempt 1/10 · candidate cooling down"
    );
    assert_eq!(turn.retries(Class::RateLimit), 1);
    assert_eq!(turn.attempt(), 1, "a rest sends nothing");
    assert_eq!(turn.waited(), Duration::from_secs(2));
}

#[test]
fn a_cooldown_beyond_the_policy_stops_at_once_with_its_deadline() {
    let mut turn = route(1);
    // Interactive rate limits wait at most 10 × 30 s; a reset an hour away is not waited for.
    let until = now() + Duration::from_secs(3600);
    let Action::Stop(diagnostics) = rest(&mut turn, Class::RateLimit, until, false) else {
        panic!("expected a stop");
    };
    assert_eq!(diagnostics.reason, StopReason::Resting);
    assert_eq!(diagnostics.attempts, 0, "nothing was sent");
    assert_eq!(
        diagnostics.error.as_deref(),
        Some("rebound: candidate `primary` cools down")
    );
    // `hard` (a quota wall) has no wait at all in the interactive preset.
    let mut turn = route(1);
    let until = now() + Duration::from_secs(5);
    assert!(matches!(
        rest(&mut turn, Class::Hard, until, false),
        Action::Stop(d) if d.reason == StopReason::Resting
    ));
}

#[test]
fn a_cooldown_longer_than_the_cap_is_waited_in_capped_steps_when_the_budget_spans_it() {
    let mut turn = route(1);
    // Interactive transient: 10 retries capped at 8 s span 80 s; a 20 s rest is accepted
    // and waited 8 s at a time.
    let until = now() + Duration::from_secs(20);
    let Action::Retry(wait) = rest(&mut turn, Class::Transient, until, false) else {
        panic!("expected a wait");
    };
    assert_eq!(wait.delay, Duration::from_secs(8));
    assert_eq!(turn.retries(Class::Transient), 1);
    // 90 s is more than the 9 retries left can span: a stop at once.
    let until = now() + Duration::from_secs(90);
    assert!(matches!(
        rest(&mut turn, Class::Transient, until, false),
        Action::Stop(d) if d.reason == StopReason::Resting
    ));
}

#[test]
fn rests_spend_the_retry_budget_so_a_request_cannot_rest_forever() {
    let mut turn = route(1);
    for _ in 0..10 {
        assert!(matches!(
            rest(
                &mut turn,
                Class::Transient,
                now() + Duration::from_secs(1),
                false
            ),
            Action::Retry(_)
        ));
    }
    assert!(matches!(
        rest(&mut turn, Class::Transient, now() + Duration::from_secs(1), false),
        Action::Stop(d) if d.reason == StopReason::Exhausted
    ));
}

#[test]
fn behind_a_probe_the_last_candidate_waits_without_spending_budget_up_to_its_deadline() {
    let mut turn = route(1);
    let lease_end = now() + Duration::from_secs(60);
    let Action::Retry(wait) = rest(&mut turn, Class::Transient, lease_end, true) else {
        panic!("expected a wait");
    };
    assert_eq!(wait.delay, Duration::from_secs(60));
    assert_eq!(turn.retries(Class::Transient), 0);
    // A request deadline in 5 s caps the wait; at the deadline it stops.
    turn.set_deadline(Some(now() + Duration::from_secs(5)));
    let Action::Retry(wait) = rest(&mut turn, Class::Transient, lease_end, true) else {
        panic!("expected a wait");
    };
    assert_eq!(wait.delay, Duration::from_secs(5));
    turn.set_deadline(Some(now()));
    assert!(matches!(
        rest(&mut turn, Class::Transient, lease_end, true),
        Action::Stop(d) if d.reason == StopReason::Deadline
    ));
}

#[test]
fn a_cooldown_that_ends_after_the_requests_deadline_stops_at_once() {
    let mut turn = route(1);
    turn.set_deadline(Some(now() + Duration::from_secs(1)));
    assert!(matches!(
        rest(&mut turn, Class::RateLimit, now() + Duration::from_secs(2), false),
        Action::Stop(d) if d.reason == StopReason::Deadline
    ));
}

#[test]
fn a_silent_candidate_hands_over_to_the_next_at_once() {
    use rebound_core::{Failure, Phase, Safety, TransportKind};
    // S5: no headers within the first-byte timeout, or no content within the first-content
    // timeout: the next candidate, with no retry of the silent one.
    for transport in [TransportKind::Timeout, TransportKind::FirstContentTimeout] {
        let evidence = Evidence {
            transport: Some(transport),
            phase: Phase::Setup,
            body: Some("no answer".to_owned()),
            ..Evidence::default()
        };
        let classification = CATALOGUE.classify(&evidence, now());
        let failure = || Failure {
            evidence: &evidence,
            classification: &classification,
            safety: Safety::Replayable,
        };
        let mut turn = route(2);
        let action = turn.on_failure(failure(), now(), rebound_core::Jitter::new(0.5));
        assert_eq!(
            action,
            Action::Fallback {
                candidate: 1,
                class: Class::Transient
            },
            "{transport:?}"
        );
        // The last candidate retries it on its schedule.
        let action = turn.on_failure(failure(), now(), rebound_core::Jitter::new(0.5));
        assert!(matches!(action, Action::Retry(_)), "{transport:?}");
    }
}
