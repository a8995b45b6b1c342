//! The job driver: dispatches, waits and decides, committing each step before acting (P1).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, header};
use rebound_core::backoff::Jitter;
use rebound_core::status::StopReason;
use rebound_core::{
    Action, Caller, Evidence, Failure, Headers, Phase, Safety, TransportKind, Turn, WaitKind,
};
use rebound_runtime::http::read_whole;
use rebound_store::{AttemptOp, AttemptOutcome, AttemptRecord, JobRecord, JobState};
use serde_json::json;

use super::{Jobs, candidate_of, policies_of};
use crate::config::Candidate;
use crate::server::Gateway;

/// The largest job response kept.
const RESPONSE_LIMIT: usize = 64 << 20;

pub(super) async fn drive(gateway: Arc<Gateway>, id: String) {
    let Some(jobs) = gateway.jobs.as_ref() else {
        return;
    };
    let waker = jobs.waker(&id);
    loop {
        let Ok(job) = jobs.get(&id).await else {
            return;
        };
        match job.state {
            JobState::Pending => {
                if !dispatch(&gateway, jobs, job).await {
                    return;
                }
            }
            JobState::Waiting => {
                let wait = job.deadline.map_or(Duration::ZERO, |deadline| {
                    deadline
                        .duration_since(gateway.clock.now())
                        .unwrap_or(Duration::ZERO)
                });
                tokio::select! {
                    () = gateway.sleeper.sleep(wait) => {
                        // The timer's transition is fenced: a manual action since then wins.
                        let moved = jobs.transition(&id, job.generation, gateway.clock.now(), |j| {
                            j.state = JobState::Pending;
                            j.deadline = None;
                            vec![]
                        }).await;
                        if let Ok(job) = moved {
                            jobs.publish(&job);
                        }
                    }
                    () = waker.notified() => {}
                }
            }
            // Final, waiting for a human, or owned by another driver.
            _ => return,
        }
    }
}

