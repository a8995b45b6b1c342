//! The shared health ledger under load (#18, S1–S3): 1,000 requests while the primary of a
//! two-candidate route is down for 10 s, through a gateway with the ledger and through one
//! with `[health] enabled = false`, measured in one run; then the same load with no failure
//! through both, to show what the ledger's fast path costs.
//!
//! Two `rebound chaos` upstreams (primary, fallback) and the two gateways each run on a thread
//! of their own, on a current-thread runtime as `rebound serve` and `rebound chaos` do, on real
//! loopback sockets and the wall clock; the load comes from this thread. The outage is chaos's
//! `down:MS` step: every request to the primary within 10 s of the first (`outage_ms=N`) is
//! reset before any response byte, then it answers again. The route and its policies are the defaults (a
//! primary with a fallback after it: at most two retries per class, then the fallback).
//!
//! The load: `waves` waves (10 by default) of `per_wave` requests (100) sent at once, a wave
//! every `spacing_ms` (1,000): the 1,000 requests cover the outage. Every other request
//! streams. After the outage one request every 100 ms finds when the primary serves again.
//! With no failure, the same waves 100 ms apart, five rounds through each gateway taking turns.
//! Probes are counted from the ledger's log events (`rebound::health`, `to=probing`); no other
//! event is formatted or written.
//!
//! Run: `cargo bench -p rebound-gateway --bench outage`; after `--`, `waves=N`,
//! `per_wave=N`, `spacing_ms=N` and `outage_ms=N` change the load (`waves=1 per_wave=1000`:
//! all at once).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    missing_docs,
    reason = "a benchmark program that prints"
)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use rebound_chaos::{Chaos, ChaosConfig, parse_script};
use rebound_core::Catalogue;
use rebound_gateway::{Gateway, Overrides, Server, load};
use rebound_runtime::{HttpClient, Timeouts};
use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

/// How long the primary is down, unless `outage_ms=N` says otherwise.
const OUTAGE_MS: u64 = 10_000;

/// How long after the outage the primary is watched for serving again: the longest circuit
/// window (8 s) and a second.
const WATCH: Duration = Duration::from_secs(9);

/// Counts the ledger's moves to `probing`: one per probe (S3).
struct Probes(Arc<AtomicU64>);

