//! `rebound jobs`: durable jobs on a running gateway, from the command line.

use std::io::Write;

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::{Args, Subcommand};
use http::Request;
use http_body_util::BodyExt;
use rebound_runtime::{HttpClient, Timeouts};
use serde_json::{Value, json};

use crate::bad_input;

#[derive(Args, Debug)]
pub(crate) struct JobsArgs {
    /// The gateway.
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    gateway: String,
    /// The environment variable holding the gateway key, when the gateway requires one.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "REBOUND_GATEWAY_KEY",
        global = true
    )]
    key_env: String,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: JobsCommand,
}

#[derive(Subcommand, Debug)]
enum JobsCommand {
    /// The newest jobs.
    List,
    /// One job, with its attempts and, when done, its response.
    Show {
        /// The job id.
        id: String,
    },
    /// Retry now, whatever the job waits for.
    Retry(ActionArgs),
    /// Move on to the route's next candidate (on the last one, the job fails).
    Skip(ActionArgs),
    /// Stop the job.
    Stop(ActionArgs),
}

#[derive(Args, Debug)]
struct ActionArgs {
    /// The job id.
    id: String,
    /// The generation the action is decided against (default: the job's current one). If the
    /// job has moved on since, nothing changes.
    #[arg(long)]
    generation: Option<u64>,
}

struct Client {
    http: HttpClient,
    base: String,
    key: Option<String>,
}

impl Client {
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<(u16, Value)> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base.trim_end_matches('/')))
            .header("content-type", "application/json");
        if let Some(key) = &self.key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = request
            .body(Bytes::from(body))
            .map_err(|e| bad_input(format!("--gateway {}: {e}", self.base)))?;
        let response = self
            .http
            .send(request)
            .await
            .map_err(|e| bad_input(format!("--gateway {}: {}", self.base, e.message)))?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .context("reading the gateway's answer")?
            .to_bytes();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok((status, value))
    }
}

fn print(value: &Value) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", shown(&serde_json::to_string_pretty(value)?))?;
    Ok(())
}

/// `text` without the keys this process holds (the gateway key it presents), by value: what
/// it prints is a gateway's answer, already redacted by shape there.
fn shown(text: &str) -> String {
    rebound_core::redact::secrets::known()
        .redact(text)
        .into_owned()
}

fn line(job: &Value) -> String {
    let s = |k: &str| job.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
    let deadline = job
        .get("deadline_ms")
        .and_then(Value::as_u64)
        .map_or_else(|| "-".into(), |d| d.to_string());
    format!(
        "{:<30} {:<16} gen {:<4} candidate {:<14} deadline_ms {:<14} {}",
        s("id"),
        s("state"),
        job.get("generation").and_then(Value::as_u64).unwrap_or(0),
        s("candidate"),
        deadline,
        job.get("classification")
            .and_then(|c| c.get("code"))
            .and_then(Value::as_str)
            .unwrap_or("")
    )
}

pub(crate) fn run(args: JobsArgs) -> Result<()> {
    let client = Client {
        http: HttpClient::new(Timeouts::default()).context("setting up TLS")?,
        base: args.gateway.clone(),
        key: std::env::var(&args.key_env).ok().filter(|k| !k.is_empty()),
    };
    // The gateway key is a secret of this process too: no output or message shows it.
    rebound_core::redact::secrets::remember(client.key.iter().cloned());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let (status, value) = match &args.command {
            JobsCommand::List => client.call("GET", "/v1/rebound/jobs", None).await?,
            JobsCommand::Show { id } => {
                client
                    .call("GET", &format!("/v1/rebound/jobs/{id}"), None)
                    .await?
            }
            JobsCommand::Retry(a) | JobsCommand::Skip(a) | JobsCommand::Stop(a) => {
                let action = match &args.command {
                    JobsCommand::Retry(_) => "retry",
                    JobsCommand::Skip(_) => "skip",
                    _ => "stop",
                };
                let generation = match a.generation {
                    Some(g) => g,
                    None => {
                        let (status, job) = client
                            .call("GET", &format!("/v1/rebound/jobs/{}", a.id), None)
                            .await?;
                        if status != 200 {
                            return Err(bad_input(message(&job, status)));
                        }
                        job.get("generation").and_then(Value::as_u64).unwrap_or(0)
                    }
                };
                client
                    .call(
                        "POST",
                        &format!("/v1/rebound/jobs/{}/{action}", a.id),
                        Some(json!({"generation": generation})),
                    )
                    .await?
            }
        };
        if !(200..300).contains(&status) {
            return Err(bad_input(message(&value, status)));
        }
        if args.json || matches!(args.command, JobsCommand::Show { .. }) {
            return print(&value);
        }
        let mut out = std::io::stdout().lock();
        match value.get("jobs").and_then(Value::as_array) {
            Some(jobs) if jobs.is_empty() => writeln!(out, "no jobs")?,
            Some(jobs) => {
                for job in jobs {
                    writeln!(out, "{}", shown(&line(job)))?;
                }
            }
            None => writeln!(out, "{}", shown(&line(&value)))?,
        }
        Ok(())
    })
}

fn message(value: &Value, status: u16) -> String {
    let text = value
        .pointer("/error/message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| value.to_string());
    format!("the gateway answered {status}: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_it_prints_never_shows_the_gateway_key_it_holds() {
        let key = "gw-5b7e2c91-jobs-door";
        rebound_core::redact::secrets::remember([key]);
        let job = json!({"id": "job_1", "state": "failed", "error": {"message": format!("echoed {key}")}});
        let text = shown(&serde_json::to_string_pretty(&job).unwrap());
        assert!(
            !text.contains(key) && text.contains("echoed [redacted]"),
            "{text}"
        );
    }
}
