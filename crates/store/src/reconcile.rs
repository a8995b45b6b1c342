//! The restart rule (P3), decided once for every store.
//!
//! "On restart, reconciliation re-arms only work proven not to have been dispatched; an
//! attempt that may have been sent is surfaced for manual recovery, never re-sent blindly."
//!
//! A store offers primitives ([`JobStore::claim`], the fenced [`JobStore::transition`],
//! [`AttemptOp::MarkInFlightUnknown`]); [`reconcile`] decides what they are used for, so the
//! shared store (PostgreSQL) provides the primitives and inherits the rule instead of
//! re-implementing it. For a shared store "restart" means "a holder's lease ran out" (X2): an
//! instance that takes over a dead instance's jobs applies the same rule to them.

use std::time::SystemTime;

use crate::model::{AttemptOp, JobState, JobStore, StoreError};

/// A job to run again after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DueJob {
    /// The job.
    pub id: String,
    /// Its generation: the driver's first transition is fenced by it.
    pub generation: u64,
    /// When it runs; `None` means at once.
    pub deadline: Option<SystemTime>,
}

/// What a restart found (P3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reconciliation {
    /// Jobs proven not to have an attempt out: waiting ones at their deadline, pending ones at
    /// once.
    pub due: Vec<DueJob>,
    /// Jobs moved to `action_required` because an attempt may have been sent.
    pub action_required: Vec<String>,
}

/// The `error` a job caught dispatching is left with.
fn may_have_been_sent() -> serde_json::Value {
    serde_json::json!({
        "reason": "attempt_may_have_been_sent",
        "message": "rebound stopped while an attempt was out; it may have reached the provider, so it is not re-sent blindly"
    })
}

