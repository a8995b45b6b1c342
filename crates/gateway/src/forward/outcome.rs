//! How one forwarded attempt ended, in the recovery loop's terms.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use rebound_core::{Evidence, Safety};
use rebound_runtime::provider::ResponseHead;
use rebound_runtime::{Attempted, Failed};

/// What the forwarder keeps of a failure to end the request with, if recovery stops.
#[derive(Debug, Default)]
pub(crate) struct Detail {
    /// The upstream's own error event already reached the client.
    pub(crate) error_forwarded: bool,
    /// An upstream error response (status and body), relayed when recovery stops.
    pub(crate) upstream_error: Option<(StatusCode, Bytes)>,
    /// The failed attempt's response headers that a give-up keeps (G10): those of its error
    /// response, or of a stream that failed before content.
    pub(crate) kept_headers: HeaderMap,
    /// Where a committed Responses stream stood when it failed: the events rebound ends it
    /// with continue its numbering and name its response.
    pub(crate) position: Option<Box<Position>>,
}

/// Where a committed Responses stream stood.
#[derive(Debug, Default)]
pub(crate) struct Position {
    /// The last `sequence_number` the client received, if the upstream numbered its events.
    pub(crate) sequence_number: Option<u64>,
    /// The response `response.created` announced.
    pub(crate) response: Option<ResponseHead>,
    /// The upstream's own `error` event already reached the client: only the
    /// `response.failed` that ends the stream is still owed.
    pub(crate) error_event_sent: bool,
}

/// One attempt's outcome: a success already delivered to the client, a failure, or the
/// client gone.
pub(crate) type Attempt = Attempted<(), Detail>;

/// A failed attempt.
pub(crate) type FailedAttempt = Failed<Detail>;

/// A failure. Once content reached a client that did not ask for restart markers, a replay
/// would duplicate what it has seen: that is unsafe (D4, G4).
pub(crate) fn failure(
    evidence: Evidence,
    delivered: bool,
    restart: bool,
    detail: Detail,
) -> Attempt {
    let safety = if delivered && !restart {
        Safety::Ambiguous
    } else {
        Safety::Replayable
    };
    Attempted::Failed(Failed {
        evidence,
        delivered,
        safety,
        detail,
    })
}
