//! Request bodies, read within the configured limit (G5).

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;

/// Why a request body could not be had.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// It is larger than the limit (declared or sent).
    TooLarge,
    /// The client's connection failed while sending it.
    Unreadable,
}

/// Reads a request body of at most `limit` bytes. A `content-length` beyond the limit is
/// refused before a byte is read.
pub(crate) async fn read_body(
    declared: Option<&http::HeaderValue>,
    body: Incoming,
    limit: usize,
) -> Result<Bytes, BodyError> {
    let declared = declared
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge);
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(BodyError::TooLarge),
        Err(_) => Err(BodyError::Unreadable),
    }
}
