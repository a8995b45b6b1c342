//! Holding jobs on a store several instances share (X2), in one process: the gateway renews
//! the leases of exactly the jobs it drives, and takes over the jobs its store hands it under
//! the restart rule (P3): a pending one runs, one whose attempt may have been sent is held for
//! a human and not sent. The store is SQLite behind a wrapper that plays the shared store's
//! part (a short lease, jobs to claim when the test says so); PostgreSQL itself is tested in
//! the store's and the binary's tests.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rebound_store::{
    AttemptOp, AttemptRecord, JobRecord, JobState, JobStore, NewJob, SqliteStore, StoreError,
};
use tokio::sync::Notify;

use crate::jobs::{gateway_on, submit, until, upstream};

/// SQLite in a shared store's part: holds last [`LEASE`]; `claim` hands over the jobs the test
/// orphaned, each under a new generation; every `renew` is recorded.
struct Shared {
    store: SqliteStore,
    orphans: Mutex<Vec<String>>,
    renewed: Mutex<Vec<Vec<String>>>,
    renewing: Notify,
}

const LEASE: Duration = Duration::from_millis(60);

impl JobStore for Shared {
    fn create(&self, job: NewJob, now: SystemTime) -> Result<JobRecord, StoreError> {
        self.store.create(job, now)
    }
    fn get(&self, id: &str) -> Result<JobRecord, StoreError> {
        self.store.get(id)
    }
    fn list(&self, limit: usize) -> Result<Vec<JobRecord>, StoreError> {
        self.store.list(limit)
    }
    fn in_states(&self, states: &[JobState]) -> Result<Vec<JobRecord>, StoreError> {
        self.store.in_states(states)
    }
    fn attempts(&self, id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        self.store.attempts(id)
    }
    fn transition(
        &self,
        id: &str,
        expected_generation: u64,
        now: SystemTime,
        change: &mut dyn FnMut(&mut JobRecord) -> Vec<AttemptOp>,
    ) -> Result<JobRecord, StoreError> {
        self.store.transition(id, expected_generation, now, change)
    }
    fn lease(&self) -> Option<Duration> {
        Some(LEASE)
    }
    fn claim(&self) -> Result<Vec<JobRecord>, StoreError> {
        let orphans = std::mem::take(&mut *self.orphans.lock().unwrap());
        orphans
            .iter()
            .map(|id| {
                let job = self.store.get(id)?;
                self.store
                    .transition(id, job.generation, job.updated, &mut |_| vec![])
            })
            .collect()
    }
    fn renew(&self, ids: &[String]) -> Result<usize, StoreError> {
        let mut ids = ids.to_vec();
        ids.sort();
        self.renewed.lock().unwrap().push(ids);
        self.renewing.notify_waiters();
        Ok(self.renewed.lock().unwrap().last().map_or(0, Vec::len))
    }
}

impl Shared {
    /// Waits for a renewal of exactly `ids` (sorted).
    async fn renewal_of(&self, ids: &[&str]) {
        let wanted: Vec<String> = ids.iter().map(|s| (*s).to_owned()).collect();
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let notified = self.renewing.notified();
                if self.renewed.lock().unwrap().last() == Some(&wanted) {
                    return;
                }
                notified.await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no renewal of {wanted:?}; the last ones: {:?}",
                self.renewed
                    .lock()
                    .unwrap()
                    .iter()
                    .rev()
                    .take(3)
                    .collect::<Vec<_>>()
            )
        });
    }
}

#[tokio::test]
async fn the_gateway_renews_what_it_drives_and_takes_over_under_the_restart_rule() {
    // The driven job waits ten minutes after its 429; each orphan's attempt is answered ok.
    let chaos = upstream("429+retry-after:600, ok").await;
    // Leases are under test, not the shared health ledger: the driven job's ten-minute
    // cooldown would rest the candidate for the orphans too (S2).
    let config = format!(
        "[health]\nenabled = false\n\n[[candidate]]\nid = \"c\"\nprotocol = \"openai\"\nbase_url = \"{}\"\n[[route]]\nid = \"jobs\"\nmodels = [\"*\"]\ncandidates = [\"c\"]\n",
        chaos.openai_base_url()
    );
    let shared = Arc::new(Shared {
        store: SqliteStore::in_memory().unwrap(),
        orphans: Mutex::default(),
        renewed: Mutex::default(),
        renewing: Notify::new(),
    });
    let server = gateway_on(&config, shared.clone(), false).await;
    rebound_gateway::jobs::resume(server.gateway())
        .await
        .unwrap();

    // A job this instance drives, waiting out its deadline: its lease is renewed.
    let driven = submit(&server).await;
    until(&server, &driven, "waiting").await;
    shared.renewal_of(&[&driven]).await;

    // Two jobs of a dead instance: one never sent, one with its attempt out.
    let now = SystemTime::now();
    let new_job = || NewJob {
        protocol: "openai".into(),
        route_id: "jobs".into(),
        candidates: vec!["c".into()],
        policies: shared.store.get(&driven).unwrap().policies,
        request: br#"{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}"#.to_vec(),
    };
    let pending = shared.store.create(new_job(), now).unwrap().id;
    let sent = shared.store.create(new_job(), now).unwrap().id;
    shared
        .store
        .transition(&sent, 1, now, &mut |j| {
            j.state = JobState::Dispatching;
            vec![AttemptOp::Begin(AttemptRecord::in_flight(1, "c", now))]
        })
        .unwrap();
    shared
        .orphans
        .lock()
        .unwrap()
        .extend([pending.clone(), sent.clone()]);

    // The next look takes both: the pending one runs, the other waits for a human.
    let done = until(&server, &pending, "succeeded").await;
    assert_eq!(done["attempts"].as_array().unwrap().len(), 1, "{done}");
    let held = until(&server, &sent, "action_required").await;
    assert_eq!(
        held["error"]["reason"], "attempt_may_have_been_sent",
        "{held}"
    );
    assert_eq!(held["attempts"][0]["outcome"], "unknown", "{held}");
    assert_eq!(
        chaos.attempts("default"),
        2,
        "the driven job's 429 and the pending orphan's success: nothing re-sent"
    );
    // Once its driver ends, a finished job is renewed no more; the waiting one still is.
    shared.renewal_of(&[&driven]).await;
}
