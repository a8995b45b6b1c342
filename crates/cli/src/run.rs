//! `rebound run`: a durable agent run on a running gateway, its output followed to this
//! terminal (docs/agent-runs.md).

use std::io::Write;

use anyhow::{Context, Result, anyhow};
use bytes::Bytes;
use clap::Args;
use http::Request;
use http_body_util::BodyExt;
use rebound_runtime::{HttpClient, Timeouts};
use serde_json::{Value, json};

use crate::bad_input;

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    /// What the agent is asked.
    #[arg(required_unless_present_any = ["show", "list"])]
    prompt: Option<String>,
    /// The agent route (`[[agent_route]]`); the gateway's first by default.
    #[arg(long)]
    route: Option<String>,
    /// The working directory of the agent (default: this one).
    #[arg(long, value_name = "DIR")]
    cwd: Option<std::path::PathBuf>,
    /// Submit and print the run's id, without following it.
    #[arg(long)]
    detach: bool,
    /// Show one run (state, deadline, session, invocations, output tail) instead.
    #[arg(long, value_name = "ID", conflicts_with_all = ["prompt", "list"])]
    show: Option<String>,
    /// List the newest runs instead.
    #[arg(long, conflicts_with = "prompt")]
    list: bool,
    /// The gateway.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8080")]
    gateway: String,
    /// The environment variable holding the gateway key, when the gateway requires one.
    #[arg(long, value_name = "NAME", default_value = "REBOUND_GATEWAY_KEY")]
    key_env: String,
}

fn shown(text: &str) -> String {
    rebound_core::redact::secrets::known()
        .redact(text)
        .into_owned()
}

/// One line for a state event.
fn state_line(event: &Value) -> String {
    let s = |k: &str| {
        event
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_owned()
    };
    let mut line = format!("rebound: run {} {}", s("id"), s("state"));
    if let Some(profile) = event.get("profile").and_then(Value::as_str) {
        line.push_str(&format!(" on {profile}"));
    }
    if let Some(deadline) = event.get("deadline_ms").and_then(Value::as_u64) {
        let at = httpdate::fmt_http_date(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(deadline),
        );
        line.push_str(&format!(", then {} at {at}", s("pending_outcome")));
    }
    if let Some(code) = event
        .pointer("/classification/code")
        .and_then(Value::as_str)
        && event.get("state").and_then(Value::as_str) != Some("succeeded")
    {
        line.push_str(&format!(" ({code})"));
    }
    if let Some(message) = event
        .pointer("/error/message")
        .or_else(|| event.pointer("/error/reason"))
        .and_then(Value::as_str)
    {
        line.push_str(&format!(": {message}"));
    }
    line
}

/// One run in `--list`: id, state, profile, deadline and what follows it, last code.
fn list_line(run: &Value) -> String {
    let s = |k: &str| run.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
    let deadline = run
        .get("deadline_ms")
        .and_then(Value::as_u64)
        .map_or_else(|| "-".into(), |d| d.to_string());
    format!(
        "{:<30} {:<16} profile {:<12} deadline_ms {:<14} then {:<7} {}",
        s("id"),
        s("state"),
        s("profile"),
        deadline,
        s("pending_outcome"),
        run.pointer("/classification/code")
            .and_then(Value::as_str)
            .unwrap_or("")
    )
}

/// Prints one event; the final state, once seen.
fn print_event(event: &Value) -> Result<Option<String>> {
    match event.get("type").and_then(Value::as_str) {
        Some("output") => {
            let line = event.get("line").and_then(Value::as_str).unwrap_or("");
            if event.get("stream").and_then(Value::as_str) == Some("stderr") {
                writeln!(std::io::stderr().lock(), "{}", shown(line))?;
            } else {
                writeln!(std::io::stdout().lock(), "{}", shown(line))?;
            }
        }
        Some("invocation") => {
            let s = |k: &str| event.get(k).map_or_else(|| "-".into(), |v| v.to_string());
            writeln!(
                std::io::stderr().lock(),
                "rebound: invocation {} on {} ({})",
                s("number"),
                s("profile").trim_matches('"'),
                s("mode").trim_matches('"')
            )?;
        }
        Some("state") => {
            writeln!(std::io::stderr().lock(), "{}", shown(&state_line(event)))?;
            let state = event.get("state").and_then(Value::as_str).unwrap_or("");
            if matches!(state, "succeeded" | "failed" | "action_required") {
                return Ok(Some(state.to_owned()));
            }
        }
        _ => {}
    }
    Ok(None)
}

