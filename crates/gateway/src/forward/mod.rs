//! The forwarder: one client request, attempted against the route's candidates until the
//! first success or one terminal error (G2–G4, G6).
//!
//! Before the commit point (the first content-bearing event of a stream, or the whole body of
//! a non-streaming answer) nothing has reached the client, so every retry and fallback is
//! invisible. After it, upstream bytes are forwarded untouched, whole SSE events at a time; a
//! failure then ends the stream with the provider's own in-stream error event, unless the
//! client asked for `x-rebound-replay: restart`.

mod downstream;
mod headers;
mod host;
mod outcome;
mod relay;
mod terminal;
mod upstream;

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use rebound_runtime::{Api, Protocol, recover};
use tokio::sync::oneshot;

pub(crate) use downstream::Head;
pub(crate) use headers::{forwarded_headers, rebound_headers, relayable};

use downstream::Downstream;
use headers::{detached, detached_body};
use host::LiveHost;

use crate::config::Route;
use crate::limit::{BodyError, read_body};
use crate::reply::{Body, error, pipe};
use crate::state::Gateway;

/// The marker event sent to `x-rebound-replay: restart` clients before a replay.
pub const RESTART_EVENT: &str = "rebound_restart";

/// One client request, as the forwarder keeps it while it runs.
pub(crate) struct LiveRequest {
    pub(crate) gateway: Arc<Gateway>,
    /// The API the client called.
    pub(crate) api: Api,
    pub(crate) route: Arc<Route>,
    pub(crate) headers: HeaderMap,
    /// The client's query string (`beta=true`), forwarded with the request.
    pub(crate) query: Option<Box<str>>,
    pub(crate) body: Bytes,
    pub(crate) stream: bool,
    /// The client asked for restart markers (`x-rebound-replay: restart`).
    pub(crate) restart: bool,
    /// The candidates passed over as resting (S2), for `x-rebound-skipped`.
    pub(crate) skipped: Option<http::HeaderValue>,
    /// The key of the candidate's pool the next attempt uses (S4).
    pub(crate) key: usize,
}

/// Takes a model request (`POST /v1/chat/completions`, `POST /v1/responses`,
/// `POST /v1/messages`): reads its body, picks its route, and answers with what the forwarder
/// sends. A Responses request that continues a stored response (`previous_response_id`) or a
/// conversation is kept to the base URL that holds it (see [`crate::responses`]).
pub(crate) async fn accept(
    gateway: Arc<Gateway>,
    api: Api,
    req: Request<Incoming>,
) -> Response<Body> {
    let protocol = api.protocol();
    let limit = gateway.config.body_limit;
    let too_large = || {
        error(
            protocol,
            StatusCode::PAYLOAD_TOO_LARGE,
            match protocol {
                Protocol::Anthropic => "request_too_large",
                Protocol::OpenAi => "invalid_request_error",
            },
            &format!("rebound: the request body is larger than {limit} bytes"),
        )
    };
    let (parts, body) = req.into_parts();
    let body = match read_body(parts.headers.get(header::CONTENT_LENGTH), body, limit).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => return too_large(),
        Err(BodyError::Unreadable) => {
            return error(
                protocol,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "rebound: the request body could not be read",
            );
        }
    };
    let peeked = match crate::body::peek(&body) {
        Ok(peeked) => peeked,
        Err(e) => {
            let reason = match e {
                crate::body::PeekError::NotUtf8 => {
                    "the request body is not UTF-8, as JSON must be".to_owned()
                }
                crate::body::PeekError::NotObject => {
                    "the request body must be a JSON object".to_owned()
                }
                crate::body::PeekError::Json(e) if e.is_syntax() || e.is_eof() => format!(
                    "the request body is not valid JSON (line {}, column {})",
                    e.line(),
                    e.column()
                ),
                crate::body::PeekError::Json(_) => {
                    "`model` must be a string and `stream` a boolean".to_owned()
                }
            };
            return error(
                protocol,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &format!("rebound: {reason}"),
            );
        }
    };
    let Some(model) = peeked.model.as_deref() else {
        return error(
            protocol,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "rebound: `model` is required",
        );
    };
    let stream = peeked.stream.unwrap_or(false);
    let Some(mut route) = gateway.config.route(model, protocol) else {
        return error(
            protocol,
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!("rebound: no route serves model `{model}` on this protocol"),
        );
    };
    if api == Api::Responses
        && let Some(continued) = crate::responses::continued(&body)
    {
        route = crate::responses::pinned(&gateway.responses, &gateway.config, &route, &continued);
    }
    let model = crate::observe::Model(model.into());
    let query = parts.uri.query().map(Box::from);
    let restart = parts
        .headers
        .get("x-rebound-replay")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"restart"));
    let (head_tx, head_rx) = oneshot::channel::<Head>();
    // Only a stream's body goes through a pipe; a whole answer goes with its head.
    let (body_tx, body_rx) = if stream {
        let (tx, rx) = pipe::pipe();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let request = LiveRequest {
        gateway,
        api,
        route,
        // A stream keeps its request for minutes: detached from the connection's read buffer
        // (the head, its URI included, is dropped at once).
        headers: if stream {
            let headers = detached(&parts.headers);
            drop(parts);
            headers
        } else {
            parts.headers
        },
        query,
        body: if stream { detached_body(body) } else { body },
        stream,
        restart,
        skipped: None,
        key: 0,
    };
    tokio::spawn(run(request, head_tx, body_tx));
    match head_rx.await {
        Ok(head) => {
            let mut response = head.into_response(body_rx);
            response.extensions_mut().insert(model);
            response
        }
        Err(_) => error(
            protocol,
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "rebound: the request was dropped",
        ),
    }
}

