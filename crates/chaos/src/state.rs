//! What a chaos upstream knows while it runs: its configuration, its attempt counters and
//! scripts, the requests it recorded and the responses it stored; and the draw of
//! probabilistic faults.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::record::RecordedRequest;
use crate::script::{Modifiers, Step};
use crate::stored::ResponseStore;

/// The request header that names the attempt counter and script a request belongs to.
pub const KEY_HEADER: &str = "x-chaos-key";

/// How the server behaves for keys without a script.
#[derive(Clone, Debug, Default)]
pub struct ChaosConfig {
    /// Scripts by key, set at start.
    pub scripts: HashMap<String, Vec<Step>>,
    /// Probabilistic faults for keys without a script: the seed of the draw.
    pub seed: Option<u64>,
    /// Probabilistic faults: the share of requests that fail, in [0, 1].
    pub fault_rate: f64,
    /// Pause between streamed content chunks.
    pub chunk_delay: Duration,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) attempts: HashMap<String, u64>,
    pub(crate) scripts: HashMap<String, Vec<Step>>,
    /// The outage a `down:MS` step began, by key.
    pub(crate) outages: HashMap<String, Outage>,
}

/// A key's outage: until when its requests are reset, and how many requests outages have
/// taken from its script's count so far.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outage {
    until: tokio::time::Instant,
    absorbed: u64,
}

impl Counters {
    /// Forgets a key's attempts and outage: its script starts over.
    pub(crate) fn restart(&mut self, key: &str) {
        self.attempts.remove(key);
        self.outages.remove(key);
    }
}

pub(crate) struct State {
    pub(crate) config: ChaosConfig,
    pub(crate) counters: Mutex<Counters>,
    /// TCP connections accepted.
    pub(crate) connections: std::sync::atomic::AtomicU64,
    /// Every request received, control endpoints aside.
    pub(crate) requests: Mutex<Vec<RecordedRequest>>,
    /// Responses the Responses API created.
    pub(crate) responses: ResponseStore,
    /// What replies hold when their step names no modifiers.
    pub(crate) reply: Mutex<Modifiers>,
}

impl State {
    /// Counts a request of `key` and returns its step and its attempt number (from 1).
    pub(crate) fn next_step(&self, key: &str) -> (Step, u64) {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        let attempt = {
            let n = counters.attempts.entry(key.to_owned()).or_insert(0);
            *n += 1;
            *n
        };
        if let Some(script) = counters.scripts.get(key) {
            let now = tokio::time::Instant::now();
            let outage = counters.outages.get(key).copied();
            if let Some(outage) = outage.filter(|o| now < o.until) {
                counters.outages.insert(
                    key.to_owned(),
                    Outage {
                        absorbed: outage.absorbed + 1,
                        ..outage
                    },
                );
                return (Step::Reset, attempt);
            }
            let absorbed = outage.map_or(0, |o| o.absorbed);
            let index = usize::try_from(attempt - 1 - absorbed).unwrap_or(usize::MAX);
            let step = script.get(index).cloned().unwrap_or(Step::Ok);
            if let Step::Down(length) = step {
                counters.outages.insert(
                    key.to_owned(),
                    Outage {
                        until: now + length,
                        absorbed,
                    },
                );
                return (Step::Reset, attempt);
            }
            return (step, attempt);
        }
        let step = match self.config.seed {
            Some(seed) => random_step(seed, key, attempt, self.config.fault_rate),
            None => Step::Ok,
        };
        (step, attempt)
    }

    pub(crate) fn record(&self, request: RecordedRequest) {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request);
    }
}

/// SplitMix64: a deterministic draw per (seed, key, attempt), whatever the arrival order.
fn draw(seed: u64, key: &str, attempt: u64) -> u64 {
    let mut x = seed ^ attempt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in key.bytes() {
        x = (x ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn random_step(seed: u64, key: &str, attempt: u64, rate: f64) -> Step {
    let x = draw(seed, key, attempt);
    let unit = (x >> 11) as f64 / (1u64 << 53) as f64;
    if unit >= rate.clamp(0.0, 1.0) {
        return Step::Ok;
    }
    let status = |status: u16, headers: Vec<(String, String)>| Step::Status {
        status,
        context: false,
        headers,
    };
    match (x >> 3) % 9 {
        0 => status(
            429,
            vec![(
                "retry-after-ms".into(),
                format!("{}", 100 + (x >> 20) % 400),
            )],
        ),
        1 => status(429, vec![]),
        2 => status(500, vec![]),
        3 => status(502, vec![]),
        4 => status(503, vec![("retry-after".into(), "1".into())]),
        5 => Step::Reset,
        6 => Step::CutAfter(1 + ((x >> 24) % 3) as usize),
        7 => Step::ErrorAfter(((x >> 24) % 2) as usize, "overloaded_error".into()),
        _ => Step::MalformedAfter(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(script: &str) -> State {
        let mut scripts = HashMap::new();
        scripts.insert(
            "k".to_owned(),
            crate::script::parse_script(script).expect("a script"),
        );
        State {
            counters: Mutex::new(Counters {
                scripts,
                ..Counters::default()
            }),
            config: ChaosConfig::default(),
            connections: std::sync::atomic::AtomicU64::new(0),
            requests: Mutex::new(Vec::new()),
            responses: ResponseStore::default(),
            reply: Mutex::new(Modifiers::default()),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_resets_every_request_in_it_then_the_script_goes_on() {
        let state = state("down:5000, 502");
        for attempt in 1..=3 {
            assert_eq!(state.next_step("k"), (Step::Reset, attempt));
            tokio::time::advance(Duration::from_secs(2)).await;
        }
        // 6 s after the outage began: the step after it, then the script's end.
        let (step, attempt) = state.next_step("k");
        assert!(matches!(step, Step::Status { status: 502, .. }), "{step}");
        assert_eq!(attempt, 4);
        assert_eq!(state.next_step("k"), (Step::Ok, 5));
    }
}
