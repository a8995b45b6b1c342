//! The runs' ledger: the store, and the wakers and event channels of running runs. It knows
//! nothing of the gateway around it, so the gateway's shared state can hold it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use rebound_store::runs::{InvocationOp, RunRecord, RunStore, RunStoreError};
use serde_json::Value;
use tokio::sync::{Notify, broadcast};

/// How many events (output lines, state changes) a slow follower may fall behind before it
/// misses some; the run's record keeps the output's tail either way.
const EVENTS_BUFFERED: usize = 1024;

/// Runs: the store, and the wakers and event channels of running runs.
pub struct Runs {
    store: Arc<dyn RunStore>,
    wakers: Mutex<HashMap<String, Arc<Notify>>>,
    events: Mutex<HashMap<String, broadcast::Sender<String>>>,
}

impl Runs {
    /// Runs kept in `store`.
    pub fn new(store: Arc<dyn RunStore>) -> Self {
        Runs {
            store,
            wakers: Mutex::default(),
            events: Mutex::default(),
        }
    }

    /// Store work on the blocking pool ([`crate::blocking`]).
    pub(crate) async fn off_thread<T: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn RunStore) -> Result<T, RunStoreError> + Send + 'static,
    ) -> Result<T, RunStoreError> {
        crate::blocking::off_thread(
            &self.store,
            move |store| work(store),
            RunStoreError::Database,
        )
        .await
    }

    /// One run.
    pub(crate) async fn get(&self, id: &str) -> Result<RunRecord, RunStoreError> {
        let id = id.to_owned();
        self.off_thread(move |store| store.get(&id)).await
    }

    /// A fenced transition (P2), published to the run's followers when it commits.
    pub(crate) async fn transition(
        &self,
        id: &str,
        expected_generation: u64,
        now: SystemTime,
        mut change: impl FnMut(&mut RunRecord) -> Vec<InvocationOp> + Send + 'static,
    ) -> Result<RunRecord, RunStoreError> {
        let id = id.to_owned();
        let run = self
            .off_thread(move |store| store.transition(&id, expected_generation, now, &mut change))
            .await?;
        self.send(&run.id, super::view::summary(&run, None).to_string());
        Ok(run)
    }

    /// Tells the run's followers one event (a JSON object).
    pub(crate) fn send(&self, id: &str, event: String) {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = events.get(id) {
            let _ = tx.send(event);
        }
    }

    /// Tells the run's followers an event value.
    pub(crate) fn send_value(&self, id: &str, event: &Value) {
        self.send(id, event.to_string());
    }

    /// Follows the run's events from now on.
    pub(crate) fn subscribe(&self, id: &str) -> broadcast::Receiver<String> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(id.to_owned())
            .or_insert_with(|| broadcast::channel(EVENTS_BUFFERED).0)
            .subscribe()
    }

    /// Drops the run's event channel if nobody follows it.
    pub(crate) fn unsubscribe_idle(&self, id: &str) {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if events.get(id).is_some_and(|tx| tx.receiver_count() == 0) {
            events.remove(id);
        }
    }

    /// The run's waker.
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
