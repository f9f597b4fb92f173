//! HTTP basic authentication against `basic_auth_users`' bcrypt hashes, built so that
//! nobody without the password can slow down somebody with it.
//!
//! - **Verified credentials answer from memory.** After one bcrypt, a right credential is
//!   remembered as an HMAC-SHA256 of user and password under a key drawn at start, so the
//!   process never holds a password, and a memory dump's MACs are useless to anyone who
//!   does not also have this process's key. A presented credential's MAC is compared with
//!   the user's remembered ones in constant time. Only right credentials are remembered
//!   here, at most [`GOOD_PER_USER`] per user, so a flood of guesses cannot push a real
//!   scraper's entry out. The cache belongs to one [`BasicAuth`], which is built from one
//!   reading of the web configuration: new users or hashes come with a new, empty one.
//! - **bcrypt runs on a bounded pool.** Verifications run on blocking threads, at most
//!   [`BasicAuth::workers`] at once (half the cores, 1 to 4: the other cores belong to
//!   the GPUs' jobs), and at most [`QUEUE_LIMIT`] wait; a request beyond that is answered
//!   503 at once instead of queueing without end.
//! - **Failed logins are limited per client address.** Each address may fail
//!   [`FAILURE_BURST`] times, then once every [`FAILURE_EVERY`]; past that its new guesses
//!   are answered 429 without any bcrypt. A login that succeeds gives its token back, so
//!   only failures count, and a credential already verified is never refused by it.
//! - **Addresses that failed lately wait in a lane of their own.** Their verifications
//!   join the pool's queue one at a time, so a first login from an address with no recent
//!   failure (a scraper after a restart or a password change) waits behind at most the
//!   hashes running and one guess, however many guesses are waiting: with one worker and a
//!   loaded host, a first-come queue kept a right scrape behind a flood's whole burst.
//!   Wrong credentials seen recently are remembered too (bounded), so a scraper with a
//!   stale password costs one bcrypt, not one per scrape.
//!
//! A user that does not exist is checked against a dummy hash of the same cost, so the
//! answer takes as long as for a wrong password and timing does not tell which user names
//! exist.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use hmac::{KeyInit as _, Mac as _};

use super::file::BcryptHash;
use super::rate::RateLimiter;
use crate::sync::lock;

/// Right credentials remembered per user: one password, plus one being rotated in, plus
/// spares (bcrypt ignores what follows a password's 72nd byte, so several texts can match).
pub(crate) const GOOD_PER_USER: usize = 4;

/// Wrong credentials remembered; past it an arbitrary one is forgotten for each new one.
const BAD_CACHE_SIZE: usize = 1024;

/// Verifications that may wait for a worker; more are answered 503 at once. A Prometheus
/// server's first scrape waits behind at most this many hashes.
pub(crate) const QUEUE_LIMIT: usize = 32;

/// Failed logins an address may make at once…
pub(crate) const FAILURE_BURST: u32 = 10;
/// …and then one per this long.
pub(crate) const FAILURE_EVERY: Duration = Duration::from_secs(1);

/// What a request's credentials come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A user's right password.
    Allowed,
    /// No credential, a malformed one, an unknown user or a wrong password: 401.
    Refused,
    /// The address failed too often: 429, try again after this long.
    Limited(Duration),
    /// Too many verifications are waiting: 503.
    Busy,
}

/// A keyed digest of a credential.
type Mac = [u8; 32];

/// The users and what has been decided about credentials so far.
#[derive(Debug)]
pub struct BasicAuth {
    users: BTreeMap<String, BcryptHash>,
    /// Checked when the user is unknown; of the cost most users' hashes have.
    dummy: BcryptHash,
    /// The HMAC key of this process; never leaves it.
    key: [u8; 32],
    /// User → MACs of credentials verified right.
    good: Mutex<HashMap<String, Vec<Mac>>>,
    bad: Mutex<HashSet<Mac>>,
    failures: RateLimiter,
    hashing: tokio::sync::Semaphore,
    /// The lane of addresses that failed lately: one of them at a time joins `hashing`.
    suspects: tokio::sync::Semaphore,
    waiting: AtomicUsize,
}

