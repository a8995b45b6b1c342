//! Durable agent runs (SPEC P1–P3 for agent CLIs): a prompt run by one agent profile after
//! another, each invocation a child process, waiting hours for a usage reset if it must.
//!
//! A run is kept apart from jobs: its own record, its own tables, its own interface
//! ([`RunStore`]). What it shares with jobs is the discipline: every change is a
//! generation-fenced [`RunStore::transition`] (P2), and the restart rule ([`reconcile_runs`])
//! never starts again an invocation that may have run (P3).
//!
//! Time is a [`SystemTime`] at this interface; integer milliseconds are the SQLite columns'
//! business.

mod record;
mod sqlite;

use std::time::SystemTime;

pub use record::{
    Invocation, InvocationMode, InvocationOp, NewRun, RunRecord, RunSession, RunState,
};
pub use sqlite::SqliteRunStore;

/// Why a run store refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunStoreError {
    /// The run moved on since the caller read it (P2): nothing changed.
    #[error("run {id} is at generation {actual}, not {expected}: the transition is stale")]
    Stale {
        /// The run.
        id: String,
        /// The generation the caller read.
        expected: u64,
        /// The generation the run is at.
        actual: u64,
    },
    /// No such run.
    #[error("no run {0}")]
    NotFound(String),
    /// The database failed.
    #[error("run store: {0}")]
    Database(String),
    /// A stored value does not parse.
    #[error("run {id}: stored `{field}` is corrupt: {message}")]
    Corrupt {
        /// The run.
        id: String,
        /// The field.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// What every run store provides.
pub trait RunStore: Send + Sync {
    /// Stores a new run, `pending`, at generation 1.
    fn create(&self, run: NewRun, now: SystemTime) -> Result<RunRecord, RunStoreError>;

    /// One run.
    fn get(&self, id: &str) -> Result<RunRecord, RunStoreError>;

    /// The latest runs, newest first.
    fn list(&self, limit: usize) -> Result<Vec<RunRecord>, RunStoreError>;

    /// Every run in one of `states`.
    fn in_states(&self, states: &[RunState]) -> Result<Vec<RunRecord>, RunStoreError>;

    /// A run's invocations, in order.
    fn invocations(&self, id: &str) -> Result<Vec<Invocation>, RunStoreError>;

    /// The one way a run changes (P2): `change` runs on the stored record only if it is still
    /// at `expected_generation`; its record and invocation operations commit together with a
    /// generation one higher, else [`RunStoreError::Stale`] and nothing changed.
    fn transition(
        &self,
        id: &str,
        expected_generation: u64,
        now: SystemTime,
        change: &mut dyn FnMut(&mut RunRecord) -> Vec<InvocationOp>,
    ) -> Result<RunRecord, RunStoreError>;
}

/// What a restart made of the stored runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunReconciliation {
    /// Runs to drive again: pending ones, and waiting ones whose driver waits out the
    /// persisted deadline.
    pub due: Vec<String>,
    /// Runs whose invocation was running when rebound stopped: held for a human.
    pub action_required: Vec<String>,
}

/// The restart rule for runs (P3): a run that was `running` had a child process that may
/// have acted; it is held (`action_required`, its invocation's outcome `unknown`), never
/// started again blindly. Pending and waiting runs are due: nothing of theirs ran since
/// their last committed transition.
pub fn reconcile_runs(
    store: &dyn RunStore,
    now: SystemTime,
) -> Result<RunReconciliation, RunStoreError> {
    let mut out = RunReconciliation::default();
    let open = [RunState::Pending, RunState::Waiting, RunState::Running];
    for run in store.in_states(&open)? {
        if run.state != RunState::Running {
            out.due.push(run.id);
            continue;
        }
        let held = store.transition(&run.id, run.generation, now, &mut |r| {
            r.state = RunState::ActionRequired;
            r.deadline = None;
            r.pending_outcome = None;
            r.error = Some(serde_json::json!({
                "reason": "invocation_may_have_run",
                "message": "rebound stopped while the agent ran; it may have acted, so it is not started again blindly",
            }));
            vec![InvocationOp::MarkInFlightUnknown { finished: now }]
        });
        match held {
            Ok(held) => out.action_required.push(held.id),
            Err(RunStoreError::Stale { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
