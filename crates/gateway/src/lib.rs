//! # rebound-gateway
//!
//! `rebound serve`: a local OpenAI- and Anthropic-compatible gateway. Any agent gets
//! rebound's recovery by changing one base URL.
//!
//! ## What it owns
//! - [`config`]: the TOML configuration (listen address, candidates, routes, per-class
//!   policies) and the embedded default.
//! - [`state`]: what every part shares (the [`Gateway`]): configuration, upstream client,
//!   recovery engine, metrics, jobs.
//! - [`server`]: listening and serving connections; `router` sends each path to its part,
//!   after `auth` (gateway keys) and `limit` (body sizes).
//! - [`forward`]: one request as a host of the recovery loop (`rebound_runtime::recovery`):
//!   invisible retries and fallbacks before the commit point, byte-faithful relaying after it,
//!   keep-alive countdowns, one terminal error.
//! - `passthrough`: token counting, stored responses and every path rebound does not serve,
//!   forwarded byte for byte to a provider as hosts of the same loop (G8); `caller` tells an
//!   Anthropic caller from an OpenAI one; [`responses`] remembers which candidate holds each
//!   stored response.
//! - [`body`]: reading `model`/`stream` and rewriting `model` without touching other bytes.
//! - [`shape`]: errors shaped like each provider's own.
//! - [`jobs`]: durable jobs: the jobs API and the driver that persists every decision.
//! - `health`: the shared health ledger as `GET /v1/rebound/health` shows it (S6); the ledger
//!   itself is the recovery engine's, so live requests and jobs share it (S1).
//! - [`runs`]: durable agent runs: agent CLIs as child processes, resumed or switched by the
//!   recovery loop with effect safety for agents (D4).
//! - [`metrics`]: what happened, counted, without secrets; `observe` counts what the recovery
//!   loop reports, for live requests and jobs alike. Events (one per attempt outcome) go
//!   through `tracing`; the binary chooses where they are written.
//!
//! ## What it must never do
//! Take an upstream URL from a request; forward a client's gateway key upstream; show a
//! client a retry before its first content byte; end a broken stream as if it were complete;
//! retry inside its HTTP client.

mod auth;
mod blocking;
pub mod body;
mod caller;
pub mod config;
pub mod forward;
mod health;
pub mod jobs;
mod limit;
pub mod metrics;
pub mod models;
pub mod observe;
mod passthrough;
pub mod peers;
mod reply;
pub mod responses;
mod router;
pub mod runs;
pub mod server;
pub mod shape;
pub mod state;
mod status;
mod unstreamed;

pub use config::{
    Config, ConfigError, DEFAULT_CONFIG, Env, Overrides, ProcessEnv, load, load_with,
};
pub use server::Server;
pub use state::Gateway;
