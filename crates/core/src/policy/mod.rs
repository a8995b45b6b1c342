//! The per-class recovery pipeline (D1): reset wait → same-candidate retry → exhausted outcome.
//!
//! One [`Policy`] holds a [`ClassPolicy`] for each class that can be acted on. The interactive
//! defaults of T3, T4 and B1 are [`Policy::interactive`]; a configured candidate with a
//! fallback after it defaults to [`Policy::before_fallback`], and a new dynamic candidate to
//! [`Policy::immediate_skip`] (D3). Durable jobs build their own from policy documents; the
//! evaluator in [`crate::turn`] runs them all the same way.
//!
//! `terminal` has no policy: rebound never retries it (C3). `unclassified` is not a class
//! and has no policy either: it always stops for a human (C4).

use std::time::Duration;

use crate::backoff::{Backoff, Jitter};
use crate::classification::{Class, Classification};

pub mod document;

/// The default retry budget of each retrying class: 10 retries, 11 attempts (B1).
pub const DEFAULT_RETRIES: u32 = 10;

/// The retries of a class on a candidate that has a fallback after it, by default (D3).
pub const FALLBACK_RETRIES: u32 = 2;

/// How many retries a class may spend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// At most this many retries after the initial attempt.
    Count(u32),
    /// No count ceiling (B4): only for sessions and subagents; one-shot callers get
    /// [`DEFAULT_RETRIES`] instead.
    Infinite,
}

impl Limit {
    /// True when retry number `retry` (1-based) is within the limit.
    pub fn allows(self, retry: u32) -> bool {
        match self {
            Limit::Count(max) => retry <= max,
            Limit::Infinite => true,
        }
    }

    /// The count, or `None` for infinite.
    pub fn count(self) -> Option<u32> {
        match self {
            Limit::Count(max) => Some(max),
            Limit::Infinite => None,
        }
    }
}

/// Wait for a provider's announced reset when it is near enough (D2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResetWait {
    /// The longest announced wait that is accepted; a later reset skips this step.
    pub max: Duration,
}

/// Retry the same candidate with a doubling delay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// How many retries.
    pub limit: Limit,
    /// The delay schedule; its cap also caps server hints (T2).
    pub backoff: Backoff,
}

impl RetryPolicy {
    /// `limit` retries on `backoff`.
    pub fn new(limit: Limit, backoff: Backoff) -> Self {
        RetryPolicy { limit, backoff }
    }

    /// The wait before retry `retry` (1-based): the hint if there is one, else the backoff;
    /// either way at most the cap (T1–T4).
    pub fn delay(&self, retry: u32, hint: Option<Duration>, draw: Jitter) -> Duration {
        match hint {
            Some(hint) => hint.min(self.backoff.cap()),
            None => self.backoff.delay(retry, draw),
        }
    }
}

/// What happens when a class's recovery is spent (D1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exhausted {
    /// Move on to the next candidate of the route; on the last one, the route ends.
    Skip,
    /// End the route with this failure.
    Stop,
}

/// One class's pipeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClassPolicy {
    /// Step 1, optional.
    pub reset_wait: Option<ResetWait>,
    /// Step 2, optional.
    pub retry: Option<RetryPolicy>,
    /// Step 3.
    pub exhausted: Exhausted,
}

impl ClassPolicy {
    /// No wait, no retry: straight to `exhausted`.
    pub fn immediate(exhausted: Exhausted) -> Self {
        ClassPolicy {
            reset_wait: None,
            retry: None,
            exhausted,
        }
    }

    /// Retries on `retry`, then `exhausted`.
    pub fn retrying(retry: RetryPolicy, exhausted: Exhausted) -> Self {
        ClassPolicy {
            reset_wait: None,
            retry: Some(retry),
            exhausted,
        }
    }

    /// Adds a reset wait step.
    pub fn with_reset_wait(mut self, max: Duration) -> Self {
        self.reset_wait = Some(ResetWait { max });
        self
    }

    /// The retry limit that applies to `caller`: `Infinite` is bounded for one-shot callers
    /// (B4).
    pub fn limit_for(&self, caller: Caller) -> Option<Limit> {
        self.retry.map(|r| match (r.limit, caller) {
            (Limit::Infinite, Caller::OneShot) => Limit::Count(DEFAULT_RETRIES),
            (limit, _) => limit,
        })
    }

