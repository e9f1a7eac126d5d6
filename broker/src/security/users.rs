//! The user store: SCRAM-SHA-256 and SCRAM-SHA-512 verifiers by user name, kept durably in
//! `<data>/__users` (the `__` prefix is reserved, so no topic can take the
//! name). Passwords are never stored: only what [`Verifier`] holds (salt,
//! iterations, StoredKey, ServerKey), from which a password cannot be read
//! back, only tried.
//!
//! File format (text, one user a line, every field base64 but the numbers):
//!
//! ```text
//! flume-users 1
//! scram-sha-256 <name> <iterations> <salt> <stored key> <server key>
//! scram-sha-512 <name> <iterations> <salt> <stored key> <server key>
//! ```
//!
//! A user has a SCRAM-SHA-256 line, a SCRAM-SHA-512 line, or both (keys of
//! 32 and 64 bytes). Users added before SCRAM-SHA-512 have only the first
//! and cannot log in with SHA-512 until their password is set again; a
//! password set through USERS (the client makes the verifier; the message
//! carries a SHA-256 one) keeps only SHA-256.
//!
//! Every change rewrites the file atomically (temp file, fsync, rename,
//! fsync of the directory) before it takes effect in memory, so a crash
//! leaves the old file or the new one. A file that does not parse stops the
//! broker at start with the line that is wrong.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use flume_protocol::scram::{Verifier, Verifier512, MIN_ITERATIONS};
use flume_rt::sync::lock;

use crate::error::BrokerError;
use crate::storage::write_atomic;

/// The file's name in the data directory.
pub const USERS_FILE: &str = "__users";
const HEADER: &str = "flume-users 1";
/// Most users the store holds (it is loaded whole into memory).
pub const MAX_USERS: usize = 100_000;
/// Longest user name, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Iterations of the verifiers the broker makes.
pub const ITERATIONS: u32 = MIN_ITERATIONS;

/// A user's verifiers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verifiers {
    /// For SCRAM-SHA-256 (and PLAIN, and Flume's AUTHENTICATE).
    pub sha256: Option<Verifier>,
    /// For SCRAM-SHA-512.
    pub sha512: Option<Verifier512>,
}

/// Users and their verifiers.
#[derive(Debug)]
pub struct UserStore {
    path: PathBuf,
    users: Mutex<BTreeMap<String, Verifiers>>,
}

fn bad(path: &Path, line: usize, why: &str) -> BrokerError {
    BrokerError::Config(format!("{} line {line}: {why}", path.display()))
}

fn decode_key<const N: usize>(s: &str) -> Option<[u8; N]> {
    B64.decode(s).ok()?.try_into().ok()
}

/// A user name the store accepts: 1 to [`MAX_NAME_BYTES`] bytes, no
/// whitespace or control characters.
///
/// # Errors
/// What is wrong with the name.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "a user name is 1 to {MAX_NAME_BYTES} bytes, not {}",
            name.len()
        ));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a user name has no spaces or control characters".into());
    }
    Ok(())
}

impl UserStore {
    /// Loads `<data_dir>/__users` (none yet: no users).
    ///
    /// # Errors
    /// The file cannot be read or does not parse.
    pub fn open(data_dir: &Path) -> Result<UserStore, BrokerError> {
        let path = data_dir.join(USERS_FILE);
        let text = crate::storage::read_optional(&path)?;
        let users = Self::parse(&path, &text)?;
        Ok(UserStore {
            path,
            users: Mutex::new(users),
        })
    }

