//! `rebound`: provider-failure recovery for LLM agents.
//!
//! The binary is thin: it parses arguments, reads files and standard input, and prints.
//! Every decision comes from `rebound-core`.

mod chaos;
mod classify;
mod demo;
mod jobs;
mod limits;
mod log;
mod run;
mod serve;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Input that rebound refuses: exit code 2 and a one-line reason.
#[derive(Debug)]
pub(crate) struct BadInput(pub(crate) String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Shorthand for a [`BadInput`] error.
pub(crate) fn bad_input(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadInput(message.into()))
}

#[derive(Parser)]
#[command(
    name = "rebound",
    version,
    about = "Provider-failure recovery for LLM agents: classify failures, decide retry, fallback or stop.",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Explain a provider failure: its code, class, rule, timing hint and the wait before a retry.
    Classify(classify::ClassifyArgs),
    /// Run the OpenAI- and Anthropic-compatible recovery gateway.
    #[command(after_help = serve::after_help())]
    Serve(serve::ServeArgs),
    /// Durable jobs on a running gateway: list, show, retry, skip, stop.
    Jobs(jobs::JobsArgs),
    /// A durable agent run on a running gateway: an agent CLI that waits for usage resets,
    /// resumes its session or switches profile (see docs/agent-runs.md).
    Run(run::RunArgs),
    /// Everything at once, offline: chaos upstream, gateway, a few dozen failing requests.
    Demo(demo::DemoArgs),
    /// Run a fault-injecting upstream that speaks OpenAI and Anthropic, for testing recovery.
    Chaos(chaos::ChaosArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
            report(&clap_reason(&e));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Classify(args) => classify::run(args),
        Command::Chaos(args) => chaos::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Jobs(args) => jobs::run(args),
        Command::Run(args) => run::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<BadInput>() => {
            report(&e.to_string());
            ExitCode::from(2)
        }
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            report(&format!("{e:#}"));
            ExitCode::FAILURE
        }
    }
}

/// clap's reason on one line, without the offending value: a value in the wrong place may be
/// a credential.
fn clap_reason(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ErrorKind};
    let arg = e.get(ContextKind::InvalidArg).map(ToString::to_string);
    match (e.kind(), arg) {
        (ErrorKind::InvalidValue | ErrorKind::ValueValidation, Some(arg)) => {
            let mut reason = format!("invalid value for {arg}");
            if let Some(valid) = e.get(ContextKind::ValidValue) {
                reason.push_str(&format!(", expected one of {valid}"));
            }
            format!("{reason} (see rebound --help)")
        }
        _ => {
            let rendered = e.render().to_string();
            let first = rendered.lines().next().unwrap_or("invalid arguments");
            format!(
                "{} (see rebound --help)",
                first.trim_start_matches("error: ")
            )
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Prints `rebound: <message>` as one line on standard error, redacted: an argument in the
/// wrong place may be a credential.
fn report(message: &str) {
    let redacted = rebound_core::redact::redact(message);
    let one_line = redacted.split_whitespace().collect::<Vec<_>>().join(" ");
    let _ = writeln!(std::io::stderr().lock(), "rebound: {one_line}");
}
