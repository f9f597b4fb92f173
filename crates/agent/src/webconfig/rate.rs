//! Token buckets per client address: `rate_limit` (every request that is not already
//! authenticated) and the limit on failed logins (see [`super::auth`]).
//!
//! exporter-toolkit's `rate_limit` is one bucket shared by every client (Go's
//! `rate.Limiter`): one token each `interval`, at most `burst` kept. Shared, a flood from
//! one address empties it and the next scrape of a real Prometheus is answered 429 too,
//! every time, for as long as the flood lasts. Here each address has its own bucket of the
//! same shape, so a client can only exhaust its own. IPv6 clients are counted by /64, the
//! smallest block a host is usually given: one host must not get 2^64 buckets.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sync::lock;

/// Most addresses remembered. Past it, buckets that have refilled (they hold nothing a
/// fresh one would not) are forgotten first, then the fullest one.
const MAX_ADDRESSES: usize = 4096;

/// One token each `every`, at most `burst` held, for each client address.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    every: Duration,
    burst: f64,
    /// Tokens held by each address, as of the instant.
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

impl RateLimiter {
    /// Full buckets of `burst` tokens, refilled one per `every` (which is not zero).
    pub fn new(every: Duration, burst: u32) -> RateLimiter {
        RateLimiter {
            every,
            burst: f64::from(burst),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one of `client`'s tokens if it has one.
    pub fn allow(&self, client: IpAddr) -> bool {
        self.take_at(client, Instant::now()).is_some()
    }

    /// Takes one of `client`'s tokens if it has one, and says whether its bucket was full
    /// before (`Some(true)`: nothing taken from it lately) or not.
    pub fn take(&self, client: IpAddr) -> Option<bool> {
        self.take_at(client, Instant::now())
    }

    /// Gives `client` back a token taken by [`RateLimiter::allow`] (a login that turned out
    /// right costs nothing).
    pub(crate) fn refund(&self, client: IpAddr) {
        let mut buckets = lock(&self.buckets);
        if let Some((tokens, _)) = buckets.get_mut(&block(client)) {
            *tokens = (*tokens + 1.0).min(self.burst);
        }
    }

    /// How long until `client` has a token again (for `Retry-After`), at least a second.
    pub fn retry_after(&self, client: IpAddr) -> Duration {
        let tokens = lock(&self.buckets)
            .get(&block(client))
            .map_or(self.burst, |(t, _)| *t);
        let wait = self.every.mul_f64((1.0 - tokens).max(0.0));
        wait.max(Duration::from_secs(1))
    }

    #[cfg(test)]
    fn allow_at(&self, client: IpAddr, now: Instant) -> bool {
        self.take_at(client, now).is_some()
    }

    fn take_at(&self, client: IpAddr, now: Instant) -> Option<bool> {
        let mut buckets = lock(&self.buckets);
        let key = block(client);
        if !buckets.contains_key(&key) && buckets.len() >= MAX_ADDRESSES {
            self.forget(&mut buckets, now);
        }
        let (tokens, then) = buckets.entry(key).or_insert((self.burst, now));
        let refill = now.saturating_duration_since(*then).as_secs_f64() / self.every.as_secs_f64();
        let held = (*tokens + refill).min(self.burst);
        *then = now;
        if held >= 1.0 {
            *tokens = held - 1.0;
            Some(held >= self.burst)
        } else {
            *tokens = held;
            None
        }
    }

    /// Makes room for one more address.
    fn forget(&self, buckets: &mut HashMap<IpAddr, (f64, Instant)>, now: Instant) {
        let every = self.every.as_secs_f64();
        let held = |(tokens, then): &(f64, Instant)| {
            (tokens + now.saturating_duration_since(*then).as_secs_f64() / every).min(self.burst)
        };
        buckets.retain(|_, bucket| held(bucket) < self.burst);
        if buckets.len() >= MAX_ADDRESSES {
            let fullest = buckets
                .iter()
                .max_by(|a, b| held(a.1).total_cmp(&held(b.1)))
                .map(|(k, _)| *k);
            if let Some(key) = fullest {
                buckets.remove(&key);
            }
        }
    }

    /// How many addresses are remembered (for tests of the bound).
    #[cfg(test)]
    fn remembered(&self) -> usize {
        lock(&self.buckets).len()
    }
}

/// The key of a client: its IPv4 address (IPv4-mapped IPv6 included), or its IPv6 /64.
fn block(client: IpAddr) -> IpAddr {
    match client {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut octets = v6.octets();
                octets[8..].fill(0);
                IpAddr::V6(octets.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("an address")
    }

    #[test]
    fn a_burst_then_one_per_interval() {
        let limiter = RateLimiter::new(Duration::from_secs(1), 3);
        let a = ip("192.0.2.1");
        let start = Instant::now();
        assert!((0..3).all(|_| limiter.allow_at(a, start)));
        assert!(!limiter.allow_at(a, start));
        assert!(!limiter.allow_at(a, start + Duration::from_millis(500)));
        assert!(limiter.allow_at(a, start + Duration::from_millis(1000)));
        assert!(!limiter.allow_at(a, start + Duration::from_millis(1000)));
        // A long pause refills no more than the burst.
        let later = start + Duration::from_secs(60);
        assert!((0..3).all(|_| limiter.allow_at(a, later)));
        assert!(!limiter.allow_at(a, later));
    }

    #[test]
    fn one_address_emptying_its_bucket_leaves_the_others_theirs() {
        let limiter = RateLimiter::new(Duration::from_secs(60), 2);
        let (flood, scraper) = (ip("192.0.2.1"), ip("192.0.2.2"));
        let now = Instant::now();
        assert!((0..100).filter(|_| limiter.allow_at(flood, now)).count() == 2);
        assert!(limiter.allow_at(scraper, now));
        assert!(limiter.allow_at(scraper, now));
        // An IPv6 host is one client across its /64, and a mapped IPv4 is the IPv4.
        let v6 = RateLimiter::new(Duration::from_secs(60), 1);
        assert!(v6.allow_at(ip("2001:db8::1"), now));
        assert!(!v6.allow_at(ip("2001:db8::ffff:2"), now));
        assert!(v6.allow_at(ip("2001:db8:0:1::1"), now));
        assert!(v6.allow_at(ip("::ffff:192.0.2.9"), now));
        assert!(!v6.allow_at(ip("192.0.2.9"), now));
    }

    #[test]
    fn a_token_taken_says_whether_the_bucket_was_full() {
        let limiter = RateLimiter::new(Duration::from_secs(1), 3);
        let (a, start) = (ip("192.0.2.1"), Instant::now());
        assert_eq!(limiter.take_at(a, start), Some(true));
        assert_eq!(limiter.take_at(a, start), Some(false));
        assert_eq!(limiter.take_at(a, start), Some(false));
        assert_eq!(limiter.take_at(a, start), None);
        // Refilled: nothing taken from it lately.
        assert_eq!(
            limiter.take_at(a, start + Duration::from_secs(3)),
            Some(true)
        );
    }

    #[test]
    fn a_refund_gives_the_token_back_and_retry_after_says_when() {
        let limiter = RateLimiter::new(Duration::from_secs(10), 1);
        let a = ip("192.0.2.1");
        assert!(limiter.allow(a));
        assert!(limiter.retry_after(a) > Duration::from_secs(9));
        limiter.refund(a);
        assert!(limiter.allow(a));
        assert!(!limiter.allow(a));
    }

    #[test]
    fn the_addresses_remembered_are_bounded_and_an_emptied_bucket_is_kept() {
        let limiter = RateLimiter::new(Duration::from_secs(3600), 2);
        let now = Instant::now();
        let flood = ip("198.51.100.1");
        assert!(limiter.allow_at(flood, now) && limiter.allow_at(flood, now));
        // Each of these keeps one of its two tokens: fuller than the flood's empty bucket.
        for i in 0..MAX_ADDRESSES as u32 + 50 {
            let client = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert!(limiter.allow_at(client, now));
        }
        assert!(limiter.remembered() <= MAX_ADDRESSES);
        assert!(
            !limiter.allow_at(flood, now),
            "the flood's bucket was forgotten"
        );
    }
}
