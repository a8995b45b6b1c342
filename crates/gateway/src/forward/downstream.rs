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
    /// The whole body; `None` for a stream fed through the channel.
    pub(crate) body: Option<Bytes>,
}

impl Head {
    pub(crate) fn into_response(self, rx: pipe::Receiver) -> Response<Body> {
        let mut response = match self.body {
            Some(bytes) => Response::new(Full::new(bytes).map_err(|never| match never {}).boxed()),
            None => Response::new(BodyExt::boxed(ChannelBody(rx))),
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

/// The client side: the head goes once, then body frames.
pub(crate) struct Downstream {
    pub(crate) head: Option<oneshot::Sender<Head>>,
    pub(crate) body: pipe::Sender,
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
        bytes.is_empty() || self.body.send(bytes).await
    }

    /// Completes when the client has gone away.
    pub(crate) async fn gone(&mut self) {
        match &mut self.head {
            Some(head) => head.closed().await,
            None => self.body.closed().await,
        }
    }
}
