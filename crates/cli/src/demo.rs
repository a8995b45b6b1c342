//! `rebound demo`: `rebound chaos` and `rebound serve` in-process, a few dozen requests with
//! a mixed fault script, the countdown live, and a final table. Offline; no keys needed.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::Args;
use http::Request;
use http_body_util::BodyExt;
use rebound_chaos::{Chaos, ChaosConfig, parse_script};
use rebound_core::Catalogue;
use rebound_gateway::{Gateway, Overrides, Server, load};
use rebound_runtime::{HttpClient, Timeouts};
use tokio::sync::Semaphore;

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// How many requests to drive through the gateway.
    #[arg(long, default_value_t = 30)]
    requests: usize,
    /// How many run at once.
    #[arg(long, default_value_t = 6)]
    concurrency: usize,
    /// Keep the gateway (and its status page) up after the requests, until Ctrl-C.
    #[arg(long)]
    keep: bool,
}

/// The fault scripts the requests cycle through: what a bad day at a provider looks like.
const SCENARIOS: [(&str, &str); 10] = [
    ("clean", "ok"),
    ("502 then ok", "502, ok"),
    ("429 with retry-after-ms", "429+retry-after-ms:400, ok"),
    (
        "overloaded after message_start",
        "error-after-0:overloaded_error, ok",
    ),
    ("connection reset", "reset, ok"),
    (
        "two 529s, the second with retry-after",
        "529, 529+retry-after:2, ok",
    ),
    ("503 with retry-after: 3", "503+retry-after:3, ok"),
    ("cut after 2 chunks", "cut-after-2-chunks, ok"),
    ("context overflow", "context"),
    ("bad key", "401"),
];

