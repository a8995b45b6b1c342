//! The job driver: a durable job as a host of the recovery loop. Every step is committed to
//! the store before it is acted on (P1), and every commit is fenced by the job's generation
//! (P2): a manual action since the driver last read the job wins, and the driver stops.
//!
//! The store holds the job's truth between attempts: before each attempt the driver reloads
//! the job and its turn, waits out a persisted deadline (a timer, or a manual action that wakes
//! it), and records the attempt as possibly sent before a byte leaves (P3).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Request, header};
use rebound_core::status::StopReason;
use rebound_core::{Action, Caller, Diagnostics, Evidence, Phase, Safety, Turn, Wait, WaitKind};
use rebound_runtime::attempt::{
    ErrorBody, RESPONSE_LIMIT, read_error_body, response_evidence, transport_evidence,
};
use rebound_runtime::http::read_whole;
use rebound_runtime::{Attempted, Decision, Failed, Flow, Host, Report, recover};
use rebound_store::{AttemptOp, AttemptOutcome, AttemptRecord, JobRecord, JobState};
use serde_json::json;
use tokio::sync::Notify;

use super::{Jobs, candidate_of, policies_of};
use crate::config::Candidate;
use crate::state::Gateway;

/// Runs job `id` until it succeeds, fails, waits for a human, or another owner takes it.
pub(super) async fn drive(gateway: Arc<Gateway>, id: String) {
    let Some(jobs) = gateway.jobs.as_ref() else {
        return;
    };
    let mut host = JobHost {
        gateway: &gateway,
        jobs,
        waker: jobs.waker(&id),
        id,
        job: None,
        candidate: None,
        started: SystemTime::UNIX_EPOCH,
        in_flight: false,
        key: 0,
    };
    let mut turn = None;
    let _ = recover(&gateway.engine, &mut host, &mut turn).await;
}

/// One job, driven.
struct JobHost<'a> {
    gateway: &'a Arc<Gateway>,
    jobs: &'a Jobs,
    id: String,
    /// Woken by manual actions.
    waker: Arc<Notify>,
    /// The job as of the driver's latest transition.
    job: Option<JobRecord>,
    /// The candidate of the attempt in flight.
    candidate: Option<Arc<Candidate>>,
    /// When the attempt in flight was dispatched.
    started: SystemTime,
    /// An attempt is on record as dispatched and not yet finished.
    in_flight: bool,
    /// The key of the candidate's pool the attempt uses (S4).
    key: usize,
}

