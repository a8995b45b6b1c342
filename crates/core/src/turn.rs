//! The budget state machine over one logical turn and its route (B1–B6, D2, D4).
//!
//! A [`Turn`] owns the class counters of a user turn. The host sends one model request at a
//! time; on a failure it classifies the evidence and calls [`Turn::on_failure`], which answers
//! with one [`Action`]: wait and retry the same candidate, fall back to the next candidate, or
//! stop with the diagnostics of the one terminal error. On a complete successful response the
//! host calls [`Turn::on_success`], which resets the counters (B3). Nothing here sleeps: a
//! [`Wait`] says how long, the host waits (abortably, T5) and sends the retry itself.
//!
//! The evaluation order is the pipeline of D1/D2, after the gates that no policy can open:
//! 1. unclassified evidence stops for a human (C4); ambiguous delivery stops (D4);
//!    `terminal` stops (C3);
//! 2. a trusted hint within the class's reset-wait maximum is waited for, once per candidate
//!    and class per route cycle, without spending retry budget;
//! 3. a retry while the class's budget lasts (T1–T4 give the delay), unless the provider said
//!    `x-should-retry: false`;
//! 4. the exhausted outcome: `skip` to the next candidate, or `stop`.
//!
//! A candidate that stayed silent (a first-byte or first-content timeout, [`SILENT`]) is not
//! retried when the route has another candidate: the next one takes over at once (S5).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::backoff::Jitter;
use crate::classification::{Class, Classification, Code, Verdict};
use crate::evidence::Evidence;
pub use crate::policy::Caller;
use crate::policy::{Exhausted, Limit, Policy};
use crate::status::{Diagnostics, RetryStatus};
pub use crate::status::{StopReason, WaitKind};

/// Whether replaying the failed request could duplicate an effect (D4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Safety {
    /// Nothing of the failed attempt reached a consumer that cannot discard it.
    Replayable,
    /// Output reached a consumer that cannot discard it, or a tool effect may have happened.
    Ambiguous,
}

/// One failed attempt, as the turn needs it.
#[derive(Clone, Copy, Debug)]
pub struct Failure<'a> {
    /// What the attempt left behind.
    pub evidence: &'a Evidence,
    /// What the catalogue made of it.
    pub classification: &'a Classification,
    /// Whether a replay is safe.
    pub safety: Safety,
}

/// A candidate found resting in the shared health ledger before an attempt (S2), as the
/// turn needs it.
#[derive(Clone, Copy, Debug)]
pub struct Rest<'a> {
    /// The ledger's deadline: the cooldown's or circuit's end, or the probe's lease.
    pub until: SystemTime,
    /// The class of the failure that set it.
    pub class: Class,
    /// The window ended and another request's probe is in flight: the rest ends with its
    /// report, and spends no budget.
    pub behind_probe: bool,
    /// The ledger's account of the rest, as evidence for the diagnostics of a stop.
    pub evidence: &'a Evidence,
    /// The classification that set the deadline.
    pub classification: &'a Classification,
}

/// A wait before retrying the same candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    /// How long.
    pub delay: Duration,
    /// Why.
    pub kind: WaitKind,
    /// What to show meanwhile (R3).
    pub status: RetryStatus,
}

/// What the host does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Wait, then send the same request to the same candidate.
    Retry(Wait),
    /// Send the same request to the route's next candidate now.
    Fallback {
        /// The candidate (route position) to use.
        candidate: usize,
        /// The class whose exhausted outcome was `skip`.
        class: Class,
    },
    /// Stop: emit exactly one terminal error with these diagnostics (R4).
    Stop(Box<Diagnostics>),
}

const CLASSES: usize = 3;

fn slot(class: Class) -> Option<usize> {
    match class {
        Class::RateLimit => Some(0),
        Class::Transient => Some(1),
        Class::Hard => Some(2),
        Class::Terminal => None,
    }
}

/// The per-candidate counters of the current route cycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counters {
    retries: [u32; CLASSES],
    reset_waited: [bool; CLASSES],
}

