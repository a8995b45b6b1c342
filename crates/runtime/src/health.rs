//! The health ledger shared by every request and job of one process (S1–S3, S6).
//!
//! [`rebound_core::Health`] is the sans-IO state machine; this is its one shared copy: a
//! mutex around it, a fast path that keeps requests off the mutex while every candidate is
//! healthy, a change signal that wakes whoever rests behind a deadline or a probe, and one
//! log line per state change (`rebound::health`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use rebound_core::{
    Change, Classification, Entry, Gate, Health, HealthSettings, HealthState, Learned,
};
use tokio::sync::watch;

/// The target of the ledger's log events: one per state change.
pub const LOG_TARGET: &str = "rebound::health";

/// Called with every state change and the entry after it, for gauges and for passing this
/// instance's deadlines on to the others (X3). It runs under the ledger's lock: it must not
/// block.
pub type Observer = Box<dyn Fn(&Change, Option<&Entry>) + Send + Sync>;

/// One process's health ledger.
pub struct SharedHealth {
    ledger: Mutex<Health>,
    /// How many candidates are not closed: zero keeps every gate and success off the mutex.
    resting: AtomicUsize,
    /// Bumped on every change; a rest ends early when it moves.
    changes: watch::Sender<u64>,
    observer: Option<Observer>,
}