impl BasicAuth {
    /// The checker of `users`, None when there are none (no authentication). Makes the
    /// dummy hash, which takes one bcrypt run.
    pub fn new(users: &BTreeMap<String, BcryptHash>) -> Option<BasicAuth> {
        if users.is_empty() {
            return None;
        }
        let mut costs: BTreeMap<u32, usize> = BTreeMap::new();
        for hash in users.values() {
            *costs.entry(hash.cost()).or_default() += 1;
        }
        let cost = costs
            .iter()
            .max_by_key(|(_, n)| **n)
            .map_or(10, |(c, _)| *c);
        // What the dummy's password is does not matter: an unknown user is refused whether
        // it matches or not; only the time spent counts.
        let dummy = bcrypt::hash("gpu-sentinel: no such user", cost).unwrap_or_else(|_| {
            // Costs were checked when the file was read; 10 is exporter-toolkit's own.
            "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi".into()
        });
        Some(BasicAuth {
            users: users.clone(),
            dummy: BcryptHash(dummy),
            key: random_key(),
            good: Mutex::new(HashMap::new()),
            bad: Mutex::new(HashSet::new()),
            failures: RateLimiter::new(FAILURE_EVERY, FAILURE_BURST),
            hashing: tokio::sync::Semaphore::new(BasicAuth::workers()),
            suspects: tokio::sync::Semaphore::new(1),
            waiting: AtomicUsize::new(0),
        })
    }

    /// bcrypt verifications run at once: half the cores, at least 1 and at most 4.
    pub fn workers() -> usize {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get() / 2)
            .clamp(1, 4)
    }

    /// Whether an `Authorization` header value holds a credential already verified right;
    /// never runs bcrypt.
    pub fn verified(&self, authorization: Option<&[u8]>) -> bool {
        match authorization.and_then(credentials) {
            Some((user, password)) => {
                let mac = self.mac(&user, &password);
                self.known_good(&user, &mac)
            }
            None => false,
        }
    }

    /// What the `Authorization` header value of a request from `client` comes to.
    pub async fn check(&self, authorization: Option<&[u8]>, client: IpAddr) -> Verdict {
        let Some((user, password)) = authorization.and_then(credentials) else {
            return Verdict::Refused;
        };
        let mac = self.mac(&user, &password);
        if self.known_good(&user, &mac) {
            return Verdict::Allowed;
        }
        if lock(&self.bad).contains(&mac) {
            return Verdict::Refused;
        }
        // The token is taken before the hash, so that many guesses sent at once are
        // limited as well as guesses sent one after another; a right one gives it back.
        let Some(clean) = self.failures.take(client) else {
            return Verdict::Limited(self.failures.retry_after(client));
        };
        let queued = Queued::join(&self.waiting);
        let Some(_queued) = queued else {
            self.failures.refund(client);
            return Verdict::Busy;
        };
        let _lane = if clean {
            None
        } else {
            match self.suspects.acquire().await {
                Ok(lane) => Some(lane),
                Err(_) => return Verdict::Busy,
            }
        };
        let Ok(_permit) = self.hashing.acquire().await else {
            return Verdict::Busy;
        };
        drop(_queued);
        // A request that waited may find its credential decided meanwhile.
        if self.known_good(&user, &mac) {
            self.failures.refund(client);
            return Verdict::Allowed;
        }
        if lock(&self.bad).contains(&mac) {
            return Verdict::Refused;
        }
        let known = self.users.get(&user);
        let hash = known.unwrap_or(&self.dummy).0.clone();
        let matches = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(false);
        if known.is_some() && matches {
            self.failures.refund(client);
            let mut good = lock(&self.good);
            let macs = good.entry(user).or_default();
            if macs.len() >= GOOD_PER_USER {
                macs.remove(0);
            }
            macs.push(mac);
            Verdict::Allowed
        } else {
            let mut bad = lock(&self.bad);
            if bad.len() >= BAD_CACHE_SIZE {
                if let Some(any) = bad.iter().next().copied() {
                    bad.remove(&any);
                }
            }
            bad.insert(mac);
            Verdict::Refused
        }
    }

    /// Whether `mac` is among `user`'s verified credentials, compared in constant time.
    fn known_good(&self, user: &str, mac: &Mac) -> bool {
        let good = lock(&self.good);
        let Some(macs) = good.get(user) else {
            return false;
        };
        // Every entry is compared in full, match or not.
        macs.iter()
            .fold(false, |found, known| found | equal(known, mac))
    }

    /// The cache key of a credential: user and password, length-prefixed so that no two
    /// pairs share a MAC input, under this process's key.
    fn mac(&self, user: &str, password: &str) -> Mac {
        let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.key) else {
            // HMAC takes keys of any length; this cannot happen. A MAC nobody can match
            // makes every credential go through bcrypt, which is slow but right.
            return [0xff; 32];
        };
        mac.update(&(user.len() as u64).to_be_bytes());
        mac.update(user.as_bytes());
        mac.update(password.as_bytes());
        mac.finalize().into_bytes().into()
    }

    #[cfg(test)]
    /// How many credentials are remembered, right and wrong (for tests of the bounds).
    pub(crate) fn cached_verdicts(&self) -> (usize, usize) {
        let good = lock(&self.good).values().map(Vec::len).sum();
        (good, lock(&self.bad).len())
    }
}

