//! A chaos soak: many concurrent requests, both protocols, streaming and not, through the
//! gateway against a seeded mix of faults, each checked for the contract's invariants.
//!
//! The waits are real (10–80 ms), so retries of different requests interleave as they would
//! in production; what is checked is what each client got, never how long anything took. How
//! late those waits wake under this load is a benchmark: `cargo bench -p rebound-gateway
//! --bench lateness`.
//!
//! Short form (CI): 240 requests. Long form:
//! `REBOUND_SOAK_REQUESTS=5000 cargo test -p rebound-gateway --test gateway soak -- --nocapture`

use std::sync::Arc;
use std::time::Instant;

use rebound_chaos::{Chaos, ChaosConfig};
use rebound_core::Catalogue;
use rebound_gateway::{Gateway, Overrides, Server, load};
use rebound_runtime::HttpClient;
use serde_json::Value;

use crate::{send, timeouts};

const CONFIG: &str = include_str!("../soak.toml");

#[derive(Debug, Default)]
struct Tally {
    ok_first: u64,
    recovered: u64,
    terminal: u64,
    cut_after_content: u64,
    attempts: u64,
    max_attempts: u64,
}

/// The text a stream delivered, and how it ended: `Ok(true)` complete, `Ok(false)` with the
/// provider's error event.
fn read_stream(anthropic: bool, body: &str) -> (String, Result<bool, String>) {
    let mut text = String::new();
    let mut ended = Err("no ending".to_owned());
    for event in body.split("\n\n").filter(|e| !e.trim().is_empty()) {
        if event.starts_with(':') {
            continue;
        }
        let name = event
            .lines()
            .find_map(|l| l.strip_prefix("event: "))
            .unwrap_or("");
        let data = event
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap_or("");
        if ended.is_ok() {
            return (text, Err(format!("bytes after the end: {event}")));
        }
        if data == "[DONE]" {
            ended = Ok(true);
            continue;
        }
        // The upstream's own broken event is relayed as it came, like a direct connection
        // would show it (#16); rebound writes no event that is not JSON.
        if format!("{event}\n\n") == rebound_chaos::stream::MALFORMED_EVENT {
            continue;
        }
        let Ok(value) = serde_json::from_str::<Value>(data) else {
            return (text, Err(format!("an event that is not JSON: {event}")));
        };
        if name == "error" || value.get("error").is_some_and(Value::is_object) {
            ended = Ok(false);
            continue;
        }
        if anthropic {
            if let Some(t) = value.pointer("/delta/text").and_then(Value::as_str) {
                text.push_str(t);
            }
            if name == "message_stop" {
                ended = Ok(true);
            }
        } else if let Some(t) = value
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
        {
            text.push_str(t);
        }
    }
    (text, ended)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak() {
    let requests: usize = std::env::var("REBOUND_SOAK_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(240);
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
    let config = load("soak.toml", &text, &Overrides::default(), &[("X", "y")]).unwrap();
    let gateway = Gateway::new(
        config,
        HttpClient::new(timeouts()).unwrap(),
        Arc::new(Catalogue::shipped().unwrap()),
    );
    let server = Server::start(gateway, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let addr = server.addr();
    let chaos = Arc::new(chaos);
    let permits = Arc::new(tokio::sync::Semaphore::new(16));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..requests {
        let permits = Arc::clone(&permits);
        let chaos = Arc::clone(&chaos);
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire().await.unwrap();
            let anthropic = i % 2 == 1;
            let stream = (i / 2) % 2 == 0;
            let key = format!("soak-{i}");
            let said = format!("request {i}");
            let (path, body) = if anthropic {
                ("/v1/messages", format!(r#"{{"model":"claude-soak","max_tokens":64,"stream":{stream},"messages":[{{"role":"user","content":"{said}"}}]}}"#))
            } else {
                ("/v1/chat/completions", format!(r#"{{"model":"gpt-soak","stream":{stream},"messages":[{{"role":"user","content":"{said}"}}]}}"#))
            };
            let reply = send(addr, "POST", path, &[("content-type", "application/json"), ("x-chaos-key", &key)], &body).await;
            let attempts = chaos.attempts(&key);
            (i, anthropic, stream, said, reply, attempts)
        }));
    }
    let mut tally = Tally::default();
    let mut problems = Vec::new();
    for task in tasks {
        let (i, anthropic, stream, said, reply, attempts) = task.await.unwrap();
        let expected = format!("Hello from rebound chaos. You said: {said}");
        let mut problem = |what: String| {
            problems.push(format!(
                "#{i} ({}, {}): {what}",
                if anthropic { "anthropic" } else { "openai" },
                if stream { "stream" } else { "plain" }
            ))
        };
        tally.attempts += attempts;
        tally.max_attempts = tally.max_attempts.max(attempts);
        // Two retrying classes of 10 retries each: never more than 22 attempts in all.
        if attempts > 22 {
            problem(format!("{attempts} attempts"));
        }
        if reply.header("x-rebound-attempts") != attempts.to_string() {
            problem(format!(
                "x-rebound-attempts {} but the upstream saw {attempts}",
                reply.header("x-rebound-attempts")
            ));
        }
        let text = reply.text();
        if reply.status != 200 {
            // One provider-shaped terminal error, with diagnostics.
            match serde_json::from_str::<Value>(&text) {
                Ok(v) if v.get("rebound").is_some() && (v.get("error").is_some()) => {
                    tally.terminal += 1
                }
                _ => problem(format!(
                    "status {} with a body that is not a provider-shaped error: {text}",
                    reply.status
                )),
            }
            continue;
        }
        if !stream {
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let got = if anthropic {
                v.pointer("/content/0/text")
            } else {
                v.pointer("/choices/0/message/content")
            };
            if got.and_then(Value::as_str) != Some(expected.as_str()) {
                problem(format!("a wrong answer: {text}"));
            }
        } else {
            let (delivered, ended) = read_stream(anthropic, &text);
            match ended {
                Ok(true) if delivered == expected => {}
                Ok(true) => problem(format!("duplicated or interleaved content: {delivered:?}")),
                Ok(false) if expected.starts_with(&delivered) => {
                    tally.cut_after_content += 1;
                    continue;
                }
                Ok(false) => problem(format!(
                    "content before the error is not a prefix: {delivered:?}"
                )),
                Err(e) => problem(format!("{e}: {text}")),
            }
        }
        if attempts == 1 {
            tally.ok_first += 1;
        } else {
            tally.recovered += 1;
        }
    }
    println!(
        "\nchaos soak: {requests} requests, seed 20261130, fault rate 0.35, {:.1}s",
        started.elapsed().as_secs_f64()
    );
    println!(
        "  ok first try  recovered  terminal errors  cut after content  attempts (max per request)"
    );
    println!(
        "  {:>12}  {:>9}  {:>15}  {:>17}  {:>17} ({:>2})",
        tally.ok_first,
        tally.recovered,
        tally.terminal,
        tally.cut_after_content,
        tally.attempts,
        tally.max_attempts,
    );
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert_eq!(
        tally.ok_first + tally.recovered + tally.terminal + tally.cut_after_content,
        requests as u64
    );
    assert!(tally.recovered > 0 && tally.ok_first > 0, "{tally:?}");
}
