//! `GET /v1/models`, in the caller's protocol: OpenAI's list for OpenAI callers, Anthropic's
//! (`data` of `{type: "model", id, display_name, created_at}`, `has_more`, `first_id`,
//! `last_id`) for Anthropic callers.

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use rebound_runtime::Protocol;
use rebound_runtime::http::read_whole;

use crate::forward::relayable;
use crate::reply::{Body, full};
use crate::state::Gateway;

/// The largest model list relayed; a larger one is replaced by the configured names.
const LIST_LIMIT: usize = 8 << 20;

/// `GET /v1/models` for a `protocol` caller: the list of that protocol's provider (see
/// [`crate::config::Config::provider`]), relayed; or, when there is none or it fails, the
/// configured model names in the protocol's list shape.
pub(crate) async fn models(gateway: &Gateway, protocol: Protocol) -> Response<Body> {
    let Some(candidate) = gateway.config.provider(protocol) else {
        return listed(gateway, protocol);
    };
    let url = match protocol {
        Protocol::OpenAi => format!("{}/models", candidate.base_url),
        Protocol::Anthropic => format!("{}/v1/models", candidate.base_url),
    };
    let mut request = match Request::get(url)
        .version(candidate.version())
        .body(Bytes::new())
    {
        Ok(request) => request,
        Err(_) => return listed(gateway, protocol),
    };
    candidate.authorize(request.headers_mut());
    match gateway.client.send(request).await {
        Ok(response) if response.status().is_success() => {
            let (parts, mut body) = response.into_parts();
            let idle = gateway.client.timeouts().idle;
            match read_whole(&mut body, LIST_LIMIT, idle, std::future::pending()).await {
                Ok(bytes) => {
                    let mut response = full(parts.status, "application/json", bytes);
                    *response.headers_mut() = relayable(&parts.headers, false);
                    response.headers_mut().remove(header::CONTENT_LENGTH);
                    response
                }
                _ => listed(gateway, protocol),
            }
        }
        _ => listed(gateway, protocol),
    }
}

/// The configured model names (patterns left out), in `protocol`'s list shape.
fn listed(gateway: &Gateway, protocol: Protocol) -> Response<Body> {
    let mut names: Vec<&str> = gateway
        .config
        .routes
        .iter()
        .flat_map(|r| {
            r.models
                .iter()
                .filter(|m| !m.contains('*'))
                .map(String::as_str)
                .chain(r.candidates.iter().filter_map(|c| c.model.as_deref()))
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    let body = match protocol {
        Protocol::OpenAi => {
            let data: Vec<_> = names
                .iter()
                .map(|id| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": "rebound"}))
                .collect();
            serde_json::json!({"object": "list", "data": data})
        }
        Protocol::Anthropic => {
            let data: Vec<_> = names
                .iter()
                .map(|id| {
                    serde_json::json!({
                        "type": "model",
                        "id": id,
                        "display_name": id,
                        "created_at": "1970-01-01T00:00:00Z",
                    })
                })
                .collect();
            serde_json::json!({
                "data": data,
                "has_more": false,
                "first_id": names.first(),
                "last_id": names.last(),
            })
        }
    };
    full(StatusCode::OK, "application/json", body.to_string())
}
