//! `GET /v1/rebound/health` (S6): every configured candidate as the shared health ledger sees
//! it — state, deadline, the failure that set it (class, code, rule), the latest probe. Ids,
//! states and codes only: no key, no evidence.

use std::collections::BTreeSet;
use std::time::SystemTime;

use rebound_core::{Entry, HealthState};
use rebound_runtime::health::unix_ms;
use serde_json::{Value, json};

use crate::state::Gateway;

/// The ledger as JSON, at the gateway's `now`.
pub(crate) fn view(gateway: &Gateway) -> Value {
    let now = gateway.clock().now();
    let Some(health) = gateway.engine.health() else {
        return json!({"enabled": false, "candidates": []});
    };
    let settings = health.settings();
    let configured: BTreeSet<&str> = gateway
        .config
        .routes
        .iter()
        .flat_map(|r| r.candidates.iter())
        .map(|c| c.id.as_str())
        .collect();
    let entries = health.entries();
    let pools: Vec<(&str, usize)> = gateway
        .config
        .routes
        .iter()
        .flat_map(|r| r.candidates.iter())
        .filter(|c| c.keys() > 1)
        .map(|c| (c.id.as_str(), c.keys()))
        .collect();
    let mut candidates: Vec<Value> = configured
        .iter()
        .map(|id| {
            let entry = entries.iter().find(|(e, _)| e == id).map(|(_, e)| e);
            let mut view = candidate(id, entry, now);
            // A pool's keys, by their 1-based place in `api_key_envs`: never a key (S4).
            if let Some((_, keys)) = pools.iter().find(|(p, _)| p == id) {
                let keys: Vec<Value> = (1..=*keys)
                    .map(|n| {
                        let key_id = format!("{id}#key{n}");
                        let entry = entries.iter().find(|(e, _)| *e == key_id).map(|(_, e)| e);
                        let mut key = candidate(&key_id, entry, now);
                        key["key"] = json!(n);
                        key
                    })
                    .collect();
                view["keys"] = json!(keys);
            }
            view
        })
        .collect();
    // A candidate no longer configured (a job's) still rests where it is.
    candidates.extend(
        entries
            .iter()
            .filter(|(id, _)| {
                let owner = id.split('#').next().unwrap_or_default();
                !configured.contains(owner)
            })
            .map(|(id, entry)| candidate(id, Some(entry), now)),
    );
    json!({
        "enabled": true,
        "now_ms": unix_ms(now),
        "settings": {
            "circuit_after": settings.circuit_after,
            "window_ms": settings.window.as_millis() as u64,
            "window_cap_ms": settings.window_cap.as_millis() as u64,
            "hint_cap_ms": settings.hint_cap.as_millis() as u64,
            "probe_lease_ms": settings.probe_lease.as_millis() as u64,
        },
        "candidates": candidates,
    })
}

fn candidate(id: &str, entry: Option<&Entry>, now: SystemTime) -> Value {
    let Some(entry) = entry else {
        return json!({"id": id, "state": HealthState::Closed.as_str()});
    };
    let resting = entry.state != HealthState::Closed;
    let until = entry.until.filter(|_| resting);
    json!({
        "id": id,
        "state": entry.state.as_str(),
        "until_ms": until.map(unix_ms),
        "until": until.map(httpdate::fmt_http_date),
        "remaining_ms": until.map(|u| u.duration_since(now).unwrap_or_default().as_millis() as u64),
        "scope": entry.scope.filter(|_| resting).map(|s| s.as_str()),
        "class": entry.class.filter(|_| resting).map(|c| c.as_str()),
        "code": entry.code.as_deref().filter(|_| resting),
        "rule_id": entry.rule_id.as_deref().filter(|_| resting),
        "last_probe": entry.last_probe.map(|p| json!({
            "at_ms": unix_ms(p.at),
            "succeeded": p.succeeded,
        })),
    })
}
