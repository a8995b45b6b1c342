//! What the user sees: the retry status while waiting (R3) and the diagnostics of the one
//! terminal error (R4). Field names follow the contract (`retryDelayMs`, `retryAttempt`).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::classification::{Class, Classification, Code};
use crate::evidence::{Evidence, Phase, bound_text};
use crate::policy::Limit;
use crate::redact::redact;

/// How much of a provider's error text diagnostics keep.
pub const ERROR_EXCERPT_LIMIT: usize = 512;

/// Why a wait was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// The class's backoff schedule.
    Backoff,
    /// A server or body hint, capped by the class.
    Hint,
    /// A provider's announced reset, within the reset-wait maximum (D2); it consumes no
    /// retry budget.
    ResetWait,
    /// The candidate rests in the gateway's shared health ledger (S2): another request
    /// learned its deadline, or its probe is in flight. No attempt was sent for it.
    Cooldown,
}

/// The status shown while a retry waits (R3). Re-render [`RetryStatus::text`] every second
/// for a countdown: it derives the seconds left from `since` and `delay`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryStatus {
    /// The whole wait.
    #[serde(rename = "retryDelayMs", serialize_with = "ser_ms")]
    pub delay: Duration,
    /// When the wait started.
    #[serde(serialize_with = "ser_time")]
    pub since: SystemTime,
    /// The retry this wait leads to, 1-based, counted in its class.
    pub attempt: u32,
    /// The class's budget; `None` for infinite.
    pub budget: Option<u32>,
    /// Why this wait.
    pub kind: WaitKind,
    /// The class being retried.
    pub class: Class,
    /// The code of the failure.
    pub code: Option<Code>,
}

impl RetryStatus {
    /// A status for a wait.
    pub fn new(
        delay: Duration,
        since: SystemTime,
        attempt: u32,
        limit: Limit,
        kind: WaitKind,
        class: Class,
        code: Option<Code>,
    ) -> Self {
        RetryStatus {
            delay,
            since,
            attempt,
            budget: limit.count(),
            kind,
            class,
            code,
        }
    }

    /// Time left at `now`, never negative.
    pub fn remaining(&self, now: SystemTime) -> Duration {
        let elapsed = now.duration_since(self.since).unwrap_or(Duration::ZERO);
        self.delay.saturating_sub(elapsed)
    }

    /// `Retrying in 3s · attempt 2/10` (`attempt 2` with an infinite budget). Seconds left
    /// are rounded up, so the line reads `0s` only when the retry is due.
    pub fn text(&self, now: SystemTime) -> String {
        let left = self.remaining(now);
        let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
        let mut out = format!("Retrying in {secs}s · attempt {}", self.attempt);
        if let Some(budget) = self.budget {
            let _ = write!(out, "/{budget}");
        }
        match self.kind {
            WaitKind::ResetWait => out.push_str(" · waiting for reset"),
            WaitKind::Cooldown => out.push_str(" · candidate cooling down"),
            WaitKind::Backoff | WaitKind::Hint => {}
        }
        out
    }
}

/// Why a turn stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The class's budget is spent and its outcome is `stop`.
    Exhausted,
    /// The last candidate's outcome was `skip`: the route has no candidate left.
    RouteEnded,
    /// The failure is `terminal`: repetition cannot repair it.
    Terminal,
    /// The failure is unclassified: a human decides (C4).
    Unclassified,
    /// A replay could duplicate an effect (D4).
    Unsafe,
    /// The request's deadline leaves no time for the next attempt (D6): the wait before it
    /// would end after the deadline, or the deadline has passed.
    Deadline,
    /// The provider said `x-should-retry: false` (C5).
    RetryForbidden,
    /// The only candidate left rests in the shared health ledger until a deadline beyond
    /// what its policy accepts to wait (S2): no attempt was sent for it.
    Resting,
}

impl StopReason {
    /// The name, as in diagnostics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Exhausted => "exhausted",
            StopReason::RouteEnded => "route_ended",
            StopReason::Terminal => "terminal",
            StopReason::Unclassified => "unclassified",
            StopReason::Unsafe => "unsafe",
            StopReason::RetryForbidden => "retry_forbidden",
            StopReason::Deadline => "deadline",
            StopReason::Resting => "resting",
        }
    }
}

