//! What a durable job is: its record, its attempts, and the one interface that changes them.

use std::time::{Duration, SystemTime};

use rebound_core::TurnSnapshot;
use rebound_core::policy::document::PolicyDocument;
use serde::{Deserialize, Serialize};

/// Where a durable job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Ready to dispatch, never sent (or replayable): runs as soon as possible.
    Pending,
    /// Waiting until its deadline for a retry, a reset or a fallback.
    Waiting,
    /// An attempt is being sent: after a crash, it may or may not have reached the provider.
    Dispatching,
    /// Done, with a response.
    Succeeded,
    /// Recovery stopped with a terminal error.
    Failed,
    /// A human must decide: unclassified or unsafe evidence, an attempt that may have been
    /// sent before a crash (P3), or a record rebound can no longer act on.
    ActionRequired,
    /// Stopped by a manual action.
    Stopped,
}

impl JobState {
    /// Every state.
    pub const ALL: [JobState; 7] = [
        JobState::Pending,
        JobState::Waiting,
        JobState::Dispatching,
        JobState::Succeeded,
        JobState::Failed,
        JobState::ActionRequired,
        JobState::Stopped,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Waiting => "waiting",
            JobState::Dispatching => "dispatching",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::ActionRequired => "action_required",
            JobState::Stopped => "stopped",
        }
    }

    /// Parses a stored name.
    pub fn parse(name: &str) -> Option<JobState> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// The states in which a job still has work its holder must do: run it, wait out its
    /// deadline, or learn how its attempt ended. Claims (X2) are about these.
    pub const OPEN: [JobState; 3] = [JobState::Pending, JobState::Waiting, JobState::Dispatching];

    /// True when nothing will happen without a manual action.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Stopped
        )
    }
}

/// A durable job, as stored. Everything needed to resume it after a restart is here (P1).
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    /// Its id.
    pub id: String,
    /// Bumped by every transition; a transition issued against an older one changes nothing
    /// (P2).
    pub generation: u64,
    /// Where it stands.
    pub state: JobState,
    /// `openai` or `anthropic`.
    pub protocol: String,
    /// The gateway route it runs on.
    pub route_id: String,
    /// The candidates of the route, in order, as they were when it was created.
    pub candidates: Vec<String>,
    /// The policy snapshot: one policy document per candidate, in the candidates' order, as
    /// they were when it was created (a config change does not rewrite a running job).
    pub policies: Vec<PolicyDocument>,
    /// The request body, forwarded as it is.
    pub request: Vec<u8>,
    /// The core's counters: candidate, retry ordinals, reset waits, attempts.
    pub turn: TurnSnapshot,
    /// When a waiting job runs next.
    pub deadline: Option<SystemTime>,
    /// What the wait leads to (`retry`, `reset_wait`, `fallback`).
    pub pending_outcome: Option<String>,
    /// The last failure's classification (code, class, rule id, catalogue version).
    pub classification: Option<serde_json::Value>,
    /// The response status, when done.
    pub response_status: Option<u16>,
    /// The response body, when done.
    pub response: Option<Vec<u8>>,
    /// The terminal error's diagnostics, when failed, or why a human must decide.
    pub error: Option<serde_json::Value>,
    /// When it was created.
    pub created: SystemTime,
    /// When it last changed.
    pub updated: SystemTime,
}

impl JobRecord {
    /// Job `id` as created from `job` at `now`: pending at generation 1, its first attempt
    /// ahead.
    pub(crate) fn fresh(id: String, job: NewJob, now: SystemTime) -> JobRecord {
        JobRecord {
            id,
            generation: 1,
            state: JobState::Pending,
            protocol: job.protocol,
            route_id: job.route_id,
            candidates: job.candidates,
            policies: job.policies,
            request: job.request,
            turn: TurnSnapshot {
                attempts: 1,
                ..Default::default()
            },
            deadline: None,
            pending_outcome: None,
            classification: None,
            response_status: None,
            response: None,
            error: None,
            created: now,
            updated: now,
        }
    }
}

