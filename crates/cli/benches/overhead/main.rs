//! What one extra hop through `rebound serve` costs, measured in one run against the same
//! upstream (`rebound chaos`, no faults), with nginx as the reference proxy when installed.
//!
//! Run: `cargo bench -p rebound --bench overhead`, or name sections to run only those:
//! `cargo bench -p rebound --bench overhead -- saturation latency cold idle`. `streams=N` sets how
//! many idle streams are held open (2,000 by default). Saturation also measures a second
//! gateway whose status page is open throughout; `page=closed` leaves it unwatched, as a control.
//! A "tcp relay" row copies bytes with no HTTP work: the floor of one extra hop here.
//! Load generators: saturation uses `wrk` (Debian: `apt-get install wrk`); the reference row
//! needs nginx (`apt-get install nginx-light`). Fixed-rate latency and time to first token use
//! the open-loop generator below (requests start on a fixed schedule whatever the answers do,
//! so a slow path cannot slow its own load). Idle-stream memory reads the gateway's RSS.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    missing_docs,
    reason = "a benchmark program that prints"
)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

mod paths;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use paths::{RELAY_ENV, nginx, rebound, relay, run_relay, serve, wrk};
use rebound_runtime::{HttpClient, Timeouts};

pub(crate) const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
const STREAM_BODY: &str =
    r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
const RESPONSES_STREAM_BODY: &str = r#"{"model":"m","stream":true,"input":"hi"}"#;

/// What a measured request asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Load {
    /// A whole Chat Completions answer.
    Whole,
    /// A Chat Completions stream.
    ChatStream,
    /// A Responses API stream.
    ResponsesStream,
}

impl Load {
    fn path(self) -> &'static str {
        match self {
            Load::Whole | Load::ChatStream => "/v1/chat/completions",
            Load::ResponsesStream => "/v1/responses",
        }
    }

    fn body(self) -> &'static str {
        match self {
            Load::Whole => BODY,
            Load::ChatStream => STREAM_BODY,
            Load::ResponsesStream => RESPONSES_STREAM_BODY,
        }
    }

    fn measure(self) -> &'static str {
        match self {
            Load::Whole => "whole response",
            Load::ChatStream => "first token",
            Load::ResponsesStream => "resp. 1st token",
        }
    }
}

/// Open-loop load at `rate` requests per second for `seconds`: latency (or time to the first
/// token, for streams) of each request.
async fn fixed_rate(
    client: &std::sync::Arc<HttpClient>,
    addr: SocketAddr,
    load: Load,
    rate: u32,
    seconds: u32,
) -> Vec<Duration> {
    let n = rate * seconds;
    let interval = Duration::from_secs(1) / rate;
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    let mut tasks = Vec::with_capacity(n as usize);
    for i in 0..n {
        let client = std::sync::Arc::clone(client);
        let at = start + interval * i;
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            timed(&client, addr, load).await
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        if let Ok(Some(d)) = task.await {
            out.push(d);
        }
    }
    out.sort();
    out
}

/// A load generator's client: rebound's own, which never retries, so a count is a count.
fn new_client() -> std::sync::Arc<HttpClient> {
    std::sync::Arc::new(HttpClient::new(Timeouts::default()).unwrap())
}

/// One request: its latency, or for a stream the time to its first token.
async fn timed(client: &HttpClient, addr: SocketAddr, load: Load) -> Option<Duration> {
    // Latency from the moment of sending: the timer's millisecond granularity would
    // otherwise add up to a millisecond of noise to both paths.
    let at = tokio::time::Instant::now();
    let request = Request::post(format!("http://{addr}{}", load.path()))
        .header("content-type", "application/json")
        .body(Bytes::from_static(load.body().as_bytes()))
        .unwrap();
    let response = client.send(request).await.ok()?;
    let mut body = response.into_body();
    if load != Load::Whole {
        // Time to the first content byte (the first token), not to the preamble:
        // rebound holds preambles back until content arrives, by design.
        let mut first = None;
        while let Some(Ok(frame)) = body.frame().await {
            if first.is_none()
                && frame
                    .data_ref()
                    .is_some_and(|d| d.windows(5).any(|w| w == b"Hello"))
            {
                first = Some(at.elapsed());
            }
        }
        first
    } else {
        body.collect().await.ok()?;
        Some(at.elapsed())
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0))
        })
        .unwrap_or(0)
}

