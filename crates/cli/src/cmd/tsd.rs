//! `tsdb tsd`: the server. Flags override the config file's `tsd.*` keys; OpenTSDB 2.4's
//! flags are all accepted, those meaning nothing here (ZooKeeper, Netty's I/O mode, the
//! static and cache directories) without effect.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use hourglass_core::config::Config;
use hourglass_server::{ServerSettings, State};

use crate::open::StoreArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct TsdArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// TCP port for telnet and HTTP (`tsd.network.port`; 0 picks a free one).
    #[arg(long, value_name = "NUM")]
    port: Option<String>,
    /// Address to bind (`tsd.network.bind`).
    #[arg(long)]
    bind: Option<String>,
    /// Create metrics on first use (`tsd.core.auto_create_metrics`).
    #[arg(long)]
    auto_metric: bool,
    /// Refuse writes (`tsd.mode = ro`). As in OpenTSDB, a value may follow and any value,
    /// even `false`, sets read-only.
    #[arg(long, value_name = "VALUE", num_args = 0..=1, default_missing_value = "true")]
    read_only: Option<String>,
    /// Do not serve the web UI, `/q` and the status page (`tsd.core.enable_ui = false`; any
    /// value, as in OpenTSDB).
    #[arg(long, value_name = "VALUE", num_args = 0..=1, default_missing_value = "true")]
    disable_ui: Option<String>,
    /// Do not serve `/api/*` (`tsd.core.enable_api = false`; any value, as in OpenTSDB).
    #[arg(long, value_name = "VALUE", num_args = 0..=1, default_missing_value = "true")]
    disable_api: Option<String>,
    /// Threads serving connections (`tsd.network.worker_threads`; default: one per core).
    #[arg(long, value_name = "N")]
    worker_threads: Option<String>,
    /// Listen backlog of the server socket (`tsd.network.backlog`; default 1024).
    #[arg(long, value_name = "N")]
    backlog: Option<String>,
    /// Open connections at most, 0 for no limit (`tsd.core.connections.limit`).
    #[arg(long, value_name = "N")]
    max_connections: Option<String>,
    /// Milliseconds before buffered points are written (`tsd.storage.flush_interval`).
    #[arg(long, value_name = "MS")]
    flush_interval: Option<String>,
    /// Accepted for OpenTSDB's command lines (`tsd.network.async_io`); no effect.
    #[arg(long, value_name = "VALUE")]
    async_io: Option<String>,
    /// Accepted for OpenTSDB's command lines; unused (the web UI is built in).
    #[arg(long, value_name = "PATH")]
    staticroot: Option<String>,
    /// Accepted for OpenTSDB's command lines; unused.
    #[arg(long, value_name = "PATH")]
    cachedir: Option<String>,
    /// Accepted for OpenTSDB's command lines, where it has no effect either.
    #[arg(long, hide = true)]
    statswport: bool,
}

/// The flags' keys over the config file's.
fn layered_config(args: &TsdArgs) -> anyhow::Result<Config> {
    let mut config = args.store.config()?;
    let mut set = |key: &str, value: Option<String>| {
        if let Some(v) = value {
            config.set(key, &v);
        }
    };
    set("tsd.network.port", args.port.clone());
    set("tsd.network.bind", args.bind.clone());
    set(
        "tsd.core.auto_create_metrics",
        args.auto_metric.then(|| "true".into()),
    );
    set("tsd.mode", args.read_only.as_ref().map(|_| "ro".into()));
    set(
        "tsd.core.enable_ui",
        args.disable_ui.as_ref().map(|_| "false".into()),
    );
    set(
        "tsd.core.enable_api",
        args.disable_api.as_ref().map(|_| "false".into()),
    );
    set("tsd.network.worker_threads", args.worker_threads.clone());
    // Numbers are read from the config as the file's are, with the same words when bad.
    set("tsd.network.backlog", args.backlog.clone());
    set("tsd.core.connections.limit", args.max_connections.clone());
    set("tsd.storage.flush_interval", args.flush_interval.clone());
    set("tsd.network.async_io", args.async_io.clone());
    if args.staticroot.is_some() || args.cachedir.is_some() {
        tracing::info!("--staticroot and --cachedir are unused: the web UI is built in");
    }
    Ok(config)
}

