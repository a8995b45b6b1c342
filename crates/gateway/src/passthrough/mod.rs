//! Requests rebound forwards without reading them (G8): token counting, a stored response of
//! the Responses API, and every path rebound does not serve itself. Each goes, byte for byte
//! (method, path, query string, headers, body), to a provider: the candidates of the route its
//! `model` names, the provider that holds a stored response, or the caller's provider.
//!
//! Each is a host of the one recovery loop (`rebound_runtime::recover`): before the first
//! byte of the response reaches the client, a `rate_limit` or `transient` failure is retried
//! (or falls back) as the candidate's policy says; every other failure ends the request with
//! the upstream's own answer. After the head of a success, the body is relayed as it arrives.

mod host;
mod stored;

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, header};
use hyper::body::Incoming;
use rebound_runtime::{Ending, Protocol, recover};

use crate::caller;
use crate::config::{Candidate, Route};
use crate::limit::{BodyError, read_body};
use crate::reply::{Body, error};
use crate::state::Gateway;

use host::PassHost;
pub(crate) use stored::stored;

/// The route id reported for a path passed through to the caller's provider.
pub(crate) const PASSTHROUGH_ROUTE: &str = "passthrough";

/// A request forwarded as the client sent it.
pub(crate) struct Forwarded {
    pub(crate) method: Method,
    /// The client's path and query string.
    pub(crate) target: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// The caller's protocol, which shapes rebound's own errors.
    pub(crate) caller: Protocol,
    /// The body's `model` is rewritten to each candidate's (a request routed by its model).
    pub(crate) routed: bool,
}

impl Forwarded {
    /// Reads a request whole (a retry sends it again), within the body limit.
    pub(crate) async fn read(
        gateway: &Gateway,
        req: Request<Incoming>,
    ) -> Result<Self, Response<Body>> {
        let (parts, body) = req.into_parts();
        let caller = caller::protocol(parts.uri.path(), &parts.headers);
        let limit = gateway.config.body_limit;
        let body = match read_body(parts.headers.get(header::CONTENT_LENGTH), body, limit).await {
            Ok(body) => body,
            Err(BodyError::TooLarge) => {
                return Err(error(
                    caller,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    match caller {
                        Protocol::Anthropic => "request_too_large",
                        Protocol::OpenAi => "invalid_request_error",
                    },
                    &format!("rebound: the request body is larger than {limit} bytes"),
                ));
            }
            Err(BodyError::Unreadable) => {
                return Err(error(
                    caller,
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "rebound: the request body could not be read",
                ));
            }
        };
        let target = parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
        Ok(Forwarded {
            method: parts.method,
            target,
            headers: parts.headers,
            body,
            caller,
            routed: false,
        })
    }

    /// The path without its query string.
    pub(crate) fn path(&self) -> &str {
        self.target
            .split_once('?')
            .map_or(&self.target, |(path, _)| path)
    }
}

/// Forwards `request` through `route`'s candidates with recovery.
pub(crate) async fn forward(
    gateway: &Arc<Gateway>,
    route: Arc<Route>,
    request: Forwarded,
) -> Response<Body> {
    let caller = request.caller;
    let mut host = PassHost::new(Arc::clone(gateway), route, request);
    let mut turn = None;
    match recover(&gateway.engine, &mut host, &mut turn).await {
        Ending::Succeeded(response) | Ending::Stopped(response) => response,
        Ending::Ended => error(
            caller,
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "rebound: the request was dropped",
        ),
    }
}

/// A path rebound does not serve, to the caller's provider (see [`caller::protocol`] and
/// [`crate::config::Config::provider`]).
pub(crate) async fn to_provider(gateway: &Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    let request = match Forwarded::read(gateway, req).await {
        Ok(request) => request,
        Err(response) => return response,
    };
    let Some(candidate) = gateway.config.provider(request.caller).cloned() else {
        return unserved(&request);
    };
    let route = Arc::new(Route::of_one(PASSTHROUGH_ROUTE, candidate));
    forward(gateway, route, request).await
}

