//! Authentication (`tsd.core.authentication.enable`): the credentials file loaded and its
//! secrets verified. Passwords are argon2id PHC strings, tokens SHA-256 digests; both are
//! compared in constant time, and no secret is ever logged or echoed.
//!
//! argon2 is slow on purpose (tens of ms), too slow to run on every HTTP request of a
//! client sending Basic credentials each time: a successful check is remembered under
//! SHA-256(process key, user, password) — never the clear text — so the next request with
//! the same pair costs one hash. Failures are not remembered; each one runs argon2 again.

pub(crate) mod throttle;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use hourglass_core::credentials::{Credential, CredentialKind, parse_credentials};
use hourglass_core::permission::{Permission, Permissions};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// argon2 runs at most this many at once (each takes 19 MiB and a core for tens of ms):
/// a flood of wrong passwords queues here instead of taking every blocking thread and
/// gigabytes of memory.
const MAX_CONCURRENT_HASHES: usize = 4;

/// Remembered successful password checks at most; past it the memory is cleared (a client
/// re-verified once costs one argon2 run).
const MAX_REMEMBERED: usize = 4096;

/// Why the credentials file cannot be used. Never quotes a secret.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read the credentials file. path={path} error={error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("invalid credentials file. path={path} {error}")]
    Invalid { path: PathBuf, error: String },
}

/// Who a request or connection was authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub permissions: Permissions,
}

/// The credentials file, loaded, and the memory of recent successful password checks.
pub struct Authenticator {
    path: PathBuf,
    users: HashMap<String, (String, Permissions)>,
    /// Token digests, with their names and permissions.
    tokens: Vec<([u8; 32], String, Permissions)>,
    /// A random key mixed into the remembered digests, so they are useless outside this
    /// process.
    cache_key: [u8; 32],
    remembered: Mutex<HashMap<[u8; 32], Principal>>,
    /// Verified when a user name is unknown, so its answer takes as long as a wrong password.
    decoy: String,
    /// argon2 runs in progress, up to [`MAX_CONCURRENT_HASHES`].
    hashing: parking_lot::Mutex<usize>,
    hashing_done: parking_lot::Condvar,
}

/// Names and counts only: hashes stay out of debug output (and so out of any log).
impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("path", &self.path)
            .field("users", &self.users.len())
            .field("tokens", &self.tokens.len())
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// Reads and checks the credentials file: every line parsed, every password hash a
    /// valid PHC string.
    pub fn load(path: &Path) -> Result<Authenticator, AuthError> {
        let text = std::fs::read_to_string(path).map_err(|error| AuthError::Read {
            path: path.to_owned(),
            error,
        })?;
        Authenticator::from_text(path, &text)
    }

    /// Builds from the credentials file's text (`path` only names it in errors).
    pub fn from_text(path: &Path, text: &str) -> Result<Authenticator, AuthError> {
        let invalid = |error: String| AuthError::Invalid {
            path: path.to_owned(),
            error,
        };
        let credentials = parse_credentials(text).map_err(|e| invalid(e.to_string()))?;
        let mut users = HashMap::new();
        let mut tokens = Vec::new();
        for Credential {
            kind,
            name,
            permissions,
            secret,
        } in credentials
        {
            match kind {
                CredentialKind::User => {
                    if !is_argon2_hash(&secret) {
                        return Err(invalid(format!(
                            "the password hash of {name:?} is not an argon2 PHC string"
                        )));
                    }
                    users.insert(name, (secret, permissions));
                }
                CredentialKind::Token => {
                    let digest = secret
                        .strip_prefix("sha256:")
                        .and_then(decode_hex)
                        .ok_or_else(|| invalid(format!("malformed token hash for {name:?}")))?;
                    tokens.push((digest, name, permissions));
                }
            }
        }
        let mut cache_key = [0u8; 32];
        getrandom::getrandom(&mut cache_key)
            .map_err(|e| invalid(format!("no random numbers for the cache key: {e}")))?;
        Ok(Authenticator {
            path: path.to_owned(),
            users,
            tokens,
            cache_key,
            remembered: Mutex::new(HashMap::new()),
            decoy: hash_password("decoy").map_err(invalid)?,
            hashing: parking_lot::Mutex::new(0),
            hashing_done: parking_lot::Condvar::new(),
        })
    }

    /// The file this was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many users and tokens are known.
    pub fn len(&self) -> usize {
        self.users.len() + self.tokens.len()
    }

    /// Whether no user and no token is known (nobody can get in).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A name and password checked without argon2: `Some` when the pair was verified before.
    pub fn remembered(&self, user: &str, password: &str) -> Option<Principal> {
        self.remembered
            .lock()
            .get(&self.pair_digest(user, password))
            .cloned()
    }

    /// A name and password checked (argon2 when not remembered: call it off the async
    /// threads).
    pub fn verify_password(&self, user: &str, password: &str) -> Option<Principal> {
        let digest = self.pair_digest(user, password);
        if let Some(principal) = self.remembered.lock().get(&digest) {
            return Some(principal.clone());
        }
        let (hash, permissions, known) = match self.users.get(user) {
            Some((hash, permissions)) => (hash.as_str(), *permissions, true),
            None => (self.decoy.as_str(), Permissions::NONE, false),
        };
        let parsed = PasswordHash::new(hash).ok()?;
        {
            let mut running = self.hashing.lock();
            while *running >= MAX_CONCURRENT_HASHES {
                self.hashing_done.wait(&mut running);
            }
            *running += 1;
        }
        let ok = Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok();
        *self.hashing.lock() -= 1;
        self.hashing_done.notify_one();
        if !(ok && known) {
            return None;
        }
        let principal = Principal {
            name: user.to_owned(),
            permissions,
        };
        let mut remembered = self.remembered.lock();
        if remembered.len() >= MAX_REMEMBERED {
            remembered.clear();
        }
        remembered.insert(digest, principal.clone());
        Some(principal)
    }

    /// A bearer token checked against every token digest, each compared in constant time.
    pub fn verify_token(&self, token: &str) -> Option<Principal> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (stored, name, permissions) in &self.tokens {
            if bool::from(stored.ct_eq(&digest)) {
                found = Some(Principal {
                    name: name.clone(),
                    permissions: *permissions,
                });
            }
        }
        found
    }

    fn pair_digest(&self, user: &str, password: &str) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(self.cache_key);
        hasher.update((user.len() as u64).to_be_bytes());
        hasher.update(user.as_bytes());
        hasher.update(password.as_bytes());
        hasher.finalize().into()
    }
}

