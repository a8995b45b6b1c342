//! The jobs API: submit, read, follow, and act on durable jobs.

use std::sync::{Arc, PoisonError};

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use rebound_core::policy::document::PolicyDocument;
use rebound_core::{Caller, Turn};
use rebound_runtime::Protocol;
use rebound_store::{JobState, NewJob, StoreError};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::{Jobs, now_ms, policies_of, spawn_driver, summary};
use crate::server::{Body, Gateway, full};

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

/// A job submission that `POST /v1/rebound/jobs` accepts, checked.
#[derive(Clone, Debug)]
pub struct Submission {
    /// The protocol its request speaks.
    pub protocol: Protocol,
    /// The route asked for, if any.
    pub route: Option<String>,
    /// The request's model.
    pub model: String,
    /// The request body, a JSON object that does not stream.
    pub request: Value,
}

/// Checks a job submission body; the error is the one line the client gets with its 400.
pub fn parse_submission(body: &[u8]) -> Result<Submission, String> {
    let submit: Submit = match serde_json::from_slice(body) {
        Ok(s) => s,
        Err(e) if e.is_data() => return Err(format!("rebound: {e}")),
        Err(e) => {
            return Err(format!(
                "rebound: the job is not valid JSON (line {}, column {})",
                e.line(),
                e.column()
            ));
        }
    };
    let protocol = match submit.protocol.as_str() {
        "openai" => Protocol::OpenAi,
        "anthropic" => Protocol::Anthropic,
        other => {
            return Err(format!(
                "rebound: unknown protocol `{other}`, expected openai or anthropic"
            ));
        }
    };
    if !submit.request.is_object() {
        return Err("rebound: `request` must be a JSON object, the provider's request body".into());
    }
    if submit.request.get("stream").and_then(Value::as_bool) == Some(true) {
        return Err("rebound: jobs do not stream; leave out `stream` or set it to false".into());
    }
    let Some(model) = submit.request.get("model").and_then(Value::as_str) else {
        return Err("rebound: the request needs a `model`".into());
    };
    Ok(Submission {
        protocol,
        route: submit.route,
        model: model.to_owned(),
        request: submit.request,
    })
}

/// Checks a manual action's body (`{"generation": N}`) and returns the generation.
pub fn parse_manual_action(body: &[u8]) -> Result<u64, String> {
    serde_json::from_slice::<ManualAction>(body)
        .map(|action| action.generation)
        .map_err(|_| {
            "rebound: send {\"generation\": N}, the generation the action was decided against"
                .to_owned()
        })
}

fn submit(gateway: &Arc<Gateway>, jobs: &Jobs, body: &[u8]) -> http::Response<Body> {
    let submit = match parse_submission(body) {
        Ok(submit) => submit,
        Err(message) => return problem(StatusCode::BAD_REQUEST, &message),
    };
    let (protocol, model) = (submit.protocol, submit.model.as_str());
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
        protocol: match protocol {
            Protocol::OpenAi => "openai".to_owned(),
            Protocol::Anthropic => "anthropic".to_owned(),
        },
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
    let generation = match parse_manual_action(body) {
        Ok(generation) => generation,
        Err(message) => return problem(StatusCode::BAD_REQUEST, &message),
    };
    let mut refused: Option<String> = None;
    let result = jobs.store.transition(id, generation, now_ms(gateway), &mut |job| {
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
    let (tx, body_rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let first = summary(&job, None).to_string();
    let done = job.state.is_final() || job.state == JobState::ActionRequired;
    tokio::spawn(async move {
        let send = |data: String| {
            let tx = tx.clone();
            async move {
                tx.send(Bytes::from(format!("event: state\ndata: {data}\n\n")))
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