/// A job to create.
#[derive(Clone, Debug, PartialEq)]
pub struct NewJob {
    /// `openai` or `anthropic`.
    pub protocol: String,
    /// The gateway route it runs on.
    pub route_id: String,
    /// Its candidates, in order.
    pub candidates: Vec<String>,
    /// One policy document per candidate, in the same order.
    pub policies: Vec<PolicyDocument>,
    /// The request body.
    pub request: Vec<u8>,
}

/// How an attempt ended, as far as rebound knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// Sent (or about to be): its outcome is not known yet.
    InFlight,
    /// The provider answered with a success.
    Succeeded,
    /// It failed; the record's classification says how.
    Failed,
    /// The process ended while it was out: it may or may not have reached the provider (P3).
    Unknown,
}

impl AttemptOutcome {
    /// Every outcome.
    pub const ALL: [AttemptOutcome; 4] = [
        AttemptOutcome::InFlight,
        AttemptOutcome::Succeeded,
        AttemptOutcome::Failed,
        AttemptOutcome::Unknown,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::InFlight => "in_flight",
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Unknown => "unknown",
        }
    }

    /// Parses a stored name.
    pub fn parse(name: &str) -> Option<AttemptOutcome> {
        Self::ALL.into_iter().find(|o| o.as_str() == name)
    }
}

/// One attempt, as recorded (C7: the classification chosen then stays with it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptRecord {
    /// 1-based, per job.
    pub number: u32,
    /// The candidate it went to.
    pub candidate: String,
    /// When it was dispatched.
    pub started: SystemTime,
    /// When its outcome was known.
    pub finished: Option<SystemTime>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The provider's status.
    pub status: Option<u16>,
    /// The semantic code.
    pub code: Option<String>,
    /// The class, or `unclassified`.
    pub class: Option<String>,
    /// The deciding rule.
    pub rule_id: Option<String>,
    /// The catalogue version that decided.
    pub catalogue_version: Option<String>,
    /// `setup` or `stream`.
    pub phase: Option<String>,
}

impl AttemptRecord {
    /// Attempt `number` to `candidate`, dispatched at `started`, its outcome not known yet.
    pub fn in_flight(number: u32, candidate: impl Into<String>, started: SystemTime) -> Self {
        AttemptRecord {
            number,
            candidate: candidate.into(),
            started,
            finished: None,
            outcome: AttemptOutcome::InFlight,
            status: None,
            code: None,
            class: None,
            rule_id: None,
            catalogue_version: None,
            phase: None,
        }
    }
}

/// A change to attempts made in the same transaction as a job's transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptOp {
    /// Record a dispatched attempt.
    Begin(AttemptRecord),
    /// Record the outcome of attempt `number`: every field but `number` is written.
    Finish(AttemptRecord),
    /// Every attempt of the job still [`AttemptOutcome::InFlight`] becomes
    /// [`AttemptOutcome::Unknown`], finished at `finished`: the process that sent it ended
    /// before its outcome was known (P3).
    MarkInFlightUnknown {
        /// When the outcome was given up on.
        finished: SystemTime,
    },
}

