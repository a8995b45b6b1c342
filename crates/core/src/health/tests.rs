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
