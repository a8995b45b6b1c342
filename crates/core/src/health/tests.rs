use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::*;
use crate::classification::{Code, Confidence, Verdict};
use crate::evidence::Phase;
use crate::hint::{Hint, HintSource};

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

fn failure(class: Class, hint_secs: Option<u64>) -> Classification {
    Classification {
        verdict: Verdict::Classified(class),
        code: Some(Code::new("test_code")),
        confidence: Confidence::High,
        scope: Scope::Model,
        rule_id: Some(Arc::from("test.rule")),
        catalogue_version: Arc::from("test"),
        hint: hint_secs.map(|s| Hint {
            delay: Duration::from_secs(s),
            source: HintSource::RetryAfterSeconds,
        }),
        retry_forbidden: false,
        phase: Phase::Setup,
        status: Some(429),
    }
}

fn ledger() -> Health {
    Health::new(HealthSettings::default())
}

#[test]
fn a_hint_cools_the_candidate_until_its_deadline() {
    let mut h = ledger();
    let change = h.failed("a", &failure(Class::RateLimit, Some(2)), t(0));
    assert_eq!(change.map(|c| c.to), Some(HealthState::Cooling));
    assert_eq!(
        h.gate("a", t(1)).0,
        Gate::Rest {
            until: t(2),
            class: Class::RateLimit,
            behind_probe: false,
        }
    );
    assert_eq!(h.gate("b", t(1)).0, Gate::Pass);
}

#[test]
fn a_later_nearer_deadline_never_shortens_a_farther_one() {
    let mut h = ledger();
    let _ = h.failed("a", &failure(Class::RateLimit, Some(20)), t(0));
    let change = h.failed("a", &failure(Class::RateLimit, Some(2)), t(1));
    assert_eq!(change, None);
    assert_eq!(
        h.gate("a", t(5)).0,
        Gate::Rest {
            until: t(20),
            class: Class::RateLimit,
            behind_probe: false,
        }
    );
    // A farther one extends it.
    let _ = h.failed("a", &failure(Class::RateLimit, Some(30)), t(5));
    assert_eq!(
        h.gate("a", t(25)).0,
        Gate::Rest {
            until: t(35),
            class: Class::RateLimit,
            behind_probe: false,
        }
    );
}

#[test]
fn a_quota_reset_hours_away_is_honoured() {
    let mut h = ledger();
    let _ = h.failed("a", &failure(Class::Hard, Some(5 * 3600)), t(0));
    assert_eq!(
        h.gate("a", t(3600)).0,
        Gate::Rest {
            until: t(5 * 3600),
            class: Class::Hard,
            behind_probe: false,
        }
    );
}

#[test]
fn consecutive_transient_failures_open_a_growing_capped_circuit() {
    let mut h = Health::new(HealthSettings {
        window_cap: Duration::from_secs(4),
        ..HealthSettings::default()
    });
    assert_eq!(h.failed("a", &failure(Class::Transient, None), t(0)), None);
    assert_eq!(h.failed("a", &failure(Class::Transient, None), t(0)), None);
    assert_eq!(h.gate("a", t(0)).0, Gate::Pass);
    let _ = h.failed("a", &failure(Class::Transient, None), t(0));
    assert_eq!(h.state("a"), HealthState::Open);
    assert_eq!(
        h.gate("a", t(0)).0,
        Gate::Rest {
            until: t(1),
            class: Class::Transient,
            behind_probe: false,
        }
    );
    // Each failed probe doubles the window, up to the cap.
    let mut now = t(1);
    for window in [2, 4, 4] {
        assert_eq!(h.gate("a", now).0, Gate::Probe);
        let _ = h.failed("a", &failure(Class::Transient, None), now);
        assert_eq!(h.state("a"), HealthState::Open);
        let until = now + Duration::from_secs(window);
        assert_eq!(
            h.gate("a", now).0,
            Gate::Rest {
                until,
                class: Class::Transient,
                behind_probe: false,
            }
        );
        now = until;
    }
}

