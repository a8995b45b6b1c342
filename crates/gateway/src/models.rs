//! `GET /v1/models`.

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use rebound_runtime::Protocol;
use rebound_runtime::http::read_whole;

use crate::forward::relayable;
use crate::reply::{Body, full};
use crate::state::Gateway;

/// The largest model list relayed; a larger one is replaced by the configured names.
const LIST_LIMIT: usize = 8 << 20;

/// `GET /v1/models`: the first OpenAI candidate's list, relayed; or the configured names.
pub(crate) async fn models(gateway: &Gateway) -> Response<Body> {
    let candidate = gateway
        .config
        .routes
        .iter()
        .flat_map(|r| r.candidates.iter())
        .find(|c| c.protocol == Protocol::OpenAi);
    let listed = || {
        let mut names: Vec<String> = gateway
            .config
            .routes
            .iter()
            .flat_map(|r| {
                r.models
                    .iter()
                    .filter(|m| !m.contains('*'))
                    .cloned()
                    .chain(r.candidates.iter().filter_map(|c| c.model.clone()))
            })
            .collect();
        names.sort();
        names.dedup();
        let data: Vec<_> = names
            .iter()
            .map(|id| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": "rebound"}))
            .collect();
        full(
            StatusCode::OK,
            "application/json",
            serde_json::json!({"object": "list", "data": data}).to_string(),
        )
    };
    let Some(candidate) = candidate else {
        return listed();
    };
    let mut request = match Request::get(format!("{}/models", candidate.base_url))
        .version(candidate.version())
        .body(Bytes::new())
    {
        Ok(request) => request,
        Err(_) => return listed(),
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
                _ => listed(),
            }
        }
        _ => listed(),
    }
}
