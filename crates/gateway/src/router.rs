//! The HTTP front's routing: gateway keys first, then each path to the part that serves it.

use std::convert::Infallible;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use rebound_runtime::{Api, Protocol};

use crate::auth::authorized;
use crate::forward;
use crate::limit::read_body;
use crate::reply::{Body, error, full};
use crate::state::Gateway;

/// Answers one request.
pub(crate) async fn handle(
    gateway: Arc<Gateway>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let protocol = match req.uri().path() {
        "/v1/messages" => Protocol::Anthropic,
        _ => Protocol::OpenAi,
    };
    if !authorized(&gateway.config.gateway_keys, req.headers()) {
        return Ok(error(
            protocol,
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "rebound: a valid gateway key is required",
        ));
    }
    match (req.method(), req.uri().path()) {
        (&Method::POST, "/v1/chat/completions") => {
            Ok(forward::accept(gateway, Api::ChatCompletions, req).await)
        }
        (&Method::POST, "/v1/messages") => Ok(forward::accept(gateway, Api::Messages, req).await),
        (&Method::GET, "/v1/models") => Ok(crate::models::models(&gateway).await),
        (&Method::GET, "/metrics") => Ok(full(
            StatusCode::OK,
            crate::metrics::CONTENT_TYPE,
            gateway.metrics.render(),
        )),
        (&Method::GET, "/healthz") => Ok(full(StatusCode::OK, "text/plain", "ok\n")),
        (&Method::GET, "/v1/rebound/policies") => Ok(policies(&gateway)),
        (method, p) if p == "/v1/rebound/jobs" || p.starts_with("/v1/rebound/jobs/") => {
            let (method, path) = (method.clone(), p.to_owned());
            let (parts, body) = req.into_parts();
            let limit = gateway.config.body_limit;
            let Ok(body) = read_body(parts.headers.get(header::CONTENT_LENGTH), body, limit).await
            else {
                return Ok(error(
                    protocol,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "invalid_request_error",
                    "rebound: the job is too large",
                ));
            };
            Ok(crate::jobs::handle(gateway, &method, &path, body).await)
        }
        _ => Ok(error(
            protocol,
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!(
                "rebound serves POST /v1/chat/completions, POST /v1/messages, GET /v1/models and GET /metrics, not {} {}",
                req.method(),
                req.uri().path()
            ),
        )),
    }
}

/// Every candidate's policy as a version-1 policy document (D1): what jobs snapshot.
fn policies(gateway: &Gateway) -> Response<Body> {
    let mut candidates = serde_json::Map::new();
    for candidate in gateway
        .config
        .routes
        .iter()
        .flat_map(|r| r.candidates.iter())
    {
        let document = rebound_core::policy::document::PolicyDocument::of(&candidate.policy);
        candidates.insert(
            candidate.id.clone(),
            serde_json::to_value(document).unwrap_or(serde_json::Value::Null),
        );
    }
    full(
        StatusCode::OK,
        "application/json",
        serde_json::json!({"candidates": candidates}).to_string(),
    )
}
