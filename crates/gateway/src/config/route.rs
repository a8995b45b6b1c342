//! Routes and candidates: where a request may go. What every request to a candidate needs
//! (its endpoint, its credential header, the `x-rebound-*` header values) is derived once,
//! when the configuration loads, so a request clones shared values instead of building them.

use std::fmt;
use std::sync::Arc;

use http::{HeaderName, HeaderValue, Uri};
use rebound_core::Policy;
use rebound_runtime::{Api, Protocol};

/// One upstream that can serve a request.
#[derive(Clone)]
pub struct Candidate {
    /// Its id.
    pub id: String,
    /// Its protocol.
    pub protocol: Protocol,
    /// Base URL, as the official SDKs take it.
    pub base_url: String,
    /// The key from the environment; `None` forwards the client's key (when gateway keys are
    /// off) or sends none.
    pub api_key: Option<String>,
    /// The environment variable its key comes from, as configured (a pool's first).
    pub api_key_env: Option<String>,
    /// Its pool of keys (`api_key_envs`, S4), the first being `api_key`; empty without one.
    pub pool: Vec<String>,
    /// The model it serves; rewrites the request's `model`.
    pub model: Option<String>,
    /// The provider name the catalogue knows.
    pub provider: String,
    /// Speak HTTP/2 to it: one connection carries every concurrent request.
    pub http2: bool,
    /// Its attempt timeouts over the client's (S5).
    pub timeouts: super::TimeoutOverrides,
    /// Its model's context window in tokens, where declared (D6).
    pub context_window: Option<u64>,
    /// Its per-class policy (D1): the configured one, else the interactive preset.
    pub policy: Arc<Policy>,
    /// Its policy where a fallback follows it on a route: [`Policy::before_fallback`] by
    /// default, its own when the configuration set one (D3).
    pub policy_before_fallback: Arc<Policy>,
    endpoint: Uri,
    /// The Responses API's endpoint, for an OpenAI candidate.
    responses_endpoint: Option<Uri>,
    /// `Host` for HTTP/1.1 (HTTP/2 names the authority in the request itself).
    host: Option<HeaderValue>,
    id_header: HeaderValue,
    credential: Option<(HeaderName, HeaderValue)>,
    /// A pool's credentials, in order (the first is `credential`).
    pool_credentials: Vec<(HeaderName, HeaderValue)>,
}

/// A candidate as the configuration declares it.
pub(super) struct Declared {
    pub(super) id: String,
    pub(super) protocol: Protocol,
    pub(super) base_url: String,
    pub(super) api_key: Option<String>,
    pub(super) api_key_env: Option<String>,
    pub(super) pool: Vec<String>,
    pub(super) model: Option<String>,
    pub(super) provider: String,
    pub(super) http2: bool,
    pub(super) timeouts: super::TimeoutOverrides,
    pub(super) context_window: Option<u64>,
    pub(super) policy: Arc<Policy>,
    /// The configuration set its policy, or every candidate's.
    pub(super) policy_set: bool,
}

impl fmt::Debug for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Candidate")
            .field("id", &self.id)
            .field("protocol", &self.protocol)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("model", &self.model)
            .field("provider", &self.provider)
            .field("http2", &self.http2)
            .finish_non_exhaustive()
    }
}

impl Candidate {
    /// Where the key it sends comes from, as the `rebound serve` banner tells it. Under gateway
    /// keys a client's credential never goes upstream, so a candidate without a key of its own
    /// sends none.
    pub fn key_source(&self, gateway_keys: bool) -> String {
        match (&self.api_key, &self.api_key_env) {
            _ if !self.pool.is_empty() => format!("a pool of {} keys", self.pool.len()),
            (Some(_), Some(name)) => format!("key from ${name}"),
            (Some(_), None) => "key from the configuration".into(),
            (None, _) if gateway_keys => {
                "no key: client keys stay with rebound under gateway keys".into()
            }
            (None, Some(name)) => format!("${name} unset: the client's key"),
            (None, None) => "the client's key".into(),
        }
    }

