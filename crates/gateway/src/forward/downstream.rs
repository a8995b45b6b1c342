//! The client side of a forwarded request: the response head goes once, then body frames.

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use tokio::sync::oneshot;

use crate::reply::{Body, pipe};
use crate::responses::IdWatch;

/// What the handler answers with.
pub(crate) struct Head {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    /// The whole body; `None` for a stream fed through the pipe.
    pub(crate) body: Option<Bytes>,
}

impl Head {
    /// The response, its body whole or fed through `rx` (a non-streaming request has none).
    pub(crate) fn into_response(self, rx: Option<pipe::Receiver>) -> Response<Body> {
        let body = match (self.body, rx) {
            (Some(bytes), _) => Body::whole(bytes),
            (None, Some(rx)) => Body::Stream(rx),
            (None, None) => Body::whole(Bytes::new()),
        };
        let mut response = Response::new(body);
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        response
    }
}

/// The client side: the head goes once, then body frames (streams only: a whole answer
/// goes with its head).
pub(crate) struct Downstream {
    pub(crate) head: Option<oneshot::Sender<Head>>,
    pub(crate) body: Option<pipe::Sender>,
    /// For a Responses request: finds the response id in what the client is sent.
    pub(crate) watch: Option<Box<IdWatch>>,
}

impl Downstream {
    pub(crate) fn committed(&self) -> bool {
        self.head.is_none()
    }

    pub(crate) fn respond(&mut self, head: Head) -> bool {
        if let (Some(watch), Some(body)) = (&mut self.watch, &head.body)
            && head.status.is_success()
        {
            watch.answer(body);
        }
        self.head.take().is_some_and(|tx| tx.send(head).is_ok())
    }

    /// Sends body bytes; `false` when the client went away.
    pub(crate) async fn send(&mut self, bytes: Bytes) -> bool {
        match &mut self.body {
            _ if bytes.is_empty() => true,
            Some(body) => body.send(bytes).await,
            None => false,
        }
    }

    /// Completes when the client has gone away.
    pub(crate) async fn gone(&mut self) {
        match (&mut self.head, &mut self.body) {
            (Some(head), _) => head.closed().await,
            (None, Some(body)) => body.closed().await,
            // A whole answer went with its head: nothing is left to watch.
            (None, None) => std::future::pending().await,
        }
    }
}
