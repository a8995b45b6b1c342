//! Durable routes in the gateway: the jobs API (`/v1/rebound/jobs`) and the driver that runs
//! each job through its route, persisting every decision before acting on it (P1–P3).
//!
//! A job is a non-streaming chat-completions or messages request that may wait for hours (a
//! quota reset, a long `retry-after`) and must survive a restart. Every change goes through the
//! store's generation-fenced transition; a timer that fires after a manual action, or a manual
//! action issued against an old generation, changes nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use rebound_core::backoff::Jitter;
use rebound_core::policy::document::PolicyDocument;
use rebound_core::status::StopReason;
use rebound_core::{
    Action, Caller, Evidence, Failure, Headers, Phase, Policy, Safety, Turn, WaitKind,
};
use rebound_runtime::Protocol;
use rebound_store::{
    AttemptOp, AttemptRecord, JobRecord, JobState, NewJob, RouteStore, StoreError,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast};

use crate::config::Candidate;
use crate::server::{Body, Gateway, full};

/// The largest job response kept.
const RESPONSE_LIMIT: usize = 64 << 20;

/// Jobs: the store, and the wakers and event channels of running jobs.
pub struct Jobs {
    store: Arc<dyn RouteStore>,
    wakers: Mutex<HashMap<String, Arc<Notify>>>,
    events: Mutex<HashMap<String, broadcast::Sender<String>>>,
}