    /// A declared candidate, checked, with what its requests need derived. An error names the
    /// field (`id`, `base_url`, `api_key_env`) and never shows the key.
    pub(super) fn new(declared: Declared) -> Result<Self, (&'static str, String)> {
        let Declared {
            id,
            protocol,
            base_url,
            api_key,
            api_key_env,
            pool,
            model,
            provider,
            http2,
            timeouts,
            context_window,
            policy,
            policy_set,
        } = declared;
        let bad_id = || ("id", "an id is letters, digits, `-` and `_`".to_owned());
        if id.is_empty()
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(bad_id());
        }
        let parse = |api: Api| {
            let endpoint = format!("{base_url}{}", api.path());
            endpoint
                .parse::<Uri>()
                .map_err(|e| ("base_url", format!("`{endpoint}` is not a valid URL: {e}")))
        };
        let endpoint = parse(Api::native(protocol))?;
        let responses_endpoint = match protocol {
            Protocol::OpenAi => Some(parse(Api::Responses)?),
            Protocol::Anthropic => None,
        };
        let default_port = if endpoint.scheme_str() == Some("https") {
            443
        } else {
            80
        };
        let host = match endpoint.host() {
            _ if http2 => None,
            None => None,
            Some(host) => match endpoint.port_u16() {
                Some(port) if port != default_port => {
                    HeaderValue::from_str(&format!("{host}:{port}")).ok()
                }
                _ => HeaderValue::from_str(host).ok(),
            },
        };
        let id_header = HeaderValue::from_str(&id).map_err(|_| bad_id())?;
        let credential_of = |key: &str| {
            let (name, value) = match protocol {
                Protocol::OpenAi => (http::header::AUTHORIZATION, format!("Bearer {key}")),
                Protocol::Anthropic => (HeaderName::from_static("x-api-key"), key.to_owned()),
            };
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                (
                    "api_key_env",
                    format!(
                        "the key in `{}` holds characters a header cannot carry",
                        api_key_env.as_deref().unwrap_or_default()
                    ),
                )
            })?;
            value.set_sensitive(true);
            Ok((name, value))
        };
        let credential = api_key.as_deref().map(credential_of).transpose()?;
        let pool_credentials = pool
            .iter()
            .map(|key| credential_of(key))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Candidate {
            id,
            api_key_env,
            protocol,
            base_url,
            api_key,
            model,
            provider,
            http2,
            timeouts,
            context_window,
            policy_before_fallback: if policy_set {
                Arc::clone(&policy)
            } else {
                Arc::new(Policy::before_fallback())
            },
            policy,
            endpoint,
            responses_endpoint,
            host,
            id_header,
            credential,
            pool,
            pool_credentials,
        })
    }

    /// The model endpoint of its protocol's native API: `{base}/chat/completions` or
    /// `{base}/v1/messages`.
    pub fn endpoint(&self) -> Uri {
        self.endpoint.clone()
    }

    /// The endpoint of `api`, when this candidate's protocol serves it.
    pub fn endpoint_for(&self, api: Api) -> Option<Uri> {
        match api {
            Api::Responses => self.responses_endpoint.clone(),
            _ if api.protocol() == self.protocol => Some(self.endpoint.clone()),
            _ => None,
        }
    }

    /// Its id, as the `x-rebound-candidate` header value.
    pub(crate) fn id_header(&self) -> HeaderValue {
        self.id_header.clone()
    }

    /// The HTTP version its requests ask for.
    pub fn version(&self) -> http::Version {
        if self.http2 {
            http::Version::HTTP_2
        } else {
            http::Version::HTTP_11
        }
    }

    /// `body` with its top-level `model` rewritten to this candidate's, when it names one.
    pub fn body_for(&self, body: &bytes::Bytes) -> bytes::Bytes {
        self.model
            .as_deref()
            .and_then(|model| crate::body::rewrite_model(body, model))
            .map_or_else(|| body.clone(), bytes::Bytes::from)
    }

    /// The `Host` header of its HTTP/1.1 requests, as the HTTP client would otherwise build
    /// on every request.
    pub(crate) fn host(&self) -> Option<HeaderValue> {
        self.host.clone()
    }

    /// Sets this candidate's key (marked sensitive, so it is never printed) and the headers
    /// its protocol requires.
    pub fn authorize(&self, headers: &mut http::HeaderMap) {
        self.authorize_with(headers, 0);
    }

    /// How many keys it holds: a pool's size, else one (its key, the client's or none).
    pub fn keys(&self) -> usize {
        self.pool_credentials.len().max(1)
    }

    /// [`Candidate::authorize`] with key `key` of its pool (S4); the first key without one.
    pub fn authorize_with(&self, headers: &mut http::HeaderMap, key: usize) {
        let credential = self.pool_credentials.get(key).or(self.credential.as_ref());
        if let Some((name, value)) = credential {
            headers.insert(name.clone(), value.clone());
        }
        if self.protocol == Protocol::Anthropic && !headers.contains_key("anthropic-version") {
            headers.insert(
                "anthropic-version",
                http::HeaderValue::from_static("2023-06-01"),
            );
        }
    }
}

/// A route's switch table (D6): per terminal code another model can repair, the candidate
/// ids to switch to, in order of preference.
pub type Switch = Vec<(rebound_core::Code, Vec<String>)>;

/// A model pattern → ordered candidates.
#[derive(Clone, Debug)]
pub struct Route {
    /// Its id, reported in `x-rebound-route-id`.
    pub id: String,
    /// Model names or `*` patterns.
    pub models: Vec<String>,
    /// Candidates, in order.
    pub candidates: Vec<Arc<Candidate>>,
    /// How long a request may take (D6): its own `deadline_ms`, else the global one.
    pub deadline: Option<std::time::Duration>,
    /// Per terminal code another model can repair, the candidate ids to switch to (D6).
    pub switch: Switch,
    id_header: HeaderValue,
}

impl Route {
    /// A route; its id becomes a header value, so it may not hold control characters.
    pub(super) fn new(
        id: String,
        models: Vec<String>,
        candidates: Vec<Arc<Candidate>>,
        deadline: Option<std::time::Duration>,
    ) -> Result<Self, String> {
        let id_header = HeaderValue::from_str(&id)
            .map_err(|_| "an id may not hold control characters".to_owned())?;
        Ok(Route {
            id,
            models,
            candidates,
            deadline,
            switch: Vec::new(),
            id_header,
        })
    }