    fn parse(path: &Path, text: &str) -> Result<BTreeMap<String, Verifiers>, BrokerError> {
        let mut users = BTreeMap::new();
        let mut lines = text.lines().enumerate();
        match lines.next() {
            None => return Ok(users),
            Some((_, HEADER)) => {}
            Some(_) => return Err(bad(path, 1, &format!("expected {HEADER:?}"))),
        }
        for (i, line) in lines {
            let n = i + 1;
            if line.is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split(' ').collect();
            let [kind, name, iterations, salt, stored, server] = f.as_slice() else {
                return Err(bad(path, n, "expected 6 fields"));
            };
            let sha512 = match *kind {
                "scram-sha-256" => false,
                "scram-sha-512" => true,
                _ => return Err(bad(path, n, &format!("unknown kind {kind:?}"))),
            };
            let name = B64
                .decode(name)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| bad(path, n, "the name is not base64 of UTF-8"))?;
            let iterations: u32 = iterations
                .parse()
                .ok()
                .filter(|i| *i >= MIN_ITERATIONS)
                .ok_or_else(|| bad(path, n, "iterations below 4096 or not a number"))?;
            let salt = B64
                .decode(salt)
                .map_err(|_| bad(path, n, "the salt is not base64"))?;
            if !users.contains_key(&name) && users.len() >= MAX_USERS {
                return Err(bad(path, n, &format!("more than {MAX_USERS} users")));
            }
            let entry: &mut Verifiers = users.entry(name).or_default();
            if sha512 {
                let (Some(stored_key), Some(server_key)) = (decode_key(stored), decode_key(server))
                else {
                    return Err(bad(path, n, "a key is not 64 bytes of base64"));
                };
                entry.sha512 = Some(Verifier512 {
                    salt,
                    iterations,
                    stored_key,
                    server_key,
                });
            } else {
                let (Some(stored_key), Some(server_key)) = (decode_key(stored), decode_key(server))
                else {
                    return Err(bad(path, n, "a key is not 32 bytes of base64"));
                };
                entry.sha256 = Some(Verifier {
                    salt,
                    iterations,
                    stored_key,
                    server_key,
                });
            }
        }
        Ok(users)
    }

    fn render(users: &BTreeMap<String, Verifiers>) -> String {
        let mut out = format!("{HEADER}\n");
        let mut line = |kind: &str, name: &str, iterations: u32, salt: &[u8], keys: [&[u8]; 2]| {
            out.push_str(&format!(
                "{kind} {} {iterations} {} {} {}\n",
                B64.encode(name),
                B64.encode(salt),
                B64.encode(keys[0]),
                B64.encode(keys[1])
            ));
        };
        for (name, v) in users {
            if let Some(v) = &v.sha256 {
                line(
                    "scram-sha-256",
                    name,
                    v.iterations,
                    &v.salt,
                    [&v.stored_key, &v.server_key],
                );
            }
            if let Some(v) = &v.sha512 {
                line(
                    "scram-sha-512",
                    name,
                    v.iterations,
                    &v.salt,
                    [&v.stored_key, &v.server_key],
                );
            }
        }
        out
    }

    /// The SCRAM-SHA-256 verifier of `name`, if there is such a user and it has one.
    pub fn get(&self, name: &str) -> Option<Verifier> {
        lock(&self.users).get(name).and_then(|v| v.sha256.clone())
    }

    /// The SCRAM-SHA-512 verifier of `name`, if there is such a user and it has one.
    pub fn get512(&self, name: &str) -> Option<Verifier512> {
        lock(&self.users).get(name).and_then(|v| v.sha512.clone())
    }

    /// Every verifier of `name`, if there is such a user.
    pub fn verifiers(&self, name: &str) -> Option<Verifiers> {
        lock(&self.users).get(name).cloned()
    }

    /// The user names, sorted.
    pub fn list(&self) -> Vec<String> {
        lock(&self.users).keys().cloned().collect()
    }

    /// Whether there is no user at all.
    pub fn is_empty(&self) -> bool {
        lock(&self.users).is_empty()
    }

    /// Adds `name` with `verifier`, or replaces its verifier (a password
    /// change); durable when it returns. Blocking file I/O: call off the executor.
    ///
    /// # Errors
    /// A bad name, the store is full, or the file cannot be written (then
    /// nothing changed).
    pub fn put(&self, name: &str, verifier: Verifier) -> Result<(), BrokerError> {
        self.put_all(
            name,
            Verifiers {
                sha256: Some(verifier),
                sha512: None,
            },
        )
    }

    /// As [`UserStore::put`] with every verifier of the user (those not
    /// given are removed: a password change must not leave the old one
    /// working with another mechanism).
    ///
    /// # Errors
    /// As [`UserStore::put`], or no verifier at all.
    pub fn put_all(&self, name: &str, verifiers: Verifiers) -> Result<(), BrokerError> {
        check_name(name).map_err(BrokerError::Config)?;
        let iterations = [
            verifiers.sha256.as_ref().map(|v| v.iterations),
            verifiers.sha512.as_ref().map(|v| v.iterations),
        ];
        if iterations.iter().all(Option::is_none) {
            return Err(BrokerError::Config("a user needs a verifier".into()));
        }
        if iterations.iter().flatten().any(|i| *i < MIN_ITERATIONS) {
            return Err(BrokerError::Config(format!(
                "a verifier needs at least {MIN_ITERATIONS} iterations"
            )));
        }
        let mut users = lock(&self.users);
        if !users.contains_key(name) && users.len() >= MAX_USERS {
            return Err(BrokerError::Config(format!("at most {MAX_USERS} users")));
        }
        let mut next = users.clone();
        next.insert(name.to_owned(), verifiers);
        write_atomic(&self.path, Self::render(&next).as_bytes())?;
        *users = next;
        Ok(())
    }

    /// Changes several users at once, as `change` does to a copy of the
    /// users (a user left without a verifier is removed), durable when it
    /// returns: the file is written once, and only when something changed.
    /// What `change` returns is returned. Blocking file I/O: call off the
    /// executor.
    ///
    /// # Errors
    /// The change leaves more than [`MAX_USERS`] users, a bad name or a
    /// verifier of fewer than [`MIN_ITERATIONS`] iterations, or the file
    /// cannot be written: then nothing changed.
    pub fn alter<R>(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, Verifiers>) -> R,
    ) -> Result<R, BrokerError> {
        let mut users = lock(&self.users);
        let mut next = users.clone();
        let out = change(&mut next);
        next.retain(|_, v| v.sha256.is_some() || v.sha512.is_some());
        if next == *users {
            return Ok(out);
        }
        if next.len() > MAX_USERS {
            return Err(BrokerError::Config(format!("at most {MAX_USERS} users")));
        }
        for (name, v) in &next {
            check_name(name).map_err(BrokerError::Config)?;
            let low = [
                v.sha256.as_ref().map(|v| v.iterations),
                v.sha512.as_ref().map(|v| v.iterations),
            ];
            if low.iter().flatten().any(|i| *i < MIN_ITERATIONS) {
                return Err(BrokerError::Config(format!(
                    "a verifier needs at least {MIN_ITERATIONS} iterations"
                )));
            }
        }
        write_atomic(&self.path, Self::render(&next).as_bytes())?;
        *users = next;
        Ok(out)
    }

    /// Removes `name`; false when there was no such user. Durable when it returns.
    ///
    /// # Errors
    /// The file cannot be written (then nothing changed).
    pub fn remove(&self, name: &str) -> Result<bool, BrokerError> {
        let mut users = lock(&self.users);
        if !users.contains_key(name) {
            return Ok(false);
        }
        let mut next = users.clone();
        next.remove(name);
        write_atomic(&self.path, Self::render(&next).as_bytes())?;
        *users = next;
        Ok(true)
    }
}

