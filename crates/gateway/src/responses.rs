//! Where a stored response of the Responses API lives (G7, G8).
//!
//! A response is state at the provider that made it: `previous_response_id` continues it,
//! `GET /v1/responses/{id}`, `…/cancel` and `…/input_items` read or stop it, and a
//! `background: true` response is only ever read that way. Another provider (another base
//! URL) does not know the id and would answer 404, or, worse, start a conversation without its
//! history. So rebound remembers which candidate produced each response id it relayed (the
//! `id` of a whole answer, the `response.id` of a stream's first events), in a bounded memory
//! ([`HOMES`] ids, the oldest forgotten first); an id it does not know (made before a restart,
//! or forgotten) is taken to live at the caller's OpenAI provider
//! ([`crate::config::Config::provider`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use rebound_runtime::Protocol;
use serde::Deserialize;

use crate::config::{Candidate, Config, Route};

/// How many response ids rebound remembers. At about 100 bytes each, a few MiB at most.
pub const HOMES: usize = 32_768;

/// The route id reported for a request about a stored response.
pub(crate) const STORED_ROUTE: &str = "responses";

/// Response ids and the candidate that made each, the oldest forgotten first.
#[derive(Default)]
pub(crate) struct Homes {
    inner: Mutex<Known>,
}

#[derive(Default)]
struct Known {
    homes: HashMap<Box<str>, Arc<Candidate>>,
    order: VecDeque<Box<str>>,
}

impl Homes {
    /// `candidate` made response `id`.
    pub(crate) fn remember(&self, id: &str, candidate: &Arc<Candidate>) {
        let mut known = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if known
            .homes
            .insert(id.into(), Arc::clone(candidate))
            .is_none()
        {
            known.order.push_back(id.into());
        }
        while known.order.len() > HOMES {
            if let Some(oldest) = known.order.pop_front() {
                known.homes.remove(&oldest);
            }
        }
    }

    /// The candidate that made response `id`, if rebound remembers it.
    pub(crate) fn home(&self, id: &str) -> Option<Arc<Candidate>> {
        let known = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        known.homes.get(id).cloned()
    }
}

/// State at one provider that a Responses request continues.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Continued {
    /// A stored response (`previous_response_id`).
    Response(String),
    /// A conversation (`conversation`), made through the caller's OpenAI provider.
    Conversation,
}

/// What a Responses request body continues, if anything.
pub(crate) fn continued(body: &[u8]) -> Option<Continued> {
    #[derive(Deserialize)]
    struct Continues {
        #[serde(default)]
        previous_response_id: Option<String>,
        #[serde(default)]
        conversation: Option<serde::de::IgnoredAny>,
    }
    // Most requests continue nothing: the whole body is parsed only when a name appears in it.
    let names = |needle: &[u8]| body.windows(needle.len()).any(|w| w == needle);
    if !names(b"previous_response_id") && !names(b"\"conversation\"") {
        return None;
    }
    let continues = serde_json::from_slice::<Continues>(body).ok()?;
    match (continues.previous_response_id, continues.conversation) {
        (Some(id), _) => Some(Continued::Response(id)),
        (None, Some(_)) => Some(Continued::Conversation),
        (None, None) => None,
    }
}

/// `route` for a request that continues state at one provider: only the candidates at the base
/// URL that holds it, so a retry stays where the state is and never falls back to a provider
/// that does not know it. A response is held by the candidate that made it, else (unknown) by
/// the route's first; a conversation by the caller's OpenAI provider, which made it.
pub(crate) fn pinned(
    homes: &Homes,
    config: &Config,
    route: &Arc<Route>,
    continued: &Continued,
) -> Arc<Route> {
    let home = match continued {
        Continued::Response(id) => homes.home(id),
        Continued::Conversation => config.provider(Protocol::OpenAi).cloned(),
    };
    let base = match (&home, route.candidates.first()) {
        (Some(home), _) => home.base_url.as_str(),
        (None, Some(first)) => first.base_url.as_str(),
        (None, None) => return Arc::clone(route),
    };
    match (route.only(|c| c.base_url == base), home) {
        (Some(pinned), _) => Arc::new(pinned),
        (None, Some(home)) => Arc::new(Route::of_one(STORED_ROUTE, home)),
        (None, None) => Arc::clone(route),
    }
}

/// The response id a Responses request's client is sent: the top-level `id` of a whole
/// answer, or, for a stream, the head its relay already read from `response.created` (or
/// `response.queued`) once the held-back events go out.
#[derive(Debug, Default)]
pub(crate) struct IdWatch {
    found: Option<String>,
    done: bool,
}

