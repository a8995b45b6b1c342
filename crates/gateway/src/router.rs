//! The HTTP front's routing: gateway keys first, then each path to the part that serves it:
//! the model APIs to the forwarder, token counting and stored responses to their providers,
//! rebound's own paths here, and every other path passed through to the caller's provider
//! (G8). Each request is logged once and counted by the surface that answered it.

use std::convert::Infallible;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use rebound_runtime::Api;

use crate::auth::authorized;
use crate::caller;
use crate::forward;
use crate::limit::read_body;
use crate::passthrough;
use crate::reply::{Body, error, full};
use crate::state::Gateway;

/// Which part of the gateway answered a request: a bounded label for `/metrics` and the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Surface {
    ChatCompletions,
    Responses,
    Messages,
    TokenCount,
    StoredResponse,
    Models,
    PassThrough,
    Unserved,
    /// rebound's own paths: `/healthz`, `/metrics`, policies, jobs; and refused keys.
    Rebound,
    /// The status page, its assets, login, event stream and actions: they check the gateway
    /// key themselves, taking it from the page's cookie too (G5).
    Status,
}

impl Surface {
    fn as_str(self) -> &'static str {
        match self {
            Surface::ChatCompletions => "chat_completions",
            Surface::Responses => "responses",
            Surface::Messages => "messages",
            Surface::TokenCount => "token_count",
            Surface::StoredResponse => "stored_response",
            Surface::Models => "models",
            Surface::PassThrough => "passthrough",
            Surface::Unserved => "unserved",
            Surface::Rebound | Surface::Status => "rebound",
        }
    }

    /// The surface that serves `method` `path`.
    fn of(method: &Method, path: &str) -> Surface {
        if crate::status::http::serves(method, path) {
            return Surface::Status;
        }
        match (method, path) {
            (&Method::POST, "/v1/chat/completions") => Surface::ChatCompletions,
            (&Method::POST, "/v1/responses") => Surface::Responses,
            (&Method::POST, "/v1/messages") => Surface::Messages,
            (&Method::POST, "/v1/messages/count_tokens" | "/v1/responses/input_tokens") => {
                Surface::TokenCount
            }
            (_, p) if p.starts_with("/v1/responses/") => Surface::StoredResponse,
            (&Method::GET, "/v1/models") => Surface::Models,
            (
                &Method::GET,
                "/metrics" | "/healthz" | "/v1/rebound/policies" | "/v1/rebound/health",
            ) => Surface::Rebound,
            (_, p) if p == "/v1/rebound/jobs" || p.starts_with("/v1/rebound/jobs/") => {
                Surface::Rebound
            }
            (_, p) if p == "/v1/rebound/runs" || p.starts_with("/v1/rebound/runs/") => {
                Surface::Rebound
            }
            // rebound's own namespace is never passed through.
            (_, p) if p == "/v1/rebound" || p.starts_with("/v1/rebound/") => Surface::Unserved,
            _ => Surface::PassThrough,
        }
    }
}

/// Answers one request, logs it (target `rebound::request`) and counts it by surface.
pub(crate) async fn handle(
    gateway: Arc<Gateway>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = rebound_core::redact::redact(req.uri().path()).into_owned();
    let mut surface = Surface::of(&method, &path);
    let response = if surface == Surface::Status {
        crate::status::http::handle(Arc::clone(&gateway), req).await
    } else if authorized(&gateway.config.gateway_keys, req.headers()) {
        let response = serve(&gateway, surface, req).await;
        if surface == Surface::PassThrough
            && response
                .extensions()
                .get::<passthrough::Unserved>()
                .is_some()
        {
            surface = Surface::Unserved;
        }
        response
    } else {
        surface = Surface::Rebound;
        error(
            caller::protocol(&path, req.headers()),
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "rebound: a valid gateway key is required",
        )
    };
    crate::observe::answered(
        &gateway.metrics,
        &method,
        &path,
        surface.as_str(),
        &response,
    );
    Ok(response)
}

/// Sends a request to the part that serves its surface.
async fn serve(gateway: &Arc<Gateway>, surface: Surface, req: Request<Incoming>) -> Response<Body> {
    let gateway = Arc::clone(gateway);
    match surface {
        Surface::ChatCompletions => forward::accept(gateway, Api::ChatCompletions, req).await,
        Surface::Responses => forward::accept(gateway, Api::Responses, req).await,
        Surface::Messages => forward::accept(gateway, Api::Messages, req).await,
        Surface::TokenCount => {
            let protocol = caller::protocol(req.uri().path(), req.headers());
            passthrough::by_model(&gateway, protocol, req).await
        }
        Surface::StoredResponse => crate::passthrough::stored(&gateway, req).await,
        Surface::Models => {
            let protocol = caller::protocol(req.uri().path(), req.headers());
            crate::models::models(&gateway, protocol).await
        }
        Surface::PassThrough => passthrough::to_provider(&gateway, req).await,
        Surface::Unserved => {
            let protocol = caller::protocol(req.uri().path(), req.headers());
            error(
                protocol,
                StatusCode::NOT_FOUND,
                "not_found_error",
                &format!(
                    "rebound serves no {} {} (its own paths are /v1/rebound/policies, /v1/rebound/health, /v1/rebound/jobs and /v1/rebound/runs)",
                    req.method(),
                    req.uri().path()
                ),
            )
        }
        Surface::Rebound => rebound(gateway, req).await,
        Surface::Status => crate::status::http::handle(gateway, req).await,
    }
}

/// rebound's own paths.
async fn rebound(gateway: Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    let protocol = caller::protocol(req.uri().path(), req.headers());
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => full(
            StatusCode::OK,
            crate::metrics::CONTENT_TYPE,
            gateway.metrics.render(),
        ),
        (&Method::GET, "/healthz") => full(StatusCode::OK, "text/plain", "ok\n"),
        (&Method::GET, "/v1/rebound/policies") => policies(&gateway),
        (&Method::GET, "/v1/rebound/health") => full(
            StatusCode::OK,
            "application/json",
            crate::health::view(&gateway).to_string(),
        ),
        (method, path) => {
            let (method, path) = (method.clone(), path.to_owned());
            let (parts, body) = req.into_parts();
            let limit = gateway.config.body_limit;
            let Ok(body) = read_body(parts.headers.get(header::CONTENT_LENGTH), body, limit).await
            else {
                return error(
                    protocol,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "invalid_request_error",
                    "rebound: the job is too large",
                );
            };
            if path == "/v1/rebound/runs" || path.starts_with("/v1/rebound/runs/") {
                return crate::runs::handle(gateway, &method, &path, body).await;
            }
            crate::jobs::handle(gateway, &method, &path, body).await
        }
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
