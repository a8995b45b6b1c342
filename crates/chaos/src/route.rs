//! Which endpoint answers a request, and how a script step applies to it.
//!
//! Every endpoint below counts under the request's `x-chaos-key` (`default` without it) and
//! follows that key's script, in arrival order: model requests (`POST /v1/chat/completions`,
//! `/v1/messages`, `/v1/responses`), token counting (`POST /v1/messages/count_tokens`,
//! `/v1/responses/input_tokens`), stored responses (`GET`/`DELETE /v1/responses/{id}`,
//! `POST …/cancel`, `GET …/input_items`) and the echo (`/chaos/echo…`, any method). Not
//! counted, never faulted: `GET /v1/models`, `GET`/`HEAD /`, unknown paths (404 in the
//! caller's protocol shape) and the `/chaos/` control endpoints.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::error_shape;
use crate::model::{self, Api, Protocol};
use crate::record::RecordedRequest;
use crate::script::{Modifiers, Step};
use crate::state::{KEY_HEADER, State};
use crate::stored::CancelError;
use crate::stream::{self, Body, Envelope, json_response};
use crate::{chat, control, messages, responses};

/// The largest request body the chaos server reads.
const BODY_LIMIT: usize = 8 << 20;

/// Errors of the server itself: close the connection (the `reset` fault).
#[derive(Debug, thiserror::Error)]
#[error("chaos: connection reset by script")]
pub(crate) struct ResetByScript;

type Answer = Result<Response<Body>, ResetByScript>;

/// The protocol a caller speaks: Anthropic when it sends `anthropic-version` or `x-api-key`.
fn caller(headers: &HeaderMap) -> Protocol {
    if headers.contains_key("anthropic-version") || headers.contains_key("x-api-key") {
        Protocol::Anthropic
    } else {
        Protocol::OpenAi
    }
}

/// What a step leaves to the endpoint once statuses, resets and stalls are done.
struct Taken {
    fault: Option<Step>,
    modifiers: Modifiers,
    thinking_only: bool,
    attempt: u64,
}

/// Counts the request and applies the start of its step: `Err` when the step answers alone.
async fn take_step(
    state: &State,
    key: &str,
    protocol: Protocol,
    presented_key: Option<&str>,
) -> Result<Taken, Answer> {
    let (step, attempt) = state.next_step(key);
    let (base, modifiers) = match &step {
        Step::With(base, modifiers) => (&**base, modifiers.clone()),
        base => (
            base,
            state
                .reply
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        ),
    };
    let mut taken = Taken {
        fault: None,
        modifiers,
        thinking_only: false,
        attempt,
    };
    match base {
        Step::Reset => return Err(Err(ResetByScript)),
        Step::Page => return Err(Ok(sign_in_page())),
        Step::Status {
            status,
            context,
            headers,
        } => {
            let code = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut body =
                error_shape::error_body_with_key(protocol, *status, *context, presented_key);
            if let Some(message) = &taken.modifiers.message {
                error_shape::set_message(&mut body, message);
            }
            if let (true, Some(key)) = (taken.modifiers.echo_key, presented_key) {
                error_shape::echo_key(&mut body, key);
            }
            let mut response = json_response(code, &body);
            for (name, value) in headers {
                if let (Ok(name), Ok(value)) = (
                    http::HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(value),
                ) {
                    response.headers_mut().insert(name, value);
                }
            }
            return Err(Ok(response));
        }
        Step::Stall(d) => tokio::time::sleep(*d).await,
        Step::Ok | Step::With(..) => {}
        Step::ThinkingOnly => taken.thinking_only = true,
        fault => taken.fault = Some(fault.clone()),
    }
    Ok(taken)
}

/// A network's sign-in page, as a captive portal answers any request.
fn sign_in_page() -> Response<Body> {
    const PAGE: &str = "<!DOCTYPE html>\n<html><head><title>Sign in to continue</title></head>\n\
        <body><h1>Sign in to continue</h1><p>Accept the terms to use this network.</p></body></html>\n";
    stream::full(StatusCode::OK, "text/html; charset=utf-8", PAGE)
}

