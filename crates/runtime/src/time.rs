//! Where time comes from and the one way to wait (T5, T6): the wall clock and tokio's timer in
//! production, [`VirtualTime`] in tests.

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
