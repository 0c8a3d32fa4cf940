//! `tsdb tsd`: the server. Flags override the config file's `tsd.*` keys.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use hourglass_server::{ServerSettings, State};

use crate::open::StoreArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct TsdArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// TCP port for telnet and HTTP (`tsd.network.port`; 0 picks a free one).
    #[arg(long)]
    port: Option<u16>,
    /// Address to bind (`tsd.network.bind`).
    #[arg(long)]
    bind: Option<String>,
    /// Create metrics on first use (`tsd.core.auto_create_metrics`).
    #[arg(long)]
    auto_metric: bool,
    /// Refuse writes (`tsd.mode = ro`).
    #[arg(long)]
    read_only: bool,
    /// Accepted for compatibility; the UI is served from the binary.
    #[arg(long, hide = true)]
    staticroot: Option<String>,
    /// Accepted for compatibility; unused.
    #[arg(long, hide = true)]
    cachedir: Option<String>,
}

pub(crate) fn run(args: &TsdArgs) -> anyhow::Result<ExitCode> {
    let mut config = args.store.config()?;
    if let Some(p) = args.port {
        config.set("tsd.network.port", &p.to_string());
    }
    if let Some(b) = &args.bind {
        config.set("tsd.network.bind", b);
    }
    if args.auto_metric {
        config.set("tsd.core.auto_create_metrics", "true");
    }
    if args.read_only {
        config.set("tsd.mode", "ro");
    }
    // The same settings every tool uses (log in <data dir>/wal, 1 s flushes on Bigtable).
    let settings = args.store.settings_from(&config)?;
    let server_settings = ServerSettings::from_config(&config)?;
    let port = config.get_int("tsd.network.port", 4242)?;
    let bind = config.get_str("tsd.network.bind", "0.0.0.0").to_string();
    let addr: SocketAddr = format!("{bind}:{port}")
        .parse()
        .with_context(|| format!("bad bind address {bind}:{port}"))?;

    let db = args.store.open_tsdb(settings)?;
    db.start_background();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let state = State::new(std::sync::Arc::clone(&db), config, server_settings);
    let served: anyhow::Result<()> = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        hourglass_server::run(listener, state, shutdown_signal()).await?;
        Ok(())
    });
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