#[test]
fn failures_of_attempts_sent_before_the_circuit_opened_do_not_grow_its_window() {
    // S1, S3: 100 concurrent requests all passed the gate before the first failure came
    // back. The third failure opens the circuit for the first window; the 97 after it are
    // the same outage seen again, not failed probes: the window stays 1 s (re-armed from
    // the latest), and only the failed probe doubles it.
    let mut h = ledger();
    let now = t(0);
    for _ in 0..100 {
        let _ = h.failed("a", &failure(Class::Transient, None), now);
    }
    assert_eq!(h.state("a"), HealthState::Open);
    assert_eq!(
        h.gate("a", now).0,
        Gate::Rest {
            until: t(1),
            class: Class::Transient,
            behind_probe: false,
        }
    );
    // A late one re-arms the window from its own time: it may extend, never shorten.
    let late = now + Duration::from_millis(500);
    let _ = h.failed("a", &failure(Class::Transient, None), late);
    let until = late + Duration::from_secs(1);
    assert_eq!(
        h.gate("a", late).0,
        Gate::Rest {
            until,
            class: Class::Transient,
            behind_probe: false,
        }
    );
    assert_eq!(h.gate("a", until).0, Gate::Probe);
    let _ = h.failed("a", &failure(Class::Transient, None), until);
    assert_eq!(
        h.gate("a", until).0,
        Gate::Rest {
            until: until + Duration::from_secs(2),
            class: Class::Transient,
            behind_probe: false,
        }
    );
}

#[test]
fn exactly_one_caller_probes_and_its_success_closes() {
    let mut h = ledger();
    let _ = h.failed("a", &failure(Class::RateLimit, Some(2)), t(0));
    let gates: Vec<Gate> = (0..50).map(|_| h.gate("a", t(2)).0).collect();
    assert_eq!(gates.iter().filter(|g| **g == Gate::Probe).count(), 1);
    assert_eq!(h.state("a"), HealthState::Probing);
    let change = h.succeeded("a");
    assert_eq!(change.map(|c| c.to), Some(HealthState::Closed));
    assert_eq!(h.gate("a", t(2)).0, Gate::Pass);
    let (_, entry) = h.entries().next().expect("an entry");
    assert_eq!(entry.last_probe.and_then(|p| p.succeeded), Some(true));
}

#[test]
fn a_probe_that_never_reports_hands_over_after_its_lease() {
    let mut h = ledger();
    let _ = h.failed("a", &failure(Class::RateLimit, Some(2)), t(0));
    assert_eq!(h.gate("a", t(2)).0, Gate::Probe);
    assert_eq!(
        h.gate("a", t(3)).0,
        Gate::Rest {
            until: t(62),
            class: Class::RateLimit,
            behind_probe: true,
        }
    );
    assert_eq!(h.gate("a", t(62)).0, Gate::Probe);
}

#[test]
fn request_scoped_failures_leave_health_alone() {
    let mut h = ledger();
    let mut bad = failure(Class::Terminal, None);
    bad.scope = Scope::Request;
    for _ in 0..10 {
        assert_eq!(h.failed("a", &bad, t(0)), None);
    }
    assert_eq!(h.gate("a", t(0)).0, Gate::Pass);
}

#[test]
fn a_success_resets_the_consecutive_count() {
    let mut h = ledger();
    let _ = h.failed("a", &failure(Class::Transient, None), t(0));
    let _ = h.failed("a", &failure(Class::Transient, None), t(0));
    let _ = h.succeeded("a");
    let _ = h.failed("a", &failure(Class::Transient, None), t(0));
    assert_eq!(h.gate("a", t(0)).0, Gate::Pass);
}

#[test]
fn an_abandoned_probe_lets_the_next_caller_probe_at_once() {
    let mut h = ledger();
    let _ = h.failed("a", &failure(Class::RateLimit, Some(2)), t(0));
    assert_eq!(h.gate("a", t(2)).0, Gate::Probe);
    let change = h.abandoned("a", t(3)).map(|c| c.to);
    assert_eq!(change, Some(HealthState::Open));
    assert_eq!(h.gate("a", t(3)).0, Gate::Probe);
    // Nothing to abandon on a closed or cooling entry.
    assert_eq!(h.abandoned("b", t(3)), None);
    let _ = h.failed("c", &failure(Class::RateLimit, Some(9)), t(0));
    assert_eq!(h.abandoned("c", t(3)), None);
    assert!(matches!(h.gate("c", t(3)).0, Gate::Rest { until, .. } if until == t(9)));
}

fn remote(state: HealthState, until: SystemTime) -> Learned {
    Learned {
        state,
        until,
        scope: Some(Scope::Account),
        class: Some(Class::RateLimit),
        code: Some("rate_limited".into()),
        rule_id: Some("remote.rule".into()),
    }
}