/// What holding idle streams cost.
struct Held {
    open: usize,
    growth_kib: u64,
    upstream_kib: u64,
    /// Latency of other clients' requests while the streams are held.
    others: Vec<Duration>,
}

/// Opens `n` streams through the gateway whose upstream stalls after one chunk, and meanwhile
/// times other clients' requests (one every 5 ms for a second).
async fn idle_streams(gateway: SocketAddr, gateway_pid: u32, upstream_pid: u32, n: usize) -> Held {
    let before = rss_kib(gateway_pid);
    let upstream_before = rss_kib(upstream_pid);
    let client = new_client();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(n);
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let client = std::sync::Arc::clone(&client);
        let ready = ready_tx.clone();
        held.push(tokio::spawn(async move {
            let request = Request::post(format!("http://{gateway}/v1/chat/completions"))
                .header("content-type", "application/json")
                .header("x-chaos-key", "idle")
                .body(Bytes::from_static(STREAM_BODY.as_bytes()))
                .unwrap();
            let Ok(response) = client.send(request).await else {
                return;
            };
            let mut body = response.into_body();
            body.frame().await;
            let _ = ready.send(()).await;
            // Hold the stream open until the task is aborted.
            while body.frame().await.is_some() {}
        }));
    }
    drop(ready_tx);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut open = 0;
    while open < n && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), ready_rx.recv()).await {
            Ok(Some(())) => open += 1,
            _ => break,
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(gateway_pid);
    let upstream_after = rss_kib(upstream_pid);
    let others = fixed_rate(&new_client(), gateway, Load::Whole, 200, 1).await;
    for task in held {
        task.abort();
    }
    // Let the proxy see the streams close before the next measurement.
    tokio::time::sleep(Duration::from_millis(500)).await;
    Held {
        open,
        growth_kib: after.saturating_sub(before),
        upstream_kib: upstream_after.saturating_sub(upstream_before),
        others,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// The sections named on the command line; all when none is.
fn wanted(section: &str) -> bool {
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| ["saturation", "latency", "cold", "idle"].contains(&a.as_str()))
        .collect();
    named.is_empty() || named.iter().any(|a| a == section)
}

fn main() {
    if let Ok(upstream) = std::env::var(RELAY_ENV) {
        run_relay(upstream.parse().expect("the relay's upstream address"));
        return;
    }
    let (chaos_proc, chaos) =
        rebound(&["chaos", "--listen", "127.0.0.1:0", "--chunk-delay-ms", "0"]);
    let (gateway_proc, gateway) = serve(chaos, &[]);
    let proxy = nginx(chaos);
    let (relay_proc, relayed) = relay(chaos);
    println!(
        "rebound overhead benchmark: loopback, {} cores, upstream rebound chaos (no faults)\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The direct path comes first: the others' added latency is measured against it.
    let mut paths = vec![("direct to chaos", chaos), ("tcp relay (floor)", relayed)];
    if let Some((_, addr)) = &proxy {
        paths.push(("nginx proxy_pass", *addr));
    }
    paths.push(("rebound serve", gateway));
    if wanted("saturation") {
        // A second gateway whose status page is open the whole time: its event stream sends a
        // snapshot on every change (at most 4 a second) and each second (#20).
        // `page=closed` leaves it unwatched: the control, a second gateway in the same place.
        let (watched_proc, watched) = serve(chaos, &[]);
        let open = !std::env::args().any(|a| a == "page=closed");
        let watcher = open.then(|| watch_status_page(watched));
        let mut with_page = paths.clone();
        with_page.push((
            if open {
                "rebound, page open"
            } else {
                "rebound, 2nd, closed"
            },
            watched,
        ));
        saturation(&with_page);
        if let Some(watcher) = watcher {
            println!(
                "  the status page's stream sent {} bytes meanwhile",
                watcher.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
        drop(watched_proc);
    }
    if wanted("latency") {
        latency(&runtime, &paths);
    }
    if wanted("cold") {
        cold(&runtime, &paths);
    }
    if wanted("idle") {
        let streams = std::env::args()
            .find_map(|a| a.strip_prefix("streams=").and_then(|n| n.parse().ok()))
            .unwrap_or(2000);
        println!(
            "\nidle streams: {streams} streaming requests held open (the upstream stalls after one chunk)"
        );
        println!(
            "  {:<34} {:>8} {:>14} {:>16} {:>12} {:>12}",
            "path", "open", "memory growth", "KiB per stream", "others p50", "others p99"
        );
        println!("  (others: 200 requests/s from another client while the streams are held open)");
        let chaos_pid = chaos_proc.0.id();
        idle(
            &runtime,
            chaos,
            chaos_pid,
            "rebound serve",
            gateway,
            gateway_proc.0.id(),
            streams,
        );
        let (gateway2_proc, gateway2) = serve(chaos, &["--upstream-http2"]);
        idle(
            &runtime,
            chaos,
            chaos_pid,
            "rebound serve --upstream-http2",
            gateway2,
            gateway2_proc.0.id(),
            streams,
        );
        drop(gateway2_proc);
        if let Some((nginx_proc, addr)) = &proxy {
            // The worker holds the connections; the master only supervises.
            let master = nginx_proc.0.id();
            let worker = std::fs::read_to_string(format!("/proc/{master}/task/{master}/children"))
                .ok()
                .and_then(|c| c.split_whitespace().next().and_then(|p| p.parse().ok()))
                .unwrap_or(master);
            idle(
                &runtime,
                chaos,
                chaos_pid,
                "nginx proxy_pass",
                *addr,
                worker,
                streams,
            );
        }
    }
    drop(proxy);
    drop(relay_proc);
    drop(gateway_proc);
    drop(chaos_proc);
}

/// Opens `gateway`'s status page event stream and reads it on a thread until the gateway
/// goes; the bytes read so far.
fn watch_status_page(gateway: SocketAddr) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    use std::io::{Read, Write};
    let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = std::sync::Arc::clone(&read);
    let mut stream = std::net::TcpStream::connect(gateway).unwrap();
    stream
        .write_all(b"GET /v1/rebound/status/events HTTP/1.1\r\nhost: bench\r\n\r\n")
        .unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            counted.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        }
    });
    read
}

