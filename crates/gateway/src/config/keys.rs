//! Keys and credentials in the configuration (G5): the gateway keys clients present, the
//! checks every key passes at load (long enough to be redacted by value), and which client
//! headers never go upstream under gateway keys.

use super::{Config, Env};

/// A configuration key (`gateway_key_envs[0]`) and what is wrong with it.
type Refusal = (String, String);

/// Whether the key in variable `name` can be a secret rebound redacts by value; the message
/// names the variable, never the key.
pub(super) fn check(name: &str, key: &str) -> Result<(), String> {
    rebound_core::redact::secrets::check(key)
        .map_err(|e| format!("the environment variable `{name}` {e}"))
}

/// The gateway keys the variables `names` hold, each of which may list several, separated by
/// commas. A variable that is unset or empty, yields no key (only commas or spaces), or holds
/// a key too short to redact refuses the configuration: a setting that looks like a lock but
/// holds no key must never leave the door open.
pub(super) fn gateway_keys(names: &[String], env: &dyn Env) -> Result<Vec<String>, Refusal> {
    let mut gateway_keys = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let at = || format!("gateway_key_envs[{i}]");
        let value = env.var(name).ok_or_else(|| {
            (
                at(),
                format!("the environment variable `{name}` is not set or is empty"),
            )
        })?;
        let keys: Vec<String> = value
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(str::to_owned)
            .collect();
        if keys.is_empty() {
            return Err((
                at(),
                format!(
                    "the environment variable `{name}` holds no key (only separators or spaces)"
                ),
            ));
        }
        for key in &keys {
            check(name, key).map_err(|message| (at(), message))?;
        }
        gateway_keys.extend(keys);
    }
    Ok(gateway_keys)
}

/// A candidate's pool of keys (`api_key_envs`, S4): each variable's name and key, in order.
/// Every variable must hold a key that can be redacted; a pool beside `api_key_env` is
/// refused, as is a pool of one (that is `api_key_env`). The message names the variable,
/// never the key.
pub(super) fn pool(
    names: &[String],
    single: bool,
    env: &dyn Env,
) -> Result<Vec<(String, String)>, String> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    if single {
        return Err("set api_key_env or api_key_envs, not both".to_owned());
    }
    if names.len() < 2 {
        return Err("a pool holds two keys or more; one key is `api_key_env`".to_owned());
    }
    names
        .iter()
        .map(|name| {
            let key = env.var(name).ok_or_else(|| {
                format!("the environment variable `{name}` is not set or is empty")
            })?;
            check(name, &key)?;
            Ok((name.clone(), key))
        })
        .collect()
}

/// The configured `strip_headers`, as header names.
pub(super) fn strip_headers(names: &[String]) -> Result<Vec<http::HeaderName>, Refusal> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            http::HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                (
                    format!("strip_headers[{i}]"),
                    format!("`{name}` is not a header name"),
                )
            })
        })
        .collect()
}

/// Client headers that carry a credential: never forwarded upstream under gateway keys.
pub const CLIENT_CREDENTIAL_HEADERS: [&str; 6] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
];

impl Config {
    /// Every secret this configuration holds: the gateway keys, each candidate's own, and
    /// the shared store's password.
    pub fn secrets(&self) -> Vec<String> {
        let candidates = self
            .routes
            .iter()
            .flat_map(|r| r.candidates.iter())
            .flat_map(|c| c.api_key.iter().chain(c.pool.iter()).cloned());
        let store = self.shared_store.as_ref().and_then(|s| s.password.clone());
        self.gateway_keys
            .iter()
            .cloned()
            .chain(candidates)
            .chain(self.agents.secrets())
            .chain(store)
            .chain(self.upstream_proxies.secrets().iter().cloned())
            .collect()
    }

    /// Whether a client's `header` stays with rebound under gateway keys.
    pub fn strips(&self, header: &http::HeaderName) -> bool {
        !self.gateway_keys.is_empty()
            && (CLIENT_CREDENTIAL_HEADERS.contains(&header.as_str())
                || self.strip_headers.contains(header))
    }
}
