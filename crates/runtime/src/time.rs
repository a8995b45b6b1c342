//! Where time comes from and the one way to wait (T5, T6): the wall clock and tokio's timer in
//! production, [`VirtualTime`], [`HeldSleeper`] and [`ManualTime`] in tests.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// Where "now" comes from (T6).
pub trait Clock: Send + Sync {
    /// The current wall-clock time.
    fn now(&self) -> SystemTime;
}

/// The one place the runtime waits (T5): the driver races it against the abort token.
pub trait Sleeper: Send + Sync {
    /// A future that completes after `delay`.
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// tokio's timer.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(tokio::time::sleep(delay))
    }
}

/// Virtual time for tests: sleeping returns at once and moves the clock forward by the
/// delay, so a schedule of minutes runs in microseconds while the sockets stay real. Every
/// wait is recorded.
#[derive(Debug)]
pub struct VirtualTime {
    origin: SystemTime,
    state: Mutex<(Duration, Vec<Duration>)>,
}

impl VirtualTime {
    /// Virtual time starting at `origin`.
    pub fn starting_at(origin: SystemTime) -> Arc<Self> {
        Arc::new(VirtualTime {
            origin,
            state: Mutex::new((Duration::ZERO, Vec::new())),
        })
    }

    /// Every wait so far, in order.
    pub fn waits(&self) -> Vec<Duration> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .clone()
    }

    /// Total virtual time elapsed.
    pub fn elapsed(&self) -> Duration {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).0
    }
}

impl Clock for VirtualTime {
    fn now(&self) -> SystemTime {
        self.origin + self.elapsed()
    }
}

impl Sleeper for VirtualTime {
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 += delay;
        state.1.push(delay);
        Box::pin(tokio::task::yield_now())
    }
}

/// What happened to a wait of a [`HeldSleeper`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// A wait of this length began (and will not end by itself).
    Started(Duration),
    /// A wait of this length was dropped: something cut it short.
    Abandoned(Duration),
}

/// A sleeper for tests whose waits never end by themselves and that tells the test when a
/// wait starts and when one is given up unfinished, so a test acts *during* a wait (a client
/// leaving, an abort) without guessing how long anything takes.
#[derive(Debug)]
pub struct HeldSleeper(tokio::sync::mpsc::UnboundedSender<Wait>);

/// The test's side of a [`HeldSleeper`]: what happened to each wait, in order.
#[derive(Debug)]
pub struct Waits(tokio::sync::mpsc::UnboundedReceiver<Wait>);

impl HeldSleeper {
    /// The sleeper and the test's side of it.
    pub fn new() -> (Arc<HeldSleeper>, Waits) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Arc::new(HeldSleeper(tx)), Waits(rx))
    }
}

impl Waits {
    /// The next thing that happened to a wait, or `None` when nothing did within `limit`
    /// (which only bounds a broken build: in a working one the event comes at once).
    pub async fn next(&mut self, limit: Duration) -> Option<Wait> {
        tokio::time::timeout(limit, self.0.recv())
            .await
            .ok()
            .flatten()
    }
}

/// Reports its wait as abandoned when it is dropped (a held wait cannot finish).
struct Parked(tokio::sync::mpsc::UnboundedSender<Wait>, Duration);

impl Drop for Parked {
    fn drop(&mut self) {
        let _ = self.0.send(Wait::Abandoned(self.1));
    }
}

impl Sleeper for HeldSleeper {
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let _ = self.0.send(Wait::Started(delay));
        let parked = Parked(self.0.clone(), delay);
        Box::pin(async move {
            std::future::pending::<()>().await;
            drop(parked);
        })
    }
}

/// Time the test moves by hand: the clock stands still until [`ManualTime::advance`], and a
/// sleep ends when the clock reaches its end. Many concurrent waits (a crowd of requests
/// resting behind one deadline) then end together, exactly when the test says, and
/// [`ManualTime::sleeping`] tells the test when they have all begun.
#[derive(Debug)]
pub struct ManualTime {
    state: Mutex<Manual>,
    changed: tokio::sync::watch::Sender<()>,
}

#[derive(Debug)]
struct Manual {
    origin: SystemTime,
    now: SystemTime,
    sleepers: Vec<(SystemTime, tokio::sync::oneshot::Sender<()>)>,
}

impl ManualTime {
    /// Manual time starting at `origin`.
    pub fn starting_at(origin: SystemTime) -> Arc<Self> {
        Arc::new(ManualTime {
            state: Mutex::new(Manual {
                origin,
                now: origin,
                sleepers: Vec::new(),
            }),
            changed: tokio::sync::watch::Sender::new(()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Manual> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves the clock forward by `by` and ends every sleep that is due.
    pub fn advance(&self, by: Duration) {
        let mut state = self.lock();
        state.now += by;
        let now = state.now;
        let (due, pending): (Vec<_>, Vec<_>) =
            state.sleepers.drain(..).partition(|(end, _)| *end <= now);
        state.sleepers = pending;
        drop(state);
        for (_, wake) in due {
            let _ = wake.send(());
        }
        self.changed.send_replace(());
    }

    /// Time moved on since the origin.
    pub fn elapsed(&self) -> Duration {
        let state = self.lock();
        state.now.duration_since(state.origin).unwrap_or_default()
    }

    /// How far the clock must move for the nearest running sleep to end.
    pub fn next_wake(&self) -> Option<Duration> {
        let state = self.lock();
        state
            .sleepers
            .iter()
            .filter(|(_, wake)| !wake.is_closed())
            .map(|(end, _)| end.duration_since(state.now).unwrap_or_default())
            .min()
    }

    /// How many sleeps are running.
    pub fn sleeping(&self) -> usize {
        self.lock()
            .sleepers
            .iter()
            .filter(|(_, wake)| !wake.is_closed())
            .count()
    }

    /// Waits until at least `n` sleeps run, or `limit` passes (which only bounds a broken
    /// build: in a working one the sleeps begin as soon as the requests reach them).
    pub async fn until_sleeping(&self, n: usize, limit: Duration) -> bool {
        let mut changed = self.changed.subscribe();
        let reached = async {
            while self.sleeping() < n {
                if changed.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(limit, reached).await.is_ok()
    }
}

impl Clock for ManualTime {
    fn now(&self) -> SystemTime {
        self.lock().now
    }
}

impl Sleeper for ManualTime {
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        if delay.is_zero() {
            return Box::pin(std::future::ready(()));
        }
        let (wake, woken) = tokio::sync::oneshot::channel();
        {
            let mut state = self.lock();
            let end = state.now + delay;
            state.sleepers.push((end, wake));
        }
        self.changed.send_replace(());
        Box::pin(async move {
            let _ = woken.await;
        })
    }
}