struct Outcome {
    status: u16,
    complete: bool,
    elapsed: Duration,
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

pub(crate) fn run(args: DemoArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(demo(args))
}

async fn demo(args: DemoArgs) -> Result<()> {
    let chaos = Arc::new(
        Chaos::start(
            "127.0.0.1:0".parse()?,
            ChaosConfig {
                chunk_delay: Duration::from_millis(15),
                ..ChaosConfig::default()
            },
        )
        .await
        .context("starting rebound chaos")?,
    );
    let config = load(
        "demo",
        &format!(
            r#"
[[candidate]]
id = "chaos-openai"
protocol = "openai"
base_url = "{}"

[[candidate]]
id = "chaos-anthropic"
protocol = "anthropic"
base_url = "{}"

[[route]]
id = "demo"
models = ["*"]
candidates = ["chaos-openai", "chaos-anthropic"]
"#,
            chaos.openai_base_url(),
            chaos.anthropic_base_url()
        ),
        &Overrides::default(),
        &rebound_gateway::ProcessEnv,
    )?;
    let gateway = Gateway::new(
        config,
        HttpClient::new(Timeouts::default())?,
        Arc::new(Catalogue::shipped()?),
    );
    let server = Server::start(gateway, Some("127.0.0.1:0".parse()?)).await?;
    let addr = server.addr();
    say(&format!(
        "rebound demo: chaos upstream at {}, gateway at http://{addr} (OpenAI /v1/chat/completions, Anthropic /v1/messages)",
        chaos.addr()
    ));
    say(&format!(
        "status page: http://{addr}/status (open it in a browser to watch)"
    ));
    say(&format!(
        "{} requests, {} at a time, streaming and not, both protocols\n",
        args.requests, args.concurrency
    ));

    let client = Arc::new(HttpClient::new(Timeouts::default())?);
    let permits = Arc::new(Semaphore::new(args.concurrency.max(1)));
    let mut tasks = Vec::new();
    let started = Instant::now();
    for i in 0..args.requests {
        let (label, script) = SCENARIOS[i % SCENARIOS.len()];
        let key = format!("demo-{:02}", i + 1);
        chaos.set_script(&key, parse_script(script)?);
        let anthropic = i % 2 == 1;
        let stream = (i / 2) % 2 == 0;
        let client = Arc::clone(&client);
        let permits = Arc::clone(&permits);
        let chaos = Arc::clone(&chaos);
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire().await;
            let outcome = one(&client, addr, &key, anthropic, stream).await;
            // The upstream's own count: every attempt rebound made for this request.
            let attempts = chaos.attempts(&key);
            (i + 1, label, anthropic, stream, outcome, attempts)
        }));
    }
    let mut rows = Vec::new();
    for task in tasks {
        rows.push(task.await?);
    }
    let total = started.elapsed();

    let mut ok_first = 0;
    let mut recovered = 0;
    let mut failed = 0;
    let mut attempts = 0u64;
    say("");
    say("  #  protocol   mode    scenario                               status  attempts  result");
    for (n, label, anthropic, stream, outcome, tries) in &rows {
        let Ok(o) = outcome else {
            failed += 1;
            say(&format!(
                "{n:>3}  {:<9}  {:<6}  {label:<38} client error",
                if *anthropic { "anthropic" } else { "openai" },
                if *stream { "stream" } else { "plain" }
            ));
            continue;
        };
        attempts += tries;
        let result = if o.status == 200 && o.complete {
            if *tries > 1 {
                recovered += 1;
                "recovered"
            } else {
                ok_first += 1;
                "ok"
            }
        } else {
            failed += 1;
            if o.status == 200 {
                "ended with an error event"
            } else {
                "one terminal error"
            }
        };
        say(&format!(
            "{n:>3}  {:<9}  {:<6}  {label:<38} {:>6}  {:>8}  {result} ({:.1}s)",
            if *anthropic { "anthropic" } else { "openai" },
            if *stream { "stream" } else { "plain" },
            o.status,
            tries,
            o.elapsed.as_secs_f64()
        ));
    }
    let metrics = server.gateway().metrics_text();
    let waited: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("rebound_wait_seconds_sum "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    say("");
    say(
        "  requests  ok first try  recovered  terminal errors  upstream attempts  waited (sum)  wall time",
    );
    say(&format!(
        "  {:>8}  {ok_first:>12}  {recovered:>9}  {failed:>15}  {attempts:>17}  {waited:>11.1}s  {:>8.1}s",
        rows.len(),
        total.as_secs_f64()
    ));
    say(
        "\nTerminal errors are the failures no retry can fix (a context overflow, a bad key) and streams",
    );
    say(
        "cut after content reached the client: rebound ends those with the provider's own error event.",
    );
    if args.keep {
        say(&format!(
            "\nThe gateway stays up: its status page is at http://{addr}/status. Ctrl-C to stop."
        ));
        crate::serve::stopped().await?;
    }
    server.shutdown().await;
    drop(chaos);
    Ok(())
}

async fn one(
    client: &HttpClient,
    addr: std::net::SocketAddr,
    key: &str,
    anthropic: bool,
    stream: bool,
) -> Result<Outcome> {
    let (path, body) = if anthropic {
        (
            "/v1/messages",
            format!(
                r#"{{"model":"claude-demo","max_tokens":64,"stream":{stream},"messages":[{{"role":"user","content":"request {key}"}}]}}"#
            ),
        )
    } else {
        (
            "/v1/chat/completions",
            format!(
                r#"{{"model":"gpt-demo","stream":{stream},"messages":[{{"role":"user","content":"request {key}"}}]}}"#
            ),
        )
    };
    let request = Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .header("x-chaos-key", key)
        .body(Bytes::from(body))?;
    let started = Instant::now();
    let response = client
        .send(request)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut text = String::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Ok(data) = frame.into_data() {
            let chunk = String::from_utf8_lossy(&data);
            for line in chunk.lines().filter(|l| l.starts_with(": Retrying")) {
                say(&format!("  {key}  {}", &line[2..]));
            }
            text.push_str(&chunk);
        }
    }
    let complete =
        text.contains("[DONE]") || text.contains("message_stop") || (!stream && status == 200);
    Ok(Outcome {
        status,
        complete,
        elapsed: started.elapsed(),
    })
}
