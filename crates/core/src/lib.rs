//! # rebound-core
//!
//! The sans-IO heart of rebound: it classifies a provider failure, decides whether to wait,
//! retry, fall back or stop, and computes how long to wait. Every other part of rebound (the
//! runtime driver, the gateway, durable jobs, `rebound classify`) asks this crate and acts on
//! its answer.
//!
//! ## What it owns
//! - [`evidence`]: what a failed attempt left behind.
//! - [`catalogue`]: provider knowledge as data: rule files compiled into pattern matchers, mapping
//!   evidence to a [`classification::Classification`] (C1–C7).
//! - [`retry_after`] and [`hint`]: server timing hints, validated (T1, T2, C6).
//! - [`policy`] and [`backoff`]: the per-class pipeline of reset wait → retry → exhausted
//!   outcome (D1), with the interactive defaults as one preset (T3, T4, B1).
//! - [`turn`]: the budget state machine over a logical turn and its route (B1–B6, D2, D4).
//! - [`status`]: the retry status line (R3) and the exhaustion diagnostics (R4).
//! - [`redact`]: secrets never leave: the keys the process holds by value
//!   ([`redact::secrets`]), every other key by its shape.
//!
//! ## Example
//!
//! ```
//! use std::sync::Arc;
//! use std::time::{Duration, SystemTime};
//!
//! use rebound_core::{
//!     Action, Caller, Catalogue, Evidence, Failure, Jitter, Policy, Safety, Turn,
//! };
//!
//! let catalogue = Catalogue::shipped()?;
//! let mut turn = Turn::single(Arc::new(Policy::interactive()), Caller::Session);
//! let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_050_800);
//!
//! let mut evidence = Evidence {
//!     provider: Some("anthropic".into()),
//!     status: Some(529),
//!     body: Some(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into()),
//!     ..Evidence::default()
//! };
//! evidence.headers.insert("retry-after", "2");
//! let classification = catalogue.classify(&evidence, now);
//! assert_eq!(classification.rule_id.as_deref(), Some("anthropic.overloaded"));
//!
//! let failure = Failure { evidence: &evidence, classification: &classification, safety: Safety::Replayable };
//! match turn.on_failure(failure, now, Jitter::new(0.5)) {
//!     Action::Retry(wait) => {
//!         assert_eq!(wait.delay, Duration::from_secs(2));
//!         assert_eq!(wait.status.text(now), "Retrying in 2s · attempt 1/10");
//!     }
//!     other => panic!("expected a retry, got {other:?}"),
//! }
//! # Ok::<(), rebound_core::CatalogueError>(())
//! ```
//!
//! ## What it must never do
//! Read a clock, sleep, open a file or a socket, or draw random numbers. Time (`now`) and the
//! jitter draw come in as parameters (T6), so every decision is a pure function of its inputs
//! and every schedule is testable in virtual time. `clippy.toml` in this crate turns a clock
//! read, a sleep or a file read into a lint error, and the crate depends on no async runtime.
//!
//! ## Why sans-IO
//! The same decision runs in three very different hosts: an agent runtime's turn loop, an
//! HTTP gateway holding a client connection, and a durable job that may resume after a
//! restart hours later. Keeping the decision free of I/O is what lets all three share one
//! policy object instead of three drifting copies (B6).

pub mod backoff;
pub mod catalogue;
pub mod classification;
pub mod evidence;
pub mod health;
pub mod hint;
pub mod policy;
pub mod redact;
pub mod retry_after;
pub mod status;
pub mod toml_refusal;
pub mod turn;

pub use backoff::{Backoff, Jitter};
pub use catalogue::{Catalogue, CatalogueError, Source};
pub use classification::{
    Class, Classification, Code, Confidence, Scope, UnclassifiedReason, Verdict,
};
pub use evidence::{Evidence, Headers, Phase, TransportKind};
pub use health::{Change, Entry, Gate, Health, HealthSettings, HealthState, Learned};
pub use hint::{Hint, HintSource};
pub use policy::{Caller, ClassPolicy, Exhausted, Limit, Policy, ResetWait, RetryPolicy};
pub use status::{Diagnostics, RetryStatus, StopReason, WaitKind};
pub use turn::{Action, Failure, Rest, Safety, Switches, Turn, TurnSnapshot, Wait};