impl JobHost<'_> {
    /// The job as last read; `None` only before the first `prepare`.
    fn job(&self) -> Option<&JobRecord> {
        self.job.as_ref()
    }

    /// Waits for a waiting job's deadline, or for a manual action to wake it. The timer's
    /// transition to pending is fenced: a manual action since then wins.
    async fn wait_for_deadline(&self, job: &JobRecord) {
        let now = self.gateway.clock().now();
        let wait = job.deadline.map_or(Duration::ZERO, |deadline| {
            deadline.duration_since(now).unwrap_or(Duration::ZERO)
        });
        // A wait for a resting candidate ends early when the ledger changes (S2, S3).
        let mut changes = self
            .gateway
            .engine
            .health()
            .filter(|_| job.pending_outcome.as_deref() == Some(COOLDOWN))
            .map(|health| health.subscribe());
        // A change between the rest's decision and this subscription (a probe that reported
        // meanwhile) is not missed: a candidate that may serve now ends the wait at once.
        if let (Some(health), Some(id)) = (
            self.gateway.engine.health().filter(|_| changes.is_some()),
            job.candidates.get(job.turn.candidate),
        ) && health.may_serve(id, now)
        {
            self.due(job).await;
            return;
        }
        let ledger_changed = async {
            if let Some(changes) = changes.as_mut()
                && changes.changed().await.is_ok()
            {
                return;
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            () = ledger_changed => self.due(job).await,
            () = self.gateway.sleeper().sleep(wait) => self.due(job).await,
            () = self.waker.notified() => {}
        }
        // A job's wait is spent here, durably, not in the loop's `wait`: what it lasted.
        let waited = self
            .gateway
            .clock()
            .now()
            .duration_since(now)
            .unwrap_or_default();
        self.gateway.metrics.waited(waited);
    }

    /// A waiting job's wait is over: it is pending again. Fenced: a manual action since the
    /// job was read wins.
    async fn due(&self, job: &JobRecord) {
        let now = self.gateway.clock().now();
        let moved = self
            .jobs
            .transition(&job.id, job.generation, now, |j| {
                j.state = JobState::Pending;
                j.deadline = None;
                vec![]
            })
            .await;
        if let Ok(job) = moved {
            self.jobs.publish(&job);
        }
    }

    /// Loads a pending job's candidate and turn. Nothing is on record yet: the shared health
    /// ledger may still pass the candidate over or rest it (S2) before anything is sent.
    async fn load(&mut self, job: JobRecord, turn: &mut Option<Turn>) -> Flow {
        let now = self.gateway.clock().now();
        let Some(candidate) = candidate_of(self.gateway, &job) else {
            let gone = json!({"reason": "candidate_gone", "message": "the job's candidate is no longer configured"});
            let _ = self.jobs.require_action(&job, now, gone).await;
            return Flow::End;
        };
        // The snapshot decides what follows a failure: one this gateway cannot run is a
        // human's to resolve, before anything is sent.
        let policies = match policies_of(&job, self.gateway.catalogue()) {
            Ok(policies) => policies,
            Err(invalid) => {
                let _ = self
                    .jobs
                    .require_action(&job, now, invalid.to_job_error())
                    .await;
                return Flow::End;
            }
        };
        *turn = Some(Turn::restore(policies, Caller::Session, &job.turn));
        self.job = Some(job);
        self.candidate = Some(candidate);
        self.in_flight = false;
        Flow::Continue
    }

    /// Records the attempt as possibly sent (P1, P3), before a byte leaves; `None` when the
    /// job moved on meanwhile (a manual action, another owner).
    async fn dispatch(&mut self, number: u32) -> Option<JobRecord> {
        let job = self.job.clone()?;
        let candidate_id = self.candidate.as_ref()?.id.clone();
        let now = self.gateway.clock().now();
        let dispatched = self
            .jobs
            .transition(&job.id, job.generation, now, move |j| {
                j.state = JobState::Dispatching;
                vec![AttemptOp::Begin(AttemptRecord::in_flight(
                    number,
                    candidate_id.clone(),
                    now,
                ))]
            })
            .await
            .ok()?;
        self.jobs.publish(&dispatched);
        self.job = Some(dispatched.clone());
        self.started = now;
        self.in_flight = true;
        Some(dispatched)
    }

    /// The record of the attempt in flight, finished now.
    fn finished_attempt(&self, number: u32, outcome: AttemptOutcome) -> AttemptRecord {
        let candidate = self
            .candidate
            .as_ref()
            .map(|c| c.id.clone())
            .unwrap_or_default();
        AttemptRecord {
            finished: Some(self.gateway.clock().now()),
            outcome,
            ..AttemptRecord::in_flight(number, candidate, self.started)
        }
    }
}