/// Applies the restart rule at `now` to the jobs this instance takes ([`JobStore::claim`]: at
/// a single-process store's start, every open job; on a shared store, those whose holder's
/// lease ran out, X2): `waiting` and `pending` jobs are due; a `dispatching` job moves to
/// `action_required` (with its in-flight attempts `unknown`) in one fenced transition. A job
/// that another actor moved on meanwhile (its transition is stale) is left to that actor.
pub fn reconcile(store: &dyn JobStore, now: SystemTime) -> Result<Reconciliation, StoreError> {
    let mut out = Reconciliation::default();
    for job in store.claim()? {
        match job.state {
            JobState::Dispatching => {
                let held = store.transition(&job.id, job.generation, now, &mut |j| {
                    j.state = JobState::ActionRequired;
                    j.deadline = None;
                    j.error = Some(may_have_been_sent());
                    vec![AttemptOp::MarkInFlightUnknown { finished: now }]
                });
                match held {
                    Ok(held) => out.action_required.push(held.id),
                    Err(StoreError::Stale { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            JobState::Waiting => out.due.push(DueJob {
                id: job.id,
                generation: job.generation,
                deadline: job.deadline,
            }),
            _ => out.due.push(DueJob {
                id: job.id,
                generation: job.generation,
                deadline: None,
            }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    //! The rule against a store that is not SQLite: a map in memory.

    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::model::{AttemptOutcome, AttemptRecord, JobRecord, NewJob};

    /// Jobs and their attempts in a map: the smallest store that honours the contract.
    #[derive(Default)]
    struct MemoryStore {
        jobs: Mutex<BTreeMap<String, (JobRecord, Vec<AttemptRecord>)>>,
    }

    impl JobStore for MemoryStore {
        fn create(&self, job: NewJob, now: SystemTime) -> Result<JobRecord, StoreError> {
            let mut jobs = self.jobs.lock().unwrap();
            let record = JobRecord {
                id: format!("job_{}", jobs.len()),
                generation: 1,
                state: JobState::Pending,
                protocol: job.protocol,
                route_id: job.route_id,
                candidates: job.candidates,
                policies: job.policies,
                request: job.request,
                turn: rebound_core::TurnSnapshot::default(),
                deadline: None,
                pending_outcome: None,
                classification: None,
                response_status: None,
                response: None,
                error: None,
                created: now,
                updated: now,
            };
            jobs.insert(record.id.clone(), (record.clone(), Vec::new()));
            Ok(record)
        }

        fn get(&self, id: &str) -> Result<JobRecord, StoreError> {
            let jobs = self.jobs.lock().unwrap();
            let (job, _) = jobs
                .get(id)
                .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
            Ok(job.clone())
        }

        fn list(&self, limit: usize) -> Result<Vec<JobRecord>, StoreError> {
            let jobs = self.jobs.lock().unwrap();
            Ok(jobs
                .values()
                .rev()
                .take(limit)
                .map(|(j, _)| j.clone())
                .collect())
        }

        fn in_states(&self, states: &[JobState]) -> Result<Vec<JobRecord>, StoreError> {
            let jobs = self.jobs.lock().unwrap();
            Ok(jobs
                .values()
                .filter(|(j, _)| states.contains(&j.state))
                .map(|(j, _)| j.clone())
                .collect())
        }

        fn attempts(&self, id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
            let jobs = self.jobs.lock().unwrap();
            let (_, attempts) = jobs
                .get(id)
                .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
            Ok(attempts.clone())
        }

        fn transition(
            &self,
            id: &str,
            expected_generation: u64,
            now: SystemTime,
            change: &mut dyn FnMut(&mut JobRecord) -> Vec<AttemptOp>,
        ) -> Result<JobRecord, StoreError> {
            let mut jobs = self.jobs.lock().unwrap();
            let (stored, attempts) = jobs
                .get_mut(id)
                .ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
            if stored.generation != expected_generation {
                return Err(StoreError::Stale {
                    id: id.to_owned(),
                    expected: expected_generation,
                    actual: stored.generation,
                });
            }
            let mut job = stored.clone();
            let ops = change(&mut job);
            job.generation = expected_generation + 1;
            job.updated = now;
            for op in ops {
                match op {
                    AttemptOp::Begin(a) => attempts.push(a),
                    AttemptOp::Finish(a) => {
                        if let Some(slot) = attempts.iter_mut().find(|b| b.number == a.number) {
                            *slot = a;
                        }
                    }
                    AttemptOp::MarkInFlightUnknown { finished } => {
                        for a in attempts
                            .iter_mut()
                            .filter(|a| a.outcome == AttemptOutcome::InFlight)
                        {
                            a.outcome = AttemptOutcome::Unknown;
                            a.finished = Some(finished);
                        }
                    }
                }
            }
            *stored = job.clone();
            Ok(job)
        }
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn new_job() -> NewJob {
        NewJob {
            protocol: "openai".into(),
            route_id: "r".into(),
            candidates: vec!["a".into()],
            policies: vec![],
            request: b"{}".to_vec(),
        }
    }

    fn to(
        state: JobState,
        deadline: Option<SystemTime>,
    ) -> impl FnMut(&mut JobRecord) -> Vec<AttemptOp> {
        move |j| {
            j.state = state;
            j.deadline = deadline;
            vec![]
        }
    }

    #[test]
    fn the_restart_rule_holds_for_a_store_that_is_not_sqlite() {
        let store = MemoryStore::default();
        let pending = store.create(new_job(), at(1)).unwrap();
        let waiting = store.create(new_job(), at(1)).unwrap();
        store
            .transition(
                &waiting.id,
                1,
                at(2),
                &mut to(JobState::Waiting, Some(at(7200))),
            )
            .unwrap();
        let dispatching = store.create(new_job(), at(1)).unwrap();
        store
            .transition(&dispatching.id, 1, at(2), &mut |j| {
                j.state = JobState::Dispatching;
                vec![AttemptOp::Begin(AttemptRecord::in_flight(1, "a", at(2)))]
            })
            .unwrap();
        let done = store.create(new_job(), at(1)).unwrap();
        store
            .transition(&done.id, 1, at(2), &mut to(JobState::Succeeded, None))
            .unwrap();

        let r = reconcile(&store, at(10)).unwrap();

        assert_eq!(r.action_required, vec![dispatching.id.clone()]);
        assert_eq!(
            r.due,
            vec![
                DueJob {
                    id: pending.id.clone(),
                    generation: 1,
                    deadline: None
                },
                DueJob {
                    id: waiting.id.clone(),
                    generation: 2,
                    deadline: Some(at(7200))
                },
            ]
        );
        let held = store.get(&dispatching.id).unwrap();
        assert_eq!((held.state, held.generation), (JobState::ActionRequired, 3));
        assert_eq!(held.error.unwrap()["reason"], "attempt_may_have_been_sent");
        let attempts = store.attempts(&dispatching.id).unwrap();
        assert_eq!(
            (attempts[0].outcome, attempts[0].finished),
            (AttemptOutcome::Unknown, Some(at(10)))
        );
        // Nothing else was touched: a second restart finds the same due work and nothing
        // new to hold.
        let again = reconcile(&store, at(20)).unwrap();
        assert_eq!((again.due, again.action_required.len()), (r.due, 0));
    }

    /// A store whose `dispatching` job is moved on by someone else between the listing and
    /// the transition.
    struct Overtaken(MemoryStore);

    impl JobStore for Overtaken {
        fn create(&self, job: NewJob, now: SystemTime) -> Result<JobRecord, StoreError> {
            self.0.create(job, now)
        }
        fn get(&self, id: &str) -> Result<JobRecord, StoreError> {
            self.0.get(id)
        }
        fn list(&self, limit: usize) -> Result<Vec<JobRecord>, StoreError> {
            self.0.list(limit)
        }
        fn in_states(&self, states: &[JobState]) -> Result<Vec<JobRecord>, StoreError> {
            let listed = self.0.in_states(states)?;
            for job in &listed {
                self.0.transition(
                    &job.id,
                    job.generation,
                    at(5),
                    &mut to(JobState::Stopped, None),
                )?;
            }
            Ok(listed)
        }
        fn attempts(&self, id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
            self.0.attempts(id)
        }
        fn transition(
            &self,
            id: &str,
            expected_generation: u64,
            now: SystemTime,
            change: &mut dyn FnMut(&mut JobRecord) -> Vec<AttemptOp>,
        ) -> Result<JobRecord, StoreError> {
            self.0.transition(id, expected_generation, now, change)
        }
    }

    #[test]
    fn a_job_moved_on_meanwhile_is_left_to_whoever_moved_it() {
        let store = Overtaken(MemoryStore::default());
        let id = store.create(new_job(), at(1)).unwrap().id;
        store
            .transition(&id, 1, at(2), &mut to(JobState::Dispatching, None))
            .unwrap();
        let r = reconcile(&store, at(10)).unwrap();
        assert!(r.action_required.is_empty(), "{r:?}");
        assert_eq!(store.get(&id).unwrap().state, JobState::Stopped);
    }
}
