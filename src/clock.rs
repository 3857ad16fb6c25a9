//! Time. Every decision that needs the time (TTL expiry, garbage ages, coordinator timeouts,
//! timestamps written into checkpoints and savepoints) reads an injected [`Clock`], so tests
//! move time by hand instead of sleeping. [`SystemClock`] is the only reader of the wall clock
//! in the crate: `clippy.toml` disallows `SystemTime::now` elsewhere and
//! `tests/architecture_rules.rs` checks the same in CI.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of time in milliseconds. Tests inject [`ManualClock`]; nothing in rockstate reads
/// the wall clock except [`SystemClock`].
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch (or any fixed origin the job uses consistently).
    fn now_ms(&self) -> u64;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one reader of the wall clock
    fn now_ms(&self) -> u64 {
        millis_since_epoch(SystemTime::now())
    }
}

/// A clock that moves only when told to: for tests, and as the event-time watermark.
#[derive(Debug, Default, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(start_ms)))
    }

    /// Sets the time (never moves backwards: a smaller value is ignored, like a watermark).
    pub fn set(&self, ms: u64) {
        self.0.fetch_max(ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `d`.
    pub fn advance(&self, d: Duration) {
        let ms = millis(d);
        // Saturating: a clock moved past the end stays there.
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(ms))
            });
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// `t` (a file's or object's modification time) in milliseconds since the Unix epoch; 0 for a
/// time before it.
pub(crate) fn millis_since_epoch(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `d` in whole milliseconds, `u64::MAX` for a duration beyond it (about 585 million years:
/// what a caller passes for "never"), never wrapped around to a short one.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whether something last modified at `modified_ms` is at least `min_age` old at `now_ms`.
/// A modification time in the future (clock skew) counts as age zero.
pub(crate) fn is_older_than(modified_ms: u64, now_ms: u64, min_age: Duration) -> bool {
    now_ms.saturating_sub(modified_ms) >= millis(min_age)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_beyond_u64_milliseconds_saturate() {
        assert_eq!(millis(Duration::from_millis(1234)), 1234);
        // 18,446,744,073,709,552 s is 2^64 + 384 ms: it must not wrap to 384.
        assert_eq!(
            millis(Duration::from_secs(18_446_744_073_709_552)),
            u64::MAX
        );
        assert_eq!(millis(Duration::MAX), u64::MAX);
        assert!(!is_older_than(
            0,
            10,
            Duration::from_secs(18_446_744_073_709_552)
        ));
        let c = ManualClock::new(u64::MAX - 1);
        c.advance(Duration::from_millis(5));
        assert_eq!(c.now_ms(), u64::MAX);
    }

    #[test]
    fn manual_clock_never_moves_back() {
        let c = ManualClock::new(10);
        c.set(5);
        assert_eq!(c.now_ms(), 10);
        c.advance(Duration::from_millis(7));
        assert_eq!(c.now_ms(), 17);
    }

    #[test]
    fn ages_saturate() {
        assert!(is_older_than(1_000, 4_000, Duration::from_secs(3)));
        assert!(!is_older_than(1_001, 4_000, Duration::from_secs(3)));
        assert!(!is_older_than(9_000, 4_000, Duration::from_millis(1)));
        assert!(is_older_than(9_000, 4_000, Duration::ZERO));
    }
}
