//! # rebound-gateway
//!
//! `rebound serve`: a local OpenAI- and Anthropic-compatible gateway. Any agent gets
//! rebound's recovery by changing one base URL.
//!
//! ## What it owns
//! - [`config`]: the TOML configuration (listen address, candidates, routes, per-class
//!   policies) and the embedded default.
//! - [`server`]: listening, gateway keys, body limits, routing.
//! - [`forward`]: one request through the route: invisible retries and fallbacks before the
//!   commit point, byte-faithful relaying after it, keep-alive countdowns, one terminal error.
//! - [`body`]: reading `model`/`stream` and rewriting `model` without touching other bytes.
//! - [`shape`]: errors shaped like each provider's own.
//! - [`jobs`]: durable jobs: the jobs API and the driver that persists every decision.
//! - [`metrics`], [`log`]: what happened, without secrets.
//!
//! ## What it must never do
//! Take an upstream URL from a request; forward a client's gateway key upstream; show a
//! client a retry before its first content byte; end a broken stream as if it were complete;
//! retry inside its HTTP client.

pub mod body;
pub mod config;
pub mod forward;
pub mod jobs;
pub mod log;
pub mod metrics;
pub mod models;
pub mod server;
pub mod shape;

pub use config::{
    Config, ConfigError, DEFAULT_CONFIG, Env, Overrides, ProcessEnv, load, load_with,
};
pub use log::{BatchedStderrLog, LogSink, MemoryLog, NoLog, StderrLog};
pub use server::{Gateway, Server};
