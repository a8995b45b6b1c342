//! The run driver: a durable agent run as a host of the recovery loop (B6). Each invocation
//! is an attempt; the loop classifies its evidence and asks the turn, and the driver commits
//! the decision before acting on it (P1), fenced by the run's generation (P2).
//!
//! Effect safety for agents (D4) is what the driver adds: an invocation that acted (a tool
//! call in its structured output) is only ever continued in its own session. A retry on the
//! same profile resumes the session the CLI reported; a switch to another profile after an
//! effect needs the route's explicit `handoff`; a run that acted and cannot be resumed is
//! `action_required`, with the evidence.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rebound_core::status::StopReason;
use rebound_core::{Action, Caller, Diagnostics, Evidence, Phase, Safety, Turn, Wait};
use rebound_runtime::{Attempted, Decision, Failed, Flow, Host, Report, recover};
use rebound_store::AttemptOutcome;
use rebound_store::runs::{
    Invocation, InvocationMode, InvocationOp, RunRecord, RunSession, RunState,
};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::process::{OUTPUT_TAIL, Ran, Tail, invoke};
use super::{Runs, policies_of};
use crate::config::AgentProfile;
use crate::state::Gateway;

/// Runs run `id` until it succeeds, fails, waits for a human, or another owner takes it.
pub(super) async fn drive(gateway: Arc<Gateway>, id: String) {
    let Some(runs) = gateway.runs.as_ref() else {
        return;
    };
    let mut host = RunHost {
        gateway: &gateway,
        runs,
        waker: runs.waker(&id),
        id,
        run: None,
        current: None,
    };
    let mut turn = None;
    let _ = recover(&gateway.engine, &mut host, &mut turn).await;
    // A run that ended keeps no event channel nobody follows.
    runs.unsubscribe_idle(&host.id);
}

/// The invocation in flight.
struct Current {
    profile: Arc<AgentProfile>,
    args: Vec<String>,
    record: Invocation,
}

/// What a failed invocation leaves for the commit.
#[derive(Debug, Default)]
pub(super) struct Left {
    exit_code: Option<i32>,
    session: Option<String>,
    acted: bool,
    output: String,
    stderr: String,
}

/// One run, driven.
struct RunHost<'a> {
    gateway: &'a Arc<Gateway>,
    runs: &'a Runs,
    id: String,
    waker: Arc<Notify>,
    /// The run as of the driver's latest transition.
    run: Option<RunRecord>,
    current: Option<Current>,
}

fn problem(reason: &str, message: &str) -> Value {
    json!({"reason": reason, "message": message})
}