fn saturation(paths: &[(&str, SocketAddr)]) {
    let rounds = 3;
    println!(
        "saturation: wrk -t1 -c16 -d4s, non-streaming POST /v1/chat/completions; each figure the median of {rounds} rounds, the paths taking turns"
    );
    let mut figures = vec![Vec::new(); paths.len()];
    for _ in 0..rounds {
        for ((_, addr), rps) in paths.iter().zip(figures.iter_mut()) {
            let Some(measured) = wrk(*addr) else {
                println!("  wrk is not installed (apt-get install wrk): saturation skipped");
                return;
            };
            rps.push(measured);
        }
    }
    let medians: Vec<f64> = figures
        .into_iter()
        .map(|mut rps| {
            rps.sort_by(f64::total_cmp);
            rps[rps.len() / 2]
        })
        .collect();
    let direct = medians[0];
    let nginx = paths
        .iter()
        .position(|(name, _)| name.starts_with("nginx"))
        .map(|i| medians[i]);
    println!(
        "  {:<24} {:>12} {:>16} {:>16}",
        "path", "requests/s", "ratio to direct", "ratio to nginx"
    );
    for ((name, _), rps) in paths.iter().zip(&medians) {
        let vs_nginx = nginx
            .filter(|_| *name != paths[0].0)
            .map_or_else(String::new, |n| format!("{:.3}", rps / n));
        println!(
            "  {name:<24} {rps:>12.0} {:>16.3} {vs_nginx:>16}",
            rps / direct
        );
    }
    if nginx.is_none() {
        println!("  nginx is not installed (apt-get install nginx-light): no reference row");
    }
}

