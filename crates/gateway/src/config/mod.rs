//! The gateway's configuration: one TOML file (see `docs/gateway.md`), compiled into a
//! validated [`Config`]. Every error names the file, the table and the key.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use rebound_core::Policy;
use rebound_core::toml_refusal::{named_field, one_line, syntax};
use rebound_runtime::Protocol;

mod agent;
mod backlog;
mod file;
mod health;
mod keys;
mod outbound;
mod policy;
mod route;
mod store;
mod timeouts;

pub use agent::{AgentOutput, AgentProfile, AgentRoute, Agents, DEFAULT_RESUME_PROMPT};
pub use backlog::DEFAULT_LISTEN_BACKLOG;
use file::{ConfigFile, compile_switch};
pub use keys::CLIENT_CREDENTIAL_HEADERS;
use policy::compile_policy;
pub use route::{Candidate, Route, Routes, Switch, matches_pattern};
pub use store::{DEFAULT_LEASE, SharedStore};
pub use timeouts::TimeoutOverrides;

/// The default request body limit.
pub const DEFAULT_BODY_LIMIT: usize = 32 << 20;

/// The default cap on client connections served at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// The embedded default, used without a config file.
pub const DEFAULT_CONFIG: &str = r#"
listen = "127.0.0.1:8080"

[[candidate]]
id = "openai"
protocol = "openai"
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"

[[candidate]]
id = "anthropic"
protocol = "anthropic"
base_url = "https://api.anthropic.com"
api_key_env = "ANTHROPIC_API_KEY"

[[route]]
id = "default"
models = ["*"]
candidates = ["openai", "anthropic"]
"#;

/// A `deadline_ms` value at `key`: more than 0, and at most a day (a longer wait is a job's).
fn deadline_of(
    ms: Option<u64>,
    key: &str,
) -> Result<Option<std::time::Duration>, (Option<String>, String)> {
    const DAY_MS: u64 = 24 * 60 * 60 * 1000;
    match ms {
        None => Ok(None),
        Some(0) => Err((Some(key.to_owned()), "must be more than 0".into())),
        Some(ms) if ms > DAY_MS => Err((
            Some(key.to_owned()),
            format!("{ms} ms is more than a day: a wait that long is a durable job's"),
        )),
        Some(ms) => Ok(Some(std::time::Duration::from_millis(ms))),
    }
}

/// A configuration that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub struct ConfigError {
    /// The file (or `embedded default`).
    pub file: String,
    /// The key, as a dotted path (`candidate.openai.base_url`).
    pub key: Option<String>,
    /// What is wrong, on one line.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{}: `{key}`: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Accepted client keys; empty means none are required (loopback only).
    pub gateway_keys: Vec<String>,
    /// Client request headers never forwarded upstream under gateway keys, besides the
    /// credential headers every client may send ([`CLIENT_CREDENTIAL_HEADERS`]); lower case.
    pub strip_headers: Vec<http::HeaderName>,
    /// The listen backlog: connections the system queues before rebound accepts them.
    pub listen_backlog: u32,
    /// The request body limit.
    pub body_limit: usize,
    /// Routes, in order.
    pub routes: Routes,
    /// The request deadline of a route that sets none, and of a request that has no route
    /// of the configuration's (a stored response, a pass-through): `deadline_ms` (D6).
    pub deadline: Option<std::time::Duration>,
    /// The durable jobs database, when it is a SQLite file (the default).
    pub store_path: std::path::PathBuf,
    /// The PostgreSQL database several instances share, when `store` names one: then
    /// `store_path` is not used.
    pub shared_store: Option<SharedStore>,
    /// How long a client may take to send a request head.
    pub header_read_timeout: std::time::Duration,
    /// The most client connections served at once; more wait to be accepted. `None` (not
    /// configured): [`DEFAULT_MAX_CONNECTIONS`], or what the process's open-files limit allows
    /// when the caller knows it (see [`Config::connections_for_open_files`]).
    pub max_connections: Option<usize>,
    /// The shared health ledger's settings (`[health]`); `None` when it is turned off.
    pub health: Option<rebound_core::HealthSettings>,
    /// The gateway's attempt timeouts (`[timeouts]`, S5), over the client's defaults; each
    /// candidate holds these merged with its own.
    pub timeouts: TimeoutOverrides,
    /// The connect timeout (`[timeouts] connect_ms`), gateway-wide.
    pub connect_timeout: Option<std::time::Duration>,
    /// CA certificates the upstream client trusts besides the public roots
    /// (`upstream_ca_file`): a company's CA, a TLS-inspecting proxy's.
    pub upstream_roots: rebound_runtime::http::ExtraRoots,
    /// The proxies upstreams are reached through (`upstream_proxy`, else the environment's
    /// `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY`).
    pub upstream_proxies: rebound_runtime::http::Proxies,
    /// Agent profiles and agent routes (`[[agent]]`, `[[agent_route]]`).
    pub agents: Agents,
}

