//! `rebound serve`: the gateway, in the foreground.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use rebound_gateway::config::Config;
use rebound_gateway::{DEFAULT_CONFIG, Gateway, Overrides, ProcessEnv, Server, load_with};
use rebound_runtime::HttpClient;
use rebound_store::runs::SqliteRunStore;
use rebound_store::{JobStore, PostgresOptions, PostgresStore, SqliteStore};

use crate::bad_input;
use crate::log::LogFormat;

#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// The configuration file (TOML). Without it, rebound serves the embedded default:
    /// OpenAI-protocol requests to the OpenAI API, Anthropic-protocol requests to the
    /// Anthropic API, keys from OPENAI_API_KEY / ANTHROPIC_API_KEY or passed through.
    #[arg(long, short, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on (overrides the config).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// The OpenAI upstream base URL, as the SDKs take it (with /v1). Embedded default only.
    #[arg(long, value_name = "URL", conflicts_with = "config")]
    openai_upstream: Option<String>,
    /// The Anthropic upstream base URL, as the SDKs take it (without /v1). Embedded default only.
    #[arg(long, value_name = "URL", conflicts_with = "config")]
    anthropic_upstream: Option<String>,
    /// Speak HTTP/2 to every upstream (as `http2 = true` on each candidate): one connection
    /// carries all concurrent requests to an upstream.
    #[arg(long)]
    upstream_http2: bool,
    /// A folder of user rule files (*.toml) to add to the shipped catalogue.
    #[arg(long, value_name = "DIR")]
    catalogue: Option<PathBuf>,
    /// How log lines are written to standard error: `text` (`key=value` fields) or `json`
    /// (one object a line). REBOUND_LOG filters them, in RUST_LOG syntax (default
    /// `warn,rebound=info`).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// What `serve --help` tells after the options: the attempt timeouts and the shared health
/// ledger's settings, with their defaults (set in the config file).
pub(crate) fn after_help() -> String {
    let t = rebound_runtime::Timeouts::default();
    let h = rebound_core::HealthSettings::default();
    let ms = |d: std::time::Duration| d.as_millis();
    format!(
        "Attempt timeouts (config `[timeouts]`, or `timeouts = {{ … }}` on a candidate; each expiry is \
a transient failure, and a candidate silent to the first byte or first content hands over to \
the next one on its route):
  connect_ms            {:>9}  connecting (gateway-wide)
  first_byte_ms         {:>9}  request to response headers, non-streaming (the whole answer)
  stream_first_byte_ms  {:>9}  request to response headers, streaming
  first_content_ms      {:>9}  stream headers to first content (time to first token)
  stream_idle_ms        {:>9}  longest quiet gap in a stream

Shared health (config `[health]`; `enabled = false` turns it off): a server's reset hint cools a \
candidate down for every request and job; consecutive transient failures open a circuit; one \
request probes when it ends. GET /v1/rebound/health shows it.
  circuit_after         {:>9}  consecutive transient failures that open a circuit
  window_ms             {:>9}  first circuit window (doubles after each failed probe)
  window_cap_ms         {:>9}  longest circuit window
  hint_cap_ms           {:>9}  longest cooldown a hint may set
  probe_lease_ms        {:>9}  how long a probe may run before another request probes",
        ms(t.connect),
        ms(t.first_byte),
        ms(t.stream_first_byte),
        ms(t.first_content),
        ms(t.idle),
        h.circuit_after,
        ms(h.window),
        ms(h.window_cap),
        ms(h.hint_cap),
        ms(h.probe_lease),
    )
}

