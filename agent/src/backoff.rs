//! Bounded exponential backoff: `min_ms`, doubling on every failure, capped
//! at `max_ms`, back to `min_ms` after a success.

use std::time::Duration;

/// Delays between retries of one operation.
#[derive(Debug, Clone)]
pub struct Backoff {
    min_ms: u64,
    max_ms: u64,
    next_ms: u64,
}

impl Backoff {
    /// A backoff from `min_ms` up to `max_ms` (at least `min_ms`).
    pub fn new(min_ms: u64, max_ms: u64) -> Self {
        let min_ms = min_ms.max(1);
        Backoff {
            min_ms,
            max_ms: max_ms.max(min_ms),
            next_ms: min_ms,
        }
    }

    /// The delay to wait now; the one after is twice as long, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let now = self.next_ms;
        self.next_ms = now.saturating_mul(2).min(self.max_ms);
        Duration::from_millis(now)
    }

    /// Forgets past failures.
    pub fn reset(&mut self) {
        self.next_ms = self.min_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(100, 2_000);
        let got: Vec<u64> = (0..7).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(got, vec![100, 200, 400, 800, 1600, 2000, 2000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }

    #[test]
    fn degenerate_bounds_are_sane() {
        let mut b = Backoff::new(0, 0);
        assert_eq!(b.next_delay(), Duration::from_millis(1));
        assert_eq!(b.next_delay(), Duration::from_millis(1));
    }
}