impl Config {
    /// The timeouts the upstream client is built with: its defaults under `[timeouts]`.
    pub fn client_timeouts(&self) -> rebound_runtime::Timeouts {
        let mut timeouts = self.timeouts.resolve(rebound_runtime::Timeouts::default());
        if let Some(connect) = self.connect_timeout {
            timeouts.connect = connect;
        }
        timeouts
    }
}

/// Where the environment's values come from (so tests need not touch the process's).
pub trait Env {
    /// The value of a variable.
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl<const N: usize> Env for [(&str, &str); N] {
    fn var(&self, name: &str) -> Option<String> {
        self.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

/// Overrides given on the command line.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--openai-upstream`: the embedded default's OpenAI base URL.
    pub openai_upstream: Option<String>,
    /// `--anthropic-upstream`: the embedded default's Anthropic base URL.
    pub anthropic_upstream: Option<String>,
    /// `--upstream-http2`: every candidate speaks HTTP/2.
    pub upstream_http2: bool,
}

/// Loads `text` (named `file` in errors), applies `overrides`, reads keys from `env`. Legacy
/// per-code policy rules are resolved against the shipped catalogue.
pub fn load(
    file: &str,
    text: &str,
    overrides: &Overrides,
    env: &dyn Env,
) -> Result<Config, ConfigError> {
    load_with(file, text, overrides, env, None)
}

/// [`load`], resolving legacy per-code policy rules against `catalogue` (the shipped one
/// when `None`).
pub fn load_with(
    file: &str,
    text: &str,
    overrides: &Overrides,
    env: &dyn Env,
    catalogue: Option<&rebound_core::Catalogue>,
) -> Result<Config, ConfigError> {
    let shipped = std::sync::OnceLock::new();
    let catalogue = || -> Result<&rebound_core::Catalogue, String> {
        match catalogue {
            Some(c) => Ok(c),
            None => shipped
                .get_or_init(rebound_core::Catalogue::shipped)
                .as_ref()
                .map_err(ToString::to_string),
        }
    };
    let err = |key: Option<String>, message: String| ConfigError {
        file: file.to_owned(),
        key,
        message: one_line(&message),
    };
    let parsed: ConfigFile =
        toml::from_str(text).map_err(|e| err(named_field(e.message()), syntax(text, &e)))?;
    let listen = match (overrides.listen, &parsed.listen) {
        (Some(addr), _) => addr,
        (None, Some(text)) => text.parse().map_err(|_| {
            err(
                Some("listen".into()),
                format!("`{text}` is not an address like 127.0.0.1:8080"),
            )
        })?,
        (None, None) => SocketAddr::from(([127, 0, 0, 1], 8080)),
    };
    let gateway_keys = keys::gateway_keys(&parsed.gateway_key_envs, env)
        .map_err(|(key, message)| err(Some(key), message))?;
    if !listen.ip().is_loopback() && gateway_keys.is_empty() {
        return Err(err(
            Some("listen".into()),
            format!(
                "{listen} is not a loopback address: set gateway_key_envs so clients must present a gateway key"
            ),
        ));
    }
    let health =
        health::settings(&parsed.health).map_err(|(key, message)| err(Some(key), message))?;
    let (global_timeouts, connect_timeout) =
        timeouts::overrides(&parsed.timeouts, "timeouts", true)
            .map_err(|(key, message)| err(Some(key), message))?;
    let body_limit = parsed.body_limit_bytes.unwrap_or(DEFAULT_BODY_LIMIT);
    if body_limit == 0 {
        return Err(err(
            Some("body_limit_bytes".into()),
            "must be more than 0".into(),
        ));
    }
    let default_policy =
        compile_policy(&parsed.policy, &Policy::interactive(), "policy", &catalogue)
            .map_err(|(key, message)| err(Some(key), message))?;

    let mut candidates: BTreeMap<String, Arc<Candidate>> = BTreeMap::new();
    for c in &parsed.candidate {
        let at = |field: &str| Some(format!("candidate.{}.{field}", c.id));
        let protocol = match c.protocol.as_str() {
            "openai" => Protocol::OpenAi,
            "anthropic" => Protocol::Anthropic,
            other => {
                return Err(err(
                    at("protocol"),
                    format!("unknown protocol `{other}`, expected openai or anthropic"),
                ));
            }
        };
        let mut base_url = c.base_url.clone();
        let upstream_override = match protocol {
            Protocol::OpenAi => &overrides.openai_upstream,
            Protocol::Anthropic => &overrides.anthropic_upstream,
        };
        if let Some(url) = upstream_override {
            base_url = url.clone();
        }
        let valid_url = (base_url.starts_with("http://") || base_url.starts_with("https://"))
            && base_url
                .parse::<http::Uri>()
                .is_ok_and(|u| u.host().is_some());
        if !valid_url {
            return Err(err(
                at("base_url"),
                format!("`{base_url}` is not an http(s) URL"),
            ));
        }
        let api_key = c.api_key_env.as_deref().and_then(|name| env.var(name));
        if let (Some(name), Some(key)) = (&c.api_key_env, &api_key) {
            keys::check(name, key).map_err(|message| err(at("api_key_env"), message))?;
        }
        let pool = keys::pool(&c.api_key_envs, c.api_key_env.is_some(), env)
            .map_err(|message| err(at("api_key_envs"), message))?;
        let (api_key, api_key_env) = match pool.first() {
            Some((name, key)) => (Some(key.clone()), Some(name.clone())),
            None => (api_key, c.api_key_env.clone()),
        };
        if !gateway_keys.is_empty() && api_key_env.is_some() && api_key.is_none() {
            return Err(err(
                at("api_key_env"),
                format!(
                    "`{}` is not set; with gateway keys, client keys are never forwarded upstream",
                    c.api_key_env.as_deref().unwrap_or_default()
                ),
            ));
        }
        let policy = compile_policy(
            &c.policy,
            &default_policy,
            &format!("candidate.{}.policy", c.id),
            &catalogue,
        )
        .map_err(|(key, message)| err(Some(key), message))?;
        let (own_timeouts, _) =
            timeouts::overrides(&c.timeouts, &format!("candidate.{}.timeouts", c.id), false)
                .map_err(|(key, message)| err(Some(key), message))?;
        let candidate = Candidate::new(route::Declared {
            id: c.id.clone(),
            protocol,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
            api_key_env,
            pool: pool.into_iter().map(|(_, key)| key).collect(),
            model: c.model.clone(),
            provider: c.provider.clone().unwrap_or_else(|| match protocol {
                Protocol::OpenAi => "openai".into(),
                Protocol::Anthropic => "anthropic".into(),
            }),
            http2: c.http2 || overrides.upstream_http2,
            timeouts: own_timeouts.or(global_timeouts),
            context_window: match c.context_window {
                Some(0) => return Err(err(at("context_window"), "must be more than 0".into())),
                window => window,
            },
            policy: Arc::new(policy),
            policy_set: c.policy.is_set() || parsed.policy.is_set(),
        })
        .map_err(|(field, message)| err(at(field), message))?;
        if candidates
            .insert(c.id.clone(), Arc::new(candidate))
            .is_some()
        {
            return Err(err(
                Some(format!("candidate.{}.id", c.id)),
                "declared twice".into(),
            ));
        }
    }
    if overrides.openai_upstream.is_some() || overrides.anthropic_upstream.is_some() {
        for (flag, protocol, set) in [
            (
                "--openai-upstream",
                Protocol::OpenAi,
                overrides.openai_upstream.is_some(),
            ),
            (
                "--anthropic-upstream",
                Protocol::Anthropic,
                overrides.anthropic_upstream.is_some(),
            ),
        ] {
            if set && !candidates.values().any(|c| c.protocol == protocol) {
                return Err(err(
                    None,
                    format!("{flag} given, but no candidate speaks that protocol"),
                ));
            }
        }
    }
    let deadline =
        deadline_of(parsed.deadline_ms, "deadline_ms").map_err(|(key, m)| err(key, m))?;
    let mut routes = Vec::new();
    let mut route_ids = HashSet::new();
    for r in &parsed.route {
        if !route_ids.insert(r.id.clone()) {
            return Err(err(
                Some(format!("route.{}.id", r.id)),
                "declared twice".into(),
            ));
        }
        if r.models.is_empty() {
            return Err(err(
                Some(format!("route.{}.models", r.id)),
                "needs at least one model name or pattern".into(),
            ));
        }
        if r.candidates.is_empty() {
            return Err(err(
                Some(format!("route.{}.candidates", r.id)),
                "needs at least one candidate".into(),
            ));
        }
        let list = r
            .candidates
            .iter()
            .map(|id| {
                candidates.get(id).cloned().ok_or_else(|| {
                    err(
                        Some(format!("route.{}.candidates", r.id)),
                        format!("no candidate `{id}`"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let route_deadline = deadline_of(r.deadline_ms, &format!("route.{}.deadline_ms", r.id))
            .map_err(|(key, m)| err(key, m))?
            .or(deadline);
        let switch = compile_switch(r).map_err(|(key, m)| err(key, m))?;
        routes.push(
            Route::new(r.id.clone(), r.models.clone(), list, route_deadline)
                .map_err(|message| err(Some(format!("route.{}.id", r.id)), message))?
                .with_switch(switch),
        );
    }
    if routes.is_empty() {
        return Err(err(
            Some("route".into()),
            "at least one [[route]] is needed".into(),
        ));
    }
    let store_path = match &parsed.store_path {
        Some(path) if path.trim().is_empty() => {
            return Err(err(Some("store_path".into()), "is empty".into()));
        }
        Some(path) => std::path::PathBuf::from(path),
        None => default_store_path(env),
    };
    let shared_store = store::compile(
        &store::StoreFile {
            store: parsed.store.as_deref(),
            store_path: parsed.store_path.as_deref(),
            store_password_env: parsed.store_password_env.as_deref(),
            store_ca_file: parsed.store_ca_file.as_deref(),
            store_lease_ms: parsed.store_lease_ms,
        },
        env,
    )
    .map_err(|(key, message)| err(Some(key), message))?;
    let header_read_timeout = match parsed.header_read_timeout_ms {
        Some(0) => {
            return Err(err(
                Some("header_read_timeout_ms".into()),
                "must be more than 0".into(),
            ));
        }
        Some(ms) => std::time::Duration::from_millis(ms),
        None => std::time::Duration::from_secs(10),
    };
    if parsed.max_connections == Some(0) {
        return Err(err(
            Some("max_connections".into()),
            "must be more than 0".into(),
        ));
    }
    let strip_headers = keys::strip_headers(&parsed.strip_headers)
        .map_err(|(key, message)| err(Some(key), message))?;
    let listen_backlog = match parsed.listen_backlog {
        Some(0) => {
            return Err(err(
                Some("listen_backlog".into()),
                "must be more than 0".into(),
            ));
        }
        Some(n) => n,
        None => backlog::default_backlog(),
    };
    let upstream_roots = outbound::roots(parsed.upstream_ca_file.as_deref())
        .map_err(|(key, message)| err(key, message))?;
    let upstream_proxies = outbound::proxies(
        parsed.upstream_proxy.as_deref(),
        parsed.upstream_no_proxy.as_deref(),
        env,
    )
    .map_err(|(key, message)| err(key, message))?;
    let agents = agent::compile_agents(
        &parsed.agent,
        &parsed.agent_route,
        &default_policy,
        &catalogue,
    )
    .map_err(|(key, message)| err(Some(key), message))?;
    let config = Config {
        agents,
        deadline,
        listen,
        strip_headers,
        listen_backlog,
        gateway_keys,
        body_limit,
        routes: Routes::new(routes),
        store_path,
        shared_store,
        header_read_timeout,
        max_connections: parsed.max_connections,
        health,
        timeouts: global_timeouts,
        connect_timeout,
        upstream_roots,
        upstream_proxies,
    };
    // Every key loaded is a secret from now on: redacted by value wherever text leaves.
    rebound_core::redact::secrets::remember(config.secrets());
    Ok(config)
}

/// `$XDG_DATA_HOME/rebound/jobs.db`, else `~/.local/share/rebound/jobs.db`, else
/// `rebound-jobs.db` in the working directory. An installation from before jobs had their
/// name keeps its file: where `jobs.db` does not exist and `routes.db` does, that one.
fn default_store_path(env: &dyn Env) -> std::path::PathBuf {
    let dir = if let Some(data) = env.var("XDG_DATA_HOME") {
        std::path::Path::new(&data).join("rebound")
    } else if let Some(home) = env.var("HOME") {
        std::path::Path::new(&home).join(".local/share/rebound")
    } else {
        return std::path::PathBuf::from("rebound-jobs.db");
    };
    let (jobs, routes) = (dir.join("jobs.db"), dir.join("routes.db"));
    if !jobs.exists() && routes.exists() {
        routes
    } else {
        jobs
    }
}

impl Config {
    /// How many client connections `open_files` file descriptors can serve: each takes one,
    /// plus one upstream connection unless every candidate speaks HTTP/2 (whose connections
    /// are shared), with 64 kept for the listener, the database and upstream HTTP/2.
    pub fn connections_for_open_files(&self, open_files: u64) -> usize {
        let all_http2 = self
            .routes
            .iter()
            .flat_map(|r| r.candidates.iter())
            .all(|c| c.http2);
        let per_connection = if all_http2 { 1 } else { 2 };
        usize::try_from(open_files.saturating_sub(64) / per_connection)
            .unwrap_or(usize::MAX)
            .max(1)
    }

    /// The connection cap in force: configured, else the default.
    pub fn connection_cap(&self) -> usize {
        self.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS)
    }

    /// The provider of `protocol` for requests that name no model (pass-through, a stored
    /// response rebound does not know, the model list): the first candidate of that protocol
    /// in the first route that has one, in the order of the configuration.
    pub fn provider(&self, protocol: Protocol) -> Option<&Arc<Candidate>> {
        self.routes
            .iter()
            .flat_map(|r| r.candidates.iter())
            .find(|c| c.protocol == protocol)
    }

    /// The route for `model` on `protocol`, with only that protocol's candidates.
    pub fn route(&self, model: &str, protocol: Protocol) -> Option<Arc<Route>> {
        self.routes.find(model, protocol)
    }
}

#[cfg(test)]
mod tests;