impl RunHost<'_> {
    fn now(&self) -> SystemTime {
        self.gateway.clock().now()
    }

    /// Holds the run (at its generation) for a human with `error`.
    async fn require_action(&self, run: &RunRecord, error: Value) {
        let _ = self
            .runs
            .transition(&run.id, run.generation, self.now(), move |r| {
                r.state = RunState::ActionRequired;
                r.deadline = None;
                r.pending_outcome = None;
                r.error = Some(error.clone());
                vec![]
            })
            .await;
    }

    /// Waits for a waiting run's deadline, or for its waker; the timer's move to pending is
    /// fenced.
    async fn wait_for_deadline(&self, run: &RunRecord) {
        let now = self.now();
        let wait = run.deadline.map_or(Duration::ZERO, |deadline| {
            deadline.duration_since(now).unwrap_or(Duration::ZERO)
        });
        tokio::select! {
            () = self.gateway.sleeper().sleep(wait) => {
                let _ = self.runs.transition(&run.id, run.generation, self.now(), |r| {
                    r.state = RunState::Pending;
                    r.deadline = None;
                    vec![]
                }).await;
            }
            () = self.waker.notified() => {}
        }
    }

    /// Starts a pending run's next invocation on record (P1): its profile, fresh or resumed.
    async fn dispatch(&mut self, run: RunRecord, turn: &mut Option<Turn>) -> Flow {
        let profile_id = run
            .profiles
            .get(run.turn.candidate)
            .cloned()
            .unwrap_or_default();
        let Some(profile) = self.gateway.config.agents.profile(&profile_id).cloned() else {
            let gone = problem(
                "profile_gone",
                &format!("the run's agent profile `{profile_id}` is no longer configured"),
            );
            self.require_action(&run, gone).await;
            return Flow::End;
        };
        let policies = match policies_of(&run, self.gateway.catalogue()) {
            Ok(policies) => policies,
            Err(message) => {
                self.require_action(&run, problem("policy_snapshot_invalid", &message))
                    .await;
                return Flow::End;
            }
        };
        let own_session = run.session.as_ref().filter(|s| s.profile == profile.id);
        let (mode, args) = match own_session.and_then(|s| profile.resume_args(&s.id)) {
            Some(args) => (InvocationMode::Resume, args),
            None => {
                // D4: after an effect, a fresh session would do the work again. Only a route
                // that allows a hand-off starts another profile afresh.
                let handed_off = run.handoff && own_session.is_none();
                if run.acted && !handed_off {
                    let message = format!(
                        "the run already acted and profile `{}` cannot resume its session; starting afresh could repeat its effects",
                        profile.id
                    );
                    self.require_action(&run, problem("cannot_resume", &message))
                        .await;
                    return Flow::End;
                }
                (InvocationMode::Fresh, profile.fresh_args(&run.prompt))
            }
        };
        let now = self.now();
        let record = Invocation {
            number: run.turn.attempts.max(1),
            profile: profile.id.clone(),
            mode,
            started: now,
            finished: None,
            outcome: AttemptOutcome::InFlight,
            exit_code: None,
            session: own_session.map(|s| s.id.clone()),
            acted: false,
            code: None,
            class: None,
            rule_id: None,
            catalogue_version: None,
        };
        let begin = record.clone();
        let started = self
            .runs
            .transition(&run.id, run.generation, now, move |r| {
                r.state = RunState::Running;
                r.deadline = None;
                r.pending_outcome = None;
                vec![InvocationOp::Begin(begin.clone())]
            })
            .await;
        let Ok(run) = started else {
            return Flow::End;
        };
        self.runs.send_value(
            &run.id,
            &json!({"type": "invocation", "number": record.number, "profile": profile.id, "mode": mode}),
        );
        *turn = Some(Turn::restore(policies, Caller::Session, &run.turn));
        self.run = Some(run);
        self.current = Some(Current {
            profile,
            args,
            record,
        });
        Flow::Continue
    }
}

/// The text the catalogue reads: the error events first, then the final error text, then
/// the stderr tail (C8).
fn evidence_text(ran: &Ran) -> String {
    let mut parts: Vec<String> = ran.errors.clone();
    if let Some((true, Some(text))) = &ran.finished
        && !parts.contains(text)
    {
        parts.push(text.clone());
    }
    parts.extend(ran.spawn_error.clone());
    if !ran.stderr.trim().is_empty() {
        parts.push(ran.stderr.trim_end().to_owned());
    }
    parts.join("\n")
}