impl IdWatch {
    /// A whole answer.
    pub(crate) fn answer(&mut self, body: &[u8]) {
        #[derive(Deserialize)]
        struct Answer {
            id: Option<String>,
        }
        if self.done {
            return;
        }
        self.done = true;
        self.found = serde_json::from_slice::<Answer>(body)
            .ok()
            .and_then(|a| a.id);
    }

    /// A stream whose events naming response `id` reached the client.
    pub(crate) fn streamed(&mut self, id: &str) {
        if self.done || id.is_empty() {
            return;
        }
        self.done = true;
        self.found = Some(id.to_owned());
    }

    /// The id found, once.
    pub(crate) fn take(&mut self) -> Option<String> {
        self.found.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_id_seen_is_kept_once() {
        let mut watch = IdWatch::default();
        watch.streamed("");
        assert_eq!(watch.take(), None);
        watch.streamed("resp_42");
        assert_eq!(watch.take().as_deref(), Some("resp_42"));
        watch.streamed("resp_other");
        assert_eq!(watch.take(), None);

        let mut whole = IdWatch::default();
        whole.answer(br#"{"id":"resp_7","object":"response","output":[]}"#);
        assert_eq!(whole.take().as_deref(), Some("resp_7"));
    }

    #[test]
    fn only_a_body_naming_a_response_or_a_conversation_continues_one() {
        assert_eq!(continued(br#"{"model":"m","input":"hi"}"#), None);
        assert_eq!(
            continued(br#"{"model":"m","previous_response_id":"resp_1"}"#),
            Some(Continued::Response("resp_1".into()))
        );
        assert_eq!(
            continued(br#"{"model":"m","input":"previous_response_id conversation"}"#),
            None
        );
        assert_eq!(
            continued(br#"{"model":"m","previous_response_id":null,"conversation":null}"#),
            None
        );
        for conversation in [r#""conv_1""#, r#"{"id":"conv_1"}"#] {
            let body = format!(r#"{{"model":"m","conversation":{conversation}}}"#);
            assert_eq!(continued(body.as_bytes()), Some(Continued::Conversation));
        }
    }

    #[test]
    fn a_continued_response_stays_at_the_base_url_that_holds_it() {
        let text = r#"
[[candidate]]
id = "a1"
protocol = "openai"
base_url = "https://a.example/v1"

[[candidate]]
id = "b"
protocol = "openai"
base_url = "https://b.example/v1"

[[candidate]]
id = "a2"
protocol = "openai"
base_url = "https://a.example/v1"
model = "other"

[[route]]
id = "main"
models = ["*"]
candidates = ["a1", "b", "a2"]
"#;
        let config = crate::config::load(
            "test",
            text,
            &crate::config::Overrides::default(),
            &crate::config::ProcessEnv,
        )
        .unwrap();
        let homes = Homes::default();
        let route = config.route("m", Protocol::OpenAi).unwrap();
        let ids = |route: &Route| {
            route
                .candidates
                .iter()
                .map(|c| c.id.clone())
                .collect::<Vec<_>>()
        };

        // Unknown: the route's first candidate's base URL.
        assert_eq!(
            ids(&pinned(
                &homes,
                &config,
                &route,
                &Continued::Response("resp_unknown".into())
            )),
            ["a1", "a2"]
        );
        // Made by `b`: only `b`, never a fallback to the other provider.
        homes.remember("resp_b", &route.candidates[1]);
        assert_eq!(
            ids(&pinned(
                &homes,
                &config,
                &route,
                &Continued::Response("resp_b".into())
            )),
            ["b"]
        );
        // Made by a candidate this route no longer has: that candidate alone.
        let elsewhere = config.route("m", Protocol::OpenAi).unwrap();
        let other = Route::of_one("x", Arc::clone(&elsewhere.candidates[1]));
        let only_a = Arc::new(
            route
                .only(|c| c.base_url.starts_with("https://a."))
                .unwrap(),
        );
        homes.remember("resp_b2", &other.candidates[0]);
        assert_eq!(
            ids(&pinned(
                &homes,
                &config,
                &only_a,
                &Continued::Response("resp_b2".into())
            )),
            ["b"]
        );
    }

    #[test]
    fn the_memory_forgets_its_oldest_ids_first() {
        let config = crate::config::load(
            "test",
            crate::config::DEFAULT_CONFIG,
            &crate::config::Overrides::default(),
            &crate::config::ProcessEnv,
        )
        .unwrap();
        let candidate = Arc::clone(&config.routes[0].candidates[0]);
        let homes = Homes::default();
        for i in 0..=HOMES {
            homes.remember(&format!("resp_{i}"), &candidate);
        }
        assert!(homes.home("resp_0").is_none());
        assert!(homes.home("resp_1").is_some());
        assert!(homes.home(&format!("resp_{HOMES}")).is_some());
        assert_eq!(homes.inner.lock().unwrap().homes.len(), HOMES);
    }
}
