//! What the recovery loop reports, counted in `/metrics` (G6): the same for live requests and
//! durable jobs, because both report through here.

use rebound_core::{Action, StopReason};
use rebound_runtime::Report;

use crate::metrics::Metrics;

/// Counts one report of a request of `protocol` (`openai`, `anthropic`); `candidate_id` names
/// a route position.
pub(crate) fn count<'a>(
    metrics: &Metrics,
    protocol: &str,
    candidate_id: impl Fn(usize) -> &'a str,
    report: &Report<'_>,
) {
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
                Action::Retry(wait) => metrics.retry(class, code, wait.delay),
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
        Report::Ended => metrics.request(protocol, "client_gone"),
    }
}
