//! What the driver tells its caller while a request runs (R1–R4).

use rebound_core::{Diagnostics, RetryStatus};
use serde::Serialize;

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A complete response.
    Complete,
    /// Recovery stopped; an `Error` event came just before.
    Failed,
    /// The caller aborted. Not an error.
    Aborted,
}

/// One event of a request. Every request ends with exactly one `End`; a failed one has
/// exactly one `Error` before it; a recovered one has none (R3, R4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Streamed text of the visible assistant message.
    Text {
        /// The visible message id, the same across replays (R2).
        message_id: String,
        /// The text.
        text: String,
    },
    /// Streamed thinking or reasoning of the visible assistant message, shown live (G9).
    Reasoning {
        /// The visible message id, the same across replays (R2).
        message_id: String,
        /// The thinking or reasoning text.
        text: String,
    },
    /// The failed attempt's partial output must be dropped: the replay starts the message
    /// again under the same id (R1, R2).
    Discard {
        /// The message whose partial text goes.
        message_id: String,
    },
    /// Waiting before a retry (R3). Re-render `status.text(now)` every second for a
    /// countdown.
    Retrying {
        /// The message being retried.
        message_id: String,
        /// Delay, since, attempt, budget, class, code.
        status: RetryStatus,
    },
    /// Moving to the route's next candidate.
    Fallback {
        /// The message being retried.
        message_id: String,
        /// The candidate now in use.
        candidate: usize,
    },
    /// The one terminal error of a request whose recovery stopped (R4).
    Error {
        /// The message that failed.
        message_id: String,
        /// Code, class, rule, phase, provider status, timing, `retryAttempt`.
        diagnostics: Box<Diagnostics>,
    },
    /// The end of the request.
    End {
        /// The message.
        message_id: String,
        /// How it ended.
        outcome: Outcome,
    },
}

/// Receives events.
pub trait EventSink {
    /// One event.
    fn emit(&mut self, event: Event);
}

impl<F: FnMut(Event)> EventSink for F {
    fn emit(&mut self, event: Event) {
        self(event);
    }
}

impl EventSink for Vec<Event> {
    fn emit(&mut self, event: Event) {
        self.push(event);
    }
}