    /// This route with its `switch` table.
    pub(super) fn with_switch(mut self, switch: Switch) -> Self {
        self.switch = switch;
        self
    }

    /// The switches of this route's candidates as route positions (D6): targets this view
    /// of the route does not hold are left out.
    pub fn switches(&self) -> Arc<rebound_core::Switches> {
        let position = |id: &String| self.candidates.iter().position(|c| &c.id == id);
        Arc::new(rebound_core::Switches {
            by_code: self
                .switch
                .iter()
                .map(|(code, ids)| (code.clone(), ids.iter().filter_map(position).collect()))
                .collect(),
            windows: self.candidates.iter().map(|c| c.context_window).collect(),
        })
    }

    /// Its id, as the `x-rebound-route-id` header value.
    pub(crate) fn id_header(&self) -> HeaderValue {
        self.id_header.clone()
    }

    /// Each candidate's policy on this route (D3): every candidate but the last has a
    /// fallback after it, so it takes its policy for that place; the last keeps its own
    /// (the interactive preset unless configured). A route of one behaves as that candidate.
    pub fn policies(&self) -> Vec<Arc<Policy>> {
        let last = self.candidates.len().saturating_sub(1);
        self.candidates
            .iter()
            .enumerate()
            .map(|(position, c)| {
                Arc::clone(if position < last {
                    &c.policy_before_fallback
                } else {
                    &c.policy
                })
            })
            .collect()
    }

    /// This route with only the candidates `keep` accepts, or `None` when none is left.
    pub(crate) fn only(&self, keep: impl Fn(&Candidate) -> bool) -> Option<Route> {
        let candidates: Vec<_> = self
            .candidates
            .iter()
            .filter(|c| keep(c))
            .cloned()
            .collect();
        (!candidates.is_empty()).then(|| Route {
            candidates,
            ..self.clone()
        })
    }

    /// A route of one candidate, for a request that has one place to go (a stored response,
    /// a path passed through to the caller's provider).
    pub(crate) fn of_one(id: &'static str, candidate: Arc<Candidate>) -> Route {
        Route {
            id: id.to_owned(),
            models: Vec::new(),
            candidates: vec![candidate],
            deadline: None,
            switch: Vec::new(),
            id_header: HeaderValue::from_static(id),
        }
    }

    /// This route as `protocol`'s requests see it: only the candidates that speak it.
    fn speaking(&self, protocol: Protocol) -> Option<Route> {
        let candidates: Vec<_> = self
            .candidates
            .iter()
            .filter(|c| c.protocol == protocol)
            .cloned()
            .collect();
        (!candidates.is_empty()).then(|| Route {
            candidates,
            ..self.clone()
        })
    }
}

/// The routes, in order, with each one's per-protocol view made once.
#[derive(Clone, Debug)]
pub struct Routes {
    all: Vec<Route>,
    /// For each route: its OpenAI view, then its Anthropic view.
    views: Vec<[Option<Arc<Route>>; 2]>,
}

impl Routes {
    pub(super) fn new(all: Vec<Route>) -> Self {
        let views = all
            .iter()
            .map(|r| {
                [Protocol::OpenAi, Protocol::Anthropic]
                    .map(|protocol| r.speaking(protocol).map(Arc::new))
            })
            .collect();
        Routes { all, views }
    }

    /// The first route for `model` with a candidate on `protocol`, with only that protocol's
    /// candidates.
    pub fn find(&self, model: &str, protocol: Protocol) -> Option<Arc<Route>> {
        self.all
            .iter()
            .zip(&self.views)
            .filter(|(route, _)| route.models.iter().any(|p| matches_pattern(p, model)))
            .find_map(|(_, views)| views[slot(protocol)].clone())
    }

    /// The route `id`, with only `protocol`'s candidates.
    pub fn by_id(&self, id: &str, protocol: Protocol) -> Option<Arc<Route>> {
        self.all
            .iter()
            .position(|r| r.id == id)
            .and_then(|i| self.views[i][slot(protocol)].clone())
    }
}

impl std::ops::Deref for Routes {
    type Target = [Route];

    fn deref(&self) -> &[Route] {
        &self.all
    }
}

fn slot(protocol: Protocol) -> usize {
    match protocol {
        Protocol::OpenAi => 0,
        Protocol::Anthropic => 1,
    }
}

/// `*` matches any run of characters; everything else matches itself.
///
/// ```
/// use rebound_gateway::config::matches_pattern;
///
/// assert!(matches_pattern("claude-*", "claude-sonnet-4-5"));
/// assert!(!matches_pattern("gpt-*", "o3"));
/// ```
pub fn matches_pattern(pattern: &str, name: &str) -> bool {
    let Some((first, rest)) = pattern.split_once('*') else {
        return pattern == name;
    };
    let (middle, last) = rest.rsplit_once('*').unwrap_or(("", rest));
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in middle.split('*') {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}
