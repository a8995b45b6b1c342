//! What a durable route is: its record, its attempts, and the one interface that changes them.

use rebound_core::TurnSnapshot;
use serde::{Deserialize, Serialize};

/// Where a durable route stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Ready to dispatch, never sent (or replayable): runs as soon as possible.
    Pending,
    /// Waiting until `deadline_ms` for a retry, a reset or a fallback.
    Waiting,
    /// An attempt is being sent: after a crash, it may or may not have reached the provider.
    Dispatching,
    /// Done, with a response.
    Succeeded,
    /// Recovery stopped with a terminal error.
    Failed,
    /// A human must decide: unclassified or unsafe evidence, or an attempt that may have been
    /// sent before a crash (P3).
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

    /// True when nothing will happen without a manual action.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Stopped
        )
    }
}

/// A durable route, as stored. Everything needed to resume it after a restart is here (P1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// The policy snapshot: one policy document per candidate.
    pub policies: serde_json::Value,
    /// The request body, forwarded as it is.
    #[serde(skip)]
    pub request: Vec<u8>,
    /// The core's counters: candidate, retry ordinals, reset waits, attempts.
    pub turn: TurnSnapshot,
    /// When a waiting route runs next, in milliseconds since the Unix epoch.
    pub deadline_ms: Option<u64>,
    /// What the wait leads to (`retry`, `reset_wait`, `fallback`).
    pub pending_outcome: Option<String>,
    /// The last failure's classification (code, class, rule id, catalogue version).
    pub classification: Option<serde_json::Value>,
    /// The response status, when done.
    pub response_status: Option<u16>,
    /// The response body, when done.
    #[serde(skip)]
    pub response: Option<Vec<u8>>,
    /// The terminal error's diagnostics, when failed.
    pub error: Option<serde_json::Value>,
    /// Created, in milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// Last changed, in milliseconds since the Unix epoch.
    pub updated_ms: u64,
}

/// A route to create.
#[derive(Clone, Debug, PartialEq)]
pub struct NewJob {
    /// `openai` or `anthropic`.
    pub protocol: String,
    /// The gateway route.
    pub route_id: String,
    /// Its candidates, in order.
    pub candidates: Vec<String>,
    /// One policy document per candidate.
    pub policies: serde_json::Value,
    /// The request body.
    pub request: Vec<u8>,
}

/// One attempt, as recorded (C7: the classification chosen then stays with it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// 1-based, per route.
    pub number: u32,
    /// The candidate it went to.
    pub candidate: String,
    /// When it was dispatched.
    pub started_ms: u64,
    /// When its outcome was known.
    pub finished_ms: Option<u64>,
    /// `in_flight`, `succeeded`, `failed`, `unknown` (the process ended while it was out).
    pub outcome: String,
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

/// A change to attempts made in the same transaction as a route's transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptOp {
    /// Record a dispatched attempt.
    Begin(AttemptRecord),
    /// Record the outcome of attempt `number`.
    Finish(AttemptRecord),
}

/// What a restart found (P3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reconciliation {
    /// Routes to run: `(id, generation, deadline)`; no deadline means at once.
    pub due: Vec<(String, u64, Option<u64>)>,
    /// Routes moved to `action_required` because an attempt may have been sent.
    pub action_required: Vec<String>,
}

/// A store that cannot do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The transition was issued against an older generation; nothing changed.
    #[error("route {id} is at generation {actual}, not {expected}: the transition is stale")]
    Stale {
        /// The route.
        id: String,
        /// The generation the transition was issued against.
        expected: u64,
        /// The route's generation.
        actual: u64,
    },
    /// No such route.
    #[error("no route {0}")]
    NotFound(String),
    /// The database failed.
    #[error("route store: {0}")]
    Database(String),
    /// A stored value does not parse.
    #[error("route store: corrupt record {0}")]
    Corrupt(String),
}

/// The store interface: an embedded SQLite today (P4), a shared PostgreSQL for several
/// gateways tomorrow (see `docs/durable-routes.md`).
pub trait RouteStore: Send + Sync {
    /// Creates a pending route.
    fn create(&self, job: NewJob, now_ms: u64) -> Result<JobRecord, StoreError>;
    /// One route.
    fn get(&self, id: &str) -> Result<JobRecord, StoreError>;
    /// The newest routes first.
    fn list(&self, limit: usize) -> Result<Vec<JobRecord>, StoreError>;
    /// A route's attempts, in order.
    fn attempts(&self, id: &str) -> Result<Vec<AttemptRecord>, StoreError>;
    /// The one transition owner (P2): applies `change` to the route if it is still at
    /// `expected_generation`, together with its attempt operations, atomically, and bumps the
    /// generation. A stale transition changes nothing.
    fn transition(
        &self,
        id: &str,
        expected_generation: u64,
        now_ms: u64,
        change: &mut dyn FnMut(&mut JobRecord) -> Vec<AttemptOp>,
    ) -> Result<JobRecord, StoreError>;
    /// After a restart (P3): routes waiting on a deadline or never dispatched are due again;
    /// routes caught dispatching move to `action_required` and their open attempts to
    /// `unknown`.
    fn reconcile(&self, now_ms: u64) -> Result<Reconciliation, StoreError>;
}
