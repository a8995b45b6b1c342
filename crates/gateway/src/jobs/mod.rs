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

mod api;
mod driver;
mod view;

pub use api::{Submission, parse_manual_action, parse_submission};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use rebound_core::policy::document::PolicyError;
use rebound_core::{Catalogue, Policy};
use rebound_store::{AttemptOp, JobRecord, JobState, JobStore, Reconciliation, StoreError};
use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast};

pub(crate) use api::handle;

use crate::config::Candidate;
use crate::state::Gateway;

/// How many state changes a slow event follower may fall behind before it misses some.
const EVENTS_BUFFERED: usize = 64;

/// Jobs: the store, and the wakers and event channels of running jobs.
pub struct Jobs {
    store: Arc<dyn JobStore>,
    wakers: Mutex<HashMap<String, Arc<Notify>>>,
    events: Mutex<HashMap<String, broadcast::Sender<String>>>,
}

impl Jobs {
    /// Jobs kept in `store`.
    pub fn new(store: Arc<dyn JobStore>) -> Self {
        Jobs {
            store,
            wakers: Mutex::default(),
            events: Mutex::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn JobStore> {
        &self.store
    }

    /// Runs store work on the blocking pool. SQLite waits for the disk on every commit
    /// (`synchronous=FULL`), and the gateway's async thread meanwhile serves every live
    /// request and stream: it must never wait for a disk.
    pub(crate) async fn off_thread<T: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn JobStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || work(store.as_ref()))
            .await
            .unwrap_or_else(|e| Err(StoreError::Database(format!("a store call failed: {e}"))))
    }

    /// One job, read off the async thread.
    pub(crate) async fn get(&self, id: &str) -> Result<JobRecord, StoreError> {
        let id = id.to_owned();
        self.off_thread(move |store| store.get(&id)).await
    }

    /// A fenced transition (P2) at `now`, committed off the async thread: `change` applies
    /// only if the job is still at `expected_generation`, else [`StoreError::Stale`] and
    /// nothing changed. The caller publishes the result ([`Jobs::publish`]).
    pub(crate) async fn transition(
        &self,
        id: &str,
        expected_generation: u64,
        now: SystemTime,
        mut change: impl FnMut(&mut JobRecord) -> Vec<AttemptOp> + Send + 'static,
    ) -> Result<JobRecord, StoreError> {
        let id = id.to_owned();
        self.off_thread(move |store| store.transition(&id, expected_generation, now, &mut change))
            .await
    }

    /// Moves `job` (at its generation) to `action_required` with `error`, the reason a human
    /// must decide, and publishes it.
    pub(crate) async fn require_action(
        &self,
        job: &JobRecord,
        now: SystemTime,
        error: Value,
    ) -> Result<JobRecord, StoreError> {
        let held = self
            .transition(&job.id, job.generation, now, move |j| {
                j.state = JobState::ActionRequired;
                j.deadline = None;
                j.error = Some(error.clone());
                vec![]
            })
            .await?;
        self.publish(&held);
        Ok(held)
    }

    /// Tells whoever follows the job's events (`GET /v1/rebound/jobs/{id}/events`) its new
    /// state. Call it after every committed transition.
    pub(crate) fn publish(&self, job: &JobRecord) {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = events.get(&job.id) {
            let _ = tx.send(view::summary(job, None).to_string());
        }
    }

    /// Follows the job's published states from now on.
    pub(crate) fn subscribe(&self, id: &str) -> broadcast::Receiver<String> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(id.to_owned())
            .or_insert_with(|| broadcast::channel(EVENTS_BUFFERED).0)
            .subscribe()
    }

    /// Drops the job's event channel if nobody follows it (a job that was not found).
    pub(crate) fn unsubscribe_idle(&self, id: &str) {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if events.get(id).is_some_and(|tx| tx.receiver_count() == 0) {
            events.remove(id);
        }
    }

    /// The job's waker: a manual action notifies it, so a driver waiting out the job's
    /// deadline re-reads the job at once instead of sleeping on a stale plan.
    pub(crate) fn waker(&self, id: &str) -> Arc<Notify> {
        Arc::clone(
            self.wakers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(id.to_owned())
                .or_default(),
        )
    }
}

/// A job's policy snapshot that this gateway cannot run: the job needs a human, never a
/// silent fallback to some other policy.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotError {
    /// One candidate's document does not compile against the catalogue.
    #[error("job {job}: the policy snapshot of candidate `{candidate}` does not compile: {source}")]
    Compile {
        /// The job.
        job: String,
        /// The candidate whose document it is.
        candidate: String,
        /// What is wrong, with the document's field.
        source: PolicyError,
    },
    /// The snapshot does not have one document per candidate.
    #[error("job {job}: the policy snapshot has {policies} documents for {candidates} candidates")]
    Count {
        /// The job.
        job: String,
        /// Documents in the snapshot.
        policies: usize,
        /// Candidates of the job.
        candidates: usize,
    },
}

impl SnapshotError {
    /// The job's `error` while it waits for a human.
    pub(crate) fn to_job_error(&self) -> Value {
        let mut error = json!({"reason": "policy_snapshot_invalid", "message": self.to_string()});
        if let (
            SnapshotError::Compile {
                candidate, source, ..
            },
            Value::Object(map),
        ) = (self, &mut error)
        {
            map.insert("candidate".into(), json!(candidate));
            map.insert("field".into(), json!(source.field));
        }
        error
    }
}

/// The job's route as policies, one per candidate, compiled from its snapshot against
/// `catalogue`.
pub(crate) fn policies_of(
    job: &JobRecord,
    catalogue: &Catalogue,
) -> Result<Vec<Arc<Policy>>, SnapshotError> {
    if job.policies.len() != job.candidates.len() {
        return Err(SnapshotError::Count {
            job: job.id.clone(),
            policies: job.policies.len(),
            candidates: job.candidates.len(),
        });
    }
    job.policies
        .iter()
        .zip(&job.candidates)
        .map(|(doc, candidate)| {
            doc.compile(&Policy::immediate_skip(), catalogue)
                .map(Arc::new)
                .map_err(|source| SnapshotError::Compile {
                    job: job.id.clone(),
                    candidate: candidate.clone(),
                    source,
                })
        })
        .collect()
}

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
    tokio::spawn(async move { driver::drive(gateway, id).await });
}

/// After a restart: apply the restart rule ([`rebound_store::reconcile()`]), then drive every
/// due job (P3).
pub async fn resume(gateway: &Arc<Gateway>) -> Result<Reconciliation, StoreError> {
    let Some(jobs) = gateway.jobs.as_ref() else {
        return Ok(Reconciliation::default());
    };
    let now = gateway.clock().now();
    let reconciled = jobs
        .off_thread(move |store| rebound_store::reconcile(store, now))
        .await?;
    for due in &reconciled.due {
        spawn_driver(gateway, due.id.clone());
    }
    Ok(reconciled)
}