/// Whether `secret` is an argon2 PHC string with its salt and hash.
fn is_argon2_hash(secret: &str) -> bool {
    PasswordHash::new(secret).is_ok_and(|hash| {
        ["argon2id", "argon2i", "argon2d"].contains(&hash.algorithm.as_str())
            && hash.salt.is_some()
            && hash.hash.is_some()
    })
}

/// The credentials file a TSD serves with, reloaded on demand (SIGHUP): a reload that fails
/// keeps the credentials in force. Each reload starts with no remembered password, so a
/// removed user or a changed password takes effect at once.
#[derive(Debug)]
pub struct CredentialsFile {
    path: PathBuf,
    current: parking_lot::RwLock<Arc<Authenticator>>,
}

impl CredentialsFile {
    pub fn load(path: &Path) -> Result<CredentialsFile, AuthError> {
        Ok(CredentialsFile {
            path: path.to_owned(),
            current: parking_lot::RwLock::new(Arc::new(Authenticator::load(path)?)),
        })
    }

    /// The credentials in force.
    pub fn current(&self) -> Arc<Authenticator> {
        Arc::clone(&self.current.read())
    }

    /// Reads the file again; on success its users and tokens replace the ones in force
    /// (returns how many), on failure nothing changes.
    pub fn reload(&self) -> Result<usize, AuthError> {
        let fresh = Authenticator::load(&self.path)?;
        let count = fresh.len();
        *self.current.write() = Arc::new(fresh);
        Ok(count)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// An argon2id PHC string of `password` with a fresh random salt (argon2's default
/// parameters: 19 MiB, 2 passes, 1 lane — OWASP's recommendation).
pub fn hash_password(password: &str) -> Result<String, String> {
    let mut salt = [0u8; 16];
    getrandom::getrandom(&mut salt).map_err(|e| format!("no random numbers: {e}"))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| e.to_string())?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| e.to_string())
}

/// A new API token: `hg_` and 32 random bytes in hex.
pub fn new_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| format!("no random numbers: {e}"))?;
    Ok(format!("hg_{}", encode_hex(&bytes)))
}

/// The credentials file's form of a token: `sha256:` and its digest in hex.
pub fn token_hash(token: &str) -> String {
    format!("sha256:{}", encode_hex(&Sha256::digest(token.as_bytes())))
}

fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_hex(hex: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if hex.len() != 64 {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// What a telnet `auth` line asks to be checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthLine<'a> {
    /// `auth basic USER PASSWORD`: the password is the rest of the line, spaces and all.
    Basic { user: &'a str, password: &'a str },
    /// `auth token TOKEN`.
    Token(&'a str),
}

/// Reads what follows `auth ` on a telnet line; `None` when it is neither form (a failed
/// authentication, like a wrong secret).
pub fn parse_auth_line(args: &str) -> Option<AuthLine<'_>> {
    match args.split_once(' ')? {
        ("basic", rest) => {
            let (user, password) = rest.split_once(' ')?;
            (!user.is_empty()).then_some(AuthLine::Basic { user, password })
        }
        ("token", token) if !token.is_empty() => Some(AuthLine::Token(token)),
        _ => None,
    }
}

/// What a principal (or nobody, with authentication off) may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Access {
    /// Authentication is off: everything is allowed.
    Open,
    /// Authenticated as this principal.
    As(Principal),
}

