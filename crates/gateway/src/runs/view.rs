//! How a run reads in the API and in its event stream.

use std::time::{SystemTime, UNIX_EPOCH};

use rebound_store::runs::{Invocation, RunRecord};
use serde_json::{Value, json};

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A run's state: what `GET /v1/rebound/runs/{id}` answers (with its invocations and output
/// tail) and what its event stream sends on every change (`type: state`, without them).
pub(crate) fn summary(run: &RunRecord, invocations: Option<&[Invocation]>) -> Value {
    let mut value = json!({
        "type": "state",
        "id": run.id,
        "generation": run.generation,
        "state": run.state.as_str(),
        "route": run.route_id,
        "profiles": run.profiles,
        "profile": run.profiles.get(run.turn.candidate),
        "handoff": run.handoff,
        "cwd": run.cwd,
        "session": run.session.as_ref().map(|s| json!({"profile": s.profile, "id": s.id})),
        "acted": run.acted,
        "deadline_ms": run.deadline.map(ms),
        "pending_outcome": run.pending_outcome,
        "classification": run.classification,
        "evidence": run.evidence,
        "error": run.error,
        "result": run.result,
        "created_ms": ms(run.created),
        "updated_ms": ms(run.updated),
    });
    if let (Some(invocations), Value::Object(map)) = (invocations, &mut value) {
        let list: Vec<Value> = invocations
            .iter()
            .map(|i| {
                json!({
                    "number": i.number,
                    "profile": i.profile,
                    "mode": i.mode,
                    "outcome": i.outcome.as_str(),
                    "exit_code": i.exit_code,
                    "session": i.session,
                    "acted": i.acted,
                    "code": i.code,
                    "class": i.class,
                    "rule_id": i.rule_id,
                    "catalogue_version": i.catalogue_version,
                    "started_ms": ms(i.started),
                    "finished_ms": i.finished.map(ms),
                })
            })
            .collect();
        map.insert("invocations".into(), Value::Array(list));
        map.insert("output".into(), json!(run.output));
    }
    value
}
