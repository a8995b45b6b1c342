//! `/metrics` (G6): requests by protocol and outcome, every client request by the surface
//! that answered it (passed-through and unserved paths included), attempts by candidate, retries,
//! exhaustions and fallbacks by class and code, recoveries by class, and a histogram of the
//! time waited before retries. The counters live in a `prometheus-client` registry and are
//! rendered in its OpenMetrics text format.
//!
//! Every request counts at least an attempt and its end, so the counters are found without
//! allocating: a label set seen before is a read lock and a comparison of a few short
//! strings away from its counter.

use std::fmt::Write as _;
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// The content type of [`Metrics::render`]'s text: OpenMetrics 1.0, which Prometheus scrapes
/// as it does its own text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the wait histogram, in seconds.
const WAIT_BUCKETS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 60.0];

/// A label value, escaped as the text format requires: prometheus-client writes values as it
/// is given them, and a candidate id or a user rule's code may hold a quote.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct LabelValue(Box<str>);

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// `N` labels, named in the order they are rendered.
type Labels<const N: usize> = [(&'static str, LabelValue); N];

/// A counter family whose counters are found by borrowed label values.
///
/// [`Family::get_or_create`] takes an owned label set, which would be `N` allocations on
/// every request. The counters made so far are kept beside the family (a counter is a shared
/// handle: both see the same count), and found under a read lock by comparing values; only a
/// label set never seen before takes the write lock and allocates. Label sets are few (codes,
/// classes, candidates, outcomes), so a scan beats hashing.
#[derive(Debug)]
struct Counters<const N: usize> {
    names: [&'static str; N],
    family: Family<Labels<N>, Counter>,
    known: RwLock<Vec<(Labels<N>, Counter)>>,
}

impl<const N: usize> Counters<N> {
    fn new(names: [&'static str; N]) -> Self {
        Counters {
            names,
            family: Family::default(),
            known: RwLock::new(Vec::new()),
        }
    }

    fn find<'a>(known: &'a [(Labels<N>, Counter)], values: &[&str; N]) -> Option<&'a Counter> {
        known
            .iter()
            .find(|(labels, _)| {
                labels
                    .iter()
                    .zip(values)
                    .all(|((_, have), want)| &*have.0 == *want)
            })
            .map(|(_, counter)| counter)
    }

    /// Counts one more for `values` (in the order of the names).
    fn inc(&self, values: [&str; N]) {
        {
            let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(counter) = Self::find(&known, &values) {
                counter.inc();
                return;
            }
        }
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(counter) = Self::find(&known, &values) {
            counter.inc();
            return;
        }
        let labels: Labels<N> =
            std::array::from_fn(|i| (self.names[i], LabelValue(values[i].into())));
        let counter = self.family.get_or_create(&labels).clone();
        counter.inc();
        known.push((labels, counter));
    }
}

/// The gateway's counters. Labels are protocols, outcomes, candidate ids, classes and codes:
/// never request data, so no key can reach them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Counters<2>,
    attempts: Counters<1>,
    retries: Counters<2>,
    recoveries: Counters<1>,
    exhaustions: Counters<2>,
    fallbacks: Counters<2>,
    surfaces: Counters<2>,
    rests: Counters<2>,
    retold: Counters<2>,
    health: Family<Labels<2>, Gauge>,
    wait: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let requests = Counters::new(["protocol", "outcome"]);
        let attempts = Counters::new(["candidate"]);
        let retries = Counters::new(["class", "code"]);
        let recoveries = Counters::new(["class"]);
        let exhaustions = Counters::new(["class", "code"]);
        let fallbacks = Counters::new(["class", "code"]);
        let surfaces = Counters::new(["surface", "status"]);
        let rests = Counters::new(["candidate", "outcome"]);
        let retold = Counters::new(["candidate", "form"]);
        let health = Family::<Labels<2>, Gauge>::default();
        let wait = Histogram::new(WAIT_BUCKETS);
        let mut registry = Registry::default();
        // Counters are registered without `_total`: the format adds it to their samples.
        registry.register(
            "rebound_requests",
            "Client requests by protocol and outcome (ok, recovered, error, client_gone).",
            requests.family.clone(),
        );
        registry.register(
            "rebound_attempts",
            "Upstream attempts by candidate.",
            attempts.family.clone(),
        );
        registry.register(
            "rebound_retries",
            "Retries by class and code.",
            retries.family.clone(),
        );
        registry.register(
            "rebound_recoveries",
            "Requests that succeeded after failures, by the class of the last failure.",
            recoveries.family.clone(),
        );
        registry.register(
            "rebound_exhaustions",
            "Requests whose recovery stopped, by class and code.",
            exhaustions.family.clone(),
        );
        registry.register(
            "rebound_fallbacks",
            "Fallbacks to the next candidate, by class and code.",
            fallbacks.family.clone(),
        );
        registry.register(
            "rebound_retold",
            "Answers that came in the other form than asked, told in the form asked, by \
             candidate and the form told (stream: a whole answer told as a stream; whole: a \
             stream gathered into its whole answer).",
            retold.family.clone(),
        );
        registry.register(
            "rebound_http_requests",
            "Client requests by the surface that answered (chat_completions, responses, \
             messages, token_count, stored_response, models, passthrough, unserved, rebound) \
             and status class (2xx, 4xx …).",
            surfaces.family.clone(),
        );
        registry.register(
            "rebound_health_rests",
            "Requests that found a candidate resting in the shared health ledger, by candidate \
             and what followed (skipped, waited, stopped): no attempt was sent for them.",
            rests.family.clone(),
        );
        registry.register(
            "rebound_candidate_health",
            "1 for each candidate's current state in the shared health ledger (closed, \
             cooling, open, probing), 0 for the others.",
            health.clone(),
        );
        registry.register_with_unit(
            "rebound_wait",
            "Time waited before retries.",
            Unit::Seconds,
            wait.clone(),
        );
        Metrics {
            registry,
            requests,
            attempts,
            retries,
            recoveries,
            exhaustions,
            fallbacks,
            retold,
            surfaces,
            rests,
            health,
            wait,
        }
    }
}

