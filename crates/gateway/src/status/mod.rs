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