impl Host for RunHost<'_> {
    type Success = ();
    type Detail = Left;
    type Stopped = ();

    fn route_id(&self) -> &str {
        self.run.as_ref().map_or("-", |r| r.route_id.as_str())
    }

    fn candidate_id(&self, candidate: usize) -> &str {
        self.run
            .as_ref()
            .and_then(|r| r.profiles.get(candidate))
            .map_or("-", String::as_str)
    }

    /// An agent profile's failures are its run's: a run records each invocation before it
    /// starts, so it is not gated by the shared ledger, and does not feed it.
    fn shares_health(&self) -> bool {
        false
    }

    fn new_turn(&self) -> Turn {
        let policies = self
            .run
            .as_ref()
            .and_then(|run| policies_of(run, self.gateway.catalogue()).ok())
            .unwrap_or_default();
        Turn::new(policies, Caller::Session)
    }

    async fn prepare(&mut self, turn: &mut Option<Turn>) -> Flow {
        loop {
            let Ok(run) = self.runs.get(&self.id).await else {
                return Flow::End;
            };
            match run.state {
                RunState::Pending => return self.dispatch(run, turn).await,
                RunState::Waiting => self.wait_for_deadline(&run).await,
                // Final, waiting for a human, or running under another driver.
                _ => return Flow::End,
            }
        }
    }

    async fn attempt(&mut self, _candidate: usize, _attempt: u32) -> Attempted<(), Left> {
        let (Some(run), Some(current)) = (self.run.clone(), self.current.as_ref()) else {
            return Attempted::Ended;
        };
        let cwd = if run.cwd.is_empty() {
            current.profile.cwd.clone().unwrap_or_default()
        } else {
            run.cwd.clone()
        };
        let mut output = Tail::from_text(&run.output, OUTPUT_TAIL);
        let number = current.record.number;
        let runs = self.runs;
        let ran = invoke(&current.profile, &current.args, &cwd, |stream, line, _| {
            output.push(line);
            runs.send_value(
                &run.id,
                &json!({"type": "output", "invocation": number, "stream": stream.as_str(), "line": line}),
            );
        })
        .await;
        let session = ran
            .session
            .clone()
            .or_else(|| current.record.session.clone());
        let acted = run.acted || ran.acted;
        if !ran.succeeded() {
            let resumable = session.is_some() && current.profile.resume_args.is_some();
            let evidence = Evidence {
                provider: Some(current.profile.provider.clone()),
                phase: if ran.content || ran.acted {
                    Phase::Stream
                } else {
                    Phase::Setup
                },
                body: Some(evidence_text(&ran)),
                // C4: this run, this generation, this invocation.
                invocation: Some(format!("{}:g{}:i{number}", run.id, run.generation)),
                ..Evidence::default()
            };
            return Attempted::Failed(Failed {
                evidence,
                delivered: ran.content,
                safety: if !acted || resumable {
                    Safety::Replayable
                } else {
                    Safety::Ambiguous
                },
                detail: Left {
                    exit_code: ran.exit_code,
                    session,
                    acted: ran.acted,
                    output: output.text(),
                    stderr: ran.stderr.clone(),
                },
            });
        }
        let mut record = current.record.clone();
        record.finished = Some(self.now());
        record.outcome = AttemptOutcome::Succeeded;
        record.exit_code = ran.exit_code;
        record.session.clone_from(&session);
        record.acted = ran.acted;
        let profile = current.profile.id.clone();
        let result = ran.result();
        let output = output.text();
        let _ = self
            .runs
            .transition(&run.id, run.generation, self.now(), move |r| {
                r.state = RunState::Succeeded;
                r.result.clone_from(&result);
                r.acted |= acted;
                r.output.clone_from(&output);
                if let Some(id) = &session {
                    r.session = Some(RunSession {
                        profile: profile.clone(),
                        id: id.clone(),
                    });
                }
                vec![InvocationOp::Finish(record.clone())]
            })
            .await;
        Attempted::Succeeded(())
    }

    async fn commit(&mut self, failed: &Failed<Left>, decision: &Decision, turn: &Turn) -> Flow {
        let (Some(run), Some(current)) = (self.run.clone(), self.current.as_ref()) else {
            return Flow::End;
        };
        let left = &failed.detail;
        let classification = &decision.classification;
        let mut record = current.record.clone();
        record.finished = Some(self.now());
        record.outcome = AttemptOutcome::Failed;
        record.exit_code = left.exit_code;
        record.session.clone_from(&left.session);
        record.acted = left.acted;
        record.code = classification.code.as_ref().map(|c| c.to_string());
        record.class = Some(decision.class().to_owned());
        record.rule_id = classification.rule_id.as_deref().map(str::to_owned);
        record.catalogue_version = Some(classification.catalogue_version.to_string());
        let recorded = json!({
            "code": record.code, "class": record.class, "rule_id": record.rule_id,
            "catalogue_version": record.catalogue_version,
            "hint_ms": classification.hint.map(|h| u64::try_from(h.delay.as_millis()).unwrap_or(u64::MAX)),
        });
        let evidence = json!({
            "invocation": failed.evidence.invocation,
            "profile": current.profile.id,
            "provider": failed.evidence.provider,
            "phase": failed.evidence.phase.as_str(),
            "exit_code": left.exit_code,
            "acted": left.acted,
            "text": failed.evidence.bounded_text(),
            "stderr_tail": left.stderr,
        });
        let acted = run.acted || left.acted;
        // D4: a switch after an effect is a hand-off, which the route must allow.
        let held = matches!(decision.action, Action::Fallback { .. }) && acted && !run.handoff;
        let resumes = left.session.is_some() && current.profile.resume_args.is_some();
        let (snapshot, now, action) = (turn.snapshot(), self.now(), decision.action.clone());
        let (profile, session, output) = (
            current.profile.id.clone(),
            left.session.clone(),
            left.output.clone(),
        );
        let next = run.profiles.get(snapshot.candidate).cloned();
        let result = self
            .runs
            .transition(&run.id, run.generation, now, move |r| {
                r.classification = Some(recorded.clone());
                r.evidence = Some(evidence.clone());
                r.turn = snapshot.clone();
                r.acted = acted;
                r.output.clone_from(&output);
                if let Some(id) = &session {
                    r.session = Some(RunSession {
                        profile: profile.clone(),
                        id: id.clone(),
                    });
                }
                if held {
                    r.state = RunState::ActionRequired;
                    r.deadline = None;
                    r.pending_outcome = None;
                    r.error = Some(json!({
                        "reason": "acted_without_handoff",
                        "message": format!(
                            "the run acted on profile `{profile}`; the route does not allow handing it to `{}`",
                            next.as_deref().unwrap_or("-")
                        ),
                    }));
                } else {
                    apply(r, &action, now, resumes);
                }
                vec![InvocationOp::Finish(record.clone())]
            })
            .await;
        match result {
            Ok(run) if !held => {
                self.run = Some(run);
                Flow::Continue
            }
            _ => Flow::End,
        }
    }

    /// The wait is on record as the run's deadline: the next `prepare` spends it, durably.
    async fn wait(&mut self, _failed: &Failed<Left>, _wait: &Wait, _attempt: u32) -> Flow {
        Flow::Continue
    }

    /// The terminal error is on record (see `commit`).
    async fn stop(&mut self, _failed: Failed<Left>, _diagnostics: Box<Diagnostics>, _attempt: u32) {
    }

    /// Runs count like requests, under the protocol `agent`, and their invocations like
    /// attempts, under the profile's id (G6).
    fn report(&self, report: Report<'_>) {
        // A run that ends without a decision was taken over, or held before it ran.
        if matches!(report, Report::Ended) {
            return;
        }
        crate::observe::count(self.gateway, "agent", |c| self.candidate_id(c), &report);
    }
}

/// What a decision makes of the run's record.
fn apply(run: &mut RunRecord, action: &Action, now: SystemTime, resumes: bool) {
    match action {
        Action::Retry(wait) => {
            run.state = RunState::Waiting;
            run.deadline = Some(now + wait.delay);
            run.pending_outcome = Some(if resumes { "resume" } else { "retry" }.into());
        }
        Action::Fallback { .. } => {
            run.state = RunState::Pending;
            run.deadline = None;
            run.pending_outcome = Some("switch".into());
        }
        Action::Stop(diagnostics) => {
            run.state = match diagnostics.reason {
                StopReason::Unclassified | StopReason::Unsafe => RunState::ActionRequired,
                _ => RunState::Failed,
            };
            run.deadline = None;
            run.pending_outcome = None;
            run.error = serde_json::to_value(diagnostics).ok();
        }
    }
}
