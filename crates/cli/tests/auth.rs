#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `tsdb auth` end to end: the credentials file it writes, and a TSD reading it.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `tsdb auth ARGS...` with `stdin` on its standard input.
fn auth(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .arg("auth")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn file_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(String::from)
        .collect()
}

#[test]
fn auth_commands_store_hashes_and_never_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    let file = users.to_str().unwrap();

    let o = auth(
        &[
            "add-user",
            "--file",
            file,
            "alice",
            "--permissions",
            "read,write",
        ],
        "correct horse\n",
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "", "nothing on stdout for a user");
    let lines = file_lines(&users);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("user alice read,write $argon2id$"),
        "{lines:?}"
    );
    assert!(!lines[0].contains("correct horse"), "{lines:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&users).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "readable by its owner only: {mode:o}");

    let o = auth(
        &[
            "add-token",
            "--file",
            file,
            "grafana",
            "--permissions",
            "read",
        ],
        "",
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let token = text(&o.stdout).trim().to_string();
    assert!(token.starts_with("hg_") && token.len() == 67, "{token:?}");
    let lines = file_lines(&users);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[1].starts_with("token grafana read sha256:"),
        "{lines:?}"
    );
    assert!(
        !lines[1].contains(&token[3..]),
        "the token itself is not stored"
    );

    // The same name and kind again: replaced (a new password), not added.
    let before = lines[0].clone();
    let o = auth(
        &[
            "add-user",
            "--file",
            file,
            "alice",
            "--permissions",
            "admin",
        ],
        "battery staple\n",
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines = file_lines(&users);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with("user alice admin $argon2id$"),
        "{lines:?}"
    );
    assert_ne!(lines[0], before, "a fresh hash");

    // Refused: a user's name for a token, an unknown permission, an empty password.
    let refused = [
        (
            auth(
                &[
                    "add-token",
                    "--file",
                    file,
                    "alice",
                    "--permissions",
                    "read",
                ],
                "",
            ),
            "already a user",
        ),
        (
            auth(
                &["add-user", "--file", file, "bob", "--permissions", "root"],
                "pw\n",
            ),
            "unknown permission \"root\"",
        ),
        (
            auth(
                &["add-user", "--file", file, "bob", "--permissions", "read"],
                "\n",
            ),
            "no password",
        ),
        (
            auth(&["remove", "--file", file, "carol"], ""),
            "no user or token",
        ),
    ];
    for (o, expected) in refused {
        assert!(!o.status.success(), "{expected}");
        assert!(text(&o.stderr).contains(expected), "{}", text(&o.stderr));
        assert_eq!(text(&o.stdout), "", "no token printed on a refusal");
    }
    assert_eq!(file_lines(&users).len(), 2, "refusals change nothing");

    let o = auth(&["remove", "--file", file, "grafana"], "");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines = file_lines(&users);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("user alice "), "{lines:?}");
}
