//! The health ledger (S1, S3): what every request and job of a gateway knows about its
//! candidates, as a sans-IO state machine.
//!
//! A failure with a trusted reset hint (T1) cools its candidate down until the hint's deadline;
//! consecutive `transient` failures without one open a circuit for a window that grows with
//! each window that ends in a failed probe, up to a cap. Unlike failure-count cooldowns, the
//! deadline is the server's own word when it gave one, and a later event may extend a deadline
//! but never shorten it. When a deadline passes, exactly one caller is let through as the probe
//! ([`Gate::Probe`]); its success closes the entry, its failure re-opens it with the next
//! window. Time is a parameter: the ledger never reads a clock.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::classification::{Class, Classification, Scope};

/// How the ledger turns failures into windows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthSettings {
    /// Consecutive `transient` failures without a hint that open a circuit.
    pub circuit_after: u32,
    /// The first circuit window; each window that ends in a failed probe doubles it.
    pub window: Duration,
    /// The longest circuit window. At 8 s, T4's cap, with a first window of 1 s after 3
    /// failures, a window never outlasts the wait a request's own transient schedule takes
    /// after the same failure, so a sole candidate keeps exactly the T4 schedule.
    pub window_cap: Duration,
    /// The longest cooldown a hint may set (a quota reset hours away is honoured up to it).
    pub hint_cap: Duration,
    /// How long a probe may run before another caller may probe instead (a probe whose
    /// request went away never reports).
    pub probe_lease: Duration,
}

impl Default for HealthSettings {
    fn default() -> Self {
        HealthSettings {
            circuit_after: 3,
            window: Duration::from_secs(1),
            window_cap: Duration::from_secs(8),
            hint_cap: Duration::from_secs(24 * 60 * 60),
            probe_lease: Duration::from_secs(60),
        }
    }
}

/// A candidate's state, as the API and the metrics name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HealthState {
    /// Serving.
    Closed,
    /// Resting until a deadline the server gave (a trusted hint).
    Cooling,
    /// Resting after consecutive transient failures.
    Open,
    /// The deadline passed and one probe is in flight.
    Probing,
}

impl HealthState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Closed => "closed",
            HealthState::Cooling => "cooling",
            HealthState::Open => "open",
            HealthState::Probing => "probing",
        }
    }

    /// Every state, for gauges.
    pub const ALL: [HealthState; 4] = [
        HealthState::Closed,
        HealthState::Cooling,
        HealthState::Open,
        HealthState::Probing,
    ];
}

/// What a caller about to send an attempt may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Send.
    Pass,
    /// Send: this attempt is the one probe of an ended window.
    Probe,
    /// Do not send before `until`.
    Rest {
        /// The deadline.
        until: SystemTime,
        /// The class of the failure that set it, for the resting request's policy.
        class: Class,
        /// Another caller's probe is in flight: the rest ends with its report.
        behind_probe: bool,
    },
}

/// The outcome of the latest probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeRecord {
    /// When it started.
    pub at: SystemTime,
    /// Whether it succeeded; `None` while it runs.
    pub succeeded: Option<bool>,
}

/// One candidate's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The state.
    pub state: HealthState,
    /// The scope of the failure that set the deadline (the catalogue rule's scope).
    pub scope: Option<Scope>,
    /// The deadline, while resting.
    pub until: Option<SystemTime>,
    /// The class of the failure that set it.
    pub class: Option<Class>,
    /// The code of the failure that set it.
    pub code: Option<String>,
    /// The rule that classified it.
    pub rule_id: Option<String>,
    /// The latest probe.
    pub last_probe: Option<ProbeRecord>,
    consecutive: u32,
    windows: u32,
    probe_started: Option<SystemTime>,
}

impl Entry {
    fn closed() -> Self {
        Entry {
            state: HealthState::Closed,
            scope: None,
            until: None,
            class: None,
            code: None,
            rule_id: None,
            last_probe: None,
            consecutive: 0,
            windows: 0,
            probe_started: None,
        }
    }
}

/// A state change, for the log and the metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The candidate.
    pub candidate: String,
    /// Before.
    pub from: HealthState,
    /// After.
    pub to: HealthState,
    /// The deadline after, if resting.
    pub until: Option<SystemTime>,
    /// Whether another instance's deadline made it ([`Health::learn`]) rather than this
    /// ledger's own events: a learned change is not published again.
    pub learned: bool,
}