pub(crate) fn run(args: ServeArgs) -> Result<()> {
    // Written until `run` returns, the last lines on the way out.
    let _log = crate::log::install(args.log_format)?;
    let (name, text) = match &args.config {
        Some(path) => (
            path.display().to_string(),
            std::fs::read_to_string(path)
                .map_err(|e| bad_input(format!("--config {}: {e}", path.display())))?,
        ),
        None => ("embedded default".to_owned(), DEFAULT_CONFIG.to_owned()),
    };
    let overrides = Overrides {
        listen: args.listen,
        openai_upstream: args.openai_upstream.clone(),
        anthropic_upstream: args.anthropic_upstream.clone(),
        upstream_http2: args.upstream_http2,
    };
    let catalogue = crate::classify::load_catalogue(args.catalogue.as_deref())?;
    let mut config = load_with(&name, &text, &overrides, &ProcessEnv, Some(&catalogue))
        .map_err(|e| bad_input(e.to_string()))?;
    let open_files = crate::limits::raise_open_files();
    if config.max_connections.is_none()
        && let Some(open_files) = open_files
    {
        config.max_connections = Some(config.connections_for_open_files(open_files));
    }
    let mut connections = format!(
        "  connections         up to {} at once (open files limit {}, listen backlog {})",
        config.connection_cap(),
        open_files.map_or_else(|| "unlimited".to_owned(), |n| n.to_string()),
        config.listen_backlog
    );
    let client = HttpClient::configured(
        config.client_timeouts(),
        &config.upstream_roots,
        &config.upstream_proxies,
    )
    .context("setting up TLS")?;
    if !config.upstream_roots.is_empty() {
        let n = config.upstream_roots.len();
        connections = format!(
            "{connections}\n  upstream TLS        the public roots and {n} CA certificate{} of upstream_ca_file",
            if n == 1 { "" } else { "s" }
        );
    }
    for line in config.upstream_proxies.describe() {
        connections = format!("{connections}\n  upstream proxy      {line}");
    }
    // Opened before the async runtime starts, and released and dropped after it ends: the
    // PostgreSQL client blocks on its own connections, which it must never do on the async
    // thread.
    let (store, shared, store_name) = open_store(&config)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let jobs_store = Arc::clone(&store);
    let served = runtime.block_on(async move {
        let gated = !config.gateway_keys.is_empty();
        let routes: Vec<String> = config
            .routes
            .iter()
            .map(|r| {
                let candidates: Vec<String> = r
                    .candidates
                    .iter()
                    .map(|c| {
                        let key = c.key_source(gated);
                        let http2 = if c.http2 { ", HTTP/2" } else { "" };
                        format!("{} → {} ({key}{http2})", c.id, c.base_url)
                    })
                    .collect();
                format!("  route {} [{}]: {}", r.id, r.models.join(", "), candidates.join(", "))
            })
            .collect();
        // Agent runs stay in the embedded SQLite file, whatever holds the jobs.
        let store_path = config.store_path.clone();
        let run_store = SqliteRunStore::open(&store_path)
            .map_err(|e| bad_input(format!("agent runs at {}: {e}", store_path.display())))?;
        let gateway = Gateway::new(config, client, Arc::new(catalogue))
            .with_jobs(jobs_store)
            .with_runs(Arc::new(run_store));
        // On a shared store, the health ledger is shared too (X3): listening before serving.
        if let Some(shared) = shared {
            gateway.share_health(shared).await;
        }
        let server = Server::start(gateway, None)
            .await
            .map_err(|e| bad_input(format!("cannot listen: {e}")))?;
        let resumed = rebound_gateway::jobs::resume(server.gateway())
            .await
            .map_err(|e| bad_input(format!("durable jobs at {store_name}: {e}")))?;
        let runs = rebound_gateway::runs::resume(server.gateway())
            .await
            .map_err(|e| bad_input(format!("agent runs at {}: {e}", store_path.display())))?;
        let addr = server.addr();
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "rebound serve listening on {addr}\n  OpenAI base URL     http://{addr}/v1\n  Anthropic base URL  http://{addr}\n  status page         http://{addr}/status\n  metrics             http://{addr}/metrics\n  jobs                http://{addr}/v1/rebound/jobs ({} resumed, {} need action; {})\n  agent runs          http://{addr}/v1/rebound/runs ({} resumed, {} need action)\n{connections}\n{}",
            resumed.due.len(),
            resumed.action_required.len(),
            store_name,
            runs.due.len(),
            runs.action_required.len(),
            routes.join("\n")
        );
        let _ = out.flush();
        drop(out);
        stopped().await?;
        server.shutdown().await;
        Ok(())
    });
    // The job drivers end with the runtime; then, on a shared store, this instance's holds go
    // at once to the other instances, which take its jobs over under the restart rule (X2,
    // P3) instead of waiting for the leases to run out.
    drop(runtime);
    match store.release() {
        Ok(0) => {}
        Ok(let_go) => tracing::info!(event = "job_holds_released", jobs = let_go),
        Err(e) => tracing::warn!(event = "job_holds_release_failed", error = %e),
    }
    served
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM, the signal service managers and container
/// runtimes stop a process with: either is a clean stop.
pub(crate) async fn stopped() -> Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("waiting for SIGTERM")?;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted.context("waiting for Ctrl-C"),
        _ = terminate.recv() => Ok(()),
    }
}

/// A store as opened: the jobs' store, the same again when it is PostgreSQL (for the shared
/// health ledger), and how the banner names it.
type Opened = (Arc<dyn JobStore>, Option<Arc<PostgresStore>>, String);

/// The durable jobs store the configuration names, opened (and migrated), and how the banner
/// names it: the SQLite file, or the PostgreSQL URL (which holds no password).
fn open_store(config: &Config) -> Result<Opened> {
    match &config.shared_store {
        Some(shared) => {
            let store = PostgresStore::connect(PostgresOptions {
                url: shared.url.clone(),
                password: shared.password.clone(),
                ca_file: shared.ca_file.clone(),
                lease: shared.lease,
                pool_size: POSTGRES_POOL_SIZE,
                owner: None,
            })
            .map_err(|e| bad_input(format!("durable jobs at {}: {e}", shared.url)))?;
            let name = format!("{}, instance {}", shared.url, store.owner());
            let store = Arc::new(store);
            Ok((Arc::clone(&store) as Arc<dyn JobStore>, Some(store), name))
        }
        None => {
            let path = &config.store_path;
            let store = SqliteStore::open(path)
                .map_err(|e| bad_input(format!("durable jobs at {}: {e}", path.display())))?;
            Ok((Arc::new(store), None, path.display().to_string()))
        }
    }
}

/// The most PostgreSQL connections one instance opens: the store is reached from the
/// blocking pool, one call per connection at a time.
const POSTGRES_POOL_SIZE: u32 = 8;
