//! The client side of a forwarded request: the response head goes once, then body frames.

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use tokio::sync::oneshot;

use super::pipe;

use crate::server::Body;

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
        let mut response = match (self.body, rx) {
            (Some(bytes), _) => {
                Response::new(Full::new(bytes).map_err(|never| match never {}).boxed())
            }
            (None, Some(rx)) => Response::new(BodyExt::boxed(ChannelBody(rx))),
            (None, None) => Response::new(
                http_body_util::Empty::new()
                    .map_err(|never| match never {})
                    .boxed(),
            ),
        };
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        response
    }
}

/// A response body fed by the forwarder through a [`pipe`].
pub(crate) struct ChannelBody(pipe::Receiver);

impl ChannelBody {
    pub(crate) fn new(rx: pipe::Receiver) -> Self {
        ChannelBody(rx)
    }
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|bytes| bytes.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// The client side: the head goes once, then body frames (streams only: a whole answer
/// goes with its head).
pub(crate) struct Downstream {
    pub(crate) head: Option<oneshot::Sender<Head>>,
    pub(crate) body: Option<pipe::Sender>,
}

impl Downstream {
    pub(crate) fn committed(&self) -> bool {
        self.head.is_none()
    }

    pub(crate) fn respond(&mut self, head: Head) -> bool {
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