/// The diagnostics of the one terminal error of an exhausted or stopped request (R4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnostics {
    /// Why the request stopped.
    pub reason: StopReason,
    /// The provider's error text, redacted and bounded.
    pub error: Option<String>,
    /// The semantic code.
    pub code: Option<Code>,
    /// The class, or `unclassified`.
    pub class: &'static str,
    /// The deciding rule.
    pub rule_id: Option<String>,
    /// The catalogue version that decided (C7).
    pub catalogue_version: String,
    /// The failure's phase.
    pub phase: Phase,
    /// The provider.
    pub provider: Option<String>,
    /// The provider's HTTP status.
    pub provider_status: Option<u16>,
    /// The exhausted class's retry counter (e.g. 10 after ten retries).
    pub retry_attempt: u32,
    /// Attempts sent in this request, the failed one included.
    pub attempts: u32,
    /// The candidate (route position) that failed last.
    pub candidate: usize,
    /// The validated hint of the last failure.
    pub hint_ms: Option<u64>,
    /// Time spent waiting in this request.
    #[serde(serialize_with = "ser_ms")]
    pub waited_ms: Duration,
}

impl Diagnostics {
    /// The diagnostics of `classification` for `evidence`, with counters from the caller.
    pub fn new(
        reason: StopReason,
        evidence: &Evidence,
        classification: &Classification,
        retry_attempt: u32,
        attempts: u32,
        candidate: usize,
        waited: Duration,
    ) -> Self {
        Diagnostics {
            reason,
            error: error_excerpt(evidence),
            code: classification.code.clone(),
            class: classification.verdict.label(),
            rule_id: classification.rule_id.as_deref().map(str::to_owned),
            catalogue_version: classification.catalogue_version.to_string(),
            phase: evidence.phase,
            provider: evidence.provider.clone(),
            provider_status: evidence.status,
            retry_attempt,
            attempts,
            candidate,
            hint_ms: classification
                .hint
                .map(|h| u64::try_from(h.delay.as_millis()).unwrap_or(u64::MAX)),
            waited_ms: waited,
        }
    }
}

/// The evidence's text, bounded to [`ERROR_EXCERPT_LIMIT`] bytes and redacted. Redaction
/// runs on a slightly longer prefix first, so a key cut by the bound is still recognised.
pub fn error_excerpt(evidence: &Evidence) -> Option<String> {
    let body = evidence.body.as_deref()?;
    let window = bound_text(body, ERROR_EXCERPT_LIMIT + 256);
    let redacted = redact(window);
    let mut excerpt = bound_text(&redacted, ERROR_EXCERPT_LIMIT).to_owned();
    if body.len() > excerpt.len() && redacted.len() > excerpt.len() {
        excerpt.push('…');
    }
    Some(excerpt)
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn ser_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    s.serialize_u64(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(delay_ms: u64, attempt: u32, limit: Limit) -> RetryStatus {
        RetryStatus::new(
            Duration::from_millis(delay_ms),
            UNIX_EPOCH,
            attempt,
            limit,
            WaitKind::Backoff,
            Class::Transient,
            None,
        )
    }

    #[test]
    fn countdown_text() {
        let s = status(8000, 9, Limit::Count(10));
        let at = |ms| UNIX_EPOCH + Duration::from_millis(ms);
        assert_eq!(s.text(at(0)), "Retrying in 8s · attempt 9/10");
        assert_eq!(s.text(at(500)), "Retrying in 8s · attempt 9/10");
        assert_eq!(s.text(at(1000)), "Retrying in 7s · attempt 9/10");
        assert_eq!(s.text(at(7999)), "Retrying in 1s · attempt 9/10");
        assert_eq!(s.text(at(8000)), "Retrying in 0s · attempt 9/10");
        assert_eq!(s.text(at(60_000)), "Retrying in 0s · attempt 9/10");
        // A clock that went backwards shows the whole wait, not a panic.
        let early = RetryStatus {
            since: at(5000),
            ..s.clone()
        };
        assert_eq!(early.text(at(0)), "Retrying in 8s · attempt 9/10");
    }

    #[test]
    fn infinite_budget_shows_the_attempt_alone() {
        let s = status(3000, 42, Limit::Infinite);
        assert_eq!(s.text(UNIX_EPOCH), "Retrying in 3s · attempt 42");
    }

    #[test]
    fn status_serialises_with_contract_names() {
        let s = status(3000, 2, Limit::Count(10));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["retryDelayMs"], 3000);
        assert_eq!(json["since"], 0);
        assert_eq!(json["attempt"], 2);
        assert_eq!(json["budget"], 10);
    }

    #[test]
    fn excerpts_are_bounded_and_redacted() {
        let key = "sk-proj-abcdefghijklmnopqrstuvwxyz012345";
        let evidence = Evidence {
            body: Some(format!("{}{key}", "x".repeat(ERROR_EXCERPT_LIMIT - 20))),
            ..Evidence::default()
        };
        let excerpt = error_excerpt(&evidence).unwrap();
        assert!(!excerpt.contains("sk-proj-abc"), "{excerpt}");
        assert!(!excerpt.contains("abcdefghijkl"), "{excerpt}");
        assert!(excerpt.len() <= ERROR_EXCERPT_LIMIT + '…'.len_utf8());
    }
}
