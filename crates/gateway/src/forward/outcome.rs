//! How one forwarded attempt ended, in the recovery loop's terms.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use rebound_core::{Evidence, Safety};
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
