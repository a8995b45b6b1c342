//! A response body, from either client: the HTTP/1.1 connections or hyper's pooled HTTP/2 client.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::{TransportFailure, h1};

/// A response body. Its pieces come as they arrive; a failure is already classified.
#[derive(Debug)]
pub struct ResponseBody(Inner);

#[derive(Debug)]
enum Inner {
    H1(h1::Body),
    H2(Incoming),
}

impl ResponseBody {
    pub(super) fn h1(body: h1::Body) -> Self {
        ResponseBody(Inner::H1(body))
    }

    pub(super) fn h2(body: Incoming) -> Self {
        ResponseBody(Inner::H2(body))
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = TransportFailure;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, TransportFailure>>> {
        match &mut self.get_mut().0 {
            Inner::H1(body) => body.poll_frame(cx),
            Inner::H2(body) => Pin::new(body)
                .poll_frame(cx)
                .map(|frame| frame.map(|result| result.map_err(|e| super::body_failure(&e)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Inner::H1(body) => body.is_end_stream(),
            Inner::H2(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Inner::H1(_) => SizeHint::default(),
            Inner::H2(body) => body.size_hint(),
        }
    }
}
