//! # rebound-store
//!
//! Durable jobs (SPEC P1–P4): requests that may wait minutes or hours for a provider's
//! reset or a fallback, and must carry on after the gateway or the machine restarts without
//! ever sending the same work twice.
//!
//! ## What it owns
//! - [`model`]: the job record (classification, typed policy snapshot, retry ordinals,
//!   absolute deadline, pending outcome), its attempts, and the [`JobStore`] interface: the
//!   primitives every store provides.
//! - [`reconcile`](mod@reconcile): the restart rule (P3), written once over [`JobStore`], so
//!   every store inherits it rather than re-implementing it.
//! - [`sqlite`]: the embedded implementation: one SQLite file, migrated on open by whichever
//!   process opens it first (`sqlite_file`).
//! - [`runs`]: durable agent runs, their own record, interface, restart rule and tables in
//!   the same file.
//! - [`postgres`](mod@postgres): the shared implementation: one PostgreSQL database for
//!   several gateway instances, each holding the jobs it drives with a lease (X1, X2), and
//!   the shared health ledger's deadlines they pass to each other (X3).
//!
//! ## What it must never do
//! Change a job except through [`JobStore::transition`], which is fenced by the job's
//! generation: a timer, a manual action or a provider result issued against an older
//! generation changes nothing (P2). Re-arm after a restart anything that may have been sent
//! (P3). Read a stored value it cannot parse as anything but an error naming the job and the
//! field ([`StoreError::Corrupt`]).
//!
//! Time is a [`std::time::SystemTime`] at this crate's interface; integer milliseconds are
//! the columns' business. Leases alone are on the database's clock.

mod column;
pub mod model;
pub mod postgres;
pub mod reconcile;
mod row;
pub mod runs;
pub mod sqlite;
mod sqlite_file;

pub use model::{
    AttemptOp, AttemptOutcome, AttemptRecord, JobRecord, JobState, JobStore, NewJob, StoreError,
};
pub use postgres::health::{HealthListener, SharedDeadline};
pub use postgres::{PostgresOptions, PostgresStore};
pub use reconcile::{DueJob, Reconciliation, reconcile};
pub use sqlite::SqliteStore;
