//! The status page's own ledger (G6, R3): the requests waiting right now, a bounded ring of
//! recent failures, and the small counts the page's charts draw. Recording is a bounded push
//! or an insert/remove around a wait, and a change notice that costs nothing when nobody
//! watches; the page's snapshot is built only for a watcher.

pub(crate) mod http;
mod page;
mod snapshot;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use rebound_core::{Evidence, RetryStatus};
use serde_json::{Value, json};
use tokio::sync::watch;

use rebound_runtime::Decision;
use rebound_runtime::health::unix_ms;

/// How many recent failures the page shows.
pub(crate) const FAILURES_KEPT: usize = 50;
/// How many minutes of attempt counts the page's chart covers.
const MINUTES_KEPT: usize = 30;
/// The wait-time chart's bucket bounds, in milliseconds (the last bucket is everything above).
pub(crate) const WAIT_BUCKETS_MS: [u64; 7] = [250, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000];

/// One failed attempt as the page shows it: ids, status, classification and the redacted
/// excerpt of the evidence (S4: never a key, never a prompt or completion).
#[derive(Clone, Debug)]
struct Failure {
    at: SystemTime,
    route: String,
    candidate: String,
    status: Option<u16>,
    code: Option<String>,
    class: &'static str,
    rule_id: Option<String>,
    excerpt: Option<String>,
}

/// A request waiting now.
#[derive(Clone, Debug)]
struct Waiting {
    route: String,
    candidate: String,
    status: RetryStatus,
    /// The attempt the wait leads to and the route's attempt ceiling, as `k/N`.
    attempt: u32,
}

#[derive(Default)]
struct Inner {
    failures: VecDeque<Failure>,
    waiting: BTreeMap<u64, Waiting>,
    next_wait: u64,
    /// Attempts per minute (minute since the epoch) by class (`ok` for a success).
    minutes: VecDeque<(u64, BTreeMap<&'static str, u64>)>,
    /// Waits by [`WAIT_BUCKETS_MS`] bucket.
    waits: [u64; WAIT_BUCKETS_MS.len() + 1],
}

/// The status ledger, shared by the gateway.
pub(crate) struct Status {
    inner: Mutex<Inner>,
    changes: watch::Sender<u64>,
}

impl Default for Status {
    fn default() -> Self {
        Status {
            inner: Mutex::default(),
            changes: watch::channel(0).0,
        }
    }
}

impl Status {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells watchers something changed; a no-op store when nobody watches.
    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees every later change.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Counts one attempt's outcome at `now` by `class` (`ok` for a success).
    pub(crate) fn attempted(&self, now: SystemTime, class: &'static str) {
        let minute = unix_ms(now) / 60_000;
        let mut inner = self.lock();
        match inner.minutes.back_mut() {
            Some((m, counts)) if *m == minute => *counts.entry(class).or_default() += 1,
            _ => {
                inner
                    .minutes
                    .push_back((minute, BTreeMap::from([(class, 1)])));
                while inner.minutes.len() > MINUTES_KEPT {
                    inner.minutes.pop_front();
                }
            }
        }
    }

    /// Keeps one failed attempt of `route` at `candidate`, as `decision` classified it,
    /// dropping the oldest beyond [`FAILURES_KEPT`]. A rest sent nothing and is not kept.
    pub(crate) fn failed(
        &self,
        now: SystemTime,
        route: &str,
        candidate: &str,
        evidence: &Evidence,
        decision: &Decision,
    ) {
        if decision.rested {
            return;
        }
        let failure = Failure {
            at: now,
            route: route.to_owned(),
            candidate: candidate.to_owned(),
            status: evidence.status,
            code: decision.classification.code.as_ref().map(|c| c.to_string()),
            class: decision.class(),
            rule_id: decision
                .classification
                .rule_id
                .as_deref()
                .map(str::to_owned),
            excerpt: rebound_core::status::error_excerpt(evidence),
        };
        {
            let mut inner = self.lock();
            if inner.failures.len() == FAILURES_KEPT {
                inner.failures.pop_front();
            }
            inner.failures.push_back(failure);
        }
        self.changed();
    }

    /// Registers a request waiting on `candidate` of `route`; the wait is listed until the
    /// returned guard drops, and its length counted in the wait chart.
    pub(crate) fn wait(
        self: &Arc<Self>,
        route: &str,
        candidate: &str,
        status: &RetryStatus,
        attempt: u32,
    ) -> WaitGuard {
        let id = {
            let mut inner = self.lock();
            let id = inner.next_wait;
            inner.next_wait += 1;
            let ms = u64::try_from(status.delay.as_millis()).unwrap_or(u64::MAX);
            let bucket = WAIT_BUCKETS_MS
                .iter()
                .position(|b| ms <= *b)
                .unwrap_or(WAIT_BUCKETS_MS.len());
            inner.waits[bucket] += 1;
            inner.waiting.insert(
                id,
                Waiting {
                    route: route.to_owned(),
                    candidate: candidate.to_owned(),
                    status: status.clone(),
                    attempt,
                },
            );
            id
        };
        self.changed();
        WaitGuard {
            status: Arc::clone(self),
            id,
        }
    }

