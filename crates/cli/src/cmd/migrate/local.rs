//! The local store as a migration's target: the data dir (or Bigtable) opened as every
//! `tsdb` tool opens it, and served for the run by the TSD's own HTTP API on a private
//! loopback port. Points, annotations and meta then take the TSD's write path (the
//! write-ahead log, `?sync`, the tag index), and the final verification asks the same
//! queries of both sides.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use hourglass_server::{ServerSettings, State};

use crate::open::StoreArgs;

/// The local store, served.
#[derive(Debug)]
pub(crate) struct Local {
    pub(crate) base: String,
    db: crate::open::Db,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl Local {
    pub(crate) fn start(store: &StoreArgs) -> anyhow::Result<Local> {
        let mut config = store.config()?;
        // The run writes what the source has: metrics are created; nobody else reaches the
        // port, so it needs neither credentials nor TLS.
        config.set("tsd.core.auto_create_metrics", "true");
        config.set("tsd.core.authentication.enable", "false");
        config.set("tsd.network.tls.cert", "");
        config.set("tsd.network.tls.key", "");
        config.set("tsd.mode", "rw");
        config.set("tsd.core.enable_api", "true");
        let settings = store.settings_from(&config)?;
        let server_settings = ServerSettings::from_config(&config)?;
        let db = store.open_tsdb(settings)?;
        db.start_background();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("migrate-target")
            .enable_all()
            .build()?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(SocketAddr::from((
                [127, 0, 0, 1],
                0,
            ))))
            .context("cannot listen on a loopback port for the local store")?;
        let addr = listener.local_addr()?;
        let state = State::new(Arc::clone(&db), config, server_settings);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("migrate-target".into())
            .spawn(move || {
                let served = runtime.block_on(hourglass_server::run(listener, state, async {
                    let _ = stopped.await;
                }));
                runtime.shutdown_timeout(std::time::Duration::from_secs(5));
                served
            })?;
        Ok(Local {
            base: format!("http://{addr}"),
            db,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops serving, flushes and closes the store.
    pub(crate) fn finish(mut self) -> anyhow::Result<()> {
        self.shutdown()?;
        self.db.close()?;
        Ok(())
    }

    fn shutdown(&mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            match thread.join() {
                Ok(served) => served.context("serving the local store failed")?,
                Err(_) => anyhow::bail!("serving the local store panicked"),
            }
        }
        Ok(())
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        if self.stop.is_some() {
            let _ = self.shutdown();
            let _ = self.db.close();
        }
    }
}
