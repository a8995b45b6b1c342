//! # rebound-store
//!
//! Durable routes (SPEC P1–P4): requests that may wait minutes or hours for a provider's
//! reset or a fallback, and must carry on after the gateway or the machine restarts without
//! ever sending the same work twice.
//!
//! ## What it owns
//! - [`model`]: the route record (classification, policy snapshot, retry ordinals, absolute
//!   deadline, pending outcome), its attempts, and the [`RouteStore`] interface.
//! - [`sqlite`]: the embedded implementation: one SQLite file, migrated on open.
//!
//! ## What it must never do
//! Change a route except through [`RouteStore::transition`], which is fenced by the route's
//! generation: a timer, a manual action or a provider result issued against an older
//! generation changes nothing (P2). Re-arm after a restart anything that may have been sent
//! (P3).

pub mod model;
pub mod sqlite;

pub use model::{
    AttemptOp, AttemptRecord, JobRecord, JobState, NewJob, Reconciliation, RouteStore, StoreError,
};
pub use sqlite::SqliteStore;