/// A whole (non-streaming) answer under a stream fault: an in-stream error becomes the
/// closest status (529 for `overloaded_error`, 429 for a rate limit, else 500), a stall after content waits before
/// the answer, a cut or malformed body breaks the body.
async fn whole(
    protocol: Protocol,
    body: Bytes,
    content_type: &'static str,
    fault: Option<&Step>,
) -> Response<Body> {
    match fault {
        Some(Step::ErrorAfter(_, kind) | Step::ErrorEventAfter(_, kind)) => {
            let status = match kind.as_str() {
                "overloaded_error" => 529,
                "rate_limit_error" | "rate_limit_exceeded" => 429,
                _ => 500,
            };
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            json_response(code, &error_shape::error_body(protocol, status, false))
        }
        Some(Step::StallAfter(_, d)) => {
            tokio::time::sleep(*d).await;
            stream::whole(body, content_type, None)
        }
        fault => stream::whole(body, content_type, fault),
    }
}

async fn whole_json(protocol: Protocol, body: &Value, fault: Option<&Step>) -> Response<Body> {
    whole(
        protocol,
        Bytes::from(body.to_string()),
        "application/json",
        fault,
    )
    .await
}

pub(crate) async fn handle(state: Arc<State>, req: Request<Incoming>) -> Answer {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let protocol = match path.as_str() {
        p if p.starts_with("/v1/messages") => Protocol::Anthropic,
        p if p.starts_with("/v1/chat/") || p.starts_with("/v1/responses") => Protocol::OpenAi,
        _ => caller(&parts.headers),
    };
    let body = match Limited::new(body, BODY_LIMIT).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Ok(json_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                &error_shape::error_body(protocol, 413, false),
            ));
        }
    };
    if path.starts_with("/chaos/")
        && let Some(answer) = control::answer(&state, &parts.method, &path, &body)
    {
        return Ok(answer);
    }
    state.record(RecordedRequest {
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map_or_else(|| path.clone(), ToString::to_string),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.clone(),
    });
    let key = parts
        .headers
        .get(KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("default")
        .to_owned();
    let presented_key = parts
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| parts.headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::to_owned);
    let request = Request::from_parts(parts, body);
    let counted = Counted {
        state: &state,
        key: &key,
        protocol,
        presented_key: presented_key.as_deref(),
    };
    match (request.method(), path.as_str()) {
        (&Method::GET | &Method::HEAD, "/") => Ok(json_response(StatusCode::OK, &json!({}))),
        (&Method::GET, "/v1/models") => Ok(json_response(
            StatusCode::OK,
            &model::models(caller(request.headers())),
        )),
        (&Method::POST, "/v1/chat/completions") => {
            counted.model(Api::ChatCompletions, request.body()).await
        }
        (&Method::POST, "/v1/messages") => counted.model(Api::Messages, request.body()).await,
        (&Method::POST, "/v1/responses") => counted.model(Api::Responses, request.body()).await,
        (&Method::POST, "/v1/messages/count_tokens") => {
            counted.count(Api::Messages, request.body()).await
        }
        (&Method::POST, "/v1/responses/input_tokens") => {
            counted.count(Api::Responses, request.body()).await
        }
        (method, p) if p.starts_with("/v1/responses/") => {
            let rest = p.trim_start_matches("/v1/responses/");
            counted.stored(method, rest, request.uri().query()).await
        }
        (_, p) if p == "/chaos/echo" || p.starts_with("/chaos/echo/") => {
            counted.echo(&request).await
        }
        (method, _) => Ok(json_response(
            StatusCode::NOT_FOUND,
            &error_shape::not_found(caller(request.headers()), method.as_str(), &path),
        )),
    }
}

/// A counted request: its key, protocol and the credential it presented.
struct Counted<'a> {
    state: &'a State,
    key: &'a str,
    protocol: Protocol,
    presented_key: Option<&'a str>,
}

