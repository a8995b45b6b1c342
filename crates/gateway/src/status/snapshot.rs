//! One snapshot of everything the status page shows: the health ledger's candidates (as
//! `GET /v1/rebound/health` shows them), the waits and failures of the status ledger, and the
//! durable jobs. Ids, states, codes and redacted excerpts only: no key, prompt or completion.

use rebound_runtime::health::unix_ms;
use serde_json::{Value, json};

use crate::state::Gateway;

/// How many jobs the page lists, newest first.
const JOBS_SHOWN: usize = 50;

/// The page's snapshot at the gateway's `now`.
pub(super) async fn snapshot(gateway: &Gateway) -> Value {
    let now = gateway.clock().now();
    let mut out = gateway.status.view(now);
    out["now_ms"] = json!(unix_ms(now));
    out["health"] = crate::health::view(gateway);
    out["routes"] = gateway
        .config
        .routes
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "candidates": r.candidates.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
            })
        })
        .collect();
    out["jobs"] = match &gateway.jobs {
        None => json!({"enabled": false, "list": []}),
        Some(jobs) => match jobs.off_thread(|store| store.list(JOBS_SHOWN)).await {
            Ok(list) => json!({
                "enabled": true,
                "list": list.iter().map(job).collect::<Vec<_>>(),
            }),
            Err(e) => json!({"enabled": true, "list": [], "error": e.to_string()}),
        },
    };
    out
}

/// A job as the page lists it: its state and schedule, never its request or response.
fn job(j: &rebound_store::JobRecord) -> Value {
    json!({
        "id": j.id,
        "generation": j.generation,
        "state": j.state,
        "route_id": j.route_id,
        "candidate": j.candidates.get(j.turn.candidate),
        "attempts": j.turn.attempts,
        "deadline_ms": j.deadline.map(unix_ms),
        "pending_outcome": j.pending_outcome,
        "code": j.classification.as_ref().and_then(|c| c.get("code")).cloned(),
        "updated_ms": unix_ms(j.updated),
    })
}
