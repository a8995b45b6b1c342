//! Durable routes in the gateway: the jobs API (`/v1/rebound/jobs`) and the driver that runs
//! each job through its route, persisting every decision before acting on it (P1–P3).
//!
//! A job is a non-streaming chat-completions or messages request that may wait for hours (a
//! quota reset, a long `retry-after`) and must survive a restart. Every change goes through the
//! store's generation-fenced transition; a timer that fires after a manual action, or a manual
//! action issued against an old generation, changes nothing.

mod api;
mod driver;

pub use api::{Submission, parse_manual_action, parse_submission};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::UNIX_EPOCH;

use rebound_core::Policy;
use rebound_core::policy::document::PolicyDocument;
use rebound_store::{AttemptOp, AttemptRecord, JobRecord, RouteStore, StoreError};
use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast};

pub(crate) use api::handle;

use crate::config::Candidate;
use crate::state::Gateway;

/// Jobs: the store, and the wakers and event channels of running jobs.
pub struct Jobs {
    store: Arc<dyn RouteStore>,
    wakers: Mutex<HashMap<String, Arc<Notify>>>,
    events: Mutex<HashMap<String, broadcast::Sender<String>>>,
}

fn now_ms(gateway: &Gateway) -> u64 {
    gateway
        .clock()
        .now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl Jobs {
    /// Jobs kept in `store`.
    pub fn new(store: Arc<dyn RouteStore>) -> Self {
        Jobs {
            store,
            wakers: Mutex::default(),
            events: Mutex::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn RouteStore> {
        &self.store
    }

    /// Runs store work on the blocking pool. SQLite waits for the disk on every commit
    /// (`synchronous=FULL`), and the gateway's async thread meanwhile serves every live
    /// request and stream: it must never wait for a disk.
    async fn off_thread<T: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn RouteStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || work(store.as_ref()))
            .await
            .unwrap_or_else(|e| Err(StoreError::Database(format!("a store call failed: {e}"))))
    }

    /// One job, read off the async thread.
    async fn get(&self, id: &str) -> Result<JobRecord, StoreError> {
        let id = id.to_owned();
        self.off_thread(move |store| store.get(&id)).await
    }

    /// A fenced transition (P2), committed off the async thread.
    async fn transition(
        &self,
        id: &str,
        expected_generation: u64,
        now_ms: u64,
        mut change: impl FnMut(&mut JobRecord) -> Vec<AttemptOp> + Send + 'static,
    ) -> Result<JobRecord, StoreError> {
        let id = id.to_owned();
        self.off_thread(move |store| {
            store.transition(&id, expected_generation, now_ms, &mut change)
        })
        .await
    }

    fn publish(&self, job: &JobRecord) {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = events.get(&job.id) {
            let _ = tx.send(summary(job, None).to_string());
        }
    }

    fn waker(&self, id: &str) -> Arc<Notify> {
        Arc::clone(
            self.wakers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(id.to_owned())
                .or_default(),
        )
    }
}

/// The API view of a job.
fn summary(job: &JobRecord, attempts: Option<&[AttemptRecord]>) -> Value {
    let mut out = json!({
        "id": job.id,
        "generation": job.generation,
        "state": job.state,
        "protocol": job.protocol,
        "route_id": job.route_id,
        "candidate": job.candidates.get(job.turn.candidate),
        "candidates": job.candidates,
        "turn": job.turn,
        "deadline_ms": job.deadline_ms,
        "pending_outcome": job.pending_outcome,
        "classification": job.classification,
        "error": job.error,
        "response_status": job.response_status,
        "created_ms": job.created_ms,
        "updated_ms": job.updated_ms,
    });
    if let (Some(attempts), Value::Object(map)) = (attempts, &mut out) {
        map.insert("attempts".into(), json!(attempts));
        if let Some(body) = &job.response {
            let response = serde_json::from_slice::<Value>(body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
            map.insert("response".into(), response);
        }
    }
    out
}

fn policies_of(job: &JobRecord, gateway: &Gateway) -> Vec<Arc<Policy>> {
    let docs: Vec<PolicyDocument> =
        serde_json::from_value(job.policies.clone()).unwrap_or_default();
    let policies: Vec<Arc<Policy>> = docs
        .iter()
        .map(|d| {
            Arc::new(
                d.compile(&Policy::immediate_skip(), gateway.catalogue())
                    .unwrap_or_else(|_| Policy::immediate_skip()),
            )
        })
        .collect();
    if policies.is_empty() {
        vec![Arc::new(Policy::immediate_skip())]
    } else {
        policies
    }
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

/// After a restart: reconcile the store, then drive every due job (P3).
pub async fn resume(gateway: &Arc<Gateway>) -> Result<rebound_store::Reconciliation, StoreError> {
    let Some(jobs) = gateway.jobs.as_ref() else {
        return Ok(rebound_store::Reconciliation::default());
    };
    let now = now_ms(gateway);
    let reconciled = jobs.off_thread(move |store| store.reconcile(now)).await?;
    for (id, _, _) in &reconciled.due {
        spawn_driver(gateway, id.clone());
    }
    Ok(reconciled)
}