    /// The wait before retry `retry` (1-based) for `caller`, or `None` when this class does
    /// not retry or the budget is spent. Reset waits are not considered: see
    /// [`crate::turn::Turn`] for the whole pipeline.
    pub fn retry_delay(
        &self,
        caller: Caller,
        retry: u32,
        hint: Option<Duration>,
        draw: Jitter,
    ) -> Option<Duration> {
        let policy = self.retry?;
        let limit = self.limit_for(caller)?;
        (retry >= 1 && limit.allows(retry)).then(|| policy.delay(retry, hint, draw))
    }
}

/// Who is asking. All three share one policy object (B6); only `infinite` differs (B4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Caller {
    /// The main agent session.
    Session,
    /// A subagent the session spawned.
    Subagent,
    /// A single completion outside a session.
    OneShot,
}

/// A candidate's pipelines, one per class that can be acted on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    /// For `rate_limit` failures.
    pub rate_limit: ClassPolicy,
    /// For `transient` failures.
    pub transient: ClassPolicy,
    /// For `hard` failures.
    pub hard: ClassPolicy,
}

impl Policy {
    /// The interactive defaults (D3): `rate_limit` retries 10 times from 2 s doubling with
    /// 25 % jitter, capped at 30 s (T3); `transient` retries 10 times 1, 2, 4, 8, 8 … s (T4);
    /// `hard` stops at once. Every exhausted outcome is `stop`.
    pub fn interactive() -> Self {
        Policy {
            rate_limit: ClassPolicy::retrying(
                RetryPolicy::new(
                    Limit::Count(DEFAULT_RETRIES),
                    Backoff::doubling(Duration::from_secs(2), Duration::from_secs(30))
                        .with_jitter(0.25),
                ),
                Exhausted::Stop,
            ),
            transient: ClassPolicy::retrying(
                RetryPolicy::new(
                    Limit::Count(DEFAULT_RETRIES),
                    Backoff::doubling(Duration::from_secs(1), Duration::from_secs(8)),
                ),
                Exhausted::Stop,
            ),
            hard: ClassPolicy::immediate(Exhausted::Stop),
        }
    }

    /// The default of a configured candidate that has a fallback after it on its route (D3):
    /// each retrying class retries at most [`FALLBACK_RETRIES`] times on the interactive
    /// schedule, a server hint honoured up to the class cap, then skips to the next candidate;
    /// `hard` skips at once. A configured fallback is used before the client is made to wait,
    /// with at most three attempts on the candidate before it.
    pub fn before_fallback() -> Self {
        let interactive = Policy::interactive();
        let short = |class: ClassPolicy| ClassPolicy {
            reset_wait: None,
            retry: class
                .retry
                .map(|retry| RetryPolicy::new(Limit::Count(FALLBACK_RETRIES), retry.backoff)),
            exhausted: Exhausted::Skip,
        };
        Policy {
            rate_limit: short(interactive.rate_limit),
            transient: short(interactive.transient),
            hard: ClassPolicy::immediate(Exhausted::Skip),
        }
    }

    /// What a new dynamic candidate gets (D3): skip at once for every class, no hidden waits.
    pub fn immediate_skip() -> Self {
        Policy {
            rate_limit: ClassPolicy::immediate(Exhausted::Skip),
            transient: ClassPolicy::immediate(Exhausted::Skip),
            hard: ClassPolicy::immediate(Exhausted::Skip),
        }
    }

    /// The opt-in `infinite` setting (B4): removes the count ceiling of every retrying class
    /// and nothing else.
    pub fn with_infinite_retries(mut self) -> Self {
        for class in [&mut self.rate_limit, &mut self.transient, &mut self.hard] {
            if let Some(retry) = &mut class.retry {
                retry.limit = Limit::Infinite;
            }
        }
        self
    }

    /// The wait before retry `retry` (1-based) of a failure classified as `classification`,
    /// under this policy's retry step: `None` when it is unclassified, `terminal`, forbidden
    /// by `x-should-retry: false`, not retried by its class, or past the budget. This is what
    /// `rebound classify --attempt N` prints; [`crate::turn::Turn`] runs the whole pipeline.
    pub fn retry_delay(
        &self,
        classification: &Classification,
        caller: Caller,
        retry: u32,
        draw: Jitter,
    ) -> Option<Duration> {
        if classification.retry_forbidden {
            return None;
        }
        let hint = classification.hint.map(|h| h.delay);
        self.for_class(classification.class()?)?
            .retry_delay(caller, retry, hint, draw)
    }