fn request(
    args: &RunArgs,
    key: Option<&str>,
    method: &str,
    path: &str,
    body: String,
) -> Result<Request<Bytes>> {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("{}{path}", args.gateway.trim_end_matches('/')))
        .header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    request
        .body(Bytes::from(body))
        .map_err(|e| bad_input(format!("--gateway {}: {e}", args.gateway)))
}

pub(crate) fn run(args: RunArgs) -> Result<()> {
    let http = HttpClient::new(Timeouts {
        // A run's stream is quiet while it waits for a reset: hours, not seconds.
        idle: std::time::Duration::from_secs(7 * 24 * 3600),
        ..Timeouts::default()
    })
    .context("setting up TLS")?;
    let key = std::env::var(&args.key_env).ok().filter(|k| !k.is_empty());
    rebound_core::redact::secrets::remember(key.iter().cloned());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let (method, path, body) = if let Some(id) = &args.show {
            ("GET", format!("/v1/rebound/runs/{id}"), String::new())
        } else if args.list {
            ("GET", "/v1/rebound/runs".to_owned(), String::new())
        } else {
            let cwd = match &args.cwd {
                Some(dir) => dir.clone(),
                None => std::env::current_dir().context("reading the working directory")?,
            };
            let cwd = std::fs::canonicalize(&cwd)
                .map_err(|e| bad_input(format!("--cwd {}: {e}", cwd.display())))?;
            let submit = json!({
                "prompt": args.prompt,
                "route": args.route,
                "cwd": cwd.to_string_lossy(),
                "stream": !args.detach,
            });
            ("POST", "/v1/rebound/runs".to_owned(), submit.to_string())
        };
        let request = request(&args, key.as_deref(), method, &path, body)?;
        let response = http
            .send(request)
            .await
            .map_err(|e| bad_input(format!("--gateway {}: {}", args.gateway, e.message)))?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        if !(200..300).contains(&status) || args.show.is_some() || args.list || args.detach {
            let bytes = body
                .collect()
                .await
                .context("reading the gateway's answer")?
                .to_bytes();
            let value: Value = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            if !(200..300).contains(&status) {
                let text = value
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .map_or_else(|| value.to_string(), str::to_owned);
                return Err(bad_input(format!("the gateway answered {status}: {text}")));
            }
            let text = if args.detach {
                value
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("-")
                    .to_owned()
            } else if let Some(runs) = value.get("runs").and_then(Value::as_array) {
                if runs.is_empty() {
                    "no runs".to_owned()
                } else {
                    runs.iter().map(list_line).collect::<Vec<_>>().join("\n")
                }
            } else {
                serde_json::to_string_pretty(&value)?
            };
            writeln!(std::io::stdout().lock(), "{}", shown(&text))?;
            return Ok(());
        }
        let mut pending = Vec::new();
        let mut last = None;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| anyhow!("the gateway's stream broke: {e}"))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            pending.extend_from_slice(&data);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                if let Ok(event) = serde_json::from_slice::<Value>(&line)
                    && let Some(state) = print_event(&event)?
                {
                    last = Some(state);
                }
            }
        }
        match last.as_deref() {
            Some("succeeded") => Ok(()),
            Some(state) => Err(anyhow!("the run ended {state}")),
            None => Err(anyhow!("the gateway's stream ended before the run did")),
        }
    })
}