fn now_ms(gateway: &Gateway) -> u64 {
    gateway
        .clock
        .now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn json_response(status: StatusCode, value: &Value) -> http::Response<Body> {
    full(status, "application/json", value.to_string())
}

fn problem(status: StatusCode, message: &str) -> http::Response<Body> {
    json_response(
        status,
        &json!({"error": {"message": message, "type": "invalid_request_error"}}),
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Submit {
    /// `openai` (chat completions) or `anthropic` (messages).
    protocol: String,
    /// The route to use; by default the one the request's model selects.
    route: Option<String>,
    /// The request body, as the provider's API takes it. Jobs do not stream.
    request: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManualAction {
    /// The generation the action was decided against.
    generation: u64,
}

impl Jobs {
    /// Jobs kept in `store`.
    pub fn new(store: Arc<dyn RouteStore>) -> Self {
        Jobs {
            store,
            wakers: Mutex::default(),
            events: Mutex::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn RouteStore> {
        &self.store
    }

    fn publish(&self, job: &JobRecord) {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = events.get(&job.id) {
            let _ = tx.send(summary(job, None).to_string());
        }
    }

    fn waker(&self, id: &str) -> Arc<Notify> {
        Arc::clone(
            self.wakers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(id.to_owned())
                .or_default(),
        )
    }
}

/// The API view of a job.
fn summary(job: &JobRecord, attempts: Option<&[AttemptRecord]>) -> Value {
    let mut out = json!({
        "id": job.id,
        "generation": job.generation,
        "state": job.state,
        "protocol": job.protocol,
        "route_id": job.route_id,
        "candidate": job.candidates.get(job.turn.candidate),
        "candidates": job.candidates,
        "turn": job.turn,
        "deadline_ms": job.deadline_ms,
        "pending_outcome": job.pending_outcome,
        "classification": job.classification,
        "error": job.error,
        "response_status": job.response_status,
        "created_ms": job.created_ms,
        "updated_ms": job.updated_ms,
    });
    if let (Some(attempts), Value::Object(map)) = (attempts, &mut out) {
        map.insert("attempts".into(), json!(attempts));
        if let Some(body) = &job.response {
            let response = serde_json::from_slice::<Value>(body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
            map.insert("response".into(), response);
        }
    }
    out
}

fn policies_of(job: &JobRecord, gateway: &Gateway) -> Vec<Arc<Policy>> {
    let docs: Vec<PolicyDocument> =
        serde_json::from_value(job.policies.clone()).unwrap_or_default();
    let policies: Vec<Arc<Policy>> = docs
        .iter()
        .map(|d| {
            Arc::new(
                d.compile(&Policy::immediate_skip(), &gateway.catalogue)
                    .unwrap_or_else(|_| Policy::immediate_skip()),
            )
        })
        .collect();
    if policies.is_empty() {
        vec![Arc::new(Policy::immediate_skip())]
    } else {
        policies
    }
}

fn candidate_of(gateway: &Gateway, job: &JobRecord) -> Option<Arc<Candidate>> {
    let id = job.candidates.get(job.turn.candidate)?;
    gateway
        .config
        .routes
        .iter()
        .flat_map(|r| r.candidates.iter())
        .find(|c| &c.id == id)
        .cloned()
}

/// Routes `/v1/rebound/jobs…` requests.
pub(crate) async fn handle(
    gateway: Arc<Gateway>,
    method: &http::Method,
    path: &str,
    body: Bytes,
) -> http::Response<Body> {
    let Some(jobs) = gateway.jobs.as_ref() else {
        return problem(
            StatusCode::NOT_FOUND,
            "rebound: durable jobs are not enabled on this gateway",
        );
    };
    let rest = path
        .trim_start_matches("/v1/rebound/jobs")
        .trim_start_matches('/');
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    match (method.as_str(), parts.as_slice()) {
        ("POST", []) => submit(&gateway, jobs, &body),
        ("GET", []) => match jobs.store.list(100) {
            Ok(list) => json_response(
                StatusCode::OK,
                &json!({"jobs": list.iter().map(|j| summary(j, None)).collect::<Vec<_>>()}),
            ),
            Err(e) => problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        },
        ("GET", [id]) => match (jobs.store.get(id), jobs.store.attempts(id)) {
            (Ok(job), Ok(attempts)) => {
                json_response(StatusCode::OK, &summary(&job, Some(&attempts)))
            }
            (Err(StoreError::NotFound(_)), _) => {
                problem(StatusCode::NOT_FOUND, &format!("rebound: no job {id}"))
            }
            (Err(e), _) | (_, Err(e)) => problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        },
        ("GET", [id, "events"]) => events(jobs, id),
        ("POST", [id, action @ ("retry" | "skip" | "stop")]) => {
            manual(&gateway, jobs, id, action, &body)
        }
        _ => problem(StatusCode::NOT_FOUND, "rebound: unknown jobs endpoint"),
    }
}

fn submit(gateway: &Arc<Gateway>, jobs: &Jobs, body: &[u8]) -> http::Response<Body> {
    let submit: Submit = match serde_json::from_slice(body) {
        Ok(s) => s,
        Err(e) if e.is_data() => return problem(StatusCode::BAD_REQUEST, &format!("rebound: {e}")),
        Err(e) => {
            return problem(
                StatusCode::BAD_REQUEST,
                &format!(
                    "rebound: the job is not valid JSON (line {}, column {})",
                    e.line(),
                    e.column()
                ),
            );
        }
    };
    let protocol = match submit.protocol.as_str() {
        "openai" => Protocol::OpenAi,
        "anthropic" => Protocol::Anthropic,
        other => {
            return problem(
                StatusCode::BAD_REQUEST,
                &format!("rebound: unknown protocol `{other}`, expected openai or anthropic"),
            );
        }
    };
    if submit.request.get("stream").and_then(Value::as_bool) == Some(true) {
        return problem(
            StatusCode::BAD_REQUEST,
            "rebound: jobs do not stream; leave out `stream` or set it to false",
        );
    }
    let Some(model) = submit.request.get("model").and_then(Value::as_str) else {
        return problem(
            StatusCode::BAD_REQUEST,
            "rebound: the request needs a `model`",
        );
    };
    let route = match &submit.route {
        Some(id) => gateway
            .config
            .routes
            .iter()
            .find(|r| &r.id == id)
            .and_then(|r| {
                let candidates: Vec<_> = r
                    .candidates
                    .iter()
                    .filter(|c| c.protocol == protocol)
                    .cloned()
                    .collect();
                (!candidates.is_empty()).then(|| crate::config::Route {
                    id: r.id.clone(),
                    models: r.models.clone(),
                    candidates,
                })
            }),
        None => gateway.config.route(model, protocol),
    };
    let Some(route) = route else {
        return problem(StatusCode::NOT_FOUND, "rebound: no route serves this job");
    };
    let policies: Vec<PolicyDocument> = route
        .candidates
        .iter()
        .map(|c| PolicyDocument::of(&c.policy))
        .collect();
    let new = NewJob {
        protocol: submit.protocol.clone(),
        route_id: route.id.clone(),
        candidates: route.candidates.iter().map(|c| c.id.clone()).collect(),
        policies: serde_json::to_value(policies).unwrap_or(Value::Null),
        request: submit.request.to_string().into_bytes(),
    };
    match jobs.store.create(new, now_ms(gateway)) {
        Ok(job) => {
            spawn_driver(gateway, job.id.clone());
            json_response(StatusCode::ACCEPTED, &summary(&job, None))
        }
        Err(e) => problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn manual(
    gateway: &Arc<Gateway>,
    jobs: &Jobs,
    id: &str,
    action: &str,
    body: &[u8],
) -> http::Response<Body> {
    let Ok(request) = serde_json::from_slice::<ManualAction>(body) else {
        return problem(
            StatusCode::BAD_REQUEST,
            "rebound: send {\"generation\": N}, the generation the action was decided against",
        );
    };
    let mut refused: Option<String> = None;
    let result = jobs.store.transition(id, request.generation, now_ms(gateway), &mut |job| {
        let mut turn = Turn::restore(policies_of(job, gateway), Caller::Session, &job.turn);
        match action {
            "stop" => {
                job.state = JobState::Stopped;
                job.deadline_ms = None;
            }
            "retry" if job.state == JobState::Succeeded => refused = Some("the job succeeded".into()),
            "retry" => {
                turn.begin_manual_attempt();
                job.state = JobState::Pending;
                job.deadline_ms = None;
                job.pending_outcome = Some("manual_retry".into());
            }
            _ if job.state == JobState::Succeeded => refused = Some("the job succeeded".into()),
            _ => {
                if turn.skip() {
                    job.state = JobState::Pending;
                    job.pending_outcome = Some("manual_skip".into());
                } else {
                    job.state = JobState::Failed;
                    job.error = Some(json!({"reason": "route_ended", "message": "skipped past the last candidate"}));
                }
                job.deadline_ms = None;
            }
        }
        job.turn = turn.snapshot();
        vec![]
    });
    if let Some(reason) = refused {
        return problem(
            StatusCode::CONFLICT,
            &format!("rebound: cannot {action}: {reason}"),
        );
    }
    match result {
        Ok(job) => {
            jobs.publish(&job);
            jobs.waker(&job.id).notify_one();
            if job.state == JobState::Pending {
                spawn_driver(gateway, job.id.clone());
            }
            json_response(StatusCode::OK, &summary(&job, None))
        }
        Err(StoreError::Stale { actual, .. }) => json_response(
            StatusCode::CONFLICT,
            &json!({"error": {"message": format!("rebound: the job moved on to generation {actual}; nothing changed"), "type": "stale_generation"}, "generation": actual}),
        ),
        Err(StoreError::NotFound(_)) => {
            problem(StatusCode::NOT_FOUND, &format!("rebound: no job {id}"))
        }
        Err(e) => problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn events(jobs: &Jobs, id: &str) -> http::Response<Body> {
    let job = match jobs.store.get(id) {
        Ok(job) => job,
        Err(StoreError::NotFound(_)) => {
            return problem(StatusCode::NOT_FOUND, &format!("rebound: no job {id}"));
        }
        Err(e) => return problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let mut rx = jobs
        .events
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(id.to_owned())
        .or_insert_with(|| broadcast::channel(64).0)
        .subscribe();
    let (tx, body_rx) =
        tokio::sync::mpsc::channel::<Result<hyper::body::Frame<Bytes>, std::io::Error>>(16);
    let first = summary(&job, None).to_string();
    let done = job.state.is_final() || job.state == JobState::ActionRequired;
    tokio::spawn(async move {
        let send = |data: String| {
            let tx = tx.clone();
            async move {
                tx.send(Ok(hyper::body::Frame::data(Bytes::from(format!(
                    "event: state\ndata: {data}\n\n"
                )))))
                .await
                .is_ok()
            }
        };
        if !send(first).await || done {
            return;
        }
        while let Ok(data) = rx.recv().await {
            let finished = serde_json::from_str::<Value>(&data)
                .ok()
                .and_then(|v| v.get("state").and_then(Value::as_str).map(str::to_owned))
                .is_some_and(|s| {
                    matches!(
                        s.as_str(),
                        "succeeded" | "failed" | "stopped" | "action_required"
                    )
                });
            if !send(data).await || finished {
                return;
            }
        }
    });
    let mut response =
        http::Response::new(BodyExt::boxed(crate::forward::ChannelBody::new(body_rx)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

/// Starts a driver for `id` unless one is running.
pub(crate) fn spawn_driver(gateway: &Arc<Gateway>, id: String) {
    let gateway = Arc::clone(gateway);
    tokio::spawn(async move { drive(gateway, id).await });
}

/// After a restart: reconcile the store, then drive every due job (P3).
pub async fn resume(gateway: &Arc<Gateway>) -> Result<rebound_store::Reconciliation, StoreError> {
    let Some(jobs) = gateway.jobs.as_ref() else {
        return Ok(rebound_store::Reconciliation::default());
    };
    let reconciled = jobs.store.reconcile(now_ms(gateway))?;
    for (id, _, _) in &reconciled.due {
        spawn_driver(gateway, id.clone());
    }
    Ok(reconciled)
}

async fn drive(gateway: Arc<Gateway>, id: String) {
    let Some(jobs) = gateway.jobs.as_ref() else {
        return;
    };
    let waker = jobs.waker(&id);
    loop {
        let Ok(job) = jobs.store.get(&id) else { return };
        match job.state {
            JobState::Pending => {
                if !dispatch(&gateway, jobs, job).await {
                    return;
                }
            }
            JobState::Waiting => {
                let deadline = UNIX_EPOCH + Duration::from_millis(job.deadline_ms.unwrap_or(0));
                let wait = deadline
                    .duration_since(gateway.clock.now())
                    .unwrap_or(Duration::ZERO);
                tokio::select! {
                    () = gateway.sleeper.sleep(wait) => {
                        // The timer's transition is fenced: a manual action since then wins.
                        let moved = jobs.store.transition(&id, job.generation, now_ms(&gateway), &mut |j| {
                            j.state = JobState::Pending;
                            j.deadline_ms = None;
                            vec![]
                        });
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
        let _ = jobs.store.transition(&job.id, job.generation, now_ms(gateway), &mut |j| {
            j.state = JobState::ActionRequired;
            j.error = Some(json!({"reason": "candidate_gone", "message": "the job's candidate is no longer configured"}));
            vec![]
        });
        return false;
    };
    let number = job.turn.attempts.max(1);
    let started = now_ms(gateway);
    // P1/P3: the attempt is on record as possibly sent before a byte leaves.
    let dispatched = jobs
        .store
        .transition(&job.id, job.generation, started, &mut |j| {
            j.state = JobState::Dispatching;
            vec![AttemptOp::Begin(AttemptRecord {
                number,
                candidate: candidate.id.clone(),
                started_ms: started,
                outcome: "in_flight".into(),
                ..AttemptRecord::default()
            })]
        });
    let Ok(job) = dispatched else { return false };
    jobs.publish(&job);
    gateway.metrics.attempt(&candidate.id);
    let outcome = send(gateway, &candidate, &job).await;
    let finished = now_ms(gateway);
    let mut attempt = AttemptRecord {
        number,
        candidate: candidate.id.clone(),
        started_ms: started,
        finished_ms: Some(finished),
        ..AttemptRecord::default()
    };
    let evidence = match outcome {
        Ok((status, body)) => {
            attempt.outcome = "succeeded".into();
            attempt.status = Some(status);
            let done = jobs
                .store
                .transition(&job.id, job.generation, finished, &mut |j| {
                    j.state = JobState::Succeeded;
                    j.response_status = Some(status);
                    j.response = Some(body.clone());
                    j.deadline_ms = None;
                    vec![AttemptOp::Finish(attempt.clone())]
                });
            if let Ok(job) = done {
                jobs.publish(&job);
            }
            return false;
        }
        Err(evidence) => evidence,
    };
    let now = gateway.clock.now();
    let classification = gateway.catalogue.classify(&evidence, now);
    let mut turn = Turn::restore(policies_of(&job, gateway), Caller::Session, &job.turn);
    let action = turn.on_failure(
        Failure {
            evidence: &evidence,
            classification: &classification,
            safety: Safety::Replayable,
        },
        now,
        Jitter::new(gateway.draw()),
    );
    attempt.outcome = "failed".into();
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
        .store
        .transition(&job.id, job.generation, now_ms(gateway), &mut |j| {
            j.classification = Some(recorded.clone());
            j.turn = snapshot_after.clone();
            match &action {
                Action::Retry(wait) => {
                    j.state = JobState::Waiting;
                    let deadline = now + wait.delay;
                    j.deadline_ms = deadline
                        .duration_since(UNIX_EPOCH)
                        .ok()
                        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                    j.pending_outcome = Some(match wait.kind {
                        WaitKind::ResetWait => "reset_wait".into(),
                        _ => "retry".into(),
                    });
                }
                Action::Fallback { .. } => {
                    j.state = JobState::Pending;
                    j.deadline_ms = None;
                    j.pending_outcome = Some("fallback".into());
                }
                Action::Stop(diagnostics) => {
                    j.state = match diagnostics.reason {
                        StopReason::Unclassified | StopReason::Unsafe => JobState::ActionRequired,
                        _ => JobState::Failed,
                    };
                    j.deadline_ms = None;
                    j.pending_outcome = None;
                    j.error = serde_json::to_value(diagnostics).ok();
                }
            }
            vec![AttemptOp::Finish(attempt.clone())]
        });
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
    let body = candidate
        .model
        .as_deref()
        .and_then(|m| crate::body::rewrite_model(&job.request, m))
        .unwrap_or_else(|| job.request.clone());
    let url = match candidate.protocol {
        Protocol::OpenAi => format!("{}/chat/completions", candidate.base_url),
        Protocol::Anthropic => format!("{}/v1/messages", candidate.base_url),
    };
    let mut request = Request::post(url)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| Evidence {
            body: Some(e.to_string()),
            transport: Some(rebound_core::TransportKind::ConnectionRefused),
            ..base.clone()
        })?;
    if candidate.protocol == Protocol::Anthropic {
        request
            .headers_mut()
            .insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
    }
    if let Some(key) = &candidate.api_key {
        let (name, value) = match candidate.protocol {
            Protocol::OpenAi => (header::AUTHORIZATION, format!("Bearer {key}")),
            Protocol::Anthropic => (http::HeaderName::from_static("x-api-key"), key.clone()),
        };
        if let Ok(mut value) = HeaderValue::from_str(&value) {
            value.set_sensitive(true);
            request.headers_mut().insert(name, value);
        }
    }
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
    let (parts, body) = response.into_parts();
    let bytes = http_body_util::Limited::new(body, RESPONSE_LIMIT)
        .collect()
        .await
        .map(|c| c.to_bytes().to_vec())
        .map_err(|e| Evidence {
            transport: Some(rebound_core::TransportKind::Truncated),
            body: Some(e.to_string()),
            ..base.clone()
        })?;
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