/// A store that cannot do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The transition was issued against an older generation; nothing changed.
    #[error("job {id} is at generation {actual}, not {expected}: the transition is stale")]
    Stale {
        /// The job.
        id: String,
        /// The generation the transition was issued against.
        expected: u64,
        /// The job's generation.
        actual: u64,
    },
    /// No such job.
    #[error("no job {0}")]
    NotFound(String),
    /// The database failed.
    #[error("job store: {0}")]
    Database(String),
    /// A stored value cannot be read back, or a value cannot be stored.
    #[error("job {id}: stored `{field}` is corrupt: {message}")]
    Corrupt {
        /// The job.
        id: String,
        /// The field (`policies`, `turn`, `attempts[2].outcome` …).
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

impl StoreError {
    /// A corrupt `field` of job `id`.
    pub fn corrupt(id: &str, field: impl Into<String>, message: impl ToString) -> Self {
        StoreError::Corrupt {
            id: id.to_owned(),
            field: field.into(),
            message: message.to_string(),
        }
    }
}

/// The store interface: an embedded SQLite (P4), or a PostgreSQL shared by several gateways
/// (X1). It offers primitives only; what a restart or a takeover does with them (P3) is
/// decided once, above every store, by [`crate::reconcile()`].
///
/// ## Claims (X2)
/// A store handle speaks for one gateway instance. An open job ([`JobState::OPEN`]) is held
/// by one instance at a time, and only its holder drives it. A store shared by several
/// instances bounds every hold with a lease ([`JobStore::lease`]) on the database's clock:
/// each transition through the handle takes (or keeps) the job for its instance, and the
/// instance renews the leases of the jobs it drives ([`JobStore::renew`]). When an instance
/// dies its leases run out, and [`JobStore::claim`] hands its jobs to another instance. A
/// store used by one process only (SQLite) needs none of this: the process holds every job
/// for as long as it lives, and the defaults say exactly that.
pub trait JobStore: Send + Sync {
    /// Creates a pending job, created at `now`.
    fn create(&self, job: NewJob, now: SystemTime) -> Result<JobRecord, StoreError>;
    /// One job.
    fn get(&self, id: &str) -> Result<JobRecord, StoreError>;
    /// At most `limit` jobs, the newest first.
    fn list(&self, limit: usize) -> Result<Vec<JobRecord>, StoreError>;
    /// Every job in one of `states`, the oldest first.
    fn in_states(&self, states: &[JobState]) -> Result<Vec<JobRecord>, StoreError>;
    /// A job's attempts, in order.
    fn attempts(&self, id: &str) -> Result<Vec<AttemptRecord>, StoreError>;
    /// The one transition owner (P2): applies `change` to the job if it is still at
    /// `expected_generation`, together with the attempt operations it returns, atomically;
    /// bumps the generation and sets `updated` to `now`. A stale transition changes nothing.
    /// What is fixed at creation (protocol, route, candidates, policies, request, `created`)
    /// is not `change`'s to alter: a store need not write it.
    fn transition(
        &self,
        id: &str,
        expected_generation: u64,
        now: SystemTime,
        change: &mut dyn FnMut(&mut JobRecord) -> Vec<AttemptOp>,
    ) -> Result<JobRecord, StoreError>;

    /// How long this instance's hold on a job lasts unless renewed: `Some` for a store that
    /// several instances share, `None` (the default) for a store one process uses, where the
    /// process holds its jobs for as long as it lives.
    fn lease(&self) -> Option<Duration> {
        None
    }

    /// Takes the open jobs that no live instance holds, the oldest first, and returns them as
    /// taken: from now on this instance holds them. A shared store takes only jobs whose
    /// lease ran out (skipping rows another instance is taking or changing at this moment)
    /// and bumps each one's generation, so whatever its former holder still issues against
    /// the old generation is stale (P2). The default, for a store one process uses, is every
    /// open job: whoever held them before this process has ended.
    fn claim(&self) -> Result<Vec<JobRecord>, StoreError> {
        self.in_states(&JobState::OPEN)
    }

    /// Renews this instance's leases on `ids`, the jobs it is driving; the number of them it
    /// still holds. A job taken over meanwhile is not renewed: its new holder keeps it. The
    /// default, for a store one process uses, holds every one.
    fn renew(&self, ids: &[String]) -> Result<usize, StoreError> {
        Ok(ids.len())
    }

    /// Gives up every hold of this instance at once, as it stops: the other instances take
    /// its open jobs over at their next look, under the restart rule, instead of after the
    /// lease. The number of jobs let go. The default, for a store one process uses, has
    /// nobody to let go to.
    fn release(&self) -> Result<usize, StoreError> {
        Ok(0)
    }
}
