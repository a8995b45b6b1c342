//! The pipe from a stream's forwarder to its response body: a few chunks in flight, one
//! allocation of a few hundred bytes. An open stream holds one for its whole life, so it is
//! kept small (a tokio channel reserves 32 slots up front).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

/// Chunks that may wait in the pipe before the sender waits for the client to read.
const CAPACITY: usize = 8;

#[derive(Default)]
struct State {
    chunks: VecDeque<Bytes>,
    sender_gone: bool,
    receiver_gone: bool,
    /// The receiver, waiting for a chunk.
    receiver: Option<Waker>,
    /// The sender, waiting for room or for the receiver to go.
    sender: Option<Waker>,
}

type Shared = Arc<Mutex<State>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, State> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A new pipe.
pub(crate) fn pipe() -> (Sender, Receiver) {
    let shared = Shared::default();
    (Sender(Arc::clone(&shared)), Receiver(shared))
}

/// The forwarder's end.
pub(crate) struct Sender(Shared);

impl Sender {
    /// Sends a chunk, waiting while the pipe is full; `false` when the receiver is gone.
    pub(crate) async fn send(&self, chunk: Bytes) -> bool {
        let mut chunk = Some(chunk);
        poll_fn(|cx| {
            let mut state = lock(&self.0);
            if state.receiver_gone {
                return Poll::Ready(false);
            }
            if state.chunks.len() >= CAPACITY {
                state.sender = Some(cx.waker().clone());
                return Poll::Pending;
            }
            if let Some(chunk) = chunk.take() {
                state.chunks.push_back(chunk);
            }
            if let Some(receiver) = state.receiver.take() {
                receiver.wake();
            }
            Poll::Ready(true)
        })
        .await
    }

    /// Completes when the receiver is gone.
    pub(crate) async fn closed(&self) {
        poll_fn(|cx| {
            let mut state = lock(&self.0);
            if state.receiver_gone {
                Poll::Ready(())
            } else {
                state.sender = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let mut state = lock(&self.0);
        state.sender_gone = true;
        if let Some(receiver) = state.receiver.take() {
            receiver.wake();
        }
    }
}

/// The response body's end.
pub(crate) struct Receiver(Shared);

impl Receiver {
    /// The next chunk; `None` once the sender is gone and the pipe is empty.
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let mut state = lock(&self.0);
        if let Some(chunk) = state.chunks.pop_front() {
            if let Some(sender) = state.sender.take() {
                sender.wake();
            }
            return Poll::Ready(Some(chunk));
        }
        if state.sender_gone {
            return Poll::Ready(None);
        }
        state.receiver = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let mut state = lock(&self.0);
        state.receiver_gone = true;
        state.chunks.clear();
        if let Some(sender) = state.sender.take() {
            sender.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::{Future, poll_fn};
    use std::pin::{Pin, pin};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake, Waker};

    use bytes::Bytes;

    use super::{CAPACITY, Receiver, pipe};

    /// A waker that counts its wakes: whether a waiting side was woken is then a fact the
    /// test reads, not something it waits for.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Wakes {
        fn count(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }

        fn poll<F: Future>(self: &Arc<Self>, future: Pin<&mut F>) -> Poll<F::Output> {
            future.poll(&mut Context::from_waker(&Waker::from(Arc::clone(self))))
        }

        fn recv(self: &Arc<Self>, rx: &mut Receiver) -> Poll<Option<Bytes>> {
            rx.poll_recv(&mut Context::from_waker(&Waker::from(Arc::clone(self))))
        }
    }

    #[tokio::test]
    async fn chunks_arrive_in_order_then_the_end() {
        let (tx, mut rx) = pipe();
        let sending = tokio::spawn(async move {
            for i in 0..100 {
                assert!(tx.send(Bytes::from(format!("{i},"))).await);
            }
        });
        let mut got = String::new();
        while let Some(chunk) = poll_fn(|cx| rx.poll_recv(cx)).await {
            got.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        sending.await.unwrap();
        let expected: String = (0..100).map(|i| format!("{i},")).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn a_full_pipe_makes_the_sender_wait_for_the_reader() {
        let (tx, mut rx) = pipe();
        let wakes = Arc::new(Wakes::default());
        for _ in 0..CAPACITY {
            let sent = wakes.poll(pin!(tx.send(Bytes::from_static(b"x"))));
            assert_eq!(sent, Poll::Ready(true));
        }
        let mut blocked = pin!(tx.send(Bytes::from_static(b"y")));
        assert!(
            wakes.poll(blocked.as_mut()).is_pending(),
            "a full pipe took another chunk"
        );
        assert_eq!(wakes.count(), 0);
        assert_eq!(
            wakes.recv(&mut rx),
            Poll::Ready(Some(Bytes::from_static(b"x")))
        );
        assert_eq!(wakes.count(), 1, "a read did not wake the waiting sender");
        assert_eq!(wakes.poll(blocked), Poll::Ready(true));
    }

    #[test]
    fn a_gone_reader_wakes_a_waiting_sender_and_refuses_more() {
        let (tx, rx) = pipe();
        let wakes = Arc::new(Wakes::default());
        for _ in 0..CAPACITY {
            let sent = wakes.poll(pin!(tx.send(Bytes::from_static(b"x"))));
            assert_eq!(sent, Poll::Ready(true));
        }
        let mut waiting = pin!(tx.send(Bytes::from_static(b"y")));
        assert!(wakes.poll(waiting.as_mut()).is_pending());
        drop(rx);
        assert_eq!(
            wakes.count(),
            1,
            "the reader left without waking the sender"
        );
        assert_eq!(wakes.poll(waiting), Poll::Ready(false));
        assert_eq!(wakes.poll(pin!(tx.closed())), Poll::Ready(()));
        let refused = wakes.poll(pin!(tx.send(Bytes::from_static(b"z"))));
        assert_eq!(refused, Poll::Ready(false));
    }
}
