//! # rebound-chaos
//!
//! A fault-injecting upstream that speaks OpenAI Chat Completions (`/v1/chat/completions`,
//! `/v1/models`) and Anthropic Messages (`/v1/messages`), streaming and not, with a
//! deterministic fake model. Point an agent, an official SDK or rebound itself at it and
//! script what goes wrong.
//!
//! ## What it owns
//! - [`script`]: fault steps (`502, 429+retry-after-ms:300, cut-after-3-chunks, ok`).
//! - [`model`]: the fake model and both protocols' wire shapes, including provider-shaped
//!   error bodies and in-stream error events.
//! - [`server`]: the HTTP server, per-key attempt counters (`GET /chaos/attempts`) and
//!   scripts (`POST /chaos/scripts`).
//!
//! ## Example
//!
//! ```
//! use rebound_chaos::{Step, parse_script};
//!
//! let steps = parse_script("502, 429+retry-after-ms:300, cut-after-3-chunks, ok").unwrap();
//! assert_eq!(steps.len(), 4);
//! assert_eq!(steps[2], Step::CutAfter(3));
//! ```
//!
//! ## What it must never do
//! Answer nondeterministically: the same script, seed and requests give the same bytes, so
//! tests can assert exact attempt counts.

pub mod model;
pub mod script;
pub mod server;

pub use model::Protocol;
pub use script::{Step, parse_script};
pub use server::{Chaos, ChaosConfig, KEY_HEADER};
