//! The loop's step before each attempt: asking the shared health ledger (S2–S4).
//!
//! A candidate is gated under its id; a candidate with a pool of keys (S4) is gated under
//! each key's id (`primary#key2`) too, and the first key that may serve is used. A resting
//! candidate (or one whose every key rests) is decided by [`Turn::on_rest`]: passed over,
//! waited for, or stopped at; the decision is logged, reported, committed and carried out
//! like a failure's, without an attempt.

use std::sync::Arc;
use std::time::SystemTime;

use rebound_core::classification::{Class, Confidence, Scope, Verdict};
use rebound_core::hint::{Hint, HintSource};
use rebound_core::{Classification, Evidence, Gate, Phase, Rest, Safety, Turn};

use super::{Decision, Early, Engine, Flow, Host, Next, Report, carry_out, log_decision};
use crate::attempt::Failed;
use crate::health::SharedHealth;

/// What the ledger's step before an attempt leaves.
pub(super) enum Consulted<R> {
    /// Send the attempt.
    Go(Slot),
    /// The turn moved on (another candidate, or a rest ended): start the step again.
    Again,
    /// The turn stopped at a resting candidate; the host delivered the terminal error.
    Stopped(R),
    /// Whoever waited went away.
    Ended,
}

/// Where an attempt goes in the ledger's terms: what its outcome is reported under.
#[derive(Clone, Debug, Default)]
pub(super) struct Slot {
    /// The attempt is the one probe of an ended window (S3).
    pub(super) probe: bool,
    /// The key of the candidate's pool it uses, and that key's ledger id (S4).
    pub(super) key: Option<(usize, String)>,
}

impl Slot {
    /// The ledger ids an outcome of this attempt concerns: the key's for a failure scoped to
    /// the account or key (a rate limit, a quota), else the candidate's.
    pub(super) fn failed_id<'a>(&'a self, candidate: &'a str, scope: Scope) -> &'a str {
        match &self.key {
            Some((_, id)) if scope == Scope::Account => id,
            _ => candidate,
        }
    }

    /// Reports a success under the candidate's id and the key's.
    pub(super) fn succeeded(&self, health: &SharedHealth, candidate: &str) {
        health.succeeded(candidate);
        if let Some((_, id)) = &self.key {
            health.succeeded(id);
        }
    }

    /// Whether, after a failure scoped to this attempt's key, another key of the candidate
    /// may serve at once (S4): then the retry needs no wait.
    pub(super) fn another_key_serves(
        &self,
        health: &SharedHealth,
        candidate: &str,
        keys: usize,
        scope: Scope,
        now: SystemTime,
    ) -> bool {
        let Some((used, _)) = &self.key else {
            return false;
        };
        scope == Scope::Account
            && (0..keys)
                .filter(|k| k != used)
                .any(|k| health.may_serve(&key_id(candidate, k), now))
    }

    /// A probe that will never report.
    pub(super) fn abandoned(&self, health: &SharedHealth, candidate: &str, now: SystemTime) {
        if !self.probe {
            return;
        }
        health.abandoned(candidate, now);
        if let Some((_, id)) = &self.key {
            health.abandoned(id, now);
        }
    }
}

/// The ledger id of key `key` (0-based) of `candidate`'s pool.
pub(super) fn key_id(candidate: &str, key: usize) -> String {
    format!("{candidate}#key{}", key + 1)
}

/// A rest the ledger asks for: until when, for which class, behind a probe or not, and the
/// ledger id that set it.
struct Resting {
    until: SystemTime,
    class: Class,
    behind_probe: bool,
    id: String,
}

/// The gate of `candidate` (id `id`) with `keys` keys: a slot, or the rest to take.
fn gate(health: &SharedHealth, id: &str, keys: usize, now: SystemTime) -> Result<Slot, Resting> {
    let resting = |gate: Gate, id: &str| match gate {
        Gate::Rest {
            until,
            class,
            behind_probe,
        } => Some(Resting {
            until,
            class,
            behind_probe,
            id: id.to_owned(),
        }),
        Gate::Pass | Gate::Probe => None,
    };
    let candidate = health.gate(id, now);
    if let Some(rest) = resting(candidate, id) {
        return Err(rest);
    }
    let mut slot = Slot {
        probe: candidate == Gate::Probe,
        key: None,
    };
    if keys <= 1 {
        return Ok(slot);
    }
    // The first key that may serve; when none may, the one that rests least long.
    let mut nearest: Option<Resting> = None;
    for key in 0..keys {
        let key_id = key_id(id, key);
        let gate = health.gate(&key_id, now);
        match resting(gate, &key_id) {
            None => {
                slot.probe |= gate == Gate::Probe;
                slot.key = Some((key, key_id));
                return Ok(slot);
            }
            Some(rest) => {
                if nearest.as_ref().is_none_or(|n| rest.until < n.until) {
                    nearest = Some(rest);
                }
            }
        }
    }
    match nearest {
        Some(rest) => Err(rest),
        None => Ok(slot),
    }
}

