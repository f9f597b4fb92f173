//! `rate_limit`: a token bucket over every request, as exporter-toolkit's (Go's
//! `rate.Limiter`): one token each `interval`, at most `burst` kept; a request without a
//! token is answered 429.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sync::lock;

#[derive(Debug)]
pub struct RateLimiter {
    every: Duration,
    burst: f64,
    /// Tokens held, as of the instant.
    bucket: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    /// A full bucket of `burst` tokens, refilled one per `every` (which is not zero).
    pub fn new(every: Duration, burst: u32) -> RateLimiter {
        RateLimiter {
            every,
            burst: f64::from(burst),
            bucket: Mutex::new((f64::from(burst), Instant::now())),
        }
    }

    /// Takes a token if one is there.
    pub fn allow(&self) -> bool {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> bool {
        let mut bucket = lock(&self.bucket);
        let (tokens, then) = *bucket;
        let refill = now.saturating_duration_since(then).as_secs_f64() / self.every.as_secs_f64();
        let tokens = (tokens + refill).min(self.burst);
        if tokens >= 1.0 {
            *bucket = (tokens - 1.0, now);
            true
        } else {
            *bucket = (tokens, now);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_per_interval() {
        let limiter = RateLimiter::new(Duration::from_secs(1), 3);
        let start = Instant::now();
        assert!((0..3).all(|_| limiter.allow_at(start)));
        assert!(!limiter.allow_at(start));
        assert!(!limiter.allow_at(start + Duration::from_millis(500)));
        assert!(limiter.allow_at(start + Duration::from_millis(1000)));
        assert!(!limiter.allow_at(start + Duration::from_millis(1000)));
        // A long pause refills no more than the burst.
        let later = start + Duration::from_secs(60);
        assert!((0..3).all(|_| limiter.allow_at(later)));
        assert!(!limiter.allow_at(later));
    }
}