/// A turn's counters, to persist and restore (durable jobs, P1): everything a [`Turn`]
/// knows besides its route and caller.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TurnSnapshot {
    /// The candidate the next attempt goes to.
    pub candidate: usize,
    /// Retries spent per class: rate_limit, transient, hard.
    pub retries: [u32; 3],
    /// Whether each class has used its reset wait on this candidate.
    pub reset_waited: [bool; 3],
    /// The attempt in flight, 1-based.
    pub attempts: u32,
    /// Time waited, in milliseconds.
    pub waited_ms: u64,
}

/// The codes of `terminal` failures that another model can repair (D6): a prompt too long
/// for one model's context may fit another's. Repetition repairs none of them, and no model
/// repairs a malformed request or a content filter's refusal.
pub const MODEL_REPAIRABLE: &[&str] = &["context_overflow"];

/// The codes of a candidate that accepted a request and stayed silent: no response headers
/// within the first-byte timeout, or no content within the first-content timeout (S5).
pub const SILENT: &[&str] = &["response_timeout", "first_content_timeout"];

/// Where a `terminal` failure that another model can repair switches at once (D6).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Switches {
    /// By code (one of [`MODEL_REPAIRABLE`]): the route positions to switch to, in order
    /// of preference.
    pub by_code: Vec<(Code, Vec<usize>)>,
    /// Each route position's context window in tokens, where declared.
    pub windows: Vec<Option<u64>>,
}

impl Switches {
    /// The position a failure of `code` at position `from` switches to: the first target
    /// after `from` on the route whose context window is larger, or undeclared on either
    /// side. Never `from` itself, never backwards, so a request switches at most once per
    /// candidate.
    pub fn target(&self, code: &Code, from: usize, route_len: usize) -> Option<usize> {
        let (_, targets) = self.by_code.iter().find(|(c, _)| c == code)?;
        let window = |at: usize| self.windows.get(at).copied().flatten();
        targets.iter().copied().find(|&to| {
            to > from
                && to < route_len
                && match (window(to), window(from)) {
                    (Some(to), Some(from)) => to > from,
                    _ => true,
                }
        })
    }
}

/// The recovery state of one logical turn.
#[derive(Clone, Debug)]
pub struct Turn {
    route: Vec<Arc<Policy>>,
    caller: Caller,
    candidate: usize,
    counters: Counters,
    attempts: u32,
    waited: Duration,
    /// No attempt starts after it (D6).
    deadline: Option<SystemTime>,
    /// Where a terminal failure another model can repair goes (D6).
    switches: Option<Arc<Switches>>,
}

impl Turn {
    /// A turn over a route of one or more candidates' policies, for `caller`. An empty route
    /// is treated as one interactive candidate.
    pub fn new(route: Vec<Arc<Policy>>, caller: Caller) -> Self {
        let route = if route.is_empty() {
            vec![Arc::new(Policy::interactive())]
        } else {
            route
        };
        Turn {
            route,
            caller,
            candidate: 0,
            counters: Counters::default(),
            attempts: 1,
            waited: Duration::ZERO,
            deadline: None,
            switches: None,
        }
    }

    /// This turn with `switches` for terminal failures that another model can repair (D6).
    pub fn with_switches(mut self, switches: Arc<Switches>) -> Self {
        self.switches = Some(switches);
        self
    }

    /// Sets the current request's deadline (D6), or lifts it: after it no attempt starts,
    /// whatever budgets remain, so a wait that would end later is not begun and the turn
    /// stops with the failure in hand. A deadline belongs to a request, not to the turn's
    /// counters: it is not persisted.
    pub fn set_deadline(&mut self, deadline: Option<SystemTime>) {
        self.deadline = deadline;
    }

    /// A turn with one candidate.
    pub fn single(policy: Arc<Policy>, caller: Caller) -> Self {
        Self::new(vec![policy], caller)
    }

