//! Durable agent runs in the gateway: the runs API (`/v1/rebound/runs`) and the driver that
//! runs an agent CLI through an agent route, profile after profile, waiting for usage resets
//! and resuming sessions, persisting every decision before acting on it (P1–P3, D4).
//!
//! A run is a prompt for an agent CLI (Claude Code, Codex CLI) in a working directory. Each
//! invocation is a child process whose exit status, stderr and structured output are the
//! evidence the catalogue classifies (C8); the single recovery loop decides (B6), the driver
//! adds effect safety for agents: what acted is resumed, never started afresh (D4).
//!
//! [`Runs`] is the state every part shares; the API (`api`) and the driver use it.

mod api;
mod driver;
mod events;
pub(crate) mod ledger;
mod process;
mod view;

use std::sync::Arc;

use rebound_core::{Catalogue, Policy};
use rebound_store::runs::{RunReconciliation, RunRecord, RunStoreError, reconcile_runs};

pub(crate) use api::handle;
pub use ledger::Runs;

use crate::state::Gateway;

/// The run's route as policies, one per profile, compiled from its snapshot (P1): a snapshot
/// this gateway cannot run is a human's to resolve, never replaced by another policy.
fn policies_of(run: &RunRecord, catalogue: &Catalogue) -> Result<Vec<Arc<Policy>>, String> {
    if run.policies.len() != run.profiles.len() {
        return Err(format!(
            "run {}: the policy snapshot has {} documents for {} profiles",
            run.id,
            run.policies.len(),
            run.profiles.len()
        ));
    }
    run.policies
        .iter()
        .zip(&run.profiles)
        .map(|(doc, profile)| {
            doc.compile(&Policy::immediate_skip(), catalogue)
                .map(Arc::new)
                .map_err(|e| {
                    format!(
                        "run {}: the policy snapshot of profile `{profile}` does not compile: {e}",
                        run.id
                    )
                })
        })
        .collect()
}

/// Starts a driver for `id`. A second driver of the same run loses the first fenced
/// transition and stops, so an invocation never starts twice.
pub(crate) fn spawn_driver(gateway: &Arc<Gateway>, id: String) {
    let gateway = Arc::clone(gateway);
    tokio::spawn(async move { driver::drive(gateway, id).await });
}

/// After a restart: apply the runs' restart rule, then drive every due run (P3). A run that
/// waited for a reset waits out the rest of its persisted deadline, then resumes.
pub async fn resume(gateway: &Arc<Gateway>) -> Result<RunReconciliation, RunStoreError> {
    let Some(runs) = gateway.runs.as_ref() else {
        return Ok(RunReconciliation::default());
    };
    let now = gateway.clock().now();
    let reconciled = runs
        .off_thread(move |store| reconcile_runs(store, now))
        .await?;
    for due in &reconciled.due {
        spawn_driver(gateway, due.clone());
    }
    Ok(reconciled)
}
