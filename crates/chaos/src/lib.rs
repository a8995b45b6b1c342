//! # rebound-chaos
//!
//! A fault-injecting upstream that speaks OpenAI Chat Completions (`/v1/chat/completions`),
//! the OpenAI Responses API (`/v1/responses`, with stored responses and background mode),
//! Anthropic Messages (`/v1/messages`), both token-counting endpoints and `/v1/models`,
//! streaming and not, with a deterministic fake model that thinks when asked and calls tools
//! with arguments that satisfy their schemas. Point an agent, an official SDK or rebound
//! itself at it and script what goes wrong.
//!
//! ## What it owns
//! - [`script`]: fault steps (`502, 429+retry-after-ms:300, cut-after-3-chunks, ok+thinking`).
//! - [`model`]: the fake model: what it answers to a conversation.
//! - [`schema`]: example tool arguments from a JSON schema.
//! - [`chat`], [`messages`], [`responses`]: each API's wire shapes; [`error_shape`]: error
//!   bodies and in-stream error events.
//! - [`stream`]: response bodies, streamed or whole, and the faults that break them.
//! - [`server`]: the HTTP server, per-key attempt counters (`GET /chaos/attempts`), scripts
//!   (`POST /chaos/scripts`) and the requests it received ([`Chaos::requests`]).
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

pub mod chat;
mod control;
pub mod error_shape;
pub mod messages;
pub mod model;
pub mod record;
pub mod responses;
mod route;
pub mod schema;
pub mod script;
pub mod server;
mod state;
mod stored;
pub mod stream;

pub use model::{Api, Protocol};
pub use record::RecordedRequest;
pub use script::{Modifiers, Step, ToolChoice, parse_modifiers, parse_script};
pub use server::Chaos;
pub use state::{ChaosConfig, KEY_HEADER};