impl Host for JobHost<'_> {
    type Success = ();
    type Detail = ();
    type Stopped = ();

    fn route_id(&self) -> &str {
        self.job().map_or("-", |j| j.route_id.as_str())
    }

    fn candidate_id(&self, candidate: usize) -> &str {
        self.job()
            .and_then(|j| j.candidates.get(candidate))
            .map_or("-", String::as_str)
    }

    fn new_turn(&self) -> Turn {
        // `prepare` loads every attempt's turn; this is for a job it never loaded.
        let policies = self
            .job()
            .and_then(|job| policies_of(job, self.gateway.catalogue()).ok())
            .unwrap_or_default();
        Turn::new(policies, Caller::Session)
    }

    fn keys(&self, _candidate: usize) -> usize {
        self.candidate.as_ref().map_or(1, |c| c.keys())
    }

    fn use_key(&mut self, _candidate: usize, key: usize) {
        self.key = key;
    }

    async fn prepare(&mut self, turn: &mut Option<Turn>) -> Flow {
        loop {
            let Ok(job) = self.jobs.get(&self.id).await else {
                return Flow::End;
            };
            match job.state {
                JobState::Pending => return self.load(job, turn).await,
                JobState::Waiting => self.wait_for_deadline(&job).await,
                // Final, waiting for a human, or owned by another driver.
                _ => return Flow::End,
            }
        }
    }

    async fn attempt(&mut self, _candidate: usize, attempt: u32) -> Attempted<(), ()> {
        let Some(candidate) = self.candidate.clone() else {
            return Attempted::Ended;
        };
        let Some(job) = self.dispatch(attempt).await else {
            return Attempted::Ended;
        };
        let (status, body) = match send(self.gateway, &candidate, self.key, &job).await {
            Ok(answer) => answer,
            Err(evidence) => {
                return Attempted::Failed(Failed {
                    evidence,
                    delivered: false,
                    safety: Safety::Replayable,
                    detail: (),
                });
            }
        };
        let mut record = self.finished_attempt(attempt, AttemptOutcome::Succeeded);
        record.status = Some(status);
        let now = self.gateway.clock().now();
        let done = self
            .jobs
            .transition(&job.id, job.generation, now, move |j| {
                j.state = JobState::Succeeded;
                j.response_status = Some(status);
                j.response = Some(body.clone());
                j.deadline = None;
                vec![AttemptOp::Finish(record.clone())]
            })
            .await;
        if let Ok(job) = done {
            self.jobs.publish(&job);
        }
        Attempted::Succeeded(())
    }

    async fn commit(&mut self, failed: &Failed<()>, decision: &Decision, turn: &Turn) -> Flow {
        let Some(job) = self.job.clone() else {
            return Flow::End;
        };
        self.gateway.status.failed(
            self.gateway.clock().now(),
            &job.route_id,
            self.candidate_id(decision.candidate),
            &failed.evidence,
            decision,
        );
        let classification = &decision.classification;
        // A rest sent nothing: there is no attempt to finish (S2).
        let in_flight = std::mem::take(&mut self.in_flight);
        let mut record = self.finished_attempt(decision.attempt, AttemptOutcome::Failed);
        record.status = failed.evidence.status;
        record.code = classification.code.as_ref().map(|c| c.to_string());
        record.class = Some(decision.class().to_owned());
        record.rule_id = classification.rule_id.as_deref().map(str::to_owned);
        record.catalogue_version = Some(classification.catalogue_version.to_string());
        record.phase = Some(failed.evidence.phase.as_str().to_owned());
        let recorded = json!({
            "code": record.code, "class": record.class, "rule_id": record.rule_id,
            "catalogue_version": record.catalogue_version,
            "hint_ms": classification.hint.map(|h| h.delay.as_millis() as u64),
        });
        let snapshot = turn.snapshot();
        let now = self.gateway.clock().now();
        let action = decision.action.clone();
        let result = self
            .jobs
            .transition(&job.id, job.generation, now, move |j| {
                j.classification = Some(recorded.clone());
                j.turn = snapshot.clone();
                apply(j, &action, now);
                if in_flight {
                    vec![AttemptOp::Finish(record.clone())]
                } else {
                    vec![]
                }
            })
            .await;
        match result {
            Ok(job) => {
                self.jobs.publish(&job);
                self.job = Some(job);
                Flow::Continue
            }
            Err(_) => Flow::End,
        }
    }

    /// The wait is on record as the job's deadline: the next `prepare` spends it, durably.
    async fn wait(&mut self, _failed: &Failed<()>, _wait: &Wait, _attempt: u32) -> Flow {
        Flow::Continue
    }

    /// The terminal error is on record (see `commit`); nobody waits on a connection for it.
    async fn stop(&mut self, _failed: Failed<()>, _diagnostics: Box<Diagnostics>, _attempt: u32) {}

    fn report(&self, report: Report<'_>) {
        // A job that ends without a decision was taken over or stopped by hand: no request
        // outcome to count. Its waits are counted where they are spent (`wait_for_deadline`).
        if matches!(report, Report::Ended | Report::Waited(_)) {
            return;
        }
        let protocol = self.job().map_or("-", |j| j.protocol.as_str());
        crate::observe::count(self.gateway, protocol, |c| self.candidate_id(c), &report);
    }
}

