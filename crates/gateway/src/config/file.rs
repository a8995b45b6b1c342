//! The configuration file as written: what serde reads before [`super::load_with`] checks
//! it, and the `switch` tables of routes, checked against their route.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::policy::PolicyFile;
use super::route::Switch;
use super::{health, timeouts};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfigFile {
    pub(super) listen: Option<String>,
    #[serde(default)]
    pub(super) gateway_key_envs: Vec<String>,
    #[serde(default)]
    pub(super) strip_headers: Vec<String>,
    pub(super) listen_backlog: Option<u32>,
    pub(super) body_limit_bytes: Option<usize>,
    pub(super) store_path: Option<String>,
    /// A PostgreSQL database shared by several instances (X1), instead of `store_path`.
    pub(super) store: Option<String>,
    /// The environment variable holding the PostgreSQL password.
    pub(super) store_password_env: Option<String>,
    /// CA certificates (PEM) to trust for the PostgreSQL server's certificate.
    pub(super) store_ca_file: Option<String>,
    /// How long an instance's hold on a job lasts unless renewed (X2).
    pub(super) store_lease_ms: Option<u64>,
    /// CA certificates (PEM) to trust for upstreams' certificates, besides the public roots.
    pub(super) upstream_ca_file: Option<String>,
    /// The proxy upstreams are reached through (a URL, or `none`), over the environment's.
    pub(super) upstream_proxy: Option<String>,
    /// Hosts reached directly despite `upstream_proxy` (`NO_PROXY`'s syntax).
    pub(super) upstream_no_proxy: Option<String>,
    pub(super) header_read_timeout_ms: Option<u64>,
    pub(super) max_connections: Option<usize>,
    /// The default request deadline of every route (D6).
    pub(super) deadline_ms: Option<u64>,
    #[serde(default)]
    pub(super) health: health::HealthFile,
    #[serde(default)]
    pub(super) timeouts: timeouts::TimeoutsFile,
    #[serde(default)]
    pub(super) policy: PolicyFile,
    #[serde(default)]
    pub(super) candidate: Vec<CandidateFile>,
    #[serde(default)]
    pub(super) route: Vec<RouteFile>,
    /// Agent profiles: agent CLIs run headless (docs/agent-runs.md).
    #[serde(default)]
    pub(super) agent: Vec<super::agent::AgentFile>,
    /// Agent routes: profiles as candidates.
    #[serde(default)]
    pub(super) agent_route: Vec<super::agent::AgentRouteFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CandidateFile {
    pub(super) id: String,
    pub(super) protocol: String,
    pub(super) base_url: String,
    pub(super) api_key_env: Option<String>,
    /// A pool of keys (S4): a rate-limited or quota-exhausted key rests while the others
    /// serve.
    #[serde(default)]
    pub(super) api_key_envs: Vec<String>,
    pub(super) model: Option<String>,
    pub(super) provider: Option<String>,
    #[serde(default)]
    pub(super) http2: bool,
    /// Its own attempt timeouts (S5), over the gateway's.
    #[serde(default)]
    pub(super) timeouts: timeouts::TimeoutsFile,
    /// The model's context window in tokens, so a switch on context overflow skips
    /// candidates that are no larger (D6).
    pub(super) context_window: Option<u64>,
    #[serde(default)]
    pub(super) policy: PolicyFile,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RouteFile {
    pub(super) id: String,
    pub(super) models: Vec<String>,
    pub(super) candidates: Vec<String>,
    /// This route's request deadline, instead of the global one (D6).
    pub(super) deadline_ms: Option<u64>,
    /// Per terminal code another model can repair: the candidates to switch to (D6).
    #[serde(default)]
    pub(super) switch: BTreeMap<String, SwitchTargets>,
}

/// One candidate id, or several in order of preference.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum SwitchTargets {
    One(String),
    Many(Vec<String>),
}

impl SwitchTargets {
    fn ids(&self) -> &[String] {
        match self {
            SwitchTargets::One(id) => std::slice::from_ref(id),
            SwitchTargets::Many(ids) => ids,
        }
    }
}

/// A route's `switch` table, checked: codes another model can repair, targets on the route.
pub(super) fn compile_switch(r: &RouteFile) -> Result<Switch, (Option<String>, String)> {
    let mut switch = Vec::new();
    for (code, targets) in &r.switch {
        let key = Some(format!("route.{}.switch.{code}", r.id));
        if !rebound_core::turn::MODEL_REPAIRABLE.contains(&code.as_str()) {
            return Err((
                key,
                format!(
                    "`{code}` is not a failure another model can repair; expected {}",
                    rebound_core::turn::MODEL_REPAIRABLE.join(", ")
                ),
            ));
        }
        if targets.ids().is_empty() {
            return Err((key, "names no candidate".into()));
        }
        for id in targets.ids() {
            if !r.candidates.contains(id) {
                return Err((key, format!("`{id}` is not one of the route's candidates")));
            }
        }
        switch.push((rebound_core::Code::new(code), targets.ids().to_vec()));
    }
    Ok(switch)
}
