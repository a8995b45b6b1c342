//! The jobs' ledger: the store, and the wakers and event channels of running jobs. It knows
//! nothing of the gateway around it, so the gateway's shared state can hold it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use rebound_store::{AttemptOp, JobRecord, JobState, JobStore, StoreError};
use serde_json::Value;
use tokio::sync::{Notify, broadcast, watch};

/// How many state changes a slow event follower may fall behind before it misses some.
const EVENTS_BUFFERED: usize = 64;

/// Jobs: the store, and the wakers and event channels of running jobs.
pub struct Jobs {
    store: Arc<dyn JobStore>,
    /// The jobs this instance drives, with how many drivers each has: on a shared store,
    /// the jobs whose leases it renews (X2).
    driving: Mutex<HashMap<String, usize>>,
    wakers: Mutex<HashMap<String, Arc<Notify>>>,
    events: Mutex<HashMap<String, broadcast::Sender<String>>>,
    /// Bumped on every published change, for the status page.
    changes: watch::Sender<u64>,
}

impl Jobs {
    /// Jobs kept in `store`.
    pub fn new(store: Arc<dyn JobStore>) -> Self {
        Jobs {
            store,
            driving: Mutex::default(),
            wakers: Mutex::default(),
            events: Mutex::default(),
            changes: watch::channel(0).0,
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn JobStore> {
        &self.store
    }

    /// Runs store work on the blocking pool ([`crate::blocking`]).
    pub(crate) async fn off_thread<T: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn JobStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        crate::blocking::off_thread(&self.store, move |store| work(store), StoreError::Database)
            .await
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
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = events.get(&job.id) {
            let _ = tx.send(super::view::summary(job, None).to_string());
        }
    }

    /// A receiver that sees every later published change of any job.
    pub(crate) fn subscribe_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
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

    /// Counts a driver of `id` in, while it runs.
    pub(crate) fn driver_started(&self, id: &str) {
        let mut driving = self.driving.lock().unwrap_or_else(PoisonError::into_inner);
        *driving.entry(id.to_owned()).or_default() += 1;
    }

    /// Counts a driver of `id` out: once none is left, this instance no longer renews the
    /// job's lease, and if it is still open another instance takes it over (X2).
    pub(crate) fn driver_ended(&self, id: &str) {
        let mut driving = self.driving.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = driving.get_mut(id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                driving.remove(id);
            }
        }
    }

    /// The jobs this instance drives now.
    pub(crate) fn driving(&self) -> Vec<String> {
        let driving = self.driving.lock().unwrap_or_else(PoisonError::into_inner);
        driving.keys().cloned().collect()
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
