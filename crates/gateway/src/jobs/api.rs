//! The jobs API: submit, read, follow, and act on durable jobs.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use rebound_core::policy::document::PolicyDocument;
use rebound_core::{Caller, Catalogue, Turn};
use rebound_runtime::Protocol;
use rebound_store::{JobRecord, JobState, NewJob, StoreError};
use serde::Deserialize;
use serde_json::{Value, json};

use super::view::summary;
use super::{Jobs, policies_of, spawn_driver};
use crate::reply::{Body, full};
use crate::state::Gateway;

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
    /// The request body, as the provider's API takes it, kept byte for byte. Jobs do not
    /// stream.
    request: Box<serde_json::value::RawValue>,
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
        ("POST", []) => submit(&gateway, jobs, &body).await,
        ("GET", []) => match jobs.off_thread(|store| store.list(100)).await {
            Ok(list) => json_response(
                StatusCode::OK,
                &json!({"jobs": list.iter().map(|j| summary(j, None)).collect::<Vec<_>>()}),
            ),
            Err(e) => problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        },
        ("GET", [id]) => {
            let read = (*id).to_owned();
            let found = jobs
                .off_thread(move |store| Ok((store.get(&read)?, store.attempts(&read)?)))
                .await;
            match found {
                Ok((job, attempts)) => {
                    json_response(StatusCode::OK, &summary(&job, Some(&attempts)))
                }
                Err(StoreError::NotFound(_)) => {
                    problem(StatusCode::NOT_FOUND, &format!("rebound: no job {id}"))
                }
                Err(e) => problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            }
        }
        ("GET", [id, "events"]) => events(jobs, id).await,
        ("POST", [id, action @ ("retry" | "skip" | "stop")]) => {
            manual(&gateway, jobs, id, action, &body).await
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
    /// The request body exactly as submitted (a JSON object that does not stream): stored
    /// and sent byte for byte, never re-serialised (numbers, key order and spacing kept).
    pub request: String,
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
    let request = submit.request.get();
    if !request.starts_with('{') {
        return Err("rebound: `request` must be a JSON object, the provider's request body".into());
    }
    let peeked = crate::body::peek(request.as_bytes()).map_err(|_| {
        "rebound: the request's `model` must be a string and `stream` a boolean".to_owned()
    })?;
    if peeked.stream == Some(true) {
        return Err("rebound: jobs do not stream; leave out `stream` or set it to false".into());
    }
    let Some(model) = peeked.model else {
        return Err("rebound: the request needs a `model`".into());
    };
    Ok(Submission {
        protocol,
        route: submit.route,
        model: model.into_owned(),
        request: request.to_owned(),
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

async fn submit(gateway: &Arc<Gateway>, jobs: &Jobs, body: &[u8]) -> http::Response<Body> {
    let submit = match parse_submission(body) {
        Ok(submit) => submit,
        Err(message) => return problem(StatusCode::BAD_REQUEST, &message),
    };
    let (protocol, model) = (submit.protocol, submit.model.as_str());
    let route = match &submit.route {
        Some(id) => gateway.config.routes.by_id(id, protocol),
        None => gateway.config.route(model, protocol),
    };
    let Some(route) = route else {
        return problem(StatusCode::NOT_FOUND, "rebound: no route serves this job");
    };
    let policies: Vec<PolicyDocument> = route
        .policies()
        .iter()
        .map(|policy| PolicyDocument::of(policy))
        .collect();
    let new = NewJob {
        protocol: match protocol {
            Protocol::OpenAi => "openai".to_owned(),
            Protocol::Anthropic => "anthropic".to_owned(),
        },
        route_id: route.id.clone(),
        candidates: route.candidates.iter().map(|c| c.id.clone()).collect(),
        policies,
        request: submit.request.into_bytes(),
    };
    let now = gateway.clock().now();
    match jobs.off_thread(move |store| store.create(new, now)).await {
        Ok(job) => {
            spawn_driver(gateway, job.id.clone());
            json_response(StatusCode::ACCEPTED, &summary(&job, None))
        }
        Err(e) => problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// A manual action on a job record; `Err(reason)` when it is refused, and then the record is
/// unchanged. `stop` is always possible; `retry` and `skip` need a policy snapshot this
/// gateway can run.
fn apply_manual(job: &mut JobRecord, action: &str, catalogue: &Catalogue) -> Result<(), String> {
    if action == "stop" {
        job.state = JobState::Stopped;
        job.deadline = None;
        return Ok(());
    }
    if job.state == JobState::Succeeded {
        return Err("the job succeeded".into());
    }
    let policies = policies_of(job, catalogue).map_err(|e| e.to_string())?;
    let mut turn = Turn::restore(policies, Caller::Session, &job.turn);
    if action == "retry" {
        turn.begin_manual_attempt();
        job.state = JobState::Pending;
        job.pending_outcome = Some("manual_retry".into());
    } else if turn.skip() {
        job.state = JobState::Pending;
        job.pending_outcome = Some("manual_skip".into());
    } else {
        job.state = JobState::Failed;
        job.error = Some(json!({
            "reason": "route_ended",
            "message": "skipped past the last candidate",
        }));
    }
    job.deadline = None;
    job.turn = turn.snapshot();
    Ok(())
}

/// Why a manual action changed nothing.
enum Unchanged {
    /// The action does not apply to the job as it is.
    Refused(String),
    /// The store said no: stale, not found, or failed.
    Store(StoreError),
}

async fn manual(
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
    let (target, now, act, catalogue) = (
        id.to_owned(),
        gateway.clock().now(),
        action.to_owned(),
        Arc::clone(gateway.catalogue()),
    );
    let decided = jobs
        .off_thread(move |store| {
            // Decide on the job as read; the transition, fenced by the same generation, then
            // applies the same decision to the same record. A refused action commits nothing,
            // so it moves no generation on.
            let current = store.get(&target)?;
            if current.generation == generation
                && let Err(reason) = apply_manual(&mut current.clone(), &act, &catalogue)
            {
                return Ok(Err(Unchanged::Refused(reason)));
            }
            Ok(store
                .transition(&target, generation, now, &mut |job| {
                    let _ = apply_manual(job, &act, &catalogue);
                    vec![]
                })
                .map_err(Unchanged::Store))
        })
        .await
        .unwrap_or_else(|e| Err(Unchanged::Store(e)));
    match decided {
        Ok(job) => {
            jobs.publish(&job);
            jobs.waker(&job.id).notify_one();
            if job.state == JobState::Pending {
                spawn_driver(gateway, job.id.clone());
            }
            json_response(StatusCode::OK, &summary(&job, None))
        }
        Err(Unchanged::Refused(reason)) => problem(
            StatusCode::CONFLICT,
            &format!("rebound: cannot {action}: {reason}"),
        ),
        Err(Unchanged::Store(StoreError::Stale { actual, .. })) => json_response(
            StatusCode::CONFLICT,
            &json!({"error": {"message": format!("rebound: the job moved on to generation {actual}; nothing changed"), "type": "stale_generation"}, "generation": actual}),
        ),
        Err(Unchanged::Store(StoreError::NotFound(_))) => {
            problem(StatusCode::NOT_FOUND, &format!("rebound: no job {id}"))
        }
        Err(Unchanged::Store(e)) => problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

async fn events(jobs: &Jobs, id: &str) -> http::Response<Body> {
    // Subscribe before reading: a change committed in between is then both in the record
    // read and in the stream, never in neither.
    let mut rx = jobs.subscribe(id);
    let job = match jobs.get(id).await {
        Ok(job) => job,
        Err(e) => {
            drop(rx);
            jobs.unsubscribe_idle(id);
            return match e {
                StoreError::NotFound(_) => {
                    problem(StatusCode::NOT_FOUND, &format!("rebound: no job {id}"))
                }
                e => problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            };
        }
    };
    let (tx, body_rx) = crate::reply::pipe::pipe();
    let first = summary(&job, None).to_string();
    let done = follow_ends(job.state);
    tokio::spawn(async move {
        let send = async |data: String| {
            tx.send(Bytes::from(format!("event: state\ndata: {data}\n\n")))
                .await
        };
        if !send(first).await || done {
            return;
        }
        while let Ok(data) = rx.recv().await {
            let finished = serde_json::from_str::<Value>(&data).ok().is_some_and(|v| {
                v.get("state")
                    .and_then(Value::as_str)
                    .and_then(JobState::parse)
                    .is_some_and(follow_ends)
            });
            if !send(data).await || finished {
                return;
            }
        }
    });
    let mut response = http::Response::new(Body::Stream(body_rx));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

/// A job's event stream ends at a final state, or where a human must act.
fn follow_ends(state: JobState) -> bool {
    state.is_final() || state == JobState::ActionRequired
}

#[cfg(test)]
mod tests {
    use super::parse_submission;

    #[test]
    fn fuzz_found_job_requests_are_kept_byte_for_byte() {
        // From the `jobs_body` fuzz target: a 27-digit integer came back as
        // 6.0000000000000006e26 because the request was stored re-serialised. Key order and
        // spacing changed too. It is now stored exactly as submitted.
        let request = r#"{"stream":false, "model":"claude-x","max_tokens":600000000000000001295671121,"messages":[{"role":"user","content":"hi"}]}"#;
        let body = format!(r#"{{"protocol":"anthropic","route":"claude","request": {request} }}"#);
        let submission = parse_submission(body.as_bytes()).unwrap();
        assert_eq!(submission.request, request);
        assert_eq!(submission.model, "claude-x");
    }

    #[test]
    fn a_request_must_be_an_object_with_a_string_model_that_does_not_stream() {
        for (request, says) in [
            ("[1, 2]", "must be a JSON object"),
            (r#"{"model": 5}"#, "must be a string"),
            (r#"{"model": "m", "stream": true}"#, "do not stream"),
            (r#"{"messages": []}"#, "needs a `model`"),
        ] {
            let body = format!(r#"{{"protocol": "openai", "request": {request}}}"#);
            let error = parse_submission(body.as_bytes()).unwrap_err();
            assert!(error.contains(says), "{request}: {error}");
        }
    }
}
