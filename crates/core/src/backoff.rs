//! Doubling backoff schedules (T3, T4).
//!
//! A schedule is a pure function of the retry number and one random draw; [`Backoff::schedule`]
//! turns it into an iterator of delays, so a whole schedule can be inspected without waiting.

use std::time::Duration;

/// A random draw in `[0, 1]`, supplied by the caller (T6). Out-of-range values are clamped
/// and `NaN` counts as 0, so a broken random source can lengthen no wait beyond its cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct Jitter(f64);

impl Jitter {
    /// No jitter: the draw 0.
    pub const NONE: Jitter = Jitter(0.0);
    /// The largest draw: 1.
    pub const MAX: Jitter = Jitter(1.0);

    /// A draw, clamped to `[0, 1]`.
    pub fn new(draw: f64) -> Self {
        if draw.is_nan() {
            Jitter(0.0)
        } else {
            Jitter(draw.clamp(0.0, 1.0))
        }
    }

    /// The draw.
    pub fn get(self) -> f64 {
        self.0
    }
}

/// `initial × 2^(n−1) × (1 + jitter × r)`, capped at `cap`, for retry `n ≥ 1`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    jitter: f64,
}

impl Backoff {
    /// A deterministic doubling schedule from `initial`, capped at `cap`.
    pub fn doubling(initial: Duration, cap: Duration) -> Self {
        Backoff {
            initial,
            cap,
            jitter: 0.0,
        }
    }

    /// Adds up to `fraction` (0.25 = 25 %) of positive jitter. Clamped to `[0, 1]`.
    pub fn with_jitter(mut self, fraction: f64) -> Self {
        self.jitter = Jitter::new(fraction).get();
        self
    }

    /// The first delay, before jitter.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The cap on every delay, hinted or not (T2).
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// The jitter fraction.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// The delay before retry `retry` (1-based; 0 is treated as 1) with the draw `draw`.
    pub fn delay(&self, retry: u32, draw: Jitter) -> Duration {
        let doublings = retry.saturating_sub(1);
        let base = if doublings >= 64 {
            None
        } else {
            self.initial.as_nanos().checked_mul(1u128 << doublings)
        };
        let Some(base) = base else {
            return self.cap;
        };
        if base >= self.cap.as_nanos() {
            return self.cap;
        }
        // Integer nanoseconds keep 2 s × 1.25 at exactly 2.5 s.
        let extra = (base as f64 * self.jitter * draw.get()).round() as u128;
        let total = base.saturating_add(extra).min(self.cap.as_nanos());
        duration_from_nanos(total)
    }

    /// The delays before retries 1, 2, 3 … with one draw per retry. Endless: take what you
    /// need. `draws` running dry counts as no jitter.
    pub fn schedule<I>(self, draws: I) -> impl Iterator<Item = Duration>
    where
        I: IntoIterator<Item = Jitter>,
    {
        let mut draws = draws.into_iter();
        (1u32..).map(move |n| self.delay(n, draws.next().unwrap_or(Jitter::NONE)))
    }
}

fn duration_from_nanos(nanos: u128) -> Duration {
    let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
    // The remainder is below 10^9 and fits.
    let sub = u32::try_from(nanos % 1_000_000_000).unwrap_or(0);
    Duration::new(secs, sub)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: impl IntoIterator<Item = Duration>) -> Vec<u128> {
        values.into_iter().map(|d| d.as_millis()).collect()
    }

    #[test]
    fn transient_schedule_is_1_2_4_8_8() {
        let b = Backoff::doubling(Duration::from_secs(1), Duration::from_secs(8));
        assert_eq!(
            ms(b.schedule([]).take(10)),
            [1000, 2000, 4000, 8000, 8000, 8000, 8000, 8000, 8000, 8000]
        );
    }

    #[test]
    fn rate_limit_schedule_with_jitter() {
        let b =
            Backoff::doubling(Duration::from_secs(2), Duration::from_secs(30)).with_jitter(0.25);
        assert_eq!(b.delay(1, Jitter::NONE).as_millis(), 2000);
        assert_eq!(b.delay(1, Jitter::MAX).as_millis(), 2500);
        assert_eq!(b.delay(1, Jitter::new(0.5)).as_millis(), 2250);
        assert_eq!(b.delay(4, Jitter::MAX).as_millis(), 20_000);
        assert_eq!(b.delay(5, Jitter::NONE).as_millis(), 30_000);
        assert_eq!(b.delay(4, Jitter::new(0.9)).as_millis(), 19_600);
        assert_eq!(b.delay(u32::MAX, Jitter::MAX).as_millis(), 30_000);
    }

    #[test]
    fn retry_zero_is_retry_one() {
        let b = Backoff::doubling(Duration::from_secs(1), Duration::from_secs(8));
        assert_eq!(b.delay(0, Jitter::NONE), b.delay(1, Jitter::NONE));
    }

    #[test]
    fn broken_draws_are_clamped() {
        assert_eq!(Jitter::new(f64::NAN).get(), 0.0);
        assert_eq!(Jitter::new(7.0).get(), 1.0);
        assert_eq!(Jitter::new(-1.0).get(), 0.0);
    }
}