#[test]
fn a_learned_deadline_rests_a_closed_candidate_as_a_learned_change() {
    // X3: another instance's cooldown rests this one's candidate, with its details.
    let mut h = ledger();
    let change = h.learn("a", &remote(HealthState::Cooling, t(30)), t(0));
    assert_eq!(
        change,
        Some(Change {
            candidate: "a".into(),
            from: HealthState::Closed,
            to: HealthState::Cooling,
            until: Some(t(30)),
            learned: true,
        })
    );
    assert_eq!(
        h.gate("a", t(10)).0,
        Gate::Rest {
            until: t(30),
            class: Class::RateLimit,
            behind_probe: false,
        }
    );
    let entry = h.entry("a").unwrap();
    assert_eq!(entry.code.as_deref(), Some("rate_limited"));
    assert_eq!(entry.scope, Some(Scope::Account));
    // Its own failures are never learned changes.
    let own = h.failed("b", &failure(Class::RateLimit, Some(2)), t(0));
    assert!(!own.unwrap().learned);
}

#[test]
fn a_nearer_learned_deadline_never_shortens_a_farther_local_one() {
    // X3, S1: GREATEST — a remote deadline only ever extends.
    let mut h = ledger();
    let _ = h.failed("a", &failure(Class::RateLimit, Some(60)), t(0));
    assert_eq!(
        h.learn("a", &remote(HealthState::Cooling, t(10)), t(1)),
        None
    );
    assert_eq!(h.entry("a").unwrap().until, Some(t(60)));
    assert_eq!(h.entry("a").unwrap().code.as_deref(), Some("test_code"));
    // A farther one extends it.
    let change = h
        .learn("a", &remote(HealthState::Cooling, t(90)), t(1))
        .unwrap();
    assert_eq!(change.until, Some(t(90)));
    assert!(matches!(h.gate("a", t(70)).0, Gate::Rest { until, .. } if until == t(90)));
    // An equal one changes nothing.
    assert_eq!(
        h.learn("a", &remote(HealthState::Cooling, t(90)), t(2)),
        None
    );
}

#[test]
fn a_deadline_that_passed_or_a_state_without_one_is_not_learned() {
    let mut h = ledger();
    assert_eq!(
        h.learn("a", &remote(HealthState::Cooling, t(5)), t(5)),
        None
    );
    assert_eq!(
        h.learn("a", &remote(HealthState::Probing, t(50)), t(5)),
        None
    );
    assert_eq!(
        h.learn("a", &remote(HealthState::Closed, t(50)), t(5)),
        None
    );
    assert_eq!(h.gate("a", t(5)).0, Gate::Pass);
}

#[test]
fn a_learned_deadline_during_a_local_probe_rests_the_others_and_the_probe_still_reports() {
    // S3 with X3: the probe in flight here keeps its report; no second probe starts while
    // the learned deadline runs.
    let mut h = ledger();
    let _ = h.failed("a", &failure(Class::RateLimit, Some(2)), t(0));
    assert_eq!(h.gate("a", t(3)).0, Gate::Probe);
    let change = h
        .learn("a", &remote(HealthState::Open, t(20)), t(3))
        .unwrap();
    assert_eq!(
        (change.from, change.to),
        (HealthState::Probing, HealthState::Open)
    );
    assert!(
        matches!(h.gate("a", t(4)).0, Gate::Rest { until, behind_probe: false, .. } if until == t(20))
    );
    // The probe's success is fresher evidence than the deadline: it closes the entry.
    assert_eq!(h.succeeded("a").map(|c| c.to), Some(HealthState::Closed));
    assert_eq!(h.gate("a", t(5)).0, Gate::Pass);
}

#[test]
fn a_learned_circuit_keeps_the_local_window_count() {
    // A learned deadline is not this instance's evidence: its own next circuit still starts
    // at the first window after the learned one ends in a successful probe.
    let mut h = ledger();
    let _ = h.learn("a", &remote(HealthState::Open, t(8)), t(0));
    assert_eq!(h.gate("a", t(8)).0, Gate::Probe);
    let _ = h.succeeded("a");
    for _ in 0..3 {
        let _ = h.failed("a", &failure(Class::Transient, None), t(10));
    }
    assert_eq!(h.entry("a").unwrap().until, Some(t(11)));
}
