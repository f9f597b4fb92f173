//! HTTP basic authentication against `basic_auth_users`' bcrypt hashes.
//!
//! bcrypt is slow on purpose (cost 10 is tens of milliseconds), so it runs on a blocking
//! thread, one hash at a time (as exporter-toolkit's mutex does), and each verdict is
//! cached under the SHA-256 of the credential: a Prometheus scraping every few seconds
//! costs one hash per credential, not one per scrape. The cache never holds a password,
//! only digests and verdicts, and it is bounded. A user that does not exist is checked
//! against a dummy hash of the same cost, so the answer takes as long as for a wrong
//! password and timing does not tell which user names exist.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::file::BcryptHash;
use crate::sync::lock;

/// Most cached verdicts; past it an arbitrary one is dropped for each new one.
const CACHE_SIZE: usize = 1024;

/// The users and what has been decided about credentials so far.
#[derive(Debug)]
pub struct BasicAuth {
    users: BTreeMap<String, BcryptHash>,
    /// Checked when the user is unknown; of the cost most users' hashes have.
    dummy: BcryptHash,
    verdicts: Mutex<HashMap<[u8; 32], bool>>,
    hashing: tokio::sync::Semaphore,
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
            verdicts: Mutex::new(HashMap::new()),
            hashing: tokio::sync::Semaphore::new(1),
        })
    }

    /// Whether an `Authorization` header value names a user with the right password.
    pub async fn allows(&self, authorization: Option<&[u8]>) -> bool {
        let Some((user, password)) = authorization.and_then(credentials) else {
            return false;
        };
        let digest = digest(&user, &password);
        if let Some(verdict) = self.cached(&digest) {
            return verdict;
        }
        // One hash at a time; a request that waited may find its verdict made meanwhile.
        let Ok(_permit) = self.hashing.acquire().await else {
            return false;
        };
        if let Some(verdict) = self.cached(&digest) {
            return verdict;
        }
        let known = self.users.get(&user);
        let hash = known.unwrap_or(&self.dummy).0.clone();
        let matches = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(false);
        let verdict = known.is_some() && matches;
        let mut verdicts = lock(&self.verdicts);
        if verdicts.len() >= CACHE_SIZE {
            if let Some(any) = verdicts.keys().next().copied() {
                verdicts.remove(&any);
            }
        }
        verdicts.insert(digest, verdict);
        verdict
    }

    fn cached(&self, digest: &[u8; 32]) -> Option<bool> {
        lock(&self.verdicts).get(digest).copied()
    }

    /// How many verdicts are cached (for tests of the bound).
    pub fn cached_verdicts(&self) -> usize {
        lock(&self.verdicts).len()
    }
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

/// The cache key of a credential: user and password, length-prefixed so that no two
/// pairs share a digest input.
fn digest(user: &str, password: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update((user.len() as u64).to_be_bytes());
    hasher.update(user.as_bytes());
    hasher.update(password.as_bytes());
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, password: &str) -> Vec<u8> {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {token}").into_bytes()
    }

    fn auth() -> BasicAuth {
        let hash = BcryptHash(bcrypt::hash("right", 4).expect("hashes"));
        BasicAuth::new(&BTreeMap::from([("alice".to_string(), hash)])).expect("one user")
    }

    #[tokio::test]
    async fn verdicts_for_users_passwords_and_strangers() {
        let auth = auth();
        assert!(auth.allows(Some(&header("alice", "right"))).await);
        assert!(!auth.allows(Some(&header("alice", "wrong"))).await);
        assert!(!auth.allows(Some(&header("mallory", "right"))).await);
        assert!(!auth.allows(None).await);
        assert!(!auth.allows(Some(b"Bearer abc")).await);
        assert!(!auth.allows(Some(b"Basic !!!")).await);
        // The user name and password are split at the first colon: colons may follow.
        assert!(!auth.allows(Some(&header("alice:right", ""))).await);
    }

    #[tokio::test]
    async fn one_hash_per_credential_and_a_bounded_cache() {
        let auth = auth();
        for _ in 0..50 {
            assert!(auth.allows(Some(&header("alice", "right"))).await);
        }
        assert_eq!(auth.cached_verdicts(), 1);
        for i in 0..CACHE_SIZE + 10 {
            assert!(
                !auth
                    .allows(Some(&header("alice", &format!("guess-{i}"))))
                    .await
            );
        }
        assert_eq!(auth.cached_verdicts(), CACHE_SIZE);
        // An evicted credential is simply hashed again.
        assert!(auth.allows(Some(&header("alice", "right"))).await);
    }

    #[test]
    fn no_users_no_authentication() {
        assert!(BasicAuth::new(&BTreeMap::new()).is_none());
    }

    #[test]
    fn the_dummy_hash_has_the_users_cost() {
        let auth = auth();
        assert_eq!(auth.dummy.cost(), 4);
    }
}