/// One attempt of a job. `false` when the driver should stop (another owner, or the store
/// failed).
async fn dispatch(gateway: &Arc<Gateway>, jobs: &Jobs, job: JobRecord) -> bool {
    let Some(candidate) = candidate_of(gateway, &job) else {
        let gone = json!({"reason": "candidate_gone", "message": "the job's candidate is no longer configured"});
        let _ = jobs.require_action(&job, gateway.clock.now(), gone).await;
        return false;
    };
    // The snapshot decides what follows a failure: one this gateway cannot run is a human's
    // to resolve, before anything is sent.
    let policies = match policies_of(&job, &gateway.catalogue) {
        Ok(policies) => policies,
        Err(invalid) => {
            let _ = jobs
                .require_action(&job, gateway.clock.now(), invalid.to_job_error())
                .await;
            return false;
        }
    };
    let number = job.turn.attempts.max(1);
    let started = gateway.clock.now();
    // P1/P3: the attempt is on record as possibly sent before a byte leaves.
    let candidate_id = candidate.id.clone();
    let dispatched = jobs
        .transition(&job.id, job.generation, started, move |j| {
            j.state = JobState::Dispatching;
            vec![AttemptOp::Begin(AttemptRecord::in_flight(
                number,
                candidate_id.clone(),
                started,
            ))]
        })
        .await;
    let Ok(job) = dispatched else { return false };
    jobs.publish(&job);
    gateway.metrics.attempt(&candidate.id);
    let outcome = send(gateway, &candidate, &job).await;
    let finished = gateway.clock.now();
    let mut attempt = AttemptRecord {
        finished: Some(finished),
        ..AttemptRecord::in_flight(number, candidate.id.clone(), started)
    };
    let evidence = match outcome {
        Ok((status, body)) => {
            attempt.outcome = AttemptOutcome::Succeeded;
            attempt.status = Some(status);
            let done = jobs
                .transition(&job.id, job.generation, finished, move |j| {
                    j.state = JobState::Succeeded;
                    j.response_status = Some(status);
                    j.response = Some(body.clone());
                    j.deadline = None;
                    vec![AttemptOp::Finish(attempt.clone())]
                })
                .await;
            if let Ok(job) = done {
                jobs.publish(&job);
            }
            return false;
        }
        Err(evidence) => evidence,
    };
    let now = gateway.clock.now();
    let classification = gateway.catalogue.classify(&evidence, now);
    let mut turn = Turn::restore(policies, Caller::Session, &job.turn);
    let action = turn.on_failure(
        Failure {
            evidence: &evidence,
            classification: &classification,
            safety: Safety::Replayable,
        },
        now,
        Jitter::new(gateway.draw()),
    );
    attempt.outcome = AttemptOutcome::Failed;
    attempt.status = evidence.status;
    attempt.code = classification.code.as_ref().map(|c| c.to_string());
    attempt.class = Some(classification.verdict.label().to_owned());
    attempt.rule_id = classification.rule_id.as_deref().map(str::to_owned);
    attempt.catalogue_version = Some(classification.catalogue_version.to_string());
    attempt.phase = Some(evidence.phase.as_str().to_owned());
    let recorded = json!({
        "code": attempt.code, "class": attempt.class, "rule_id": attempt.rule_id,
        "catalogue_version": attempt.catalogue_version, "hint_ms": classification.hint.map(|h| h.delay.as_millis() as u64),
    });
    let snapshot_after = turn.snapshot();
    let result = jobs
        .transition(&job.id, job.generation, gateway.clock.now(), move |j| {
            j.classification = Some(recorded.clone());
            j.turn = snapshot_after.clone();
            match &action {
                Action::Retry(wait) => {
                    j.state = JobState::Waiting;
                    j.deadline = Some(now + wait.delay);
                    j.pending_outcome = Some(match wait.kind {
                        WaitKind::ResetWait => "reset_wait".into(),
                        _ => "retry".into(),
                    });
                }
                Action::Fallback { .. } => {
                    j.state = JobState::Pending;
                    j.deadline = None;
                    j.pending_outcome = Some("fallback".into());
                }
                Action::Stop(diagnostics) => {
                    j.state = match diagnostics.reason {
                        StopReason::Unclassified | StopReason::Unsafe => JobState::ActionRequired,
                        _ => JobState::Failed,
                    };
                    j.deadline = None;
                    j.pending_outcome = None;
                    j.error = serde_json::to_value(diagnostics).ok();
                }
            }
            vec![AttemptOp::Finish(attempt.clone())]
        })
        .await;
    match result {
        Ok(job) => {
            jobs.publish(&job);
            !job.state.is_final() && job.state != JobState::ActionRequired
        }
        Err(_) => false,
    }
}

/// Sends one job attempt: `Ok((status, body))` for a success, `Err(evidence)` otherwise.
async fn send(
    gateway: &Gateway,
    candidate: &Candidate,
    job: &JobRecord,
) -> Result<(u16, Vec<u8>), Evidence> {
    let base = Evidence {
        provider: Some(candidate.provider.clone()),
        ..Evidence::default()
    };
    let body = candidate.body_for(&Bytes::from(job.request.clone()));
    let mut request = Request::post(candidate.endpoint())
        .version(candidate.version())
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(|e| Evidence {
            body: Some(e.to_string()),
            transport: Some(rebound_core::TransportKind::ConnectionRefused),
            ..base.clone()
        })?;
    candidate.authorize(request.headers_mut());
    let response = gateway
        .client
        .send(request)
        .await
        .map_err(|failure| Evidence {
            transport: Some(failure.kind),
            body: Some(failure.message),
            phase: Phase::Setup,
            ..base.clone()
        })?;
    let (parts, mut body) = response.into_parts();
    let idle = gateway.client.timeouts().idle;
    let bytes = match read_whole(&mut body, RESPONSE_LIMIT, idle, std::future::pending()).await {
        Ok(bytes) => bytes.to_vec(),
        // `None` would mean cancelled, which a pending future never is.
        Err(failure) => {
            return Err(Evidence {
                transport: Some(
                    failure
                        .as_ref()
                        .map_or(TransportKind::Truncated, |f| f.kind),
                ),
                body: failure.map(|f| f.message),
                ..base
            });
        }
    };
    if parts.status.is_success() {
        return Ok((parts.status.as_u16(), bytes));
    }
    let headers: Headers = parts
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    Err(Evidence {
        status: Some(parts.status.as_u16()),
        headers,
        body: Some(String::from_utf8_lossy(&bytes).into_owned()),
        ..base
    })
}