/// A deadline another instance set, as the shared ledger passes it on (X3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Learned {
    /// [`HealthState::Cooling`] (a server's reset hint) or [`HealthState::Open`] (a circuit).
    pub state: HealthState,
    /// The deadline.
    pub until: SystemTime,
    /// The scope of the failure that set it.
    pub scope: Option<Scope>,
    /// The class of the failure that set it.
    pub class: Option<Class>,
    /// The code of the failure that set it.
    pub code: Option<String>,
    /// The rule that classified it.
    pub rule_id: Option<String>,
}

/// The ledger: one entry per candidate id.
#[derive(Debug, Default)]
pub struct Health {
    settings: HealthSettings,
    entries: BTreeMap<String, Entry>,
}

impl Health {
    /// An empty ledger.
    pub fn new(settings: HealthSettings) -> Self {
        Health {
            settings,
            entries: BTreeMap::new(),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &HealthSettings {
        &self.settings
    }

    /// Every entry that is not plainly closed, by candidate id.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The state of `candidate`.
    pub fn state(&self, candidate: &str) -> HealthState {
        self.entries
            .get(candidate)
            .map_or(HealthState::Closed, |e| e.state)
    }

    /// Asks whether an attempt to `candidate` may start at `now`. When a deadline has passed,
    /// the first caller gets [`Gate::Probe`] and the others rest until the probe reports (or
    /// its lease ends).
    pub fn gate(&mut self, candidate: &str, now: SystemTime) -> (Gate, Option<Change>) {
        let lease = self.settings.probe_lease;
        let Some(entry) = self.entries.get_mut(candidate) else {
            return (Gate::Pass, None);
        };
        match entry.state {
            HealthState::Closed => (Gate::Pass, None),
            HealthState::Probing => match entry.probe_started {
                Some(started) if now < started + lease => (
                    Gate::Rest {
                        until: started + lease,
                        class: entry.class.unwrap_or(Class::Transient),
                        behind_probe: true,
                    },
                    None,
                ),
                _ => {
                    entry.probe_started = Some(now);
                    entry.last_probe = Some(ProbeRecord {
                        at: now,
                        succeeded: None,
                    });
                    (Gate::Probe, None)
                }
            },
            HealthState::Cooling | HealthState::Open => match entry.until {
                Some(until) if now < until => (
                    Gate::Rest {
                        until,
                        class: entry.class.unwrap_or(Class::Transient),
                        behind_probe: false,
                    },
                    None,
                ),
                _ => {
                    let from = entry.state;
                    entry.state = HealthState::Probing;
                    entry.probe_started = Some(now);
                    entry.last_probe = Some(ProbeRecord {
                        at: now,
                        succeeded: None,
                    });
                    let change = Change {
                        candidate: candidate.to_owned(),
                        from,
                        to: HealthState::Probing,
                        until: None,
                        learned: false,
                    };
                    (Gate::Probe, Some(change))
                }
            },
        }
    }

    /// A probe that will never report (its request went away before an answer): the next
    /// caller probes at once instead of waiting out the probe's lease.
    pub fn abandoned(&mut self, candidate: &str, now: SystemTime) -> Option<Change> {
        let entry = self.entries.get_mut(candidate)?;
        if entry.state != HealthState::Probing {
            return None;
        }
        entry.probe_started = None;
        // The window already ended (a probe only starts after it): the next gate probes.
        entry.state = HealthState::Open;
        entry.until = Some(entry.until.unwrap_or(now));
        if let Some(probe) = entry.last_probe.as_mut().filter(|p| p.succeeded.is_none()) {
            probe.succeeded = Some(false);
        }
        Some(Change {
            candidate: candidate.to_owned(),
            from: HealthState::Probing,
            to: HealthState::Open,
            until: entry.until,
            learned: false,
        })
    }

    /// The entry of `candidate`, if it ever failed.
    pub fn entry(&self, candidate: &str) -> Option<&Entry> {
        self.entries.get(candidate)
    }

    /// A success of `candidate` closes its entry.
    pub fn succeeded(&mut self, candidate: &str) -> Option<Change> {
        let entry = self.entries.get_mut(candidate)?;
        let from = entry.state;
        if let Some(probe) = entry.last_probe.as_mut().filter(|p| p.succeeded.is_none()) {
            probe.succeeded = Some(true);
        }
        let last_probe = entry.last_probe;
        *entry = Entry {
            last_probe,
            ..Entry::closed()
        };
        (from != HealthState::Closed).then(|| Change {
            candidate: candidate.to_owned(),
            from,
            to: HealthState::Closed,
            until: None,
            learned: false,
        })
    }

    /// A deadline another instance set for `candidate` (X3). It only ever extends: a deadline
    /// that passed, or one no later than this ledger's own, changes nothing. A resting or
    /// closed entry takes the deadline, its state and its failure's details; a probe in flight
    /// here is no longer the one probe (the entry rests again), but its report still counts:
    /// a success closes the entry, a failure re-opens it. The circuit's counts are left as
    /// they are: they are this instance's own evidence.
    pub fn learn(&mut self, candidate: &str, learned: &Learned, now: SystemTime) -> Option<Change> {
        if learned.until <= now
            || !matches!(learned.state, HealthState::Cooling | HealthState::Open)
        {
            return None;
        }
        let entry = self
            .entries
            .entry(candidate.to_owned())
            .or_insert_with(Entry::closed);
        if entry.until.is_some_and(|u| u >= learned.until) && entry.state != HealthState::Closed {
            return None;
        }
        let from = entry.state;
        entry.state = learned.state;
        entry.until = Some(learned.until);
        entry.scope = learned.scope;
        entry.class = learned.class;
        entry.code.clone_from(&learned.code);
        entry.rule_id.clone_from(&learned.rule_id);
        entry.probe_started = None;
        Some(Change {
            candidate: candidate.to_owned(),
            from,
            to: entry.state,
            until: entry.until,
            learned: true,
        })
    }

    /// A failure of `candidate`, classified at `now`. A trusted hint cools the candidate down
    /// until its deadline; consecutive transient failures open a circuit; a failed probe
    /// re-opens with the next window. Deadlines only move later. Request-scoped failures
    /// say nothing about the candidate: on a probe they count as the provider answering.
    pub fn failed(
        &mut self,
        candidate: &str,
        classification: &Classification,
        now: SystemTime,
    ) -> Option<Change> {
        let settings = self.settings.clone();
        let class = classification.verdict.class();
        let entry = self
            .entries
            .entry(candidate.to_owned())
            .or_insert_with(Entry::closed);
        let from = entry.state;
        let probing = from == HealthState::Probing;
        let health_failure = matches!(
            class,
            Some(Class::RateLimit | Class::Transient | Class::Hard)
        ) && classification.scope != Scope::Request;
        if !health_failure {
            if probing {
                return self.succeeded(candidate);
            }
            return None;
        }
        if let Some(probe) = entry.last_probe.as_mut().filter(|p| p.succeeded.is_none()) {
            probe.succeeded = Some(false);
        }
        entry.probe_started = None;
        let hinted = classification
            .hint
            .filter(|h| !h.delay.is_zero())
            .map(|h| now + h.delay.min(settings.hint_cap));
        let (state, deadline) = if let Some(deadline) = hinted {
            (HealthState::Cooling, Some(deadline))
        } else if class == Some(Class::Transient) || probing {
            entry.consecutive = entry.consecutive.saturating_add(1);
            if probing || entry.consecutive >= settings.circuit_after {
                let window = if from == HealthState::Open && !probing {
                    // Already open: an attempt that passed the gate before the circuit opened
                    // failed too. It re-arms the window it finds; only a failed probe grows
                    // it, or a burst of concurrent failures would jump to the cap at once.
                    circuit_window(&settings, entry.windows.saturating_sub(1))
                } else {
                    let window = circuit_window(&settings, entry.windows);
                    entry.windows = entry.windows.saturating_add(1);
                    window
                };
                (HealthState::Open, Some(now + window))
            } else {
                (entry.state, None)
            }
        } else {
            (entry.state, None)
        };
        let deadline = deadline?;
        // Never shorten: a nearer deadline keeps the farther one.
        let before = entry.until;
        let until = before.map_or(deadline, |u| u.max(deadline));
        if until == deadline {
            entry.state = state;
            entry.scope = Some(classification.scope);
            entry.class = class;
            entry.code = classification.code.as_ref().map(|c| c.as_str().to_owned());
            entry.rule_id = classification.rule_id.as_deref().map(str::to_owned);
        }
        entry.until = Some(until);
        (from != entry.state || before != Some(until)).then(|| Change {
            candidate: candidate.to_owned(),
            from,
            to: entry.state,
            until: entry.until,
            learned: false,
        })
    }
}

/// The circuit window after `windows` earlier ones: doubling, capped.
fn circuit_window(settings: &HealthSettings, windows: u32) -> Duration {
    let factor = 2u32.saturating_pow(windows.min(20));
    settings
        .window
        .saturating_mul(factor)
        .min(settings.window_cap)
}

#[cfg(test)]
mod tests;
