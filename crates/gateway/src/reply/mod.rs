//! What the gateway answers with: response bodies (whole, or streamed through a [`pipe`]) and
//! the small responses every part builds (`full`, and errors in the caller's protocol shape).

pub(crate) mod pipe;
mod relayed;

pub(crate) use relayed::Relayed;

use std::task::Poll;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use hyper::body::{Frame, SizeHint};
use rebound_runtime::Protocol;

use crate::shape;

/// A response body: whole, or fed through a [`pipe`] (streams and the jobs API's events).
pub(crate) enum Body {
    /// The whole body; `None` once sent (or when empty).
    Whole(Option<Bytes>),
    /// Chunks as the sender sends them.
    Stream(pipe::Receiver),
    /// An upstream's body, relayed as it arrives (pass-through, G8). A failure aborts the
    /// client's response rather than ending it cleanly.
    Upstream(Box<Relayed>),
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
            Body::Upstream(body) => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Whole(bytes) => bytes.is_none(),
            Body::Stream(_) => false,
            Body::Upstream(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Body::Stream(_) => SizeHint::default(),
            Body::Upstream(body) => body.size_hint(),
        }
    }
}

/// A whole response with its content type.
pub(crate) fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut response = Response::new(Body::whole(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// An error shaped like `protocol`'s own.
pub(crate) fn error(
    protocol: Protocol,
    status: StatusCode,
    kind: &str,
    message: &str,
) -> Response<Body> {
    full(
        status,
        "application/json",
        shape::error_body(protocol, kind, message, None).to_string(),
    )
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
