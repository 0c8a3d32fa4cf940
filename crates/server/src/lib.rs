//! The TSD server: one TCP port, two protocols. The first byte of a connection decides, as in
//! OpenTSDB: an upper-case letter starts an HTTP request (`GET`, `POST`, ...), anything else
//! is the telnet-style line protocol (`put`, `version`, ...). With TLS configured, a first
//! byte 0x16 starts a TLS handshake, and the first decrypted byte decides the same way.
//!
//! [`run`] serves a bound listener until `shutdown` resolves (or `diediedie`), then stops
//! accepting, lets in-flight requests finish, and returns; the caller flushes the database.

mod activity;
pub mod auth;
mod http;
mod ingest;
mod limit_overrides;
pub mod logs;
mod plot;
mod query_cache;
mod query_log;
mod state;
mod stats;
mod telnet;
pub mod tls;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use activity::{Activity, Tracked};

pub use http::check_put_body;
pub use state::{BuildInfo, Cors, ServerSettings, State};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long connections get to finish after shutdown starts.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves connections on `listener` until `shutdown` completes.
pub async fn run(
    listener: TcpListener,
    state: Arc<State>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut stop = state.subscribe_shutdown();
    // Read now, not by the first request that names it.
    stats::hostname();
    let router = http::router(Arc::clone(&state));
    let mut connections = JoinSet::new();
    let announcer = tokio::spawn(ingest::announce_room(
        Arc::clone(&state),
        state.subscribe_shutdown(),
    ));
    tokio::pin!(shutdown);
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "Ready to serve on {addr}");
    }
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let limit = state.settings.connections_limit;
                    if limit > 0 && state.stats.connections_open() >= limit as u64 {
                        state.stats.connections_rejected.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%peer, limit, "connection refused: open connections are at tsd.core.connections.limit");
                        drop(stream);
                        continue;
                    }
                    // Counted here, not in the task, so a burst of accepts sees the limit.
                    state.stats.connection_opened();
                    let state = Arc::clone(&state);
                    let router = router.clone();
                    let stop = state.subscribe_shutdown();
                    connections.spawn(async move {
                        if let Err(e) = serve_connection(stream, &state, router, stop).await {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                        state.stats.connection_closed();
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = &mut shutdown => break,
            _ = stop.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    tracing::info!("shutting down: no new connections, draining open ones");
    state.begin_shutdown();
    announcer.abort();
    drop(listener);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "connections still open after the drain timeout; closing them"
        );
        connections.abort_all();
    }
    Ok(())
}

/// What a connection's first byte starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstByte {
    /// 0x16: a TLS handshake record (served only with TLS configured).
    Tls,
    /// An upper-case letter: an HTTP method.
    Http,
    /// Anything else: the telnet-style line protocol.
    Telnet,
}

/// Tells the protocols apart by the first byte, as OpenTSDB does for HTTP and telnet.
pub fn sniff(first: u8) -> FirstByte {
    if first == tls::HANDSHAKE_RECORD {
        FirstByte::Tls
    } else if first.is_ascii_uppercase() {
        FirstByte::Http
    } else {
        FirstByte::Telnet
    }
}

/// Longest wait for a TLS handshake to finish.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP when the first byte is an upper-case letter (a method), else telnet.
async fn serve_protocol<S>(
    first: u8,
    stream: S,
    state: &Arc<State>,
    router: axum::Router,
    stop: watch::Receiver<bool>,
    peer: Option<std::net::SocketAddr>,
    activity: &Activity,
) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    if sniff(first) == FirstByte::Http {
        http::serve(stream, state, router, stop, peer).await
    } else {
        telnet::serve(stream, state, stop, activity, peer).await
    }
}

async fn serve_connection(
    stream: TcpStream,
    state: &Arc<State>,
    router: axum::Router,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let peer = stream.peer_addr().ok();
    let activity = Arc::new(Activity::new());
    let serve = async {
        let mut first = [0u8; 1];
        let n = stream.peek(&mut first).await?;
        if n == 0 {
            return Ok(());
        }
        let stream = Tracked::new(stream, Arc::clone(&activity));
        let Some(tls) = &state.settings.tls else {
            return serve_protocol(first[0], stream, state, router, stop, peer, &activity).await;
        };
        if sniff(first[0]) != FirstByte::Tls {
            if tls.mode == tls::TlsMode::Required {
                state.stats.plain_refused.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    ?peer,
                    "plain connection closed: tsd.network.tls.mode = required"
                );
                return Ok(());
            }
            return serve_protocol(first[0], stream, state, router, stop, peer, &activity).await;
        }
        let accepted =
            tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.acceptor().accept(stream)).await;
        let mut stream = match accepted {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                state.stats.tls_failures.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(?peer, error = %e, "TLS handshake failed");
                return Ok(());
            }
            Err(_) => {
                state.stats.tls_failures.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        };
        // The first decrypted byte tells HTTP from telnet, as for a plain connection.
        let mut first = [0u8; 1];
        let n = tokio::io::AsyncReadExt::read(&mut stream, &mut first).await?;
        if n == 0 {
            return Ok(());
        }
        let stream = tls::Rewind::new(first.to_vec(), stream);
        serve_protocol(first[0], stream, state, router, stop, peer, &activity).await
    };
    match state.settings.socket_timeout {
        None => serve.await,
        // OpenTSDB's idle handler: nothing read or written for the timeout closes it.
        Some(timeout) => tokio::select! {
            served = serve => served,
            () = activity.idle_for(timeout) => {
                state.stats.idle_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::info!(?timeout, "Closed idle socket");
                Ok(())
            }
        },
    }
}