fn latency(runtime: &tokio::runtime::Runtime, paths: &[(&str, SocketAddr)]) {
    let rate = 1000;
    let rounds = 3;
    println!(
        "\nfixed rate: {rate} requests/s for 3 s, open loop, after 1 s of the same load; each figure the median of {rounds} rounds, the paths taking turns"
    );
    println!(
        "  {:<24} {:<16} {:>10} {:>10} {:>12} {:>12}",
        "path", "measure", "p50", "p99", "added p50", "added p99"
    );
    for load in [Load::Whole, Load::ChatStream, Load::ResponsesStream] {
        let measure = load.measure();
        // One client per path, kept across rounds, as an agent keeps its connections.
        let clients: Vec<_> = paths.iter().map(|_| new_client()).collect();
        // Rounds alternate the paths, so a noisy second on a shared machine falls on all of
        // them alike, and one stall does not decide a percentile. Each round follows a second
        // of the same load on its path: the figures are the steady state at this rate, not
        // the first moments after the path sat idle through the other paths' rounds (the
        // `cold` section measures those).
        let mut figures = vec![(Vec::new(), Vec::new()); paths.len()];
        for _ in 0..rounds {
            for (((_, addr), client), (p50s, p99s)) in
                paths.iter().zip(&clients).zip(figures.iter_mut())
            {
                runtime.block_on(fixed_rate(client, *addr, load, rate, 1));
                let sorted = runtime.block_on(fixed_rate(client, *addr, load, rate, 3));
                p50s.push(percentile(&sorted, 0.5));
                p99s.push(percentile(&sorted, 0.99));
            }
        }
        let median = |mut values: Vec<Duration>| {
            values.sort();
            values[values.len() / 2]
        };
        let mut direct = (Duration::ZERO, Duration::ZERO);
        for ((name, addr), (p50s, p99s)) in paths.iter().zip(figures) {
            let (p50, p99) = (median(p50s), median(p99s));
            if *addr == paths[0].1 {
                direct = (p50, p99);
                println!("  {name:<24} {measure:<16} {:>10} {:>10}", ms(p50), ms(p99));
            } else {
                println!(
                    "  {name:<24} {measure:<16} {:>10} {:>10} {:>12} {:>12}",
                    ms(p50),
                    ms(p99),
                    ms(p50.saturating_sub(direct.0)),
                    ms(p99.saturating_sub(direct.1))
                );
            }
        }
    }
}

/// One request on a kept connection after the path sat idle for `IDLE`: what a first request
/// pays after a quiet spell, when this machine has let the process's memory go cold.
fn cold(runtime: &tokio::runtime::Runtime, paths: &[(&str, SocketAddr)]) {
    const IDLE: Duration = Duration::from_secs(2);
    const SAMPLES: usize = 5;
    println!(
        "\nafter idle: one request after {} s without traffic, on a kept connection; median of {SAMPLES}",
        IDLE.as_secs()
    );
    println!("  {:<24} {:>10}", "path", "latency");
    let clients: Vec<_> = paths.iter().map(|_| new_client()).collect();
    let mut samples = vec![Vec::new(); paths.len()];
    for round in 0..=SAMPLES {
        for (((_, addr), client), samples) in paths.iter().zip(&clients).zip(samples.iter_mut()) {
            std::thread::sleep(IDLE);
            let took = runtime.block_on(timed(client, *addr, Load::Whole));
            // The first round opens the connections.
            if round > 0 {
                samples.extend(took);
            }
        }
    }
    for ((name, _), mut samples) in paths.iter().zip(samples) {
        samples.sort();
        println!("  {name:<24} {:>10}", ms(samples[samples.len() / 2]));
    }
}

/// Holds `streams` idle streams open through `proxy` and prints its memory growth per stream.
fn idle(
    runtime: &tokio::runtime::Runtime,
    chaos: SocketAddr,
    chaos_pid: u32,
    label: &str,
    proxy: SocketAddr,
    proxy_pid: u32,
    streams: usize,
) {
    let set = Request::post(format!("http://{chaos}/chaos/scripts"))
        .header("content-type", "application/json")
        .body(Bytes::from(format!(
            "{{\"idle\": \"{}\"}}",
            vec!["stall-after-1:120000"; streams].join(", ")
        )))
        .unwrap();
    runtime.block_on(async {
        let client = HttpClient::new(Timeouts::default()).unwrap();
        let response = client.send(set).await.unwrap();
        let _ = response.into_body().collect().await;
    });
    let held = runtime.block_on(idle_streams(proxy, proxy_pid, chaos_pid, streams));
    let open = held.open.max(1) as f64;
    println!(
        "  {label:<34} {:>8} {:>10.1} MiB {:>16.1} {:>12} {:>12}   (upstream chaos: {:.1} KiB per stream)",
        held.open,
        held.growth_kib as f64 / 1024.0,
        held.growth_kib as f64 / open,
        ms(percentile(&held.others, 0.5)),
        ms(percentile(&held.others, 0.99)),
        held.upstream_kib as f64 / open,
    );
}
