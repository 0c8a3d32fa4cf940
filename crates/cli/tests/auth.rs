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

/// One HTTP/1.1 request on a new connection; the status and body.
fn http(addr: &str, path: &str, auth: &str) -> (u16, String) {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{auth}\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split(' ').nth(1).unwrap().parse().unwrap();
    (
        status,
        out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string(),
    )
}

/// What `tsdb auth` writes, a TSD reads: the user's password and the printed token open
/// HTTP and telnet, and nothing else does.
#[test]
fn a_tsd_accepts_what_tsdb_auth_wrote() {
    use base64::Engine;
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    let file = users.to_str().unwrap();
    let o = auth(
        &["add-user", "--file", file, "ops", "--permissions", "admin"],
        "s3cret pass\n",
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
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
    let token = text(&o.stdout).trim().to_string();
    let config = dir.path().join("tsd.conf");
    std::fs::write(
        &config,
        format!("tsd.core.authentication.enable = true\ntsd.core.authentication.users = {file}\n"),
    )
    .unwrap();
    let (mut child, addr) = common::spawn_tsd_with(Some(&config), &dir.path().join("data"));

    let basic = |user: &str, password: &str| {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Authorization: Basic {encoded}\r\n")
    };
    assert_eq!(http(&addr, "/api/aggregators", "").0, 401);
    assert_eq!(
        http(&addr, "/api/aggregators", &basic("ops", "s3cret")).0,
        401
    );
    assert_eq!(
        http(&addr, "/api/stats", &basic("ops", "s3cret pass")).0,
        200
    );
    let bearer = format!("Authorization: Bearer {token}\r\n");
    assert_eq!(http(&addr, "/api/aggregators", &bearer).0, 200);
    assert_eq!(http(&addr, "/api/stats", &bearer).0, 403);

    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    s.write_all(b"auth basic ops s3cret pass\nversion\n")
        .unwrap();
    let mut reader = std::io::BufReader::new(s);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
    assert_eq!(line, "AUTH_SUCCESS.\r\n");
    line.clear();
    std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
    assert!(line.starts_with("hourglass "), "{line}");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The TSD's log lines up to "Ready to serve" with these extra arguments (and the config),
/// then it is stopped.
fn start_log(extra: &[&str], config: Option<&Path>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsdb"));
    cmd.args(["tsd", "--port", "0", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(extra);
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let mut log = String::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap())) {
        let line = line.unwrap();
        log.push_str(&line);
        log.push('\n');
        if line.contains("Ready to serve") {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    log
}

/// Listening beyond loopback without authentication is said loudly; on loopback, or with
/// authentication on, it is not.
#[test]
fn an_open_tsd_beyond_loopback_warns_at_start() {
    let log = start_log(&["--bind", "0.0.0.0"], None);
    assert!(log.contains("AUTHENTICATION IS OFF"), "{log}");
    assert!(log.contains("Ready to serve"), "{log}");
    let log = start_log(&["--bind", "127.0.0.1"], None);
    assert!(!log.contains("AUTHENTICATION IS OFF"), "{log}");

    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    let o = auth(
        &[
            "add-token",
            "--file",
            users.to_str().unwrap(),
            "t",
            "--permissions",
            "read",
        ],
        "",
    );
    assert!(o.status.success());
    let token = text(&o.stdout).trim().to_string();
    let config = dir.path().join("tsd.conf");
    std::fs::write(
        &config,
        format!(
            "tsd.core.authentication.enable = true\ntsd.core.authentication.users = {}\n",
            users.display()
        ),
    )
    .unwrap();
    let log = start_log(&["--bind", "0.0.0.0"], Some(&config));
    assert!(!log.contains("AUTHENTICATION IS OFF"), "{log}");
    assert!(log.contains("Ready to serve"), "{log}");
    assert!(!log.contains(&token), "{log}");
}

/// SIGHUP reloads the credentials file: a removed token is refused, a new user accepted; a
/// broken file leaves the credentials in force.
#[test]
fn sighup_reloads_the_credentials_file() {
    use base64::Engine;
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    let file = users.to_str().unwrap();
    let o = auth(
        &["add-token", "--file", file, "old", "--permissions", "read"],
        "",
    );
    let old_token = text(&o.stdout).trim().to_string();
    let config = dir.path().join("tsd.conf");
    std::fs::write(
        &config,
        format!("tsd.core.authentication.enable = true\ntsd.core.authentication.users = {file}\n"),
    )
    .unwrap();
    let (mut child, addr) = common::spawn_tsd_with(Some(&config), &dir.path().join("data"));
    let old = format!("Authorization: Bearer {old_token}\r\n");
    let new = format!(
        "Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode("new:pw")
    );
    assert_eq!(http(&addr, "/api/aggregators", &old).0, 200);
    assert_eq!(http(&addr, "/api/aggregators", &new).0, 401);

    assert!(
        auth(&["remove", "--file", file, "old"], "")
            .status
            .success()
    );
    let o = auth(
        &["add-user", "--file", file, "new", "--permissions", "read"],
        "pw\n",
    );
    assert!(o.status.success());
    let hangup = || {
        let status = Command::new("kill")
            .args(["-HUP", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    hangup();
    // The reload is asynchronous: wait for it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while http(&addr, "/api/aggregators", &new).0 != 200 {
        assert!(std::time::Instant::now() < deadline, "not reloaded");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(http(&addr, "/api/aggregators", &old).0, 401);

    // A broken file: the TSD keeps running with the credentials it has.
    std::fs::write(&users, "user broken\n").unwrap();
    hangup();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "still running");
    assert_eq!(http(&addr, "/api/aggregators", &new).0, 200);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `tsdb query --url` and `tsdb import --url` take credentials from the environment.
#[test]
fn url_tools_take_credentials_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    let file = users.to_str().unwrap();
    assert!(
        auth(
            &[
                "add-user",
                "--file",
                file,
                "loader",
                "--permissions",
                "write"
            ],
            "load pw\n"
        )
        .status
        .success()
    );
    let o = auth(
        &[
            "add-token",
            "--file",
            file,
            "reader",
            "--permissions",
            "read",
        ],
        "",
    );
    let token = text(&o.stdout).trim().to_string();
    let token_file = dir.path().join("reader.token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let config = dir.path().join("tsd.conf");
    std::fs::write(
        &config,
        format!("tsd.core.authentication.enable = true\ntsd.core.authentication.users = {file}\n"),
    )
    .unwrap();
    let (mut child, addr) = common::spawn_tsd_with(Some(&config), &dir.path().join("data"));
    let url = format!("http://{addr}");
    let points = dir.path().join("points.txt");
    std::fs::write(&points, "sys.load 1356998400 5 host=a\n").unwrap();
    let tool = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsdb"));
        for var in [
            "HOURGLASS_TOKEN",
            "HOURGLASS_TOKEN_FILE",
            "HOURGLASS_USER",
            "HOURGLASS_PASSWORD",
            "HOURGLASS_PASSWORD_FILE",
        ] {
            cmd.env_remove(var);
        }
        cmd.args(args).envs(env.iter().copied()).output().unwrap()
    };
    let import = ["import", "--url", &url, points.to_str().unwrap()];
    let query = ["query", "--url", &url, "1356998000", "sum", "sys.load"];

    let o = tool(&import, &[]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("asks for credentials (401)"),
        "{}",
        text(&o.stderr)
    );
    let o = tool(
        &import,
        &[("HOURGLASS_TOKEN_FILE", token_file.to_str().unwrap())],
    );
    assert!(
        text(&o.stderr).contains("lack the permission (403)"),
        "{}",
        text(&o.stderr)
    );
    let o = tool(
        &import,
        &[
            ("HOURGLASS_USER", "loader"),
            ("HOURGLASS_PASSWORD", "load pw"),
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("Total: imported 1 data points in "),
        "{}",
        text(&o.stderr)
    );

    let o = tool(&query, &[]);
    assert!(
        text(&o.stderr).contains("asks for credentials (401)"),
        "{}",
        text(&o.stderr)
    );
    let o = tool(&query, &[("HOURGLASS_TOKEN", &token)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "sys.load 1356998400000 5 {host=a}\n");
    child.kill().unwrap();
    child.wait().unwrap();
}