    /// The ledger as the page's JSON, at `now`.
    pub(crate) fn view(&self, now: SystemTime) -> Value {
        let inner = self.lock();
        let failures: Vec<Value> = inner
            .failures
            .iter()
            .rev()
            .map(|f| {
                json!({
                    "at_ms": unix_ms(f.at),
                    "route": f.route,
                    "candidate": f.candidate,
                    "status": f.status,
                    "code": f.code,
                    "class": f.class,
                    "rule_id": f.rule_id,
                    "excerpt": f.excerpt,
                })
            })
            .collect();
        let waiting: Vec<Value> = inner
            .waiting
            .values()
            .map(|w| {
                let until = w.status.since + w.status.delay;
                let remaining = w.status.remaining(now);
                json!({
                    "route": w.route,
                    "candidate": w.candidate,
                    "attempt": w.attempt,
                    "retry": w.status.attempt,
                    "budget": w.status.budget,
                    "class": w.status.class.as_str(),
                    "until_ms": unix_ms(until),
                    "remaining_ms": u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
                    "text": w.status.text(now),
                })
            })
            .collect();
        let minutes: Vec<Value> = inner
            .minutes
            .iter()
            .map(|(m, counts)| json!({"minute_ms": m * 60_000, "counts": counts}))
            .collect();
        json!({
            "waiting": waiting,
            "failures": failures,
            "attempts_per_minute": minutes,
            "wait_buckets_ms": WAIT_BUCKETS_MS,
            "wait_counts": inner.waits,
        })
    }
}

/// Keeps a wait listed while it lasts.
pub(crate) struct WaitGuard {
    status: Arc<Status>,
    id: u64,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        self.status.lock().waiting.remove(&self.id);
        self.status.changed();
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use rebound_core::{Action, Catalogue, Class, Evidence, Limit, Phase, RetryStatus, WaitKind};

    use super::*;

    fn decision(evidence: &Evidence, at: SystemTime) -> Decision {
        let classification = Catalogue::shipped().unwrap().classify(evidence, at);
        Decision {
            candidate: 0,
            attempt: 1,
            classification,
            action: Action::Fallback {
                candidate: 1,
                class: Class::Transient,
            },
            rested: false,
        }
    }

    #[test]
    fn the_failure_ring_keeps_the_newest_fifty_redacted() {
        let status = Status::default();
        let at = UNIX_EPOCH + Duration::from_secs(1_796_050_800);
        let key = "sk-proj-RingCanary0123456789abcdefghij";
        for n in 0..(FAILURES_KEPT + 7) {
            let evidence = Evidence {
                phase: Phase::Setup,
                status: Some(500),
                body: Some(format!(
                    "{{\"error\":{{\"message\":\"failure {n} with {key}\"}}}}"
                )),
                ..Evidence::default()
            };
            status.failed(at, "main", "oa", &evidence, &decision(&evidence, at));
        }
        let view = status.view(at);
        let failures = view["failures"].as_array().unwrap();
        assert_eq!(failures.len(), FAILURES_KEPT);
        let newest = failures[0]["excerpt"].as_str().unwrap();
        assert!(
            newest.contains(&format!("failure {}", FAILURES_KEPT + 6)),
            "{newest}"
        );
        assert!(!view.to_string().contains(key), "{view}");
        // A rest sent nothing: not a failure to list.
        let evidence = Evidence::default();
        let mut rest = decision(&evidence, at);
        rest.rested = true;
        status.failed(at, "main", "oa", &evidence, &rest);
        assert_eq!(
            status.view(at)["failures"][0]["excerpt"],
            failures[0]["excerpt"]
        );
    }

    #[test]
    fn a_wait_is_listed_while_its_guard_lives_and_counted_once() {
        let status = Arc::new(Status::default());
        let mut changes = status.subscribe();
        let at = UNIX_EPOCH + Duration::from_secs(1_796_050_800);
        let retry = RetryStatus::new(
            Duration::from_millis(4_500),
            at,
            2,
            Limit::Count(10),
            WaitKind::Backoff,
            Class::Transient,
            None,
        );
        let guard = status.wait("main", "oa", &retry, 3);
        assert!(changes.has_changed().unwrap());
        changes.borrow_and_update();
        let view = status.view(at + Duration::from_secs(1));
        assert_eq!(view["waiting"][0]["remaining_ms"], 3_500);
        assert_eq!(view["waiting"][0]["text"], "Retrying in 4s · attempt 2/10");
        assert_eq!(view["waiting"][0]["attempt"], 3);
        drop(guard);
        assert!(changes.has_changed().unwrap());
        let view = status.view(at);
        assert_eq!(view["waiting"].as_array().unwrap().len(), 0);
        // 4.5 s falls in the `≤ 5 s` bucket.
        assert_eq!(view["wait_counts"][3], 1);
        assert_eq!(
            view["wait_counts"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| *c != 0)
                .count(),
            1
        );
    }

    #[test]
    fn attempts_are_counted_per_minute_for_the_last_thirty() {
        let status = Status::default();
        let origin = UNIX_EPOCH + Duration::from_secs(1_796_050_800);
        for minute in 0..40u64 {
            let at = origin + Duration::from_secs(minute * 60);
            status.attempted(at, "ok");
            status.attempted(at + Duration::from_secs(59), "transient");
        }
        let view = status.view(origin);
        let minutes = view["attempts_per_minute"].as_array().unwrap();
        assert_eq!(minutes.len(), MINUTES_KEPT);
        assert_eq!(
            minutes[0]["minute_ms"],
            (1_796_050_800_u64 + 10 * 60) * 1000
        );
        assert_eq!(
            minutes[29]["counts"],
            serde_json::json!({"ok": 1, "transient": 1})
        );
    }
}
