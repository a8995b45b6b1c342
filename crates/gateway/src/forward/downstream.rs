//! The client side of a forwarded request: the response head goes once, then body frames.

use std::task::Poll;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};

use hyper::body::{Frame, SizeHint};
use tokio::sync::oneshot;

use super::pipe;

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

/// A response body: whole, or fed through a [`pipe`] (streams and the jobs API's events).
pub(crate) enum Body {
    /// The whole body; `None` once sent (or when empty).
    Whole(Option<Bytes>),
    /// Chunks as the sender sends them.
    Stream(pipe::Receiver),
}

impl Body {
    pub(crate) fn whole(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        Body::Whole((!bytes.is_empty()).then_some(bytes))
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.get_mut() {
            Body::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(rx) => rx
                .poll_recv(cx)
                .map(|bytes| bytes.map(|bytes| Ok(Frame::data(bytes)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Whole(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Body::Stream(_) => SizeHint::default(),
        }
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http_body_util::BodyExt;
    use hyper::body::Body as _;

    use super::{Body, pipe};

    #[tokio::test]
    async fn a_whole_body_says_its_length_and_ends() {
        let body = Body::whole("hello");
        assert_eq!(body.size_hint().exact(), Some(5));
        assert!(!body.is_end_stream());
        assert_eq!(body.collect().await.unwrap().to_bytes(), "hello");

        let empty = Body::whole(Bytes::new());
        assert_eq!(empty.size_hint().exact(), Some(0));
        assert!(empty.is_end_stream());
        assert!(empty.collect().await.unwrap().to_bytes().is_empty());
    }

    #[tokio::test]
    async fn a_stream_body_relays_the_pipe_until_it_closes() {
        let (tx, rx) = pipe::pipe();
        let body = Body::Stream(rx);
        assert_eq!(body.size_hint().exact(), None);
        let send = tokio::spawn(async move {
            assert!(tx.send(Bytes::from_static(b"a")).await);
            assert!(tx.send(Bytes::from_static(b"b")).await);
        });
        assert_eq!(body.collect().await.unwrap().to_bytes(), "ab");
        send.await.unwrap();
    }
}