    /// The pipeline of a class; `None` for `terminal`, which is never retried.
    pub fn for_class(&self, class: Class) -> Option<&ClassPolicy> {
        match class {
            Class::RateLimit => Some(&self.rate_limit),
            Class::Transient => Some(&self.transient),
            Class::Hard => Some(&self.hard),
            Class::Terminal => None,
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy::interactive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_a_fallback_each_class_retries_twice_at_most_then_skips() {
        let p = Policy::before_fallback();
        for class in [p.rate_limit, p.transient] {
            assert_eq!(class.exhausted, Exhausted::Skip);
            assert_eq!(class.reset_wait, None);
            assert_eq!(class.limit_for(Caller::Session), Some(Limit::Count(2)));
            let hint = Some(Duration::from_secs(3));
            assert!(
                class
                    .retry_delay(Caller::Session, 2, hint, Jitter::NONE)
                    .is_some()
            );
            assert_eq!(
                class.retry_delay(Caller::Session, 3, hint, Jitter::NONE),
                None
            );
        }
        // The hint is honoured within the class cap.
        assert_eq!(
            p.rate_limit.retry_delay(
                Caller::Session,
                1,
                Some(Duration::from_secs(3)),
                Jitter::NONE
            ),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            p.transient.retry_delay(
                Caller::Session,
                1,
                Some(Duration::from_secs(60)),
                Jitter::NONE
            ),
            Some(Duration::from_secs(8))
        );
        assert_eq!(p.hard, ClassPolicy::immediate(Exhausted::Skip));
    }

    #[test]
    fn interactive_rate_limit_delays_match_the_contract() {
        let p = Policy::interactive().rate_limit;
        let d = |n, r| {
            p.retry_delay(Caller::Session, n, None, Jitter::new(r))
                .map(|d| d.as_millis())
        };
        assert_eq!(d(1, 0.0), Some(2000));
        assert_eq!(d(1, 1.0), Some(2500));
        assert_eq!(d(10, 0.0), Some(30_000));
        assert_eq!(d(11, 0.0), None);
        assert_eq!(d(0, 0.0), None);
    }

    #[test]
    fn hints_are_capped_by_the_class() {
        let p = Policy::interactive();
        let hint = Some(Duration::from_secs(120));
        let rl = p
            .rate_limit
            .retry_delay(Caller::Session, 1, hint, Jitter::MAX);
        let tr = p
            .transient
            .retry_delay(Caller::Session, 1, hint, Jitter::MAX);
        assert_eq!(rl, Some(Duration::from_secs(30)));
        assert_eq!(tr, Some(Duration::from_secs(8)));
        let short = Some(Duration::from_millis(300));
        assert_eq!(
            p.transient
                .retry_delay(Caller::Session, 3, short, Jitter::NONE),
            Some(Duration::from_millis(300))
        );
    }

    #[test]
    fn hard_and_terminal_never_retry_interactively() {
        let p = Policy::interactive();
        assert_eq!(
            p.hard.retry_delay(Caller::Session, 1, None, Jitter::NONE),
            None
        );
        assert!(p.for_class(Class::Terminal).is_none());
    }

    #[test]
    fn infinite_is_bounded_for_one_shot_callers() {
        let p = Policy::interactive().with_infinite_retries();
        assert_eq!(
            p.transient.limit_for(Caller::Session),
            Some(Limit::Infinite)
        );
        assert_eq!(
            p.transient.limit_for(Caller::Subagent),
            Some(Limit::Infinite)
        );
        assert_eq!(
            p.transient.limit_for(Caller::OneShot),
            Some(Limit::Count(DEFAULT_RETRIES))
        );
        assert!(
            p.transient
                .retry_delay(Caller::Session, 1000, None, Jitter::NONE)
                .is_some()
        );
        assert!(
            p.transient
                .retry_delay(Caller::OneShot, 11, None, Jitter::NONE)
                .is_none()
        );
        // Backoff and caps are unchanged.
        assert_eq!(
            p.transient
                .retry_delay(Caller::Session, 1000, None, Jitter::NONE),
            Some(Duration::from_secs(8))
        );
    }
}