/// A key as it may appear in an id.
fn id_safe(key: &str) -> String {
    key.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

impl Counted<'_> {
    async fn step(&self) -> Result<Taken, Answer> {
        take_step(self.state, self.key, self.protocol, self.presented_key).await
    }

    fn bad_json(&self) -> Answer {
        Ok(json_response(
            StatusCode::BAD_REQUEST,
            &error_shape::error_body(self.protocol, 400, false),
        ))
    }

    /// A model request of `api`.
    async fn model(&self, api: Api, body: &Bytes) -> Answer {
        let Ok(request) = serde_json::from_slice::<Value>(body) else {
            return self.bad_json();
        };
        let taken = match self.step().await {
            Ok(taken) => taken,
            Err(answer) => return answer,
        };
        let model_name = request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("chaos-1");
        let streaming = request
            .get("stream")
            .and_then(Value::as_bool)
            .unwrap_or(false)
            || taken.fault == Some(Step::Streamed);
        let id = match api {
            Api::ChatCompletions => format!("chatcmpl-chaos-{}", self.key),
            Api::Messages => format!("msg_chaos_{}", self.key),
            Api::Responses => format!("resp_chaos_{}_{}", id_safe(self.key), taken.attempt),
        };
        if api == Api::Responses
            && let Some(previous) = request.get("previous_response_id").and_then(Value::as_str)
            && !self.state.responses.contains(previous)
        {
            return Ok(json_response(
                StatusCode::BAD_REQUEST,
                &error_shape::invalid(
                    self.protocol,
                    &format!("Previous response with id '{previous}' not found."),
                    "previous_response_id",
                    json!("previous_response_not_found"),
                ),
            ));
        }
        let envelope = Envelope {
            id: &id,
            model: model_name,
            request: &request,
        };
        let reply = model::reply(api, &request, &taken.modifiers, taken.thinking_only);
        let body = match api {
            Api::ChatCompletions => chat::body(&envelope, &reply),
            Api::Messages => messages::body(&envelope, &reply),
            Api::Responses => responses::body(&envelope, &reply),
        };
        let background = request.get("background").and_then(Value::as_bool) == Some(true);
        let mut seen = None;
        if api == Api::Responses
            && taken.fault.is_none()
            && request.get("store") != Some(&json!(false))
        {
            let created = self.state.responses.insert(
                body.clone(),
                responses::input_items(&id, &request),
                background,
                streaming,
            );
            seen = Some(created);
        }
        if let Some(Step::Unstreamed(generating)) = taken.fault.as_ref().filter(|_| streaming) {
            tokio::time::sleep(*generating).await;
        }
        if !streaming || matches!(taken.fault, Some(Step::Unstreamed(_))) {
            let body = match (background, seen) {
                (true, Some(queued)) => queued,
                _ => body,
            };
            return Ok(whole_json(self.protocol, &body, taken.fault.as_ref()).await);
        }
        let frames = match api {
            Api::ChatCompletions => chat::frames(&envelope, &reply),
            Api::Messages => messages::frames(&envelope, &reply),
            Api::Responses => responses::frames(&envelope, &reply),
        };
        let echoed = self.presented_key.filter(|_| taken.modifiers.echo_key);
        let error_frame = match &taken.fault {
            Some(Step::ErrorAfter(n, kind) | Step::ErrorEventAfter(n, kind)) => Some(match api {
                Api::Responses => {
                    let bare = matches!(taken.fault, Some(Step::ErrorEventAfter(..)));
                    let sequence = frames.sequence_after(*n);
                    responses::stream_error(&envelope, kind, bare, sequence, echoed)
                }
                _ => error_shape::stream_error(self.protocol, kind, echoed),
            }),
            _ => None,
        };
        Ok(stream::streamed(
            frames,
            taken.fault,
            error_frame,
            self.state.config.chunk_delay,
        ))
    }

    /// `POST /v1/messages/count_tokens` or `POST /v1/responses/input_tokens`.
    async fn count(&self, api: Api, body: &Bytes) -> Answer {
        if serde_json::from_slice::<Value>(body).is_err() {
            return self.bad_json();
        }
        let taken = match self.step().await {
            Ok(taken) => taken,
            Err(answer) => return answer,
        };
        let tokens = model::count_tokens(body);
        let answer = match api {
            Api::Responses => json!({"object": "response.input_tokens", "input_tokens": tokens}),
            _ => json!({"input_tokens": tokens}),
        };
        Ok(whole_json(self.protocol, &answer, taken.fault.as_ref()).await)
    }

    /// `GET`/`DELETE /v1/responses/{id}`, `POST …/{id}/cancel`, `GET …/{id}/input_items`.
    async fn stored(&self, method: &Method, rest: &str, query: Option<&str>) -> Answer {
        let (id, action) = rest.split_once('/').unwrap_or((rest, ""));
        let served = matches!(
            (method, action),
            (&Method::GET | &Method::DELETE, "")
                | (&Method::POST, "cancel")
                | (&Method::GET, "input_items")
        );
        if !served || id.is_empty() {
            return Ok(json_response(
                StatusCode::NOT_FOUND,
                &error_shape::not_found(
                    self.protocol,
                    method.as_str(),
                    &format!("/v1/responses/{rest}"),
                ),
            ));
        }
        let taken = match self.step().await {
            Ok(taken) => taken,
            Err(answer) => return answer,
        };
        let store = &self.state.responses;
        let not_found = || {
            json_response(
                StatusCode::NOT_FOUND,
                &json!({"error": {"message": format!("Response with id '{id}' not found."),
                    "type": "invalid_request_error", "param": null, "code": null}}),
            )
        };
        let answer = match (method, action) {
            (&Method::GET, "") => store.get(id),
            (&Method::DELETE, "") => store
                .delete(id)
                .then(|| json!({"id": id, "object": "response.deleted", "deleted": true})),
            (&Method::POST, "cancel") => match store.cancel(id) {
                Ok(object) => Some(object),
                Err(CancelError::NotFound) => None,
                Err(CancelError::NotBackground) => {
                    return Ok(json_response(
                        StatusCode::BAD_REQUEST,
                        &error_shape::invalid(
                            self.protocol,
                            "Only responses created with background=true can be cancelled.",
                            "response_id",
                            Value::Null,
                        ),
                    ));
                }
            },
            (&Method::GET, "input_items") => store.input_items(id).map(|mut items| {
                let ascending = query.is_some_and(|q| q.split('&').any(|p| p == "order=asc"));
                if !ascending {
                    items.reverse();
                }
                let first = items.first().and_then(|i| i.get("id")).cloned();
                let last = items.last().and_then(|i| i.get("id")).cloned();
                json!({"object": "list", "data": items, "first_id": first, "last_id": last, "has_more": false})
            }),
            // Not served: refused above, before the count.
            _ => None,
        };
        match answer {
            Some(body) => Ok(whole_json(self.protocol, &body, taken.fault.as_ref()).await),
            None => Ok(not_found()),
        }
    }

    /// `/chaos/echo…`, any method: the request body back, with its content type, and the
    /// method and path in `x-chaos-echo-method` / `x-chaos-echo-path`.
    async fn echo(&self, request: &Request<Bytes>) -> Answer {
        let taken = match self.step().await {
            Ok(taken) => taken,
            Err(answer) => return answer,
        };
        let content_type = match request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
        {
            Some(t) if t.starts_with("application/json") => "application/json",
            Some(t) if t.starts_with("text/plain") => "text/plain",
            _ => "application/octet-stream",
        };
        let mut response = whole(
            self.protocol,
            request.body().clone(),
            content_type,
            taken.fault.as_ref(),
        )
        .await;
        if response.status() == StatusCode::OK {
            let headers = response.headers_mut();
            if let Ok(method) = HeaderValue::from_str(request.method().as_str()) {
                headers.insert("x-chaos-echo-method", method);
            }
            let path = request
                .uri()
                .path_and_query()
                .map(ToString::to_string)
                .unwrap_or_default();
            if let Ok(path) = HeaderValue::from_str(&path) {
                headers.insert("x-chaos-echo-path", path);
            }
        }
        Ok(response)
    }
}
