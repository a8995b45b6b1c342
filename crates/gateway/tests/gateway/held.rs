//! A sleeper whose waits never end by themselves, and that tells the test when a wait starts
//! and when one is given up unfinished: the test acts *during* a wait without guessing how
//! long anything takes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rebound_runtime::Sleeper;
use tokio::sync::mpsc;

/// What happened to a wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// A wait of this length began (and will not end by itself).
    Started(Duration),
    /// A wait of this length was dropped: something cut it short.
    Abandoned(Duration),
}

/// The sleeper: every wait parks until it is dropped.
pub(crate) struct Held(mpsc::UnboundedSender<Wait>);

/// The test's side: what happened to each wait, in order.
pub(crate) struct Waits(mpsc::UnboundedReceiver<Wait>);

impl Held {
    pub(crate) fn new() -> (Arc<Held>, Waits) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Arc::new(Held(tx)), Waits(rx))
    }
}

impl Waits {
    /// The next thing that happened to a wait. `limit` only bounds a broken build (the
    /// event never comes); a working one never gets near it.
    pub(crate) async fn next(&mut self, limit: Duration) -> Wait {
        tokio::time::timeout(limit, self.0.recv())
            .await
            .unwrap_or_else(|_| panic!("nothing happened to any wait within {limit:?}"))
            .expect("the sleeper is alive")
    }
}

/// Reports the wait as abandoned when it is dropped (it cannot finish).
struct Parked(mpsc::UnboundedSender<Wait>, Duration);

impl Drop for Parked {
    fn drop(&mut self) {
        let _ = self.0.send(Wait::Abandoned(self.1));
    }
}

impl Sleeper for Held {
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let _ = self.0.send(Wait::Started(delay));
        let parked = Parked(self.0.clone(), delay);
        Box::pin(async move {
            std::future::pending::<()>().await;
            drop(parked);
        })
    }
}
