//! HTTP/1.1 on the wire, without IO (RFC 9112): the request head rebound writes, and the
//! response head (`head.rs`) and body framing (`body.rs`) it reads. Everything here works on
//! byte slices, so it is tested and fuzzed without sockets.

mod body;
mod head;

pub use self::body::{BodyDecoder, Decoded, Framing};
pub use self::head::{MAX_HEAD, ResponseHead, encode_request_head, parse_response_head};

/// A response that breaks HTTP/1.1: what is wrong, in words fit for evidence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WireError(String);

impl WireError {
    pub(super) fn new(message: impl Into<String>) -> Self {
        WireError(message.into())
    }
}
