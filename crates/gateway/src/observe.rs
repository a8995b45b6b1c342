//! What the recovery loop reports, counted in `/metrics` (G6): the same for live requests and
//! durable jobs, because both report through here. And each client request's one log line and
//! count by the surface that answered it.

use http::{Method, Response};
use rebound_core::{Action, StopReason};
use rebound_runtime::Report;

use crate::metrics::Metrics;
use crate::state::Gateway;

/// The target of the one log event of each client request.
pub const REQUEST_TARGET: &str = "rebound::request";

/// The model a request named, carried on its response to its log line.
#[derive(Clone, Debug)]
pub(crate) struct Model(pub(crate) Box<str>);

/// Logs one answered request (method, path without its query string, surface, model, status,
/// and the attempts the response's head reports) and counts it by surface and status class.
/// For a stream, the status is its head's: a failure after content ends the stream, not the
/// status.
pub(crate) fn answered<B>(
    metrics: &Metrics,
    method: &Method,
    path: &str,
    surface: &str,
    response: &Response<B>,
) {
    let status = response.status();
    let class = match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    metrics.answered(surface, class);
    let model = response.extensions().get::<Model>().map(|m| &*m.0);
    let attempts = response
        .headers()
        .get("x-rebound-attempts")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(0);
    let fields = (method.as_str(), status.as_u16());
    macro_rules! event {
        ($level:ident) => {
            tracing::$level!(
                target: REQUEST_TARGET,
                method = %fields.0,
                path = %path,
                surface = %surface,
                model = model.map(tracing::field::display),
                status = fields.1,
                attempts,
            )
        };
    }
    if status.is_server_error() {
        event!(warn);
    } else {
        event!(info);
    }
}

/// Counts one report of a request of `protocol` (`openai`, `anthropic`); `candidate_id` names
/// a route position.
pub(crate) fn count<'a>(
    gateway: &Gateway,
    protocol: &str,
    candidate_id: impl Fn(usize) -> &'a str,
    report: &Report<'_>,
) {
    let metrics = &gateway.metrics;
    // The status page's attempts-per-minute chart: one bounded count per attempt's outcome.
    match report {
        Report::Succeeded { .. } => gateway.status.attempted(gateway.clock().now(), "ok"),
        Report::Decided(decision) => gateway
            .status
            .attempted(gateway.clock().now(), decision.class()),
        _ => {}
    }
    match report {
        Report::Attempting { candidate, .. } => metrics.attempt(candidate_id(*candidate)),
        Report::Succeeded {
            attempt,
            recovered_from,
            ..
        } => {
            if let Some(class) = recovered_from {
                metrics.recovery(class);
            }
            let outcome = if *attempt == 1 { "ok" } else { "recovered" };
            metrics.request(protocol, outcome);
        }
        Report::Decided(decision) => {
            let (class, code) = (decision.class(), decision.code());
            match &decision.action {
                Action::Retry(_) => metrics.retry(class, code),
                Action::Fallback { .. } => metrics.fallback(class, code),
                Action::Stop(diagnostics) => {
                    if matches!(
                        diagnostics.reason,
                        StopReason::Exhausted | StopReason::RouteEnded
                    ) {
                        metrics.exhaustion(class, code);
                    }
                    metrics.request(protocol, "error");
                }
            }
        }
        Report::Rested(decision) => {
            let candidate = candidate_id(decision.candidate);
            match &decision.action {
                Action::Retry(_) => metrics.rest(candidate, "waited"),
                Action::Fallback { .. } => metrics.rest(candidate, "skipped"),
                Action::Stop(_) => {
                    metrics.rest(candidate, "stopped");
                    metrics.request(protocol, "error");
                }
            }
        }
        Report::Waited(waited) => metrics.waited(*waited),
        Report::Ended => metrics.request(protocol, "client_gone"),
    }
}
