//! How late the gateway's retry waits wake under load, against the same waits slept with no
//! gateway at all, measured in one run.
//!
//! The load is the chaos soak's (`tests/gateway/soak.rs`): concurrent requests, both protocols,
//! streaming and not, through `rebound serve` against `rebound chaos` with a seeded mix of
//! faults, on two worker threads. Every wait the gateway asks for is recorded with how late it
//! woke. The reference then sleeps exactly those delays with bare `tokio::time::sleep`, as many
//! at once, on a runtime of the same shape: what the timer alone costs on this machine now.
//!
//! Run: `cargo bench -p rebound-gateway --bench lateness`; after `--`, `requests=N` (default
//! 1,000) and `concurrency=N` (default 16) change the load.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    missing_docs,
    reason = "a benchmark program that prints"
)]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use rebound_chaos::{Chaos, ChaosConfig};
use rebound_core::Catalogue;
use rebound_gateway::{Gateway, Overrides, Server, load};
use rebound_runtime::{HttpClient, Sleeper, SystemClock, Timeouts};
use tokio::sync::Semaphore;

/// The soak test's policy and route, measured here under real sleeps.
const CONFIG: &str = include_str!("../tests/soak.toml");

/// Each wait: how long it was asked to be, and how late it woke.
type Record = Arc<Mutex<Vec<(Duration, Duration)>>>;

/// Real sleeps, recording how late each one woke.
#[derive(Clone, Default)]
struct Measured(Record);

impl Sleeper for Measured {
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let started = Instant::now();
        let record = Arc::clone(&self.0);
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            let late = started.elapsed().saturating_sub(delay);
            record.lock().unwrap().push((delay, late));
        })
    }
}

fn arg(name: &str, default: usize) -> usize {
    std::env::args()
        .find_map(|a| {
            a.strip_prefix(&format!("{name}="))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(default)
}

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(5),
        stream_first_byte: Duration::from_secs(5),
        idle: Duration::from_millis(500),
        first_content: Duration::from_secs(5),
    }
}

/// The soak's load through the gateway; returns every wait it asked for.
async fn through_the_gateway(requests: usize, concurrency: usize) -> Vec<(Duration, Duration)> {
    let chaos = Chaos::start(
        "127.0.0.1:0".parse().unwrap(),
        ChaosConfig {
            seed: Some(20261130),
            fault_rate: 0.35,
            ..ChaosConfig::default()
        },
    )
    .await
    .unwrap();
    let text = CONFIG
        .replace("{openai}", &chaos.openai_base_url())
        .replace("{anthropic}", &chaos.anthropic_base_url());
    let config = load("bench.toml", &text, &Overrides::default(), &[("X", "y")]).unwrap();
    let measured = Measured::default();
    let gateway = Gateway::new(
        config,
        HttpClient::new(timeouts()).unwrap(),
        Arc::new(Catalogue::shipped().unwrap()),
    )
    .with_time(Arc::new(SystemClock), Arc::new(measured.clone()));
    let server = Server::start(gateway, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let addr = server.addr();
    let client = HttpClient::new(timeouts()).unwrap();
    let permits = Arc::new(Semaphore::new(concurrency));
    let mut tasks = Vec::new();
    for i in 0..requests {
        let permits = Arc::clone(&permits);
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire().await.unwrap();
            let anthropic = i % 2 == 1;
            let stream = (i / 2) % 2 == 0;
            let (path, body) = if anthropic {
                ("/v1/messages", format!(r#"{{"model":"claude-bench","max_tokens":64,"stream":{stream},"messages":[{{"role":"user","content":"request {i}"}}]}}"#))
            } else {
                ("/v1/chat/completions", format!(r#"{{"model":"gpt-bench","stream":{stream},"messages":[{{"role":"user","content":"request {i}"}}]}}"#))
            };
            let request = Request::post(format!("http://{addr}{path}"))
                .header("content-type", "application/json")
                .header("x-chaos-key", format!("bench-{i}"))
                .body(Bytes::from(body))
                .unwrap();
            // Only the waits are measured: any answer will do, a broken one included.
            if let Ok(response) = client.send(request).await {
                let _ = response.into_body().collect().await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    server.shutdown().await;
    measured.0.lock().unwrap().clone()
}

/// The same delays with bare `tokio::time::sleep`, `concurrency` at a time; how late each woke.
async fn bare_sleeps(delays: &[Duration], concurrency: usize) -> Vec<Duration> {
    let permits = Arc::new(Semaphore::new(concurrency));
    let mut tasks = Vec::new();
    for &delay in delays {
        let permits = Arc::clone(&permits);
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire().await.unwrap();
            let started = Instant::now();
            tokio::time::sleep(delay).await;
            started.elapsed().saturating_sub(delay)
        }));
    }
    let mut late = Vec::new();
    for task in tasks {
        late.push(task.await.unwrap());
    }
    late
}

/// p50, p99 and max, in milliseconds.
fn figures(late: &[Duration]) -> [f64; 3] {
    let mut sorted = late.to_vec();
    sorted.sort();
    let at = |q: usize| {
        sorted
            .get(sorted.len().saturating_sub(1) * q / 100)
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    };
    [at(50), at(99), at(100)]
}

fn main() {
    let requests = arg("requests", 1000);
    let concurrency = arg("concurrency", 16);
    // The soak's shape: two worker threads.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "wake-up lateness of retry waits: {requests} requests, {concurrency} at a time, seed 20261130, fault rate 0.35, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let started = Instant::now();
    let waits = runtime.block_on(through_the_gateway(requests, concurrency));
    let gateway_time = started.elapsed();
    let delays: Vec<Duration> = waits.iter().map(|(delay, _)| *delay).collect();
    let gateway: Vec<Duration> = waits.iter().map(|(_, late)| *late).collect();
    let bare = runtime.block_on(bare_sleeps(&delays, concurrency));
    let asked = delays.iter().sum::<Duration>().as_secs_f64() / delays.len().max(1) as f64;
    println!(
        "  {} waits of {:.1} ms on average; the gateway's run took {:.1} s\n",
        delays.len(),
        asked * 1e3,
        gateway_time.as_secs_f64()
    );
    println!(
        "  {:<38} {:>9} {:>9} {:>9}",
        "late by (ms)", "p50", "p99", "max"
    );
    let [g50, g99, gmax] = figures(&gateway);
    let [b50, b99, bmax] = figures(&bare);
    println!(
        "  {:<38} {:>9.2} {:>9.2} {:>9.2}",
        "bare tokio::time::sleep (reference)", b50, b99, bmax
    );
    println!(
        "  {:<38} {:>9.2} {:>9.2} {:>9.2}",
        "rebound serve's waits, under load", g50, g99, gmax
    );
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    println!(
        "  {:<38} {:>9.2} {:>9.2} {:>9.2}",
        "ratio (gateway / reference)",
        ratio(g50, b50),
        ratio(g99, b99),
        ratio(gmax, bmax)
    );
}