impl Access {
    pub(crate) fn allows(&self, permission: Permission) -> bool {
        match self {
            Access::Open => true,
            Access::As(principal) => principal.permissions.allows(permission),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authenticator(password: &str, token: &str) -> Authenticator {
        let text = format!(
            "user alice read,write {}\ntoken grafana read {}\n",
            hash_password(password).unwrap(),
            token_hash(token)
        );
        Authenticator::from_text(Path::new("users"), &text).unwrap()
    }

    #[test]
    fn a_password_verifies_and_is_remembered_only_when_right() {
        let auth = authenticator("s3cret", "t0ken");
        assert_eq!(auth.remembered("alice", "s3cret"), None);
        let principal = auth.verify_password("alice", "s3cret").unwrap();
        assert_eq!(principal.name, "alice");
        assert!(principal.permissions.allows(Permission::Write));
        assert!(!principal.permissions.allows(Permission::Admin));
        assert_eq!(auth.remembered("alice", "s3cret"), Some(principal));
        assert_eq!(auth.verify_password("alice", "wrong"), None);
        assert_eq!(auth.remembered("alice", "wrong"), None);
        assert_eq!(auth.verify_password("bob", "s3cret"), None);
        // The token's name is no user.
        assert_eq!(auth.verify_password("grafana", "t0ken"), None);
    }

    #[test]
    fn concurrent_checks_queue_for_argon2_and_all_finish() {
        let auth = std::sync::Arc::new(authenticator("s3cret", "t0ken"));
        let threads: Vec<_> = (0..3 * MAX_CONCURRENT_HASHES)
            .map(|i| {
                let auth = std::sync::Arc::clone(&auth);
                std::thread::spawn(move || {
                    let password = if i % 2 == 0 { "s3cret" } else { "wrong" };
                    (i, auth.verify_password("alice", password).is_some())
                })
            })
            .collect();
        for thread in threads {
            let (i, ok) = thread.join().unwrap();
            assert_eq!(ok, i % 2 == 0, "check {i}");
        }
        assert_eq!(*auth.hashing.lock(), 0, "every slot given back");
    }

    #[test]
    fn a_token_verifies_by_its_digest() {
        let auth = authenticator("s3cret", "t0ken");
        let principal = auth.verify_token("t0ken").unwrap();
        assert_eq!(principal.name, "grafana");
        assert!(principal.permissions.allows(Permission::Read));
        assert!(!principal.permissions.allows(Permission::Write));
        assert_eq!(auth.verify_token("t0ken "), None);
        assert_eq!(auth.verify_token("s3cret"), None);
    }

    #[test]
    fn auth_lines_read_as_opentsdb_writes_them() {
        let cases = [
            (
                "basic alice s3cret",
                Some(AuthLine::Basic {
                    user: "alice",
                    password: "s3cret",
                }),
            ),
            (
                "basic alice two words",
                Some(AuthLine::Basic {
                    user: "alice",
                    password: "two words",
                }),
            ),
            (
                "basic alice ",
                Some(AuthLine::Basic {
                    user: "alice",
                    password: "",
                }),
            ),
            ("token hg_abc", Some(AuthLine::Token("hg_abc"))),
            ("basic alice", None),
            ("basic  pw", None),
            ("token ", None),
            ("hmacsha256 key:digest:1:n", None),
            ("", None),
        ];
        for (args, expected) in cases {
            assert_eq!(parse_auth_line(args), expected, "{args:?}");
        }
    }

    #[test]
    fn new_tokens_differ_and_hash_to_the_file_form() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 3 + 64);
        let hash = token_hash(&a);
        assert!(parse_credentials(&format!("token t read {hash}\n")).is_ok());
        assert!(!hash.contains(&a[3..]));
    }

    #[test]
    fn a_bad_file_is_refused_without_its_secrets() {
        let error =
            Authenticator::from_text(Path::new("users"), "user alice read $notaphcstring\n")
                .unwrap_err()
                .to_string();
        assert!(error.contains("not an argon2 PHC string"), "{error}");
        assert!(!error.contains("notaphcstring"), "{error}");
        let auth = authenticator("s3cret", "t0ken");
        let debug = format!("{auth:?}");
        assert!(
            !debug.contains("argon2") && !debug.contains("sha256"),
            "{debug}"
        );
        let error = Authenticator::from_text(Path::new("users"), "user alice read\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("line 1"), "{error}");
        let error = Authenticator::load(Path::new("/nonexistent/users"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("cannot read"), "{error}");
    }
}
