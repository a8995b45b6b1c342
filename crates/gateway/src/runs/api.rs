//! The runs API: submit a run (and follow its output), read runs, follow one.
//!
//! - `POST /v1/rebound/runs` `{"prompt", "route"?, "cwd"?, "stream"?}`: a durable run on an
//!   agent route (the first one by default). With `"stream": true` the answer is the run's
//!   events as NDJSON until it succeeds, fails or needs a human; otherwise `202` and its state.
//! - `GET /v1/rebound/runs`: the latest runs. `GET /v1/rebound/runs/{id}`: one run with its
//!   invocations and output tail. `GET /v1/rebound/runs/{id}/events`: its events as NDJSON.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use rebound_core::policy::document::PolicyDocument;
use rebound_store::runs::{NewRun, RunState, RunStoreError};
use serde::Deserialize;
use serde_json::{Value, json};

use super::view::summary;
use super::{Runs, spawn_driver};
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

fn store_problem(id: &str, e: &RunStoreError) -> http::Response<Body> {
    match e {
        RunStoreError::NotFound(_) => {
            problem(StatusCode::NOT_FOUND, &format!("rebound: no run {id}"))
        }
        e => problem(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Submit {
    /// What the agent is asked.
    prompt: String,
    /// The agent route; the first one by default.
    route: Option<String>,
    /// The working directory of every invocation; the profile's (or the gateway's) otherwise.
    cwd: Option<String>,
    /// Answer with the run's events until it ends, instead of at once.
    #[serde(default)]
    stream: bool,
}

/// Routes `/v1/rebound/runs…` requests.
pub(crate) async fn handle(
    gateway: Arc<Gateway>,
    method: &http::Method,
    path: &str,
    body: Bytes,
) -> http::Response<Body> {
    let Some(runs) = gateway.runs.as_ref() else {
        return problem(
            StatusCode::NOT_FOUND,
            "rebound: agent runs are not enabled on this gateway",
        );
    };
    let rest = path.trim_start_matches("/v1/rebound/runs");
    match (method, rest) {
        (&http::Method::POST, "" | "/") => submit(&gateway, runs, &body).await,
        (&http::Method::GET, "" | "/") => match runs.off_thread(|s| s.list(100)).await {
            Ok(list) => json_response(
                StatusCode::OK,
                &json!({"runs": list.iter().map(|r| summary(r, None)).collect::<Vec<_>>()}),
            ),
            Err(e) => store_problem("-", &e),
        },
        (&http::Method::GET, rest) => {
            let rest = rest.trim_start_matches('/');
            if let Some(id) = rest.strip_suffix("/events") {
                return events(runs, id, None).await;
            }
            let id = rest.to_owned();
            let read = runs
                .off_thread(move |s| Ok((s.get(&id)?, s.invocations(&id)?)))
                .await;
            match read {
                Ok((run, invocations)) => {
                    json_response(StatusCode::OK, &summary(&run, Some(&invocations)))
                }
                Err(e) => store_problem(rest, &e),
            }
        }
        _ => problem(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("rebound: {method} {path} is not a runs operation"),
        ),
    }
}

async fn submit(gateway: &Arc<Gateway>, runs: &Runs, body: &[u8]) -> http::Response<Body> {
    let submit: Submit = match serde_json::from_slice(body) {
        Ok(s) => s,
        Err(e) => return problem(StatusCode::BAD_REQUEST, &format!("rebound: a run: {e}")),
    };
    if submit.prompt.trim().is_empty() {
        return problem(StatusCode::BAD_REQUEST, "rebound: a run: `prompt` is empty");
    }
    let agents = &gateway.config.agents;
    let route = match &submit.route {
        Some(id) => agents.route(id),
        None => agents.routes.first(),
    };
    let Some(route) = route else {
        let message = match &submit.route {
            Some(id) => format!("rebound: a run: `route`: no agent route `{id}`"),
            None => "rebound: a run: this gateway has no [[agent_route]]".to_owned(),
        };
        return problem(StatusCode::BAD_REQUEST, &message);
    };
    let cwd = submit.cwd.unwrap_or_default();
    if !cwd.is_empty() && !std::path::Path::new(&cwd).is_dir() {
        return problem(
            StatusCode::BAD_REQUEST,
            &format!("rebound: a run: `cwd`: {cwd} is not a directory"),
        );
    }
    let new = NewRun {
        route_id: route.id.clone(),
        profiles: route.agents.iter().map(|a| a.id.clone()).collect(),
        handoff: route.handoff,
        policies: route
            .agents
            .iter()
            .map(|a| PolicyDocument::of(&a.policy))
            .collect(),
        prompt: submit.prompt,
        cwd,
    };
    let now = gateway.clock().now();
    let run = match runs.off_thread(move |s| s.create(new, now)).await {
        Ok(run) => run,
        Err(e) => return store_problem("-", &e),
    };
    if !submit.stream {
        spawn_driver(gateway, run.id.clone());
        return json_response(StatusCode::ACCEPTED, &summary(&run, None));
    }
    // Follow before the driver starts: no event of the run is missed.
    let rx = runs.subscribe(&run.id);
    spawn_driver(gateway, run.id.clone());
    events(runs, &run.id, Some(rx)).await
}

fn is_done(state: &str) -> bool {
    RunState::parse(state).is_some_and(RunState::is_final)
}

/// The run's events as NDJSON: its state now, then every event until it ends.
async fn events(
    runs: &Runs,
    id: &str,
    rx: Option<tokio::sync::broadcast::Receiver<String>>,
) -> http::Response<Body> {
    let mut rx = rx.unwrap_or_else(|| runs.subscribe(id));
    let run = match runs.get(id).await {
        Ok(run) => run,
        Err(e) => {
            drop(rx);
            runs.unsubscribe_idle(id);
            return store_problem(id, &e);
        }
    };
    let (tx, body_rx) = crate::reply::pipe::pipe();
    let first = summary(&run, None).to_string();
    let done = run.state.is_final();
    tokio::spawn(async move {
        let send = async |line: String| tx.send(Bytes::from(format!("{line}\n"))).await;
        if !send(first).await || done {
            return;
        }
        loop {
            let line = match rx.recv().await {
                Ok(line) => line,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    json!({"type": "lagged", "missed": missed}).to_string()
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            let finished = serde_json::from_str::<Value>(&line).ok().is_some_and(|v| {
                v.get("type").and_then(Value::as_str) == Some("state")
                    && v.get("state").and_then(Value::as_str).is_some_and(is_done)
            });
            if !send(line).await || finished {
                return;
            }
        }
    });
    let mut response = http::Response::new(Body::Stream(body_rx));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    response
}