impl std::fmt::Debug for SharedHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedHealth")
            .field("resting", &self.resting.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl SharedHealth {
    /// An empty ledger.
    pub fn new(settings: HealthSettings) -> Self {
        SharedHealth {
            ledger: Mutex::new(Health::new(settings)),
            resting: AtomicUsize::new(0),
            changes: watch::Sender::new(0),
            observer: None,
        }
    }

    /// This ledger, telling `observer` of every state change.
    pub fn with_observer(mut self, observer: Observer) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The settings.
    pub fn settings(&self) -> HealthSettings {
        self.lock().settings().clone()
    }

    fn lock(&self) -> MutexGuard<'_, Health> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether every candidate is closed: then every gate passes, read with one atomic load.
    pub fn all_closed(&self) -> bool {
        self.resting.load(Ordering::Acquire) == 0
    }

    /// Whether an attempt to `candidate` may start at `now` (S2, S3).
    pub fn gate(&self, candidate: &str, now: SystemTime) -> Gate {
        if self.resting.load(Ordering::Acquire) == 0 {
            return Gate::Pass;
        }
        let mut ledger = self.lock();
        let (gate, change) = ledger.gate(candidate, now);
        self.changed(&ledger, change);
        gate
    }

    /// A success of `candidate`: closes its entry (a probe's success closes the circuit).
    pub fn succeeded(&self, candidate: &str) {
        if self.resting.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut ledger = self.lock();
        let change = ledger.succeeded(candidate);
        self.changed(&ledger, change);
    }

    /// A classified failure of `candidate` at `now`.
    pub fn failed(&self, candidate: &str, classification: &Classification, now: SystemTime) {
        let mut ledger = self.lock();
        let change = ledger.failed(candidate, classification, now);
        self.changed(&ledger, change);
    }

    /// A deadline another instance set for `candidate` (X3): it rests the candidate here as
    /// well, and wakes whoever rests behind it; it only ever extends a deadline. The change
    /// reaches the observer marked as learned.
    pub fn learn(&self, candidate: &str, learned: &Learned, now: SystemTime) {
        let mut ledger = self.lock();
        let change = ledger.learn(candidate, learned, now);
        self.changed(&ledger, change);
    }

    /// A probe of `candidate` that will never report: the next caller probes.
    pub fn abandoned(&self, candidate: &str, now: SystemTime) {
        if self.resting.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut ledger = self.lock();
        let change = ledger.abandoned(candidate, now);
        self.changed(&ledger, change);
    }

    /// Whether an attempt to `candidate` would pass its gate at `now`, without taking the
    /// probe: closed, or resting until a deadline that has passed.
    pub fn may_serve(&self, candidate: &str, now: SystemTime) -> bool {
        if self.resting.load(Ordering::Acquire) == 0 {
            return true;
        }
        self.lock().entry(candidate).is_none_or(|e| match e.state {
            HealthState::Closed => true,
            HealthState::Cooling | HealthState::Open => e.until.is_none_or(|u| u <= now),
            HealthState::Probing => false,
        })
    }

    /// The entry of `candidate`, if it ever failed.
    pub fn entry(&self, candidate: &str) -> Option<Entry> {
        self.lock().entry(candidate).cloned()
    }

    /// Every entry, by candidate id.
    pub fn entries(&self) -> Vec<(String, Entry)> {
        self.lock()
            .entries()
            .map(|(id, entry)| (id.to_owned(), entry.clone()))
            .collect()
    }

    /// The state of `candidate`.
    pub fn state(&self, candidate: &str) -> HealthState {
        if self.resting.load(Ordering::Acquire) == 0 {
            return HealthState::Closed;
        }
        self.lock().state(candidate)
    }

    /// A receiver that sees every later change: take it before the gate, so that no change
    /// between the gate and the rest is missed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self, ledger: &Health, change: Option<Change>) {
        let Some(change) = change else {
            return;
        };
        let resting = ledger
            .entries()
            .filter(|(_, e)| e.state != HealthState::Closed)
            .count();
        self.resting.store(resting, Ordering::Release);
        let entry = ledger.entry(&change.candidate);
        log(&change, entry);
        if let Some(observer) = &self.observer {
            observer(&change, entry);
        }
        self.changes
            .send_modify(|version| *version = version.wrapping_add(1));
    }
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One log event per state change (S6): ids, states, the deadline, the code and the rule;
/// never evidence.
fn log(change: &Change, entry: Option<&Entry>) {
    tracing::info!(
        target: LOG_TARGET,
        candidate = %change.candidate,
        from = %change.from.as_str(),
        to = %change.to.as_str(),
        learned = change.learned,
        until_ms = change.until.map(unix_ms),
        class = entry.and_then(|e| e.class).map(|c| tracing::field::display(c.as_str())),
        code = entry.and_then(|e| e.code.as_deref()).map(tracing::field::display),
        rule = entry.and_then(|e| e.rule_id.as_deref()).map(tracing::field::display),
    );
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rebound_core::classification::{Class, Confidence, Scope, Verdict};
    use rebound_core::hint::{Hint, HintSource};
    use rebound_core::{Classification, Gate, HealthSettings, HealthState, Phase};

    use super::SharedHealth;

    fn rate_limited(secs: u64) -> Classification {
        Classification {
            verdict: Verdict::Classified(Class::RateLimit),
            code: None,
            confidence: Confidence::High,
            scope: Scope::Account,
            rule_id: None,
            catalogue_version: "test".into(),
            hint: Some(Hint {
                delay: Duration::from_secs(secs),
                source: HintSource::RetryAfterSeconds,
            }),
            retry_forbidden: false,
            phase: Phase::Setup,
            status: Some(429),
        }
    }

    #[test]
    fn the_fast_path_opens_only_while_every_candidate_is_closed() {
        let health = SharedHealth::new(HealthSettings::default());
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1000);
        let mut changes = health.subscribe();
        assert_eq!(health.gate("a", now), Gate::Pass);
        health.failed("a", &rate_limited(2), now);
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        assert_eq!(health.state("a"), HealthState::Cooling);
        assert!(matches!(health.gate("a", now), Gate::Rest { .. }));
        assert_eq!(health.gate("b", now), Gate::Pass);
        assert_eq!(health.gate("a", now + Duration::from_secs(2)), Gate::Probe);
        health.succeeded("a");
        assert!(changes.has_changed().unwrap());
        assert_eq!(health.state("a"), HealthState::Closed);
        assert_eq!(health.resting.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    #[test]
    fn a_learned_deadline_leaves_the_fast_path_wakes_resters_and_reaches_the_observer_as_learned() {
        // X3: a deadline from another instance gates here as its own would.
        use std::sync::{Arc, Mutex};
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let health = SharedHealth::new(HealthSettings::default()).with_observer(Box::new(
            move |change, entry| {
                let code = entry.and_then(|e| e.code.clone());
                log.lock().unwrap().push((change.learned, code));
            },
        ));
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1000);
        let mut changes = health.subscribe();
        let learned = rebound_core::Learned {
            state: HealthState::Cooling,
            until: now + Duration::from_secs(5),
            scope: Some(Scope::Account),
            class: Some(Class::RateLimit),
            code: Some("rate_limited".into()),
            rule_id: None,
        };
        health.learn("a", &learned, now);
        assert!(changes.has_changed().unwrap());
        assert!(!health.may_serve("a", now));
        assert!(matches!(health.gate("a", now), Gate::Rest { .. }));
        // The same deadline again is no change: nothing to wake, nothing to observe.
        changes.mark_unchanged();
        health.learn("a", &learned, now);
        assert!(!changes.has_changed().unwrap());
        health.failed("b", &rate_limited(2), now);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![(true, Some("rate_limited".to_owned())), (false, None)]
        );
    }
}
