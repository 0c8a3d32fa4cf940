#![allow(clippy::unwrap_used, clippy::expect_used)]
//! TLS on the one port, end to end: certificates made by the test, a rustls client, HTTP and
//! telnet inside TLS, plain clients beside them (or refused), and a certificate reload.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{HttpConn, start_with};
use hourglass_core::config::Config;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A self-signed certificate for `localhost`, written as `NAME.crt` and `NAME.key`; returns
/// its DER form.
fn make_cert(dir: &Path, name: &str) -> CertificateDer<'static> {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join(format!("{name}.crt")), made.cert.pem()).unwrap();
    std::fs::write(
        dir.join(format!("{name}.key")),
        made.key_pair.serialize_pem(),
    )
    .unwrap();
    made.cert.der().clone()
}

fn tls_config(dir: &Path, mode: &str) -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.network.tls.cert", dir.join("a.crt").to_str().unwrap());
    c.set("tsd.network.tls.key", dir.join("a.key").to_str().unwrap());
    c.set("tsd.network.tls.mode", mode);
    c
}

/// A TLS connection trusting `trusted`.
async fn connect(addr: SocketAddr, trusted: &[CertificateDer<'static>]) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in trusted {
        roots.add(cert.clone()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// One HTTP request over TLS (`Connection: close`); the whole answer.
async fn https_get(addr: SocketAddr, trusted: &[CertificateDer<'static>], path: &str) -> String {
    let mut s = connect(addr, trusted).await;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Telnet lines over TLS, then `version`; the reply lines before the version text.
async fn tls_telnet(
    addr: SocketAddr,
    trusted: &[CertificateDer<'static>],
    text: &str,
) -> Vec<String> {
    common::fenced(connect(addr, trusted).await, text).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_plain_clients_share_the_port() {
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "a");
    let srv = start_with("memory", tls_config(dir.path(), "optional")).await;
    let trusted = [cert];

    let answer = https_get(srv.addr, &trusted, "/api/version").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"version\":\"2.4.1\""), "{answer}");

    let replies = tls_telnet(
        srv.addr,
        &trusted,
        "put tls.metric 1700000000 1 host=a\nput tls.metric 1700000001 x host=a\n",
    )
    .await;
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(replies[0].starts_with("put: invalid value"), "{replies:?}");

    // Plain clients on the same port, in optional mode.
    let plain = HttpConn::open(srv.addr)
        .await
        .request("GET", "/api/version", "", b"")
        .await;
    assert_eq!(plain.status, 200);
    let replies = common::telnet(srv.addr, "put tls.metric 1700000002 2 host=a\n").await;
    assert!(replies.is_empty(), "{replies:?}");

    assert_eq!(srv.points("tls.metric").len(), 2);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_mode_closes_plain_connections() {
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "a");
    let srv = start_with("memory", tls_config(dir.path(), "required")).await;
    for plain in ["GET /api/version HTTP/1.1\r\nHost: t\r\n\r\n", "version\n"] {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        s.write_all(plain.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .unwrap();
        assert!(
            out.is_empty(),
            "{plain:?} answered: {}",
            String::from_utf8_lossy(&out)
        );
        drop(read);
    }
    let answer = https_get(srv.addr, &[cert], "/api/version").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    srv.stop().await;
}

/// TLS and authentication together: the `auth` line inside TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telnet_authenticates_inside_tls() {
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path(), "a");
    let token = "hg_tls_token";
    std::fs::write(
        dir.path().join("users"),
        format!(
            "token writer write {}\n",
            hourglass_server::auth::token_hash(token)
        ),
    )
    .unwrap();
    let mut config = tls_config(dir.path(), "required");
    config.set("tsd.core.authentication.enable", "true");
    config.set(
        "tsd.core.authentication.users",
        dir.path().join("users").to_str().unwrap(),
    );
    let srv = start_with("memory", config).await;
    let trusted = [cert];
    let replies = tls_telnet(
        srv.addr,
        &trusted,
        &format!("auth token {token}\nput tls.auth 1700000000 1 host=a\n"),
    )
    .await;
    // OpenTSDB ends this answer with `\r\n`.
    assert_eq!(replies, vec!["AUTH_SUCCESS.\r".to_string()]);
    let answer = https_get(srv.addr, &trusted, "/api/aggregators").await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert_eq!(srv.points("tls.auth").len(), 1);
    srv.stop().await;
}

/// A reload serves the certificate now in the files; one that fails keeps the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_serves_the_new_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let first = make_cert(dir.path(), "a");
    let srv = start_with("memory", tls_config(dir.path(), "optional")).await;
    let both = [first.clone(), make_cert(dir.path(), "b")];
    let served = |s: &TlsStream<TcpStream>| s.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(served(&connect(srv.addr, &both).await), first);

    // Broken files: the reload fails, the first certificate stays.
    std::fs::write(dir.path().join("a.crt"), "not a certificate").unwrap();
    srv.state.reload();
    assert_eq!(served(&connect(srv.addr, &both).await), first);

    std::fs::copy(dir.path().join("b.crt"), dir.path().join("a.crt")).unwrap();
    std::fs::copy(dir.path().join("b.key"), dir.path().join("a.key")).unwrap();
    srv.state.reload();
    assert_eq!(served(&connect(srv.addr, &both).await), both[1]);
    srv.stop().await;
}
