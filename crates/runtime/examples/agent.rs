//! A tiny agent loop with one tool, against an in-process `rebound chaos` upstream that
//! fails on purpose. It prints the live countdown while rebound waits, and shows that the
//! tool ran exactly once although the request after it was replayed.
//!
//! Run: `cargo run -p rebound-runtime --example agent`

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    reason = "an example that prints"
)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rebound_chaos::{Chaos, ChaosConfig, parse_script};
use rebound_core::RetryStatus;
use rebound_runtime::{Api, Event, Provider, Runtime};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // The upstream: the first answer is fine (a tool call); the request after the tool
    // result is rate limited with a hint, then cut mid-stream, then served.
    let chaos = Chaos::start(
        "127.0.0.1:0".parse()?,
        ChaosConfig {
            chunk_delay: Duration::from_millis(40),
            ..ChaosConfig::default()
        },
    )
    .await?;
    chaos.set_script(
        "default",
        parse_script("ok, 429+retry-after:2, cut-after-3-chunks, ok")?,
    );
    println!("chaos upstream at {}", chaos.anthropic_base_url());

    let runtime = Runtime::interactive()?;
    let provider = Provider {
        api: Api::Messages,
        base_url: chaos.anthropic_base_url(),
        api_key: Some("sk-ant-example".into()),
        model: "chaos-1".into(),
        name: "anthropic".into(),
    };
    let mut turn = runtime.session(vec![provider]);

    // A countdown ticker: re-renders the current wait's status every second (R3).
    let waiting: Arc<Mutex<Option<RetryStatus>>> = Arc::default();
    let ticker_state = Arc::clone(&waiting);
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if let Some(status) = ticker_state.lock().unwrap().as_ref() {
                println!("  … {}", status.text(SystemTime::now()));
            }
        }
    });

    let tools = json!([{"name": "clock", "description": "The time of day.",
        "input_schema": {"type": "object", "properties": {}}}]);
    let mut messages = vec![json!({"role": "user", "content": "What time is it?"})];
    let mut tool_runs = 0;
    loop {
        let body = json!({"max_tokens": 200, "tools": tools, "messages": messages});
        let state = Arc::clone(&waiting);
        let mut on_event = move |event: Event| {
            match &event {
                Event::Retrying { status, .. } => {
                    println!(
                        "  {} ({} {})",
                        status.text(status.since),
                        status.class,
                        status.code.as_ref().map_or("-", |c| c.as_str())
                    );
                    *state.lock().unwrap() = Some(status.clone());
                    return;
                }
                Event::Text { text, .. } => print!("{text}"),
                Event::Discard { .. } => {
                    println!("\n  [stream broke: discarding the partial answer]")
                }
                Event::Error { diagnostics, .. } => println!("\n  error: {diagnostics:?}"),
                _ => {}
            }
            *state.lock().unwrap() = None;
        };
        let response = turn
            .request(&body, true, &mut on_event, &CancellationToken::new())
            .await?;
        let Some(call) = response.tool_calls.first().cloned() else {
            println!();
            break;
        };
        tool_runs += 1;
        let result = "It is noon.";
        println!("tool `{}` ran (run #{tool_runs}) → {result}", call.name);
        let input: Value = serde_json::from_str(&call.arguments).unwrap_or(json!({}));
        messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": call.id, "name": call.name, "input": input}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": result}]}));
    }
    ticker.abort();
    println!(
        "done: the tool ran {tool_runs} time(s); the upstream saw {} requests",
        chaos.attempts("default")
    );
    chaos.shutdown().await;
    Ok(())
}