/// Runs a request through the recovery loop to its one response.
pub(crate) async fn run(
    request: LiveRequest,
    head: oneshot::Sender<Head>,
    body: Option<pipe::Sender>,
) {
    let gateway = Arc::clone(&request.gateway);
    let watch = (request.api == Api::Responses).then(Box::default);
    let mut host = LiveHost::new(
        request,
        Downstream {
            head: Some(head),
            body,
            watch,
        },
    );
    // Made at the first failure: most requests succeed at once and never consult one.
    let mut turn = None;
    let _ = recover(&gateway.engine, &mut host, &mut turn).await;
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::HeaderMap;

    /// Every open stream holds one forwarder task: its future is the job's memory, so the
    /// steps it is not in are boxed rather than reserved (#4's per-stream memory).
    #[test]
    fn an_open_streams_forwarder_stays_small() {
        use std::sync::Arc;

        let config = crate::config::load(
            "test",
            crate::config::DEFAULT_CONFIG,
            &crate::config::Overrides::default(),
            &crate::config::ProcessEnv,
        )
        .unwrap();
        let client =
            rebound_runtime::HttpClient::new(rebound_runtime::Timeouts::default()).unwrap();
        let catalogue = Arc::new(rebound_core::Catalogue::shipped().unwrap());
        let gateway = Arc::new(crate::state::Gateway::new(config, client, catalogue));
        let route = gateway
            .config
            .route("gpt-4o", rebound_runtime::Protocol::OpenAi)
            .unwrap();
        let candidate = Arc::clone(&route.candidates[0]);
        let request = || super::LiveRequest {
            gateway: Arc::clone(&gateway),
            api: rebound_runtime::Api::ChatCompletions,
            route: route.clone(),
            headers: HeaderMap::new(),
            query: None,
            body: Bytes::new(),
            stream: true,
            restart: false,
            skipped: None,
            key: 0,
        };
        let (head, _) = tokio::sync::oneshot::channel();
        let (body, _) = crate::reply::pipe::pipe();
        let run = std::mem::size_of_val(&super::run(request(), head, Some(body)));
        let (head, _) = tokio::sync::oneshot::channel();
        let (body, _) = crate::reply::pipe::pipe();
        let mut down = super::Downstream {
            head: Some(head),
            body: Some(body),
            watch: None,
        };
        let request = request();
        let attempt = std::mem::size_of_val(&super::upstream::attempt(
            &request, &candidate, &mut down, 1,
        ));
        assert!(run <= 1024, "the forwarder's future is {run} bytes");
        assert!(attempt <= 1024, "an attempt's future is {attempt} bytes");
    }
}