/// A request routed by its body's `model` (token counting), to that route's candidates of
/// `protocol`.
pub(crate) async fn by_model(
    gateway: &Arc<Gateway>,
    protocol: Protocol,
    req: Request<Incoming>,
) -> Response<Body> {
    let mut request = match Forwarded::read(gateway, req).await {
        Ok(request) => request,
        Err(response) => return response,
    };
    request.caller = protocol;
    request.routed = true;
    let model = match crate::body::peek(&request.body) {
        Ok(peek) => peek.model.map(std::borrow::Cow::into_owned),
        Err(_) => None,
    };
    let Some(model) = model else {
        return error(
            protocol,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "rebound: the request body must be a JSON object with a string `model`",
        );
    };
    let Some(route) = gateway.config.route(&model, protocol) else {
        return error(
            protocol,
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!("rebound: no route serves model `{model}` on this protocol"),
        );
    };
    let mut response = forward(gateway, route, request).await;
    response
        .extensions_mut()
        .insert(crate::observe::Model(model.into()));
    response
}

/// Marks the 404 of a path no provider was configured to pass to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unserved;

/// The 404 of a path no provider of the caller's protocol is configured for, in its shape.
pub(crate) fn unserved(request: &Forwarded) -> Response<Body> {
    let mut response = error(
        request.caller,
        StatusCode::NOT_FOUND,
        "not_found_error",
        &format!(
            "rebound has no {} provider configured to pass {} {} to",
            request.caller.as_str(),
            request.method,
            request.path()
        ),
    );
    response.extensions_mut().insert(Unserved);
    response
}

/// Where `target` (a client's path and query) goes at `candidate`. An OpenAI base URL includes
/// `/v1`, as the official SDKs take it: a path below `/v1` is appended to it without its `/v1`,
/// any other path to the base URL's origin. An Anthropic base URL is an origin: the path is
/// appended as it is.
pub(crate) fn upstream_uri(
    candidate: &Candidate,
    target: &str,
) -> Result<Uri, http::uri::InvalidUri> {
    let base = candidate.base_url.trim_end_matches('/');
    let url = match candidate.protocol {
        Protocol::Anthropic => format!("{base}{target}"),
        Protocol::OpenAi => match target.strip_prefix("/v1") {
            Some(rest) if rest.is_empty() || rest.starts_with(['/', '?']) => {
                format!("{base}{rest}")
            }
            _ => {
                let origin = base.parse::<Uri>()?;
                match (origin.scheme_str(), origin.authority()) {
                    (Some(scheme), Some(authority)) => format!("{scheme}://{authority}{target}"),
                    _ => format!("{base}{target}"),
                }
            }
        },
    };
    url.parse()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(protocol: &str, base_url: &str) -> Arc<Candidate> {
        let text = format!(
            "[[candidate]]\nid = \"c\"\nprotocol = \"{protocol}\"\nbase_url = \"{base_url}\"\n\n[[route]]\nid = \"r\"\nmodels = [\"*\"]\ncandidates = [\"c\"]\n"
        );
        let config = crate::config::load(
            "test",
            &text,
            &crate::config::Overrides::default(),
            &crate::config::ProcessEnv,
        )
        .unwrap();
        Arc::clone(&config.routes[0].candidates[0])
    }

    #[test]
    fn paths_below_v1_go_below_an_openai_base_url_and_as_they_are_to_anthropic() {
        let openai = candidate("openai", "https://api.example.com/v1");
        let anthropic = candidate("anthropic", "https://claude.example.com");
        let cases = [
            (
                &openai,
                "/v1/files?limit=2",
                "https://api.example.com/v1/files?limit=2",
            ),
            (
                &openai,
                "/v1/responses/resp_1/cancel",
                "https://api.example.com/v1/responses/resp_1/cancel",
            ),
            (&openai, "/v1", "https://api.example.com/v1"),
            (
                &openai,
                "/dashboard/x",
                "https://api.example.com/dashboard/x",
            ),
            (&openai, "/v1beta/x", "https://api.example.com/v1beta/x"),
            (
                &anthropic,
                "/v1/messages/count_tokens?beta=true",
                "https://claude.example.com/v1/messages/count_tokens?beta=true",
            ),
        ];
        for (candidate, target, want) in cases {
            assert_eq!(
                upstream_uri(candidate, target).unwrap().to_string(),
                want,
                "{target}"
            );
        }
    }
}
