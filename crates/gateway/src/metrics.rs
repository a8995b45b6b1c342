//! `/metrics` in Prometheus text format (G6): attempts, retries, recoveries, exhaustions and
//! fallbacks by class and code, and a histogram of wait time.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Upper bounds of the wait histogram, in seconds.
const WAIT_BUCKETS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 60.0];

/// Counts one more for `key`, allocating only for a key never seen before.
fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
    match map.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            map.insert(key.to_owned(), 1);
        }
    }
}

/// [`bump`] for a pair of labels (a handful of entries: a scan is cheaper than two Strings).
fn bump_pair(map: &mut BTreeMap<(String, String), u64>, a: &str, b: &str) {
    match map.iter_mut().find(|((x, y), _)| x == a && y == b) {
        Some((_, n)) => *n += 1,
        None => {
            map.insert((a.to_owned(), b.to_owned()), 1);
        }
    }
}

#[derive(Default)]
struct Inner {
    requests: BTreeMap<(String, String), u64>,
    attempts: BTreeMap<String, u64>,
    retries: BTreeMap<(String, String), u64>,
    recoveries: BTreeMap<String, u64>,
    exhaustions: BTreeMap<(String, String), u64>,
    fallbacks: BTreeMap<(String, String), u64>,
    wait_buckets: [u64; WAIT_BUCKETS.len()],
    wait_count: u64,
    wait_sum: f64,
}

/// The gateway's counters. Labels are codes, classes, candidate ids and outcomes: never
/// request data, so no key can reach them.
#[derive(Default)]
pub struct Metrics(Mutex<Inner>);

impl Metrics {
    fn with(&self, f: impl FnOnce(&mut Inner)) {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// A request ended (`protocol`, `outcome`: ok, recovered, error, aborted).
    pub fn request(&self, protocol: &str, outcome: &str) {
        self.with(|m| bump_pair(&mut m.requests, protocol, outcome));
    }

    /// An attempt was sent to `candidate`.
    pub fn attempt(&self, candidate: &str) {
        self.with(|m| bump(&mut m.attempts, candidate));
    }

    /// A retry of `class`/`code` after `wait`.
    pub fn retry(&self, class: &str, code: &str, wait: Duration) {
        self.with(|m| {
            bump_pair(&mut m.retries, class, code);
            let secs = wait.as_secs_f64();
            for (i, bound) in WAIT_BUCKETS.iter().enumerate() {
                if secs <= *bound {
                    m.wait_buckets[i] += 1;
                }
            }
            m.wait_count += 1;
            m.wait_sum += secs;
        });
    }

    /// A request succeeded after failures of `class`.
    pub fn recovery(&self, class: &str) {
        self.with(|m| bump(&mut m.recoveries, class));
    }

    /// Recovery stopped on `class`/`code`.
    pub fn exhaustion(&self, class: &str, code: &str) {
        self.with(|m| bump_pair(&mut m.exhaustions, class, code));
    }

    /// A fallback to the next candidate after `class`/`code`.
    pub fn fallback(&self, class: &str, code: &str) {
        self.with(|m| bump_pair(&mut m.fallbacks, class, code));
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        let esc = |v: &str| {
            v.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n")
        };
        let mut family = |name: &str, help: &str, kind: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        family(
            "rebound_requests_total",
            "Client requests by protocol and outcome.",
            "counter",
        );
        for ((p, o), n) in &m.requests {
            let _ = writeln!(
                out,
                "rebound_requests_total{{protocol=\"{}\",outcome=\"{}\"}} {n}",
                esc(p),
                esc(o)
            );
        }
        let mut family = |name: &str, help: &str, kind: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        family(
            "rebound_attempts_total",
            "Upstream attempts by candidate.",
            "counter",
        );
        for (c, n) in &m.attempts {
            let _ = writeln!(
                out,
                "rebound_attempts_total{{candidate=\"{}\"}} {n}",
                esc(c)
            );
        }
        for (name, help, map) in [
            (
                "rebound_retries_total",
                "Retries by class and code.",
                &m.retries,
            ),
            (
                "rebound_exhaustions_total",
                "Requests whose recovery stopped, by class and code.",
                &m.exhaustions,
            ),
            (
                "rebound_fallbacks_total",
                "Fallbacks to the next candidate, by class and code.",
                &m.fallbacks,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for ((class, code), n) in map {
                let _ = writeln!(
                    out,
                    "{name}{{class=\"{}\",code=\"{}\"}} {n}",
                    esc(class),
                    esc(code)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP rebound_recoveries_total Requests that succeeded after failures, by the class of the last failure.\n# TYPE rebound_recoveries_total counter"
        );
        for (class, n) in &m.recoveries {
            let _ = writeln!(
                out,
                "rebound_recoveries_total{{class=\"{}\"}} {n}",
                esc(class)
            );
        }
        let _ = writeln!(
            out,
            "# HELP rebound_wait_seconds Time waited before retries.\n# TYPE rebound_wait_seconds histogram"
        );
        for (bound, n) in WAIT_BUCKETS.iter().zip(m.wait_buckets) {
            let _ = writeln!(out, "rebound_wait_seconds_bucket{{le=\"{bound}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "rebound_wait_seconds_bucket{{le=\"+Inf\"}} {}",
            m.wait_count
        );
        let _ = writeln!(out, "rebound_wait_seconds_sum {}", m.wait_sum);
        let _ = writeln!(out, "rebound_wait_seconds_count {}", m.wait_count);
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
        m.retry("transient", "bad_gateway", Duration::from_millis(1500));
        m.retry("rate_limit", "rate_limited", Duration::from_millis(50));
        m.exhaustion("transient", "bad_gateway");
        let text = m.render();
        assert!(
            text.contains("rebound_attempts_total{candidate=\"a\"} 1"),
            "{text}"
        );
        assert!(text.contains("rebound_retries_total{class=\"transient\",code=\"bad_gateway\"} 1"));
        assert!(text.contains("rebound_wait_seconds_bucket{le=\"0.1\"} 1"));
        assert!(text.contains("rebound_wait_seconds_bucket{le=\"2\"} 2"));
        assert!(text.contains("rebound_wait_seconds_bucket{le=\"+Inf\"} 2"));
        assert!(
            text.contains("rebound_exhaustions_total{class=\"transient\",code=\"bad_gateway\"} 1")
        );
    }
}
