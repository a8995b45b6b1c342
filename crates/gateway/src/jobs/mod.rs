//! Durable jobs in the gateway: the jobs API (`/v1/rebound/jobs`) and the driver that runs
//! each job through its route, persisting every decision before acting on it (P1–P3).
//!
//! A job is a non-streaming chat-completions or messages request that may wait for hours (a
//! quota reset, a long `retry-after`) and must survive a restart. Every change goes through the
//! store's generation-fenced transition; a timer that fires after a manual action, or a manual
//! action issued against an old generation, changes nothing.
//!
//! [`Jobs`] is the state every part shares: the store (reached off the async thread), each
//! job's waker and each job's event channel. The API (`api`) and the driver use it; it uses
//! neither.
//!
//! On a store several instances share (X2), `lease` keeps this instance's holds alive and
//! takes over the jobs of instances that died; a job is driven only by the instance that
//! holds it, and the API acts on any job, whichever instance holds it, fenced as ever.

mod api;
mod driver;
mod lease;
pub(crate) mod ledger;
mod snapshot;
mod view;

pub use api::{Submission, parse_manual_action, parse_submission};

use std::sync::Arc;

use rebound_store::{JobRecord, Reconciliation, StoreError};

pub(crate) use api::handle;
pub use ledger::Jobs;
pub(crate) use snapshot::policies_of;

use crate::config::Candidate;
use crate::state::Gateway;

fn candidate_of(gateway: &Gateway, job: &JobRecord) -> Option<Arc<Candidate>> {
    let id = job.candidates.get(job.turn.candidate)?;
    gateway
        .config
        .routes
        .iter()
        .flat_map(|r| r.candidates.iter())
        .find(|c| &c.id == id)
        .cloned()
}

/// Starts a driver for `id`. A second driver of the same job loses the first fenced
/// transition and stops, so a job is never dispatched twice.
pub(crate) fn spawn_driver(gateway: &Arc<Gateway>, id: String) {
    let gateway = Arc::clone(gateway);
    if let Some(jobs) = gateway.jobs.as_ref() {
        jobs.driver_started(&id);
    }
    tokio::spawn(async move {
        driver::drive(Arc::clone(&gateway), id.clone()).await;
        if let Some(jobs) = gateway.jobs.as_ref() {
            jobs.driver_ended(&id);
        }
    });
}

/// After a restart: apply the restart rule ([`rebound_store::reconcile()`]) to the jobs this
/// instance takes, then drive every due job (P3). On a store several instances share, from
/// then on also keep this instance's holds alive and take over the jobs of instances that
/// died (X2).
pub async fn resume(gateway: &Arc<Gateway>) -> Result<Reconciliation, StoreError> {
    let Some(jobs) = gateway.jobs.as_ref() else {
        return Ok(Reconciliation::default());
    };
    let reconciled = take_over(gateway, jobs).await?;
    if let Some(lease) = jobs.store().lease() {
        tokio::spawn(lease::hold(Arc::clone(gateway), lease));
    }
    Ok(reconciled)
}

/// Takes the jobs nobody holds under the restart rule and drives the due ones.
async fn take_over(gateway: &Arc<Gateway>, jobs: &Jobs) -> Result<Reconciliation, StoreError> {
    let now = gateway.clock().now();
    let reconciled = jobs
        .off_thread(move |store| rebound_store::reconcile(store, now))
        .await?;
    for due in &reconciled.due {
        spawn_driver(gateway, due.id.clone());
    }
    Ok(reconciled)
}
