//! The credentials file (`tsd.core.authentication.users`): its text form, parsed and written.
//!
//! One entry a line; blank lines and lines starting with `#` are ignored:
//! ```text
//! # kind  name     permissions   secret
//! user    alice    read,write    $argon2id$v=19$m=19456,t=2,p=1$...
//! token   grafana  read          sha256:9f86d081884c7d65...
//! ```
//! A `user` carries a password hash as a PHC string; a `token` carries the SHA-256 of the
//! token, in hex. Names are unique across both kinds. Verifying secrets is not done here.

use crate::permission::Permissions;
use std::fmt;

/// Whether an entry is a user (password) or an API token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialKind {
    /// Authenticates with a name and password; the secret is a PHC password hash.
    User,
    /// Authenticates with a bearer token; the secret is `sha256:` and the token's hash in hex.
    Token,
}

/// One line of the credentials file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub kind: CredentialKind,
    pub name: String,
    pub permissions: Permissions,
    pub secret: String,
}

/// Why a credentials file could not be read; `line` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialsError {
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for CredentialsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for CredentialsError {}

/// Parses a credentials file's text. The error never quotes a secret.
pub fn parse_credentials(text: &str) -> Result<Vec<Credential>, CredentialsError> {
    let mut credentials: Vec<Credential> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let error = |reason: String| CredentialsError { line, reason };
        let fields: Vec<&str> = trimmed.split_whitespace().collect();
        let [kind, name, permissions, secret] = fields[..] else {
            return Err(error(format!(
                "expected 4 fields (kind name permissions secret), found {}",
                fields.len()
            )));
        };
        let kind = match kind {
            "user" => CredentialKind::User,
            "token" => CredentialKind::Token,
            other => return Err(error(format!("unknown kind {other:?} (user or token)"))),
        };
        let permissions =
            Permissions::parse_list(permissions).map_err(|unknown| error(unknown.to_string()))?;
        let secret_ok = match kind {
            CredentialKind::User => secret.starts_with('$'),
            CredentialKind::Token => secret
                .strip_prefix("sha256:")
                .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())),
        };
        if !secret_ok {
            return Err(error(format!("malformed secret for {name:?}")));
        }
        if credentials.iter().any(|c| c.name == name) {
            return Err(error(format!("duplicate name {name:?}")));
        }
        credentials.push(Credential {
            kind,
            name: name.to_owned(),
            permissions,
            secret: secret.to_owned(),
        });
    }
    Ok(credentials)
}

/// Writes credentials in the form [`parse_credentials`] reads.
pub fn format_credentials(credentials: &[Credential]) -> String {
    let mut text = String::from("# kind name permissions secret\n");
    for credential in credentials {
        let kind = match credential.kind {
            CredentialKind::User => "user",
            CredentialKind::Token => "token",
        };
        text.push_str(&format!(
            "{kind} {} {} {}\n",
            credential.name, credential.permissions, credential.secret
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permission::Permission;

    const TOKEN_HASH: &str =
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn a_file_round_trips() {
        let text = format!(
            "# comment\n\nuser alice read,write $argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA\n\
             token grafana read {TOKEN_HASH}\n"
        );
        let credentials = parse_credentials(&text).unwrap();
        assert_eq!(credentials.len(), 2);
        assert_eq!(credentials[0].kind, CredentialKind::User);
        assert_eq!(credentials[0].name, "alice");
        assert!(credentials[0].permissions.allows(Permission::Write));
        assert!(!credentials[0].permissions.allows(Permission::Admin));
        assert_eq!(credentials[1].kind, CredentialKind::Token);
        assert_eq!(credentials[1].secret, TOKEN_HASH);
        let again = parse_credentials(&format_credentials(&credentials)).unwrap();
        assert_eq!(again, credentials);
    }

    #[test]
    fn bad_lines_are_refused_with_their_number_and_no_secret() {
        let cases = [
            ("user alice read", "expected 4 fields"),
            ("admin alice read $argon2id$x", "unknown kind"),
            ("user alice root $argon2id$x", "unknown permission \"root\""),
            ("user alice read plaintext", "malformed secret"),
            ("token t read sha256:abc", "malformed secret"),
        ];
        for (line, expected) in cases {
            let error = parse_credentials(&format!("# header\n{line}\n")).unwrap_err();
            assert_eq!(error.line, 2, "{line}");
            assert!(error.reason.contains(expected), "{line}: {error}");
            assert!(!error.to_string().contains("plaintext"), "{error}");
        }
    }

    #[test]
    fn duplicate_names_are_refused() {
        let text = format!("token a read {TOKEN_HASH}\nuser a read $argon2id$x\n");
        let error = parse_credentials(&text).unwrap_err();
        assert_eq!(error.line, 2);
        assert!(error.reason.contains("duplicate name"));
    }
}