impl<S: Subscriber> Layer<S> for Probes {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if metadata.target() == rebound_runtime::health::LOG_TARGET {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        struct ToProbing(bool);
        impl Visit for ToProbing {
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                if field.name() == "to" && format!("{value:?}") == "probing" {
                    self.0 = true;
                }
            }
        }
        let mut to = ToProbing(false);
        event.record(&mut to);
        if to.0 {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn arg(name: &str, default: u64) -> u64 {
    std::env::args()
        .find_map(|a| {
            a.strip_prefix(&format!("{name}="))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(default)
}

/// Runs what `start` makes on a thread of its own, on a current-thread runtime that lives as
/// long as the process, and hands back its handle.
fn on_its_own_thread<T, F, Fut>(name: &str, start: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
{
    let (handle, received) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                handle.send(start().await).unwrap();
                std::future::pending::<()>().await;
            });
        })
        .unwrap();
    received.recv().unwrap()
}

fn upstream(name: &str) -> Chaos {
    on_its_own_thread(name, || async {
        Chaos::start("127.0.0.1:0".parse().unwrap(), ChaosConfig::default())
            .await
            .unwrap()
    })
}

/// A gateway with the primary then the fallback on one route, every policy its default.
fn gateway(name: &str, primary: &Chaos, fallback: &Chaos, ledger: bool) -> Server {
    let mut text = String::new();
    for (id, upstream) in [("primary", primary), ("fallback", fallback)] {
        text.push_str(&format!(
            "[[candidate]]\nid = \"{id}\"\nprotocol = \"openai\"\nbase_url = \"{}\"\n\n",
            upstream.openai_base_url()
        ));
    }
    text.push_str(
        "[[route]]\nid = \"main\"\nmodels = [\"*\"]\ncandidates = [\"primary\", \"fallback\"]\n",
    );
    if !ledger {
        text.push_str("\n[health]\nenabled = false\n");
    }
    on_its_own_thread(name, move || async move {
        let no_env: [(&str, &str); 0] = [];
        let config = load("bench.toml", &text, &Overrides::default(), &no_env).unwrap();
        let gateway = Gateway::new(
            config,
            HttpClient::new(Timeouts::default()).unwrap(),
            Arc::new(Catalogue::shipped().unwrap()),
        );
        Server::start(gateway, Some("127.0.0.1:0".parse().unwrap()))
            .await
            .unwrap()
    })
}

/// One request's end.
struct Outcome {
    /// From sending to the last byte of the answer (whole or streamed).
    latency: Duration,
    stream: bool,
    /// The wave it came in, from 0.
    wave: u64,
    /// `x-rebound-candidate` of a 200 with its whole body, or `None`: the request failed.
    served_by: Option<String>,
    /// The answer named a candidate passed over (`x-rebound-skipped`).
    skipped: bool,
}

async fn one(client: &HttpClient, addr: SocketAddr, i: u64, stream: bool) -> Outcome {
    let started = Instant::now();
    let body = format!(
        r#"{{"model":"gpt-bench","stream":{stream},"messages":[{{"role":"user","content":"request {i}"}}]}}"#
    );
    let request = Request::post(format!("http://{addr}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(Bytes::from(body))
        .unwrap();
    let mut outcome = Outcome {
        latency: Duration::ZERO,
        stream,
        wave: 0,
        served_by: None,
        skipped: false,
    };
    if let Ok(response) = client.send(request).await {
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let candidate = header("x-rebound-candidate");
        outcome.skipped = header("x-rebound-skipped").is_some();
        let ok = response.status() == 200;
        let whole = response.into_body().collect().await.is_ok();
        if ok && whole {
            outcome.served_by = candidate;
        }
    }
    outcome.latency = started.elapsed();
    outcome
}

/// The load: waves of concurrent requests, every other one streaming.
#[derive(Clone, Copy)]
struct Load {
    waves: u64,
    per_wave: u64,
    spacing: Duration,
}

impl Load {
    fn requests(self) -> u64 {
        self.waves * self.per_wave
    }

    /// Sends every wave on its schedule from `start`; the requests' ends, in no order.
    fn send(
        self,
        client: &Arc<HttpClient>,
        addr: SocketAddr,
        start: tokio::time::Instant,
    ) -> Vec<tokio::task::JoinHandle<Outcome>> {
        let mut tasks = Vec::new();
        for wave in 0..self.waves {
            let at = start + self.spacing * u32::try_from(wave).unwrap();
            for n in 0..self.per_wave {
                let client = Arc::clone(client);
                let i = wave * self.per_wave + n;
                tasks.push(tokio::spawn(async move {
                    tokio::time::sleep_until(at).await;
                    let outcome = one(&client, addr, i, i % 2 == 1).await;
                    Outcome { wave, ..outcome }
                }));
            }
        }
        tasks
    }
}

/// What one run measured.
#[derive(Default)]
struct Run {
    outcomes: Vec<Outcome>,
    /// Attempts on the primary while it was down, and after, while the load lasted.
    during: u64,
    after: u64,
    probes: u64,
    /// From the outage's end to the first answer the primary served, if within [`WATCH`].
    back: Option<Duration>,
}

impl Run {
    fn served_by(&self, candidate: &str) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.served_by.as_deref() == Some(candidate))
            .count()
    }

    fn failed(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.served_by.is_none())
            .count()
    }

    fn skipped(&self) -> usize {
        self.outcomes.iter().filter(|o| o.skipped).count()
    }

    /// p50 and p99 of the answers that `kind` selects, in milliseconds; NaN when there are none.
    fn latency(&self, kind: impl Fn(&Outcome) -> bool) -> [f64; 2] {
        let mut sorted: Vec<Duration> = self
            .outcomes
            .iter()
            .filter(|o| kind(o))
            .map(|o| o.latency)
            .collect();
        sorted.sort();
        let at = |q: usize| {
            sorted
                .get(sorted.len().saturating_sub(1) * q / 100)
                .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
        };
        [at(50), at(99)]
    }
}

