//! # rebound-runtime
//!
//! The async layer an agent runtime embeds. It sends one model request through a provider
//! (OpenAI Chat Completions, the OpenAI Responses API or Anthropic Messages, streaming or
//! not); when the request fails
//! it asks `rebound-core` what to do, waits (abortably), replays only the failed request, and
//! tells the caller what it is doing.
//!
//! ## What it owns
//! - [`http`]: the one HTTP client, with rustls, pooling and timeouts, and no retries of its
//!   own (B5); transport failures become evidence.
//! - [`provider`]: the two protocols and their three APIs (Chat Completions, Responses,
//!   Messages): requests, complete answers, stream items and the commit point.
//! - [`sse`]: server-sent-events framing.
//! - [`form`]: an answer in the other form than asked (a whole answer to a stream request, a
//!   stream to one that does not stream), told as the API would have sent it in the form asked.
//! - [`foreign`]: a success in a format no API speaks (a web page, JSON that is no answer).
//! - [`recovery`]: the recovery loop, written once: attempt, evidence, decision, then wait,
//!   fall back or stop, over a small [`Host`] trait. The gateway's live requests and durable
//!   jobs are hosts of it too.
//! - [`attempt`]: one attempt's outcome and the evidence a failed one leaves behind.
//! - [`driver`]: the [`Runtime`] (client, one policy object, recovery engine) and the
//!   [`TurnDriver`] that runs one request at a time as a host of the loop.
//! - [`health`]: the health ledger every recovery of an engine shares (S1–S3).
//! - [`time`]: the clock and the one way to wait, virtual in tests.
//! - [`event`]: what the caller hears: text, reasoning, discard, retrying, fallback, error,
//!   end.
//!
//! ## Example
//!
//! ```no_run
//! use rebound_runtime::{Api, Event, Provider, Runtime};
//! use serde_json::json;
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let runtime = Runtime::interactive()?;
//! let provider = Provider {
//!     api: Api::Messages,
//!     base_url: "https://api.anthropic.com".into(),
//!     api_key: std::env::var("ANTHROPIC_API_KEY").ok(),
//!     model: "claude-sonnet-4-5".into(),
//!     name: "anthropic".into(),
//! };
//! let mut turn = runtime.session(vec![provider]);
//! let mut on_event = |event: Event| match event {
//!     Event::Text { text, .. } => print!("{text}"),
//!     Event::Discard { .. } => println!("\n[discarding a broken partial answer]"),
//!     Event::Retrying { status, .. } => println!("{}", status.text(status.since)),
//!     _ => {}
//! };
//! let body = json!({"messages": [{"role": "user", "content": "Hello"}]});
//! let response = turn.request(&body, true, &mut on_event, &CancellationToken::new()).await?;
//! println!("\n{} tool calls", response.tool_calls.len());
//! # Ok(())
//! # }
//! ```
//!
//! Stream framing is usable on its own:
//!
//! ```
//! use rebound_runtime::sse::SseFramer;
//!
//! let mut framer = SseFramer::new();
//! assert!(framer.push(b"event: ping\ndata: {}").unwrap().is_empty());
//! let events = framer.push(b"\n\n").unwrap();
//! assert_eq!(events[0].event, "ping");
//! ```
//!
//! ## What it must never do
//! Retry anywhere but in the recovery loop; re-send an earlier step of a turn (so a completed
//! tool call never runs twice); emit more than one terminal error or end per request; keep
//! sending after an abort.

pub mod attempt;
pub mod driver;
pub mod event;
pub mod foreign;
pub mod form;
pub mod health;
pub mod http;
pub mod provider;
mod reading;
pub mod recovery;
pub mod sse;
pub mod time;

pub use attempt::{Attempted, Failed};
pub use driver::{Runtime, TurnDriver, TurnError};
pub use event::{Event, EventSink, Outcome};
pub use health::SharedHealth;
pub use http::{HttpClient, Timeouts};
pub use provider::{Api, ModelResponse, Protocol, Provider, ToolCall};
pub use recovery::{Decision, Ending, Engine, Flow, Host, Report, recover};
pub use time::{
    Clock, HeldSleeper, ManualTime, Sleeper, SystemClock, TokioSleeper, VirtualTime, Wait, Waits,
};