impl Metrics {
    /// A request ended (`protocol`: openai, anthropic; `outcome`: ok, recovered, error,
    /// client_gone).
    pub fn request(&self, protocol: &str, outcome: &str) {
        self.requests.inc([protocol, outcome]);
    }

    /// An attempt was sent to `candidate`.
    pub fn attempt(&self, candidate: &str) {
        self.attempts.inc([candidate]);
    }

    /// A retry of `class`/`code`.
    pub fn retry(&self, class: &str, code: &str) {
        self.retries.inc([class, code]);
    }

    /// A wait (a retry's or a rest's) that lasted `waited`.
    pub fn waited(&self, waited: Duration) {
        self.wait.observe(waited.as_secs_f64());
    }

    /// A request succeeded after failures of `class`.
    pub fn recovery(&self, class: &str) {
        self.recoveries.inc([class]);
    }

    /// Recovery stopped on `class`/`code`.
    pub fn exhaustion(&self, class: &str, code: &str) {
        self.exhaustions.inc([class, code]);
    }

    /// A fallback to the next candidate after `class`/`code`.
    pub fn fallback(&self, class: &str, code: &str) {
        self.fallbacks.inc([class, code]);
    }

    /// `candidate` answered in the other form than asked, and its answer was told as `form`
    /// (stream, whole).
    pub fn retold(&self, candidate: &str, form: &str) {
        self.retold.inc([candidate, form]);
    }

    /// A request found `candidate` resting, and `outcome` followed (skipped, waited,
    /// stopped).
    pub fn rest(&self, candidate: &str, outcome: &str) {
        self.rests.inc([candidate, outcome]);
    }

    /// `candidate` is in `state` now (closed, cooling, open, probing), and in no other.
    pub fn health_state(&self, candidate: &str, state: &str) {
        for other in rebound_core::HealthState::ALL {
            let labels: Labels<2> = [
                ("candidate", LabelValue(candidate.into())),
                ("state", LabelValue(other.as_str().into())),
            ];
            let value = i64::from(other.as_str() == state);
            self.health.get_or_create(&labels).set(value);
        }
    }

    /// A client request was answered by `surface` with a status of class `status` (`2xx` …).
    pub fn answered(&self, surface: &str, status: &str) {
        self.surfaces.inc([surface, status]);
    }

    /// The OpenMetrics text exposition ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_a_cumulative_histogram() {
        let m = Metrics::default();
        m.attempt("a");
        m.attempt("a");
        m.request("openai", "recovered");
        m.retry("transient", "bad_gateway");
        m.waited(Duration::from_millis(1500));
        m.retry("rate_limit", "rate_limited");
        m.waited(Duration::from_millis(50));
        m.exhaustion("transient", "bad_gateway");
        m.fallback("rate_limit", "rate_limited");
        m.recovery("transient");
        m.rest("a", "skipped");
        m.health_state("a", "cooling");
        let text = m.render();
        for line in [
            "rebound_requests_total{protocol=\"openai\",outcome=\"recovered\"} 1",
            "rebound_attempts_total{candidate=\"a\"} 2",
            "rebound_retries_total{class=\"transient\",code=\"bad_gateway\"} 1",
            "rebound_retries_total{class=\"rate_limit\",code=\"rate_limited\"} 1",
            "rebound_exhaustions_total{class=\"transient\",code=\"bad_gateway\"} 1",
            "rebound_fallbacks_total{class=\"rate_limit\",code=\"rate_limited\"} 1",
            "rebound_recoveries_total{class=\"transient\"} 1",
            "rebound_health_rests_total{candidate=\"a\",outcome=\"skipped\"} 1",
            "rebound_candidate_health{candidate=\"a\",state=\"cooling\"} 1",
            "rebound_candidate_health{candidate=\"a\",state=\"closed\"} 0",
            "# TYPE rebound_wait_seconds histogram",
            "rebound_wait_seconds_bucket{le=\"0.1\"} 1",
            "rebound_wait_seconds_bucket{le=\"2.0\"} 2",
            "rebound_wait_seconds_bucket{le=\"+Inf\"} 2",
            "rebound_wait_seconds_sum 1.55",
            "rebound_wait_seconds_count 2",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::default();
        m.attempt("a\"b\\c\nd");
        let text = m.render();
        assert!(
            text.contains(r#"rebound_attempts_total{candidate="a\"b\\c\nd"} 1"#),
            "{text}"
        );
    }
}