/// The load with the primary down for `outage` from its first wave.
async fn down(
    gateway: SocketAddr,
    primary: &Chaos,
    probes: &AtomicU64,
    load: Load,
    outage: Duration,
) -> Run {
    let client = &client();
    warm_up(client, gateway, primary).await;
    primary.set_script(
        "default",
        parse_script(&format!("down:{}", outage.as_millis())).unwrap(),
    );
    // The outage begins with a request of our own straight to the primary, reset like every
    // other while the outage lasts: it is not counted.
    let direct = Request::post(format!("{}/chat/completions", primary.openai_base_url()))
        .header("content-type", "application/json")
        .body(Bytes::from_static(b"{}"))
        .unwrap();
    assert!(
        client.send(direct).await.is_err(),
        "the outage starts with a reset"
    );
    let start = tokio::time::Instant::now();
    let probes_before = probes.load(Ordering::Relaxed);
    let tasks = load.send(client, gateway, start);
    tokio::time::sleep_until(start + outage).await;
    let during = primary.attempts("default") - 1;
    let probes_during = probes.load(Ordering::Relaxed) - probes_before;
    // When the primary serves again: one request every 100 ms.
    let mut back = None;
    let mut i = 1_000_000;
    while start.elapsed() < outage + WATCH {
        let watch = one(client, gateway, i, false).await;
        if watch.served_by.as_deref() == Some("primary") {
            back = Some(start.elapsed().saturating_sub(outage));
            break;
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    Run {
        outcomes,
        during,
        after: primary.attempts("default") - 1 - during,
        probes: probes_during,
        back,
    }
}

/// The load with nothing failing.
async fn healthy(gateway: SocketAddr, primary: &Chaos, load: Load) -> Run {
    let client = &client();
    warm_up(client, gateway, primary).await;
    let before = primary.attempts("default");
    let start = tokio::time::Instant::now() + Duration::from_millis(10);
    let mut outcomes = Vec::new();
    for task in load.send(client, gateway, start) {
        outcomes.push(task.await.unwrap());
    }
    Run {
        outcomes,
        during: primary.attempts("default") - before,
        ..Run::default()
    }
}

/// The load generator's client, new for each run: a connection the gateway closed while it
/// sat idle in the pool of an earlier run would fail the first request that took it. It is
/// rebound's own, which never retries, so a failure is counted as one.
fn client() -> Arc<HttpClient> {
    Arc::new(
        HttpClient::new(Timeouts {
            connect: Duration::from_secs(5),
            first_byte: Duration::from_secs(120),
            stream_first_byte: Duration::from_secs(120),
            first_content: Duration::from_secs(120),
            idle: Duration::from_secs(120),
        })
        .unwrap(),
    )
}

/// A healthy primary, and 200 requests through the gateway to wake every path up.
async fn warm_up(client: &Arc<HttpClient>, gateway: SocketAddr, primary: &Chaos) {
    primary.set_script("default", Vec::new());
    let warm = Load {
        waves: 4,
        per_wave: 50,
        spacing: Duration::from_millis(20),
    };
    for task in warm.send(client, gateway, tokio::time::Instant::now()) {
        let outcome = task.await.unwrap();
        assert_eq!(outcome.served_by.as_deref(), Some("primary"), "warm-up");
    }
}

fn ratio(on: f64, off: f64) -> String {
    if off > 0.0 && !on.is_nan() {
        format!("{:.3}", on / off)
    } else {
        "-".to_owned()
    }
}

/// A figure, or `-` for none (NaN).
fn cell(value: f64, decimals: usize) -> String {
    if value.is_nan() {
        "-".to_owned()
    } else {
        format!("{value:.decimals$}")
    }
}

fn row(what: &str, on: f64, off: f64, decimals: usize) {
    println!(
        "  {what:<42} {:>12} {:>12} {:>10}",
        cell(on, decimals),
        cell(off, decimals),
        ratio(on, off)
    );
}

/// A row whose ratio says nothing.
fn pair(what: &str, on: f64, off: f64, decimals: usize) {
    println!(
        "  {what:<42} {:>12} {:>12} {:>10}",
        cell(on, decimals),
        cell(off, decimals),
        "-"
    );
}

fn header(title: &str) {
    println!("\n{title}");
    println!(
        "  {:<42} {:>12} {:>12} {:>10}",
        "", "ledger on", "ledger off", "on / off"
    );
}

fn whole(outcome: &Outcome) -> bool {
    !outcome.stream
}

fn streamed(outcome: &Outcome) -> bool {
    outcome.stream
}

fn latency_rows(on: &Run, off: &Run) {
    for (name, kind) in [
        ("whole", whole as fn(&Outcome) -> bool),
        ("streamed", streamed),
    ] {
        let [on50, on99] = on.latency(kind);
        let [off50, off99] = off.latency(kind);
        row(&format!("p50 latency, {name} (ms)"), on50, off50, 2);
        row(&format!("p99 latency, {name} (ms)"), on99, off99, 2);
    }
}

fn main() {
    let load = Load {
        waves: arg("waves", 10),
        per_wave: arg("per_wave", 100),
        spacing: Duration::from_millis(arg("spacing_ms", 1000)),
    };
    let probes = Arc::new(AtomicU64::new(0));
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(Probes(Arc::clone(&probes))),
    )
    .unwrap();
    let primary = upstream("primary");
    let fallback = upstream("fallback");
    let with = gateway("ledger-on", &primary, &fallback, true);
    let without = gateway("ledger-off", &primary, &fallback, false);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "shared health under load: {} requests in {} waves of {} a {} ms apart, every other one streaming; {} cores",
        load.requests(),
        load.waves,
        load.per_wave,
        load.spacing.as_millis(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "  route: primary then fallback (rebound chaos each), default policies; each gateway on one thread"
    );
    let started = Instant::now();

    // No failure: the fast path, five rounds each, taking turns (which goes first changes each
    // round); the figures are over every round's requests together.
    let rounds = 5;
    let fast_load = Load {
        spacing: load.spacing.min(Duration::from_millis(100)),
        ..load
    };
    let (mut fast_on, mut fast_off) = (Run::default(), Run::default());
    for round in 0..rounds {
        let mut turns = [(&mut fast_on, &with), (&mut fast_off, &without)];
        if round % 2 == 1 {
            turns.reverse();
        }
        for (all, server) in turns {
            let run = runtime.block_on(healthy(server.addr(), &primary, fast_load));
            all.outcomes.extend(run.outcomes);
        }
    }

    // The outage, through each gateway in turn.
    let outage = Duration::from_millis(arg("outage_ms", OUTAGE_MS));
    let on = runtime.block_on(down(with.addr(), &primary, &probes, load, outage));
    let off = runtime.block_on(down(without.addr(), &primary, &probes, load, outage));

    header(&format!(
        "the primary down for {} s from the first wave (chaos down:{})",
        outage.as_secs_f64(),
        outage.as_millis()
    ));
    row(
        "attempts on the primary while down",
        on.during as f64,
        off.during as f64,
        0,
    );
    // Without a ledger nothing probes.
    pair("  of which probes", on.probes as f64, f64::NAN, 0);
    row(
        "attempts on the primary after it recovered",
        on.after as f64,
        off.after as f64,
        0,
    );
    row(
        "served by the primary",
        on.served_by("primary") as f64,
        off.served_by("primary") as f64,
        0,
    );
    row(
        "served by the fallback",
        on.served_by("fallback") as f64,
        off.served_by("fallback") as f64,
        0,
    );
    row(
        "  of which passed the primary over (skipped)",
        on.skipped() as f64,
        off.skipped() as f64,
        0,
    );
    row("failed", on.failed() as f64, off.failed() as f64, 0);
    latency_rows(&on, &off);
    let [_, on_later] = on.latency(|o| o.wave > 0);
    let [_, off_later] = off.latency(|o| o.wave > 0);
    row(
        "p99 latency after the first wave (ms)",
        on_later,
        off_later,
        2,
    );
    let [_, on99] = on.latency(|_| true);
    let [_, off99] = off.latency(|_| true);
    let [_, fast_on99] = fast_on.latency(|_| true);
    let [_, fast_off99] = fast_off.latency(|_| true);
    row(
        "p99 added to the same load without failure (ms)",
        on99 - fast_on99,
        off99 - fast_off99,
        2,
    );
    let back = |run: &Run| run.back.map_or(f64::NAN, |b| b.as_secs_f64());
    pair(
        "primary serving again after the outage (s)",
        back(&on),
        back(&off),
        2,
    );

    header(&format!(
        "no failure, the same load with waves {} ms apart ({rounds} rounds each, taking turns)",
        fast_load.spacing.as_millis()
    ));
    row(
        "served by the primary",
        fast_on.served_by("primary") as f64,
        fast_off.served_by("primary") as f64,
        0,
    );
    row(
        "failed",
        fast_on.failed() as f64,
        fast_off.failed() as f64,
        0,
    );
    latency_rows(&fast_on, &fast_off);
    println!("\n  {:.1} s in all", started.elapsed().as_secs_f64());
}