/// `tsd.network.bind`: an IPv4 or IPv6 address or, as OpenTSDB's `InetAddress.getByName`
/// reads it, a host name (its first address).
fn bind_address(bind: &str, port: u16) -> anyhow::Result<SocketAddr> {
    use std::net::{IpAddr, ToSocketAddrs};
    if let Ok(ip) = bind.trim().parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (bind.trim(), port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .with_context(|| format!("bad bind address {bind}: not an address or a known host name"))
}

/// A positive count from `key`; `None` when unset or empty (OpenTSDB's "no value").
fn positive(config: &Config, key: &str) -> anyhow::Result<Option<u32>> {
    if config.get(key).is_none_or(|v| v.trim().is_empty()) {
        return Ok(None);
    }
    let n = config.get_int(key, 0)?;
    match u32::try_from(n) {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => anyhow::bail!("{key} must be a positive number, not {n}"),
    }
}

/// Whether `dir` holds this binary's web UI (OpenTSDB's static files do not): only then does
/// `tsd.http.staticroot` replace the built-in copies, so a key carried over from an OpenTSDB
/// config cannot break `/`.
pub(crate) fn run(args: &TsdArgs) -> anyhow::Result<ExitCode> {
    let config = layered_config(args)?;
    if let Some(refusal) = config.refusal() {
        anyhow::bail!(refusal);
    }
    for key in config.unknown_keys() {
        tracing::warn!(
            key,
            "unknown config key {key}: no part of Hourglass reads it (a typo?)"
        );
    }
    // OpenTSDB's words for numbers it checks before it starts.
    for (key, says) in [
        ("tsd.network.worker_threads", "Invalid worker thread count"),
        ("tsd.core.connections.limit", "Invalid connections limit"),
    ] {
        if let Some(v) = config
            .get(key)
            .filter(|v| !v.trim().is_empty() && v.trim().parse::<i64>().is_err())
        {
            anyhow::bail!("{says}: {key} = {}", v.trim());
        }
    }
    // The same settings every tool uses (log in <data dir>/wal, 1 s flushes on Bigtable).
    let settings = args.store.settings_from(&config)?;
    let mut server_settings = ServerSettings::from_config(&config)?;
    server_settings.build = crate::cmd::version::build_info();
    // OpenTSDB's words for a port that is not one (flag or key).
    let port = config
        .get_int("tsd.network.port", 4242)
        .ok()
        .and_then(|p| u16::try_from(p).ok())
        .with_context(|| {
            format!(
                "Invalid network port setting: tsd.network.port = {}",
                config.get_str("tsd.network.port", "").trim()
            )
        })?;
    let bind = config.get_str("tsd.network.bind", "0.0.0.0").to_string();
    let addr = bind_address(&bind, port)?;
    if server_settings.auth.is_none() && !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "AUTHENTICATION IS OFF and the TSD listens on {addr}, beyond loopback: anyone who \
             reaches this port can write, delete and read everything. Set \
             tsd.core.authentication.enable = true and tsd.core.authentication.users \
             (README: Securing a TSD), or bind to 127.0.0.1"
        );
    }
    if server_settings.auth.is_some() && server_settings.tls.is_none() && !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "authentication is on without TLS beyond loopback: passwords and tokens cross \
             the network in clear text (set tsd.network.tls.cert and tsd.network.tls.key)"
        );
    }
    let workers = positive(&config, "tsd.network.worker_threads")?;
    let backlog = positive(&config, "tsd.network.backlog")?.unwrap_or(DEFAULT_BACKLOG);

    let db = args.store.open_tsdb(settings)?;
    db.start_background();
    // Named for ps and top (the blocking pool's threads share the name).
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.thread_name("tsd-worker");
    if let Some(n) = workers {
        builder.worker_threads(n as usize);
    }
    let runtime = builder.enable_all().build()?;
    let state = State::new(std::sync::Arc::clone(&db), config, server_settings);
    // Installed before the TSD says it is ready: a SIGHUP is never the default (exit).
    let hangup = {
        let _in_runtime = runtime.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("cannot install the SIGHUP handler")?
    };
    let reloader = runtime.spawn(reload_on_hangup(hangup, std::sync::Arc::clone(&state)));
    let served: anyhow::Result<()> = runtime.block_on(async {
        let listener = listen(addr, backlog).with_context(|| format!("cannot listen on {addr}"))?;
        hourglass_server::run(listener, state, shutdown_signal()).await?;
        Ok(())
    });
    reloader.abort();
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    tracing::info!("flushing buffered points");
    db.close()?;
    served?;
    let w = db.write_stats();
    let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    tracing::info!(
        points_stored = get(&w.points_stored),
        rows_written = get(&w.rows_written),
        rows_compacted = get(&w.rows_compacted),
        flushes = get(&w.flushes),
        "stopped"
    );
    Ok(ExitCode::SUCCESS)
}

/// The listen backlog when `tsd.network.backlog` is not set (Tokio's own default).
const DEFAULT_BACKLOG: u32 = 1024;

/// A listening socket on `addr` with `backlog` pending connections at most (the kernel caps
/// it at `net.core.somaxconn`); the address is reused as OpenTSDB does.
fn listen(addr: SocketAddr, backlog: u32) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// SIGHUP reloads the credentials file (`tsd.core.authentication.users`) and the TLS
/// certificate and key.
async fn reload_on_hangup(mut hangup: tokio::signal::unix::Signal, state: std::sync::Arc<State>) {
    while hangup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading");
        state.reload();
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop with diediedie or kill");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}
