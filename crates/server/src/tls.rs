//! TLS on the TSD's one port (`tsd.network.tls.cert`, `tsd.network.tls.key`,
//! `tsd.network.tls.mode`): a connection whose first byte is a TLS handshake record (0x16)
//! is decrypted with rustls (its safe defaults: TLS 1.2 and 1.3, no legacy ciphers), and
//! the first decrypted byte then tells HTTP from telnet as for a plain connection. In
//! `optional` mode plain clients are served beside TLS ones; in `required` mode a plain
//! connection is closed unanswered. The certificate chain and key (PEM) are read again on
//! SIGHUP; a reload that fails keeps the ones in force.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hourglass_core::config::Config;
use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsAcceptor;

/// Why TLS cannot be set up. Never quotes a key's text.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("tsd.network.tls.mode = {0}: expected optional or required")]
    Mode(String),
    #[error("tsd.network.tls.cert and tsd.network.tls.key are set together")]
    Half,
    #[error("tsd.network.tls.cert {path}: {reason}")]
    Cert { path: String, reason: String },
    #[error("tsd.network.tls.key {path}: {reason}")]
    Key { path: String, reason: String },
    #[error("tsd.network.tls: the key does not fit the certificate: {0}")]
    Mismatch(String),
}

/// The first byte of a TLS record carrying a handshake (a ClientHello, first).
pub(crate) const HANDSHAKE_RECORD: u8 = 0x16;

/// Whether plain connections are still served beside TLS ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    Optional,
    Required,
}

/// The certificate and key in force, reloadable.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    pub mode: TlsMode,
    acceptor: RwLock<TlsAcceptor>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// `None` without `tsd.network.tls.cert`; an error when only one of the cert and key is
    /// set, the mode is unknown, or the files cannot be used.
    pub fn from_config(c: &Config) -> Result<Option<Tls>, TlsError> {
        let cert = c.get_str("tsd.network.tls.cert", "").trim();
        let key = c.get_str("tsd.network.tls.key", "").trim();
        let mode = match c
            .get_str("tsd.network.tls.mode", "optional")
            .trim()
            .to_ascii_lowercase()
            .as_str()
        {
            "optional" | "" => TlsMode::Optional,
            "required" => TlsMode::Required,
            other => return Err(TlsError::Mode(other.to_string())),
        };
        match (cert.is_empty(), key.is_empty()) {
            (true, true) => Ok(None),
            (false, false) => Tls::load(Path::new(cert), Path::new(key), mode).map(Some),
            _ => Err(TlsError::Half),
        }
    }

    pub fn load(cert: &Path, key: &Path, mode: TlsMode) -> Result<Tls, TlsError> {
        Ok(Tls {
            cert: cert.to_owned(),
            key: key.to_owned(),
            mode,
            acceptor: RwLock::new(acceptor(cert, key)?),
        })
    }

    /// Reads the certificate and key again; on failure the ones in force stay.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = acceptor(&self.cert, &self.key)?;
        *self.acceptor.write() = fresh;
        Ok(())
    }

    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.read().clone()
    }
}

fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    let cert_error = |reason: String| TlsError::Cert {
        path: cert.display().to_string(),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| cert_error(e.to_string()))?;
    if chain.is_empty() {
        return Err(cert_error("no certificate in it".into()));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::Key {
        path: key.display().to_string(),
        reason: e.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Mismatch(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| TlsError::Mismatch(e.to_string()))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A stream whose first bytes were already read: they are given back first.
#[derive(Debug)]
pub(crate) struct Rewind<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Rewind<S> {
    pub(crate) fn new(prefix: Vec<u8>, inner: S) -> Rewind<S> {
        Rewind {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.at < self.prefix.len() {
            let rest = &self.prefix[self.at..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn rewind_gives_the_prefix_back_first() {
        let inner: &[u8] = b"rst";
        let mut stream = Rewind::new(b"fi".to_vec(), inner);
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "first");
    }

    #[test]
    fn config_needs_both_files_and_a_known_mode() {
        let parse =
            |text: &str| Tls::from_config(&Config::parse(text).unwrap()).map_err(|e| e.to_string());
        assert!(parse("").unwrap().is_none());
        assert!(
            parse("tsd.network.tls.cert = /x\n")
                .unwrap_err()
                .contains("set together")
        );
        assert!(
            parse("tsd.network.tls.mode = sometimes\n")
                .unwrap_err()
                .contains("expected optional or required")
        );
        let missing =
            parse("tsd.network.tls.cert = /nonexistent/c\ntsd.network.tls.key = /k\n").unwrap_err();
        assert!(
            missing.contains("tsd.network.tls.cert /nonexistent/c"),
            "{missing}"
        );
    }
}