/// Asks the shared health ledger before an attempt (S2, S3, S4).
pub(super) async fn consult<H: Host>(
    engine: &Engine,
    host: &mut H,
    turn: &mut Option<Turn>,
    deadline: Option<SystemTime>,
    candidate: usize,
    attempt: u32,
) -> Consulted<H::Stopped> {
    let Some(health) = super::ledger(engine, host) else {
        return Consulted::Go(Slot::default());
    };
    // The common case, every candidate serving: no lock, no subscription, no allocation for a
    // candidate without a key pool.
    if health.all_closed() {
        let keys = host.keys(candidate);
        let key = (keys > 1).then(|| (0, key_id(host.candidate_id(candidate), 0)));
        if key.is_some() {
            host.use_key(candidate, 0);
        }
        return Consulted::Go(Slot { probe: false, key });
    }
    let now = engine.clock().now();
    // Taken before the gate, so that no change between the gate and the rest is missed.
    let changes = health.subscribe();
    let id = host.candidate_id(candidate).to_owned();
    let rest = match gate(health, &id, host.keys(candidate), now) {
        Ok(slot) => {
            if let Some((key, _)) = &slot.key {
                host.use_key(candidate, *key);
            }
            return Consulted::Go(slot);
        }
        Err(rest) => rest,
    };
    let (evidence, classification) = account(engine, health, &rest, now);
    let turn = turn.get_or_insert_with(|| host.new_turn());
    turn.set_deadline(deadline);
    let decided = Rest {
        until: rest.until,
        class: rest.class,
        behind_probe: rest.behind_probe,
        evidence: &evidence,
        classification: &classification,
    };
    #[expect(
        clippy::disallowed_methods,
        reason = "the recovery loop is the one place a rest is decided"
    )]
    let action = turn.on_rest(decided, now);
    let decision = Decision {
        candidate,
        attempt,
        classification,
        action,
        rested: true,
    };
    let failed = Failed {
        evidence,
        delivered: false,
        safety: Safety::Replayable,
        detail: H::Detail::default(),
    };
    log_decision(host, &failed, &decision);
    host.report(Report::Rested(&decision));
    if host.commit(&failed, &decision, turn).await == Flow::End {
        return Consulted::Ended;
    }
    let class = decision.class();
    // The attempt in hand was not sent: the host counts those that were.
    let sent = attempt.saturating_sub(1);
    let early = Early::Change(changes);
    match carry_out(host, engine.clock(), failed, decision, sent, class, early).await {
        Next::Attempt(_) => Consulted::Again,
        Next::Stopped(stopped) => Consulted::Stopped(stopped),
        Next::Ended => Consulted::Ended,
    }
}

/// The ledger's account of a rest, as evidence and a classification: what the terminal
/// error of a stop at it says (the deadline, the state, the failure that set it).
fn account(
    engine: &Engine,
    health: &SharedHealth,
    rest: &Resting,
    now: SystemTime,
) -> (Evidence, Classification) {
    let entry = health.entry(&rest.id);
    let state = entry.as_ref().map_or("cooling", |e| e.state.as_str());
    let code = entry.as_ref().and_then(|e| e.code.clone());
    let left = rest.until.duration_since(now).unwrap_or_default();
    let what = if rest.id.contains('#') {
        "every key of candidate"
    } else {
        "candidate"
    };
    let name = rest.id.split('#').next().unwrap_or_default();
    let evidence = Evidence {
        body: Some(format!(
            "rebound: {what} `{name}` is {} until {} ({:.1}s from now, {}{}){}",
            if rest.behind_probe {
                "being probed"
            } else {
                state
            },
            httpdate::fmt_http_date(rest.until),
            left.as_secs_f64(),
            rest.class.as_str(),
            code.as_deref().map(|c| format!(" {c}")).unwrap_or_default(),
            if rest.behind_probe {
                ""
            } else {
                ": its policy accepts no wait that long"
            },
        )),
        phase: Phase::Setup,
        ..Evidence::default()
    };
    let classification = Classification {
        verdict: Verdict::Classified(rest.class),
        code: code.as_deref().map(rebound_core::Code::new),
        confidence: Confidence::High,
        scope: entry
            .as_ref()
            .and_then(|e| e.scope)
            .unwrap_or(Scope::Provider),
        rule_id: entry.and_then(|e| e.rule_id).map(Arc::from),
        catalogue_version: Arc::from(engine.catalogue().version()),
        hint: Some(Hint {
            delay: left,
            source: HintSource::Health,
        }),
        retry_forbidden: false,
        phase: Phase::Setup,
        status: None,
    };
    (evidence, classification)
}
