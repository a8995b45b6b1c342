//! `rebound chaos`: the fault-injecting upstream, in the foreground.

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use rebound_chaos::{Chaos, ChaosConfig, parse_modifiers, parse_script};

use crate::bad_input;

#[derive(Args, Debug)]
pub(crate) struct ChaosArgs {
    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8787")]
    listen: SocketAddr,
    /// A fault script for requests carrying `x-chaos-key: KEY` (`default` for requests
    /// without the header), e.g. `default=502, 429+retry-after-ms:300, cut-after-3-chunks, ok`.
    /// Repeat for more keys.
    #[arg(long = "script", value_name = "KEY=STEPS")]
    scripts: Vec<String>,
    /// Inject random faults into keys without a script, drawn from this seed.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// With --seed: the share of requests that fail, in [0, 1].
    #[arg(long, value_name = "R", default_value_t = 0.3, requires = "seed")]
    fault_rate: f64,
    /// What replies hold when their step names no modifiers, e.g. `text` (never call a
    /// tool), `tool:Read` (call that tool on a conversation's first turn), `thinking`.
    #[arg(long, value_name = "MODIFIERS")]
    reply: Option<String>,
    /// Pause between streamed content chunks, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 20)]
    chunk_delay_ms: u64,
}

pub(crate) fn run(args: ChaosArgs) -> Result<()> {
    if !(0.0..=1.0).contains(&args.fault_rate) {
        return Err(bad_input(format!(
            "--fault-rate {} is outside [0, 1]",
            args.fault_rate
        )));
    }
    let mut scripts = HashMap::new();
    for (index, script) in args.scripts.iter().enumerate() {
        let Some((key, steps)) = script.split_once('=') else {
            return Err(bad_input(format!(
                "--script #{}: expected KEY=STEPS",
                index + 1
            )));
        };
        let steps =
            parse_script(steps).map_err(|e| bad_input(format!("--script {}: {e}", key.trim())))?;
        scripts.insert(key.trim().to_owned(), steps);
    }
    let reply = args
        .reply
        .as_deref()
        .map(parse_modifiers)
        .transpose()
        .map_err(|e| bad_input(format!("--reply: {e}")))?;
    let config = ChaosConfig {
        scripts,
        seed: args.seed,
        fault_rate: args.fault_rate,
        chunk_delay: Duration::from_millis(args.chunk_delay_ms),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let chaos = Chaos::start(args.listen, config)
            .await
            .map_err(|e| bad_input(format!("--listen {}: {e}", args.listen)))?;
        if let Some(reply) = reply {
            chaos.set_reply(reply);
        }
        // The banner is a courtesy: a closed stdout must not stop the server.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "rebound chaos listening on {}\n  OpenAI base URL     {}\n  Anthropic base URL  {}\n  attempts            GET http://{}/chaos/attempts",
            chaos.addr(),
            chaos.openai_base_url(),
            chaos.anthropic_base_url(),
            chaos.addr()
        );
        let _ = out.flush();
        drop(out);
        tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
        chaos.shutdown().await;
        Ok(())
    })
}