/// A fresh random salt (16 bytes) or nonce source.
///
/// # Errors
/// The OS has no randomness to give.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], BrokerError> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| BrokerError::Io {
        what: "read random bytes".into(),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(b)
}

/// A verifier for `password` with a fresh salt and [`ITERATIONS`].
///
/// # Errors
/// As [`random_bytes`].
pub fn new_verifier(password: &str) -> Result<Verifier, BrokerError> {
    Ok(Verifier::new(password, &random_bytes::<16>()?, ITERATIONS))
}

/// Both verifiers (SCRAM-SHA-256 and -512, each with its own fresh salt)
/// for `password`: what `flume-cli users add` and `Broker::add_user` store.
///
/// # Errors
/// As [`random_bytes`].
pub fn new_verifiers(password: &str) -> Result<Verifiers, BrokerError> {
    Ok(Verifiers {
        sha256: Some(new_verifier(password)?),
        sha512: Some(Verifier512::new(
            password,
            &random_bytes::<16>()?,
            ITERATIONS,
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_survive_a_reopen_and_only_verifiers_are_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = UserStore::open(dir.path()).unwrap();
        assert!(store.is_empty());
        let v = new_verifier("correct horse").unwrap();
        store.put("alice", v.clone()).unwrap();
        store.put("bob smith", v.clone()).unwrap_err();
        store.put("b,o=b", new_verifier("pw").unwrap()).unwrap();
        assert!(store.remove("b,o=b").unwrap());
        assert!(!store.remove("nobody").unwrap());
        store.put("carol", new_verifier("pw2").unwrap()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(USERS_FILE)).unwrap();
        assert!(!text.contains("correct horse"), "{text}");
        assert!(!dir.path().join("__users.tmp").exists());
        let again = UserStore::open(dir.path()).unwrap();
        assert_eq!(again.list(), vec!["alice", "carol"]);
        assert_eq!(again.get("alice"), Some(v));
    }

    #[test]
    fn both_verifiers_are_kept_and_an_old_store_keeps_working() {
        let dir = tempfile::tempdir().unwrap();
        let store = UserStore::open(dir.path()).unwrap();
        let both = new_verifiers("pw").unwrap();
        store.put_all("alice", both.clone()).unwrap();
        let again = UserStore::open(dir.path()).unwrap();
        assert_eq!(again.get("alice"), both.sha256);
        assert_eq!(again.get512("alice"), both.sha512);
        // A password change with SHA-256 only drops the old SHA-512 verifier.
        again.put("alice", new_verifier("new").unwrap()).unwrap();
        assert!(again.get512("alice").is_none());
        // A store written before SCRAM-SHA-512 (one scram-sha-256 line) loads.
        let v = Verifier::new("pw", b"salt", ITERATIONS);
        let line = format!(
            "{HEADER}\nscram-sha-256 {} 4096 {} {} {}\n",
            B64.encode("bob"),
            B64.encode(b"salt"),
            B64.encode(v.stored_key),
            B64.encode(v.server_key)
        );
        std::fs::write(dir.path().join(USERS_FILE), line).unwrap();
        let old = UserStore::open(dir.path()).unwrap();
        assert_eq!(old.get("bob"), Some(v));
        assert_eq!(old.get512("bob"), None);
        assert!(store.put_all("x", Verifiers::default()).is_err());
    }

    #[test]
    fn alter_changes_several_users_in_one_write_or_none() {
        let dir = tempfile::tempdir().unwrap();
        let store = UserStore::open(dir.path()).unwrap();
        store
            .put_all("alice", new_verifiers("pw").unwrap())
            .unwrap();
        let v = new_verifier("bob-pw").unwrap();
        let n = store
            .alter(|users| {
                users.insert(
                    "bob".into(),
                    Verifiers {
                        sha256: Some(v.clone()),
                        sha512: None,
                    },
                );
                // Alice keeps only her SHA-256 verifier; without any she would go.
                if let Some(a) = users.get_mut("alice") {
                    a.sha512 = None;
                }
                users.len()
            })
            .unwrap();
        assert_eq!(n, 2);
        let again = UserStore::open(dir.path()).unwrap();
        assert_eq!(again.list(), vec!["alice", "bob"]);
        assert_eq!(again.get("bob"), Some(v));
        assert!(again.get512("alice").is_none() && again.get("alice").is_some());
        store
            .alter(|users| users.get_mut("alice").map(|a| a.sha256 = None))
            .unwrap();
        assert_eq!(store.list(), vec!["bob"]);
        // A bad name refuses the whole change.
        let bad = store.alter(|users| {
            users.remove("bob");
            users.insert("c d".into(), new_verifiers("x").unwrap());
        });
        assert!(bad.is_err());
        assert_eq!(UserStore::open(dir.path()).unwrap().list(), vec!["bob"]);
    }

    #[test]
    fn a_damaged_file_is_refused_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let store = UserStore::open(dir.path()).unwrap();
        store.put("alice", new_verifier("pw").unwrap()).unwrap();
        let path = dir.path().join(USERS_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace(" 4096 ", " 12 ")).unwrap();
        let err = UserStore::open(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("line 2") && err.contains("iterations"),
            "{err}"
        );
        std::fs::write(&path, "something else\n").unwrap();
        assert!(UserStore::open(dir.path()).is_err());
    }
}
