//! `… /v1/responses/{id}[/…]`: a stored response read, cancelled or listed at the provider
//! that holds it (G7, G8; where that is: [`crate::responses`]).

use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use rebound_runtime::Protocol;

use super::Forwarded;
use crate::config::Route;
use crate::reply::Body;
use crate::responses::STORED_ROUTE;
use crate::state::Gateway;

/// `… /v1/responses/{id}[/…]`: to the candidate that made response `id`, else the caller's
/// OpenAI provider.
pub(crate) async fn stored(gateway: &Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    let mut request = match Forwarded::read(gateway, req).await {
        Ok(request) => request,
        Err(response) => return response,
    };
    request.caller = Protocol::OpenAi;
    let id = request
        .path()
        .strip_prefix("/v1/responses/")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default();
    let home = gateway
        .responses
        .home(id)
        .or_else(|| gateway.config.provider(Protocol::OpenAi).cloned());
    let Some(home) = home else {
        return super::unserved(&request);
    };
    let route = Arc::new(Route::of_one(STORED_ROUTE, home));
    super::forward(gateway, route, request).await
}
