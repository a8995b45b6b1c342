//! What a durable agent run is: its record and its invocations.

use std::time::SystemTime;

use rebound_core::TurnSnapshot;
use rebound_core::policy::document::PolicyDocument;
use serde::{Deserialize, Serialize};

use crate::model::AttemptOutcome;

/// Where a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Its next invocation may start.
    Pending,
    /// An invocation is running (its child process may act).
    Running,
    /// Waiting until its deadline (a usage reset, a backoff), then pending.
    Waiting,
    /// An invocation completed the run.
    Succeeded,
    /// Recovery stopped with the run's terminal error.
    Failed,
    /// Neither a resume nor a switch is safe, or the evidence is unclassified: a human decides.
    ActionRequired,
}

impl RunState {
    /// Every state.
    pub const ALL: [RunState; 6] = [
        RunState::Pending,
        RunState::Running,
        RunState::Waiting,
        RunState::Succeeded,
        RunState::Failed,
        RunState::ActionRequired,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::Running => "running",
            RunState::Waiting => "waiting",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::ActionRequired => "action_required",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<RunState> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// True when nothing more happens to the run by itself.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunState::Succeeded | RunState::Failed | RunState::ActionRequired
        )
    }
}

/// The agent session a run's invocations continue: the profile that started it and the id
/// its CLI reported (Claude Code's `session_id`, Codex's thread id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSession {
    /// The profile whose CLI reported it.
    pub profile: String,
    /// The id, as reported.
    pub id: String,
}

/// One durable agent run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Its id.
    pub id: String,
    /// Bumped by every transition (P2).
    pub generation: u64,
    /// Where it is.
    pub state: RunState,
    /// The agent route it runs on.
    pub route_id: String,
    /// The route's profiles, in order, as submitted.
    pub profiles: Vec<String>,
    /// Whether the route allows handing a run that already acted to another profile.
    pub handoff: bool,
    /// Each profile's policy, as submitted (P1: the snapshot decides, not today's config).
    pub policies: Vec<PolicyDocument>,
    /// The prompt.
    pub prompt: String,
    /// The working directory of every invocation.
    pub cwd: String,
    /// The turn's counters.
    pub turn: TurnSnapshot,
    /// The session to resume, once a CLI reported one.
    pub session: Option<RunSession>,
    /// Whether an invocation already acted (tool calls, file edits): the run then never
    /// starts afresh (D4).
    pub acted: bool,
    /// When a waiting run becomes pending.
    #[serde(with = "ms::option")]
    pub deadline: Option<SystemTime>,
    /// What follows the wait or the switch: `resume`, `retry`, `switch`.
    pub pending_outcome: Option<String>,
    /// The last decision's classification (code, class, rule id, catalogue version).
    pub classification: Option<serde_json::Value>,
    /// The last failed invocation's evidence: exit status, redacted tails, error events.
    pub evidence: Option<serde_json::Value>,
    /// The terminal error, or why a human must decide.
    pub error: Option<serde_json::Value>,
    /// The final result text the agent reported, once succeeded.
    pub result: Option<String>,
    /// The bounded, redacted tail of everything the run's invocations printed.
    pub output: String,
    /// When it was created.
    #[serde(with = "ms")]
    pub created: SystemTime,
    /// When it last changed.
    #[serde(with = "ms")]
    pub updated: SystemTime,
}

/// A run to create.
#[derive(Clone, Debug, PartialEq)]
pub struct NewRun {
    /// The agent route.
    pub route_id: String,
    /// Its profiles, in order.
    pub profiles: Vec<String>,
    /// Whether a hand-off after an effect is allowed.
    pub handoff: bool,
    /// Each profile's policy.
    pub policies: Vec<PolicyDocument>,
    /// The prompt.
    pub prompt: String,
    /// The working directory.
    pub cwd: String,
}

/// How an invocation started its agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvocationMode {
    /// A new session with the run's prompt.
    Fresh,
    /// The run's session, resumed.
    Resume,
}

/// One child process of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invocation {
    /// 1-based, in the run.
    pub number: u32,
    /// The profile it ran.
    pub profile: String,
    /// Fresh or resumed.
    pub mode: InvocationMode,
    /// When it started.
    #[serde(with = "ms")]
    pub started: SystemTime,
    /// When it ended.
    #[serde(with = "ms::option")]
    pub finished: Option<SystemTime>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The exit code; `None` for a signal or while running.
    pub exit_code: Option<i32>,
    /// The session it reported.
    pub session: Option<String>,
    /// Whether it acted (tool calls seen in its structured output).
    pub acted: bool,
    /// The classification of its failure (C7).
    pub code: Option<String>,
    /// The class.
    pub class: Option<String>,
    /// The rule id.
    pub rule_id: Option<String>,
    /// The catalogue version.
    pub catalogue_version: Option<String>,
}

/// A change to a run's invocations, committed with the run's transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InvocationOp {
    /// Records a new invocation, before its process starts (P1).
    Begin(Invocation),
    /// Replaces the invocation of the same number.
    Finish(Invocation),
    /// Marks the running invocation `unknown` (restart rule).
    MarkInFlightUnknown {
        /// When it was found.
        finished: SystemTime,
    },
}

/// Times as integer milliseconds since the Unix epoch in the stored JSON.
mod ms {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn to_ms(t: SystemTime) -> u64 {
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(to_ms(*t))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let ms = u64::deserialize(d)?;
        UNIX_EPOCH
            .checked_add(Duration::from_millis(ms))
            .ok_or_else(|| serde::de::Error::custom(format!("{ms} ms is out of range")))
    }

    pub(super) mod option {
        use std::time::{Duration, SystemTime, UNIX_EPOCH};

        use serde::{Deserialize, Deserializer, Serializer};

        pub(in super::super) fn serialize<S: Serializer>(
            t: &Option<SystemTime>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => s.serialize_some(&super::to_ms(*t)),
                None => s.serialize_none(),
            }
        }

        pub(in super::super) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<SystemTime>, D::Error> {
            Option::<u64>::deserialize(d)?
                .map(|ms| {
                    UNIX_EPOCH
                        .checked_add(Duration::from_millis(ms))
                        .ok_or_else(|| serde::de::Error::custom(format!("{ms} ms is out of range")))
                })
                .transpose()
        }
    }
}