    /// The counters, to persist.
    pub fn snapshot(&self) -> TurnSnapshot {
        TurnSnapshot {
            candidate: self.candidate,
            retries: self.counters.retries,
            reset_waited: self.counters.reset_waited,
            attempts: self.attempts,
            waited_ms: u64::try_from(self.waited.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// A turn over `route` that continues from `snapshot`. A candidate past the route's end
    /// is clamped to its last candidate.
    pub fn restore(route: Vec<Arc<Policy>>, caller: Caller, snapshot: &TurnSnapshot) -> Self {
        let mut turn = Self::new(route, caller);
        turn.candidate = snapshot.candidate.min(turn.route.len() - 1);
        turn.counters = Counters {
            retries: snapshot.retries,
            reset_waited: snapshot.reset_waited,
        };
        turn.attempts = snapshot.attempts.max(1);
        turn.waited = Duration::from_millis(snapshot.waited_ms);
        turn
    }

    /// Counts one more attempt to the current candidate without a failure decision: a
    /// manual "retry now" of a durable route.
    pub fn begin_manual_attempt(&mut self) {
        self.attempts = self.attempts.saturating_add(1);
    }

    /// Moves to the next candidate, as a manual "skip" does; `false` on the last one.
    pub fn skip(&mut self) -> bool {
        if self.candidate + 1 < self.route.len() {
            self.candidate += 1;
            self.counters = Counters::default();
            self.attempts = self.attempts.saturating_add(1);
            true
        } else {
            false
        }
    }

    /// Decides what follows a gate that found the current candidate resting in the shared
    /// health ledger (S2). No attempt was sent, so none is counted:
    /// - another candidate follows on the route: it takes over at once ([`Action::Fallback`]);
    /// - the last candidate waits behind a probe in flight, without spending budget, up to the
    ///   request's deadline;
    /// - the last candidate waits out a cooldown its policy accepts, with the countdown of
    ///   [`WaitKind::Cooldown`]: whole, within the class's reset-wait maximum (once per
    ///   cycle); else in steps of at most the class cap, one retry each, when the retries
    ///   left can span it;
    /// - otherwise the turn stops at once, with the deadline in its diagnostics
    ///   ([`StopReason::Resting`], or [`StopReason::Deadline`]).
    pub fn on_rest(&mut self, rest: Rest<'_>, now: SystemTime) -> Action {
        let class = rest.class;
        let failure = Failure {
            evidence: rest.evidence,
            classification: rest.classification,
            safety: Safety::Replayable,
        };
        if self.candidate + 1 < self.route.len() {
            if self.past_deadline(now) {
                return self.rest_stop(StopReason::Deadline, failure, class);
            }
            self.candidate += 1;
            self.counters = Counters::default();
            return Action::Fallback {
                candidate: self.candidate,
                class,
            };
        }
        let mut until = rest.until;
        if rest.behind_probe
            && let Some(deadline) = self.deadline
        {
            until = until.min(deadline);
        }
        let delay = until.duration_since(now).unwrap_or(Duration::ZERO);
        if self.past_deadline(until) || (rest.behind_probe && delay.is_zero()) {
            return self.rest_stop(StopReason::Deadline, failure, class);
        }
        let policy = Arc::clone(&self.route[self.candidate]);
        let class_policy = slot(class).and_then(|slot| Some((slot, policy.for_class(class)?)));
        let Some((slot, class_policy)) = class_policy else {
            return self.rest_stop(StopReason::Resting, failure, class);
        };
        let limit = class_policy
            .limit_for(self.caller)
            .unwrap_or(Limit::Count(0));
        if rest.behind_probe {
            let attempt = self.counters.retries[slot].max(1);
            return self.rest(delay, attempt, limit, class, rest.classification, now);
        }
        if let Some(reset) = class_policy.reset_wait
            && delay <= reset.max
            && !self.counters.reset_waited[slot]
        {
            self.counters.reset_waited[slot] = true;
            let attempt = self.counters.retries[slot] + 1;
            return self.rest(delay, attempt, limit, class, rest.classification, now);
        }
        if let (Some(retry), Some(limit)) =
            (class_policy.retry, class_policy.limit_for(self.caller))
        {
            let used = self.counters.retries[slot];
            let next = used.saturating_add(1);
            if !limit.allows(next) {
                return self.rest_stop(StopReason::Exhausted, failure, class);
            }
            // The policy accepts the rest when its remaining retries, each waiting up to the
            // class cap (T2), can span it: then it waits a capped step and asks again.
            let cap = retry.backoff.cap();
            let span = limit
                .count()
                .map(|max| cap.saturating_mul(max.saturating_sub(used)));
            if span.is_none_or(|span| delay <= span) {
                self.counters.retries[slot] = next;
                let step = delay.min(cap);
                return self.rest(step, next, limit, class, rest.classification, now);
            }
        }
        self.rest_stop(StopReason::Resting, failure, class)
    }

    /// A stop at a resting candidate: the attempt in hand was never sent, so the diagnostics
    /// count only those that were.
    fn rest_stop(&self, reason: StopReason, failure: Failure<'_>, class: Class) -> Action {
        let mut action = self.stop(reason, failure, Some(class));
        if let Action::Stop(diagnostics) = &mut action {
            diagnostics.attempts = self.attempts.saturating_sub(1);
        }
        action
    }

    /// Whether another candidate follows the current one on the route.
    pub fn has_next(&self) -> bool {
        self.candidate + 1 < self.route.len()
    }

    /// The candidate (route position) the next attempt goes to.
    pub fn candidate(&self) -> usize {
        self.candidate
    }

    /// The number of the attempt in flight, 1-based, since the last complete response.
    pub fn attempt(&self) -> u32 {
        self.attempts
    }

    /// Retries spent by `class` on the current candidate.
    pub fn retries(&self, class: Class) -> u32 {
        slot(class).map_or(0, |s| self.counters.retries[s])
    }

    /// Time spent waiting since the last complete response.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// A complete successful model response, text or tool calls: every counter resets (B3).
    /// Partial output, headers and phase changes are not successes; do not call this for
    /// them. The turn stays on the candidate that answered.
    pub fn on_success(&mut self) {
        self.counters = Counters::default();
        self.attempts = 1;
        self.waited = Duration::ZERO;
    }

    /// Decides what follows a failed attempt. `now` stamps the wait; `draw` is the random
    /// draw for jitter.
    pub fn on_failure(&mut self, failure: Failure<'_>, now: SystemTime, draw: Jitter) -> Action {
        let classification = failure.classification;
        let class = match classification.verdict {
            Verdict::Unclassified(_) => return self.stop(StopReason::Unclassified, failure, None),
            Verdict::Classified(class) => class,
        };
        if failure.safety == Safety::Ambiguous {
            return self.stop(StopReason::Unsafe, failure, Some(class));
        }
        let Some(slot) = slot(class) else {
            // A code another model can repair switches at once to the candidate named for
            // it (D6); it is never retried where it failed.
            let target = classification.code.as_ref().and_then(|code| {
                let switches = self.switches.as_ref()?;
                switches.target(code, self.candidate, self.route.len())
            });
            return match target {
                Some(_) if self.past_deadline(now) => {
                    self.stop(StopReason::Deadline, failure, Some(class))
                }
                Some(next) => {
                    self.candidate = next;
                    self.counters = Counters::default();
                    self.attempts += 1;
                    Action::Fallback {
                        candidate: next,
                        class,
                    }
                }
                None => self.stop(StopReason::Terminal, failure, Some(class)),
            };
        };
        // A silent candidate is better skipped than waited on twice (S5): after a timeout
        // before the first byte or the first content, the next candidate takes over.
        let silent = classification
            .code
            .as_ref()
            .is_some_and(|code| SILENT.contains(&code.as_str()));
        if silent && self.candidate + 1 < self.route.len() {
            if self.past_deadline(now) {
                return self.stop(StopReason::Deadline, failure, Some(class));
            }
            self.candidate += 1;
            self.counters = Counters::default();
            self.attempts += 1;
            return Action::Fallback {
                candidate: self.candidate,
                class,
            };
        }
        let policy = Arc::clone(&self.route[self.candidate]);
        let Some(class_policy) = policy.for_class(class) else {
            return self.stop(StopReason::Terminal, failure, Some(class));
        };
        let hint = classification.hint.map(|h| h.delay);

        if !classification.retry_forbidden {
            // Step 1: wait for an announced reset, once per candidate and class.
            if let (Some(reset), Some(hint)) = (class_policy.reset_wait, hint)
                && hint <= reset.max
                && !self.counters.reset_waited[slot]
            {
                if self.past_deadline(now + hint) {
                    return self.stop(StopReason::Deadline, failure, Some(class));
                }
                self.counters.reset_waited[slot] = true;
                let limit = class_policy
                    .limit_for(self.caller)
                    .unwrap_or(Limit::Count(0));
                let attempt = self.counters.retries[slot] + 1;
                return self.wait(
                    hint,
                    WaitKind::ResetWait,
                    attempt,
                    limit,
                    class,
                    classification,
                    now,
                );
            }
            // Step 2: retry while the budget lasts.
            if let (Some(retry), Some(limit)) =
                (class_policy.retry, class_policy.limit_for(self.caller))
            {
                let next = self.counters.retries[slot].saturating_add(1);
                if limit.allows(next) {
                    let delay = retry.delay(next, hint, draw);
                    if self.past_deadline(now + delay) {
                        return self.stop(StopReason::Deadline, failure, Some(class));
                    }
                    self.counters.retries[slot] = next;
                    let kind = if hint.is_some() {
                        WaitKind::Hint
                    } else {
                        WaitKind::Backoff
                    };
                    return self.wait(delay, kind, next, limit, class, classification, now);
                }
            }
        }

        // Step 3: the exhausted outcome.
        match class_policy.exhausted {
            Exhausted::Skip if self.candidate + 1 < self.route.len() && self.past_deadline(now) => {
                self.stop(StopReason::Deadline, failure, Some(class))
            }
            Exhausted::Skip if self.candidate + 1 < self.route.len() => {
                self.candidate += 1;
                self.counters = Counters::default();
                self.attempts += 1;
                Action::Fallback {
                    candidate: self.candidate,
                    class,
                }
            }
            Exhausted::Skip => self.stop(StopReason::RouteEnded, failure, Some(class)),
            Exhausted::Stop if classification.retry_forbidden => {
                self.stop(StopReason::RetryForbidden, failure, Some(class))
            }
            Exhausted::Stop => self.stop(StopReason::Exhausted, failure, Some(class)),
        }
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one private constructor of a wait"
    )]
    fn wait(
        &mut self,
        delay: Duration,
        kind: WaitKind,
        attempt: u32,
        limit: Limit,
        class: Class,
        classification: &Classification,
        now: SystemTime,
    ) -> Action {
        self.attempts = self.attempts.saturating_add(1);
        self.waited = self.waited.saturating_add(delay);
        let status = RetryStatus::new(
            delay,
            now,
            attempt,
            limit,
            kind,
            class,
            classification.code.clone(),
        );
        Action::Retry(Wait {
            delay,
            kind,
            status,
        })
    }

    /// A wait for a resting candidate: unlike [`Turn::wait`], no attempt failed, so none
    /// is counted.
    fn rest(
        &mut self,
        delay: Duration,
        attempt: u32,
        limit: Limit,
        class: Class,
        classification: &Classification,
        now: SystemTime,
    ) -> Action {
        self.waited = self.waited.saturating_add(delay);
        let kind = WaitKind::Cooldown;
        let code = classification.code.clone();
        let status = RetryStatus::new(delay, now, attempt, limit, kind, class, code);
        Action::Retry(Wait {
            delay,
            kind,
            status,
        })
    }

    /// True when an attempt starting at `at` would start after the deadline.
    fn past_deadline(&self, at: SystemTime) -> bool {
        self.deadline.is_some_and(|deadline| at > deadline)
    }

    fn stop(&self, reason: StopReason, failure: Failure<'_>, class: Option<Class>) -> Action {
        let retry_attempt = class.map_or(0, |c| self.retries(c));
        Action::Stop(Box::new(Diagnostics::new(
            reason,
            failure.evidence,
            failure.classification,
            retry_attempt,
            self.attempts,
            self.candidate,
            self.waited,
        )))
    }
}