/// The pending outcome of a job that waits for a candidate resting in the shared health
/// ledger: its wait also ends when the ledger changes (a probe reported).
const COOLDOWN: &str = "cooldown";

/// What a decision makes of the job's record.
fn apply(job: &mut JobRecord, action: &Action, now: SystemTime) {
    match action {
        Action::Retry(wait) => {
            job.state = JobState::Waiting;
            job.deadline = Some(now + wait.delay);
            job.pending_outcome = Some(match wait.kind {
                WaitKind::ResetWait => "reset_wait".into(),
                WaitKind::Cooldown => COOLDOWN.into(),
                WaitKind::Backoff | WaitKind::Hint => "retry".into(),
            });
        }
        Action::Fallback { .. } => {
            job.state = JobState::Pending;
            job.deadline = None;
            job.pending_outcome = Some("fallback".into());
        }
        Action::Stop(diagnostics) => {
            job.state = match diagnostics.reason {
                StopReason::Unclassified | StopReason::Unsafe => JobState::ActionRequired,
                _ => JobState::Failed,
            };
            job.deadline = None;
            job.pending_outcome = None;
            job.error = serde_json::to_value(diagnostics).ok();
        }
    }
}

/// Sends one job attempt: `Ok((status, body))` for a success, `Err(evidence)` otherwise.
async fn send(
    gateway: &Gateway,
    candidate: &Candidate,
    key: usize,
    job: &JobRecord,
) -> Result<(u16, Vec<u8>), Evidence> {
    let provider = candidate.provider.as_str();
    let broken = |kind, message: String| {
        let failure = rebound_runtime::http::TransportFailure { kind, message };
        transport_evidence(provider, failure, Phase::Setup)
    };
    let body = candidate.body_for(&Bytes::from(job.request.clone()));
    let mut request = Request::post(candidate.endpoint())
        .version(candidate.version())
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(|e| {
            broken(
                rebound_core::TransportKind::ConnectionRefused,
                e.to_string(),
            )
        })?;
    candidate.authorize_with(request.headers_mut(), key);
    let timeouts = candidate.timeouts.resolve(gateway.client.timeouts());
    let response = gateway
        .client
        .send_within(request, timeouts.first_byte)
        .await
        .map_err(|failure| transport_evidence(provider, failure, Phase::Setup))?;
    let (parts, mut body) = response.into_parts();
    let idle = timeouts.idle;
    // Nothing waits on a connection for a job: it is never cancelled.
    if !parts.status.is_success() {
        let bytes = match read_error_body(&mut body, idle, std::future::pending()).await {
            ErrorBody::Read(bytes) => bytes,
            ErrorBody::Cancelled => Bytes::new(),
        };
        return Err(response_evidence(
            provider,
            parts.status,
            &parts.headers,
            &bytes,
        ));
    }
    match read_whole(&mut body, RESPONSE_LIMIT, idle, std::future::pending()).await {
        Ok(bytes) => Ok((parts.status.as_u16(), bytes.to_vec())),
        Err(failure) => Err(match failure {
            Some(failure) => transport_evidence(provider, failure, Phase::Setup),
            None => broken(
                rebound_core::TransportKind::Truncated,
                "the answer was not read".into(),
            ),
        }),
    }
}
