//! An upstream's body relayed to the client as it arrives (pass-through, G8), with the idle
//! timeout every upstream read has (S5): a provider that goes quiet mid-body does not hold the
//! client's response open for ever.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body as _, Frame, SizeHint};
use rebound_runtime::http::ResponseBody;
use tokio::time::{Instant, Sleep};

/// An upstream body and the deadline of its next piece.
pub(crate) struct Relayed {
    body: ResponseBody,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl Relayed {
    /// `body`, failing when no piece of it arrives for `idle`.
    pub(crate) fn new(body: ResponseBody, idle: Duration) -> Self {
        Relayed {
            body,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }

    /// The next frame; an error aborts the client's response rather than ending it cleanly.
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                let idle = self.idle;
                self.deadline.as_mut().reset(Instant::now() + idle);
                Poll::Ready(frame.map(|f| f.map_err(|e| std::io::Error::other(e.message))))
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "the upstream sent nothing for {} s",
                        self.idle.as_secs_f64()
                    ),
                )))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