/// A place in the queue for a worker, given up when dropped.
struct Queued<'a>(&'a AtomicUsize);

impl<'a> Queued<'a> {
    /// A place, None when [`QUEUE_LIMIT`] requests wait already.
    fn join(waiting: &'a AtomicUsize) -> Option<Queued<'a>> {
        waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < QUEUE_LIMIT).then_some(n + 1)
            })
            .ok()
            .map(|_| Queued(waiting))
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Equality of two MACs whose time does not depend on where they differ.
fn equal(a: &Mac, b: &Mac) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// 32 bytes from the operating system's generator (ring's, which rustls already uses).
fn random_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    if rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut key)
        .is_err()
    {
        // Without getrandom(2) std's hasher seeds (also drawn from the OS, per process)
        // still make a key no other process shares.
        use std::hash::{BuildHasher as _, Hasher as _};
        for chunk in key.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(std::process::id().into());
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    key
}

/// `Basic base64(user:password)` → (user, password); None for anything else.
pub(crate) fn credentials(header: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(header).ok()?.trim();
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, password: &str) -> Vec<u8> {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {token}").into_bytes()
    }

    fn auth() -> BasicAuth {
        let hash = |p: &str| BcryptHash(bcrypt::hash(p, 4).expect("hashes"));
        BasicAuth::new(&BTreeMap::from([
            ("alice".to_string(), hash("right")),
            ("bob".to_string(), hash("other")),
        ]))
        .expect("two users")
    }

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, n])
    }

    async fn allows(auth: &BasicAuth, header: Option<&[u8]>) -> bool {
        auth.check(header, ip(1)).await == Verdict::Allowed
    }

    #[tokio::test]
    async fn verdicts_for_users_passwords_and_strangers() {
        let auth = auth();
        assert!(allows(&auth, Some(&header("alice", "right"))).await);
        assert!(!allows(&auth, Some(&header("alice", "wrong"))).await);
        assert!(!allows(&auth, Some(&header("mallory", "right"))).await);
        assert!(!allows(&auth, None).await);
        assert!(!allows(&auth, Some(b"Bearer abc")).await);
        assert!(!allows(&auth, Some(b"Basic !!!")).await);
        // The user name and password are split at the first colon: colons may follow.
        assert!(!allows(&auth, Some(&header("alice:right", ""))).await);
    }

    #[tokio::test]
    async fn one_hash_per_credential_and_bounded_caches() {
        let auth = auth();
        assert!(!auth.verified(Some(&header("alice", "right"))));
        for _ in 0..50 {
            assert!(allows(&auth, Some(&header("alice", "right"))).await);
        }
        assert!(auth.verified(Some(&header("alice", "right"))));
        assert_eq!(auth.cached_verdicts(), (1, 0));
        // Guesses from many addresses, so the failure limit does not stop them first.
        for i in 0..BAD_CACHE_SIZE + 10 {
            let client = IpAddr::from([10, 0, (i / 256) as u8, (i % 256) as u8]);
            let guess = header("alice", &format!("guess-{i}"));
            assert_eq!(auth.check(Some(&guess), client).await, Verdict::Refused);
        }
        assert_eq!(auth.cached_verdicts(), (1, BAD_CACHE_SIZE));
        // The guesses never pushed the right credential out.
        assert!(auth.verified(Some(&header("alice", "right"))));
    }

    #[tokio::test]
    async fn failed_logins_are_limited_per_address_and_right_ones_never_count() {
        let auth = auth();
        let (flood, scraper) = (ip(66), ip(7));
        // Right logins from the flooding address do not use up its failures.
        for _ in 0..3 * FAILURE_BURST {
            assert_eq!(
                auth.check(Some(&header("alice", "right")), flood).await,
                Verdict::Allowed
            );
        }
        let mut verdicts = Vec::new();
        for i in 0..3 * FAILURE_BURST {
            let guess = header("alice", &format!("guess-{i}"));
            verdicts.push(auth.check(Some(&guess), flood).await);
        }
        let refused = verdicts.iter().filter(|v| **v == Verdict::Refused).count();
        let limited = verdicts
            .iter()
            .filter(|v| matches!(v, Verdict::Limited(_)))
            .count();
        assert_eq!(refused, FAILURE_BURST as usize, "{verdicts:?}");
        assert_eq!(limited, 2 * FAILURE_BURST as usize, "{verdicts:?}");
        // The limited address still gets in with the credential already verified…
        assert_eq!(
            auth.check(Some(&header("alice", "right")), flood).await,
            Verdict::Allowed
        );
        // …and another address, with a credential never verified, is checked as usual.
        assert_eq!(
            auth.check(Some(&header("bob", "other")), scraper).await,
            Verdict::Allowed
        );
        // The flooding address with it is not: it has no failures left to risk.
        assert!(matches!(
            auth.check(Some(&header("alice", "never-seen")), flood)
                .await,
            Verdict::Limited(_)
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_clean_address_goes_ahead_of_a_flood_waiting_for_bcrypt() {
        use std::sync::Arc;
        // Cost 8: each guess holds a worker for milliseconds, long enough to queue behind.
        let hash = BcryptHash(bcrypt::hash("right", 8).expect("hashes"));
        let auth = Arc::new(
            BasicAuth::new(&BTreeMap::from([("alice".to_string(), hash)])).expect("a user"),
        );
        let finished = Arc::new(AtomicUsize::new(0));
        let mut guesses = Vec::new();
        for i in 0..FAILURE_BURST {
            let (auth, finished) = (Arc::clone(&auth), Arc::clone(&finished));
            guesses.push(tokio::spawn(async move {
                let guess = header("alice", &format!("guess-{i}"));
                let verdict = auth.check(Some(&guess), ip(66)).await;
                finished.fetch_add(1, Ordering::SeqCst);
                verdict
            }));
        }
        // Let every guess take its token and queue.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let verdict = auth.check(Some(&header("alice", "right")), ip(7)).await;
        let ahead = finished.load(Ordering::SeqCst);
        assert_eq!(verdict, Verdict::Allowed);
        // Behind the hashes running and the one guess in the flood's lane at most; a
        // first-come queue put it behind all of them.
        assert!(
            ahead <= BasicAuth::workers() + 1,
            "{ahead} of {FAILURE_BURST} guesses were hashed first"
        );
        for guess in guesses {
            assert_eq!(guess.await.expect("a guess"), Verdict::Refused);
        }
    }

    #[test]
    fn the_queue_refuses_past_its_limit() {
        let waiting = AtomicUsize::new(0);
        let places: Vec<_> = (0..QUEUE_LIMIT)
            .map(|_| Queued::join(&waiting).expect("a place"))
            .collect();
        assert!(Queued::join(&waiting).is_none());
        drop(places);
        assert!(Queued::join(&waiting).is_some());
    }

    #[test]
    fn no_users_no_authentication() {
        assert!(BasicAuth::new(&BTreeMap::new()).is_none());
    }

    #[test]
    fn the_dummy_hash_has_the_users_cost_and_keys_differ_per_instance() {
        let (a, b) = (auth(), auth());
        assert_eq!(a.dummy.cost(), 4);
        assert_ne!(a.mac("alice", "right"), b.mac("alice", "right"));
        assert!(equal(&a.mac("u", "p"), &a.mac("u", "p")));
        assert!(!equal(&a.mac("u", "p"), &a.mac("u", "q")));
    }
}
