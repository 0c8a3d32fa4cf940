#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
//! A real server on port 0 and raw-socket clients for it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hourglass_core::config::Config;
use hourglass_core::uid::UidKind;
use hourglass_core::value::Value;
use hourglass_engine::scan::{RowQuery, scan_rows};
use hourglass_engine::{Settings, Tsdb};
use hourglass_server::{ServerSettings, State};
use hourglass_storage::Store;
use hourglass_storage::memory::MemoryStore;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A stored point: time in ms, value, sorted tag pairs.
pub(crate) type StoredPoint = (i64, Value, Vec<(String, String)>);

pub(crate) struct TestServer {
    pub(crate) addr: SocketAddr,
    pub(crate) state: Arc<State>,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<std::io::Result<()>>>,
}

/// A fresh store of the named backend: `memory`, `embedded` or `bigtable` (emulator).
pub(crate) fn store_for(backend: &str) -> Arc<dyn Store> {
    match backend {
        // Data-table scans in period order (series by series within a UTC day), the
        // weakest order a store may return (RFC 0006); the other backends give key order.
        "memory" => {
            let schema = hourglass_core::schema::Schema::default();
            Arc::new(MemoryStore::new().with_period_order(
                &schema.data_table,
                schema.timestamp_offset(),
                86_400,
            ))
        }
        "embedded" => {
            let dir = tempfile::tempdir().unwrap().keep();
            // As `tsdb` opens it: compacted data cells in the compact stored form.
            // Closed periods grouped, one-hour periods at once, so the tests go through
            // groups (RFC 0006).
            let schema = hourglass_core::schema::Schema::default();
            Arc::new(
                hourglass_store_fjall::FjallStore::open(&dir)
                    .unwrap()
                    .with_cell_codec(
                        &schema.data_table,
                        Arc::new(hourglass_engine::cell_codec::DataCellCodec),
                    )
                    .with_grouping(
                        &schema.data_table,
                        hourglass_store_fjall::Grouping {
                            timestamp_offset: schema.timestamp_offset(),
                            period_secs: 3600,
                            grace_secs: 0,
                        },
                    )
                    // The rollup tiers' rows grouped too (RFC 0012), by 4 and 1 days.
                    .with_grouping(
                        "tsdb-rollup-1h",
                        hourglass_store_fjall::Grouping {
                            timestamp_offset: schema.timestamp_offset(),
                            period_secs: 4 * 86_400,
                            grace_secs: 0,
                        },
                    )
                    .with_grouping(
                        "tsdb-rollup-10m",
                        hourglass_store_fjall::Grouping {
                            timestamp_offset: schema.timestamp_offset(),
                            period_secs: 86_400,
                            grace_secs: 0,
                        },
                    ),
            )
        }
        "bigtable" => Arc::new(hourglass_store_bigtable::emulator::fresh_store()),
        other => panic!("unknown backend {other}"),
    }
}

pub(crate) async fn start_with(backend: &str, config: Config) -> TestServer {
    start_on(store_for(backend), config).await
}

pub(crate) async fn start_on(store: Arc<dyn Store>, config: Config) -> TestServer {
    start_adjusted(store, config, |_| {}).await
}

/// [`start_on`] with the settings adjusted before the database opens (a clock set by hand).
pub(crate) async fn start_adjusted(
    store: Arc<dyn Store>,
    config: Config,
    adjust: impl FnOnce(&mut Settings),
) -> TestServer {
    let mut settings = Settings::from_config(&config).unwrap();
    adjust(&mut settings);
    let tsdb = Tsdb::open(store, settings).unwrap();
    let state = State::new(
        tsdb,
        config.clone(),
        ServerSettings::from_config(&config).unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let handle = tokio::spawn(hourglass_server::run(listener, Arc::clone(&state), async {
        let _ = rx.await;
    }));
    TestServer {
        addr,
        state,
        stop: Some(tx),
        handle: Some(handle),
    }
}

/// A server with `tsd.core.auto_create_metrics = true` on the named backend.
pub(crate) async fn start(backend: &str) -> TestServer {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    start_with(backend, c).await
}

impl TestServer {
    pub(crate) async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            h.await.unwrap().unwrap();
        }
    }

    /// Stored points of `metric` as (ms, value, sorted tags), after flushing the buffers.
    pub(crate) fn points(&self, metric: &str) -> Vec<StoredPoint> {
        let db = &self.state.tsdb;
        db.flush().unwrap();
        let Ok(uid) = db.uids().get_id(UidKind::Metric, metric) else {
            return Vec::new();
        };
        let schema = &db.settings().schema;
        let query = RowQuery {
            metric: uid,
            start_secs: 0,
            end_secs: i64::from(u32::MAX) - 3600,
            tags: vec![],
        };
        let mut out = Vec::new();
        for row in scan_rows(db.store().as_ref(), schema, &query).unwrap() {
            let key = hourglass_core::rowkey::decode_row_key(schema, &row.key).unwrap();
            let mut tags: Vec<(String, String)> = key
                .series
                .tags
                .iter()
                .map(|(k, v)| {
                    (
                        db.uids().get_name(UidKind::TagKey, *k).unwrap(),
                        db.uids().get_name(UidKind::TagValue, *v).unwrap(),
                    )
                })
                .collect();
            tags.sort();
            for p in hourglass_engine::rows::decode_row(Some(&row), &[])
                .unwrap()
                .points
            {
                out.push((
                    p.qualifier.timestamp_ms(key.base_time),
                    p.value(),
                    tags.clone(),
                ));
            }
        }
        out.sort_by(|a, b| (a.0, &a.2).cmp(&(b.0, &b.2)));
        out
    }
}

/// OpenTSDB's query fixture over telnet: 1..300 (web01) and 300..1 (web02) every 30 s from
/// 1356998430, metric `sys.cpu.user`.
pub(crate) async fn load_fixture(srv: &TestServer) {
    let mut lines = String::new();
    for i in 0..300 {
        let t = 1356998430 + i * 30;
        lines.push_str(&format!("put sys.cpu.user {t} {} host=web01\n", i + 1));
        lines.push_str(&format!("put sys.cpu.user {t} {} host=web02\n", 300 - i));
    }
    assert_eq!(telnet(srv.addr, &lines).await, Vec::<String>::new());
}

/// Sends telnet lines, then `version` as a fence, and returns every reply line before the
/// version text.
pub(crate) async fn telnet(addr: SocketAddr, text: &str) -> Vec<String> {
    fenced(TcpStream::connect(addr).await.unwrap(), text).await
}

/// [`telnet`] over a connection already open (a TLS stream, say).
pub(crate) async fn fenced<S>(mut s: S, text: &str) -> Vec<String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    s.write_all(text.as_bytes()).await.unwrap();
    s.write_all(b"version\n").await.unwrap();
    let mut reader = BufReader::new(s);
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(10), reader.read_line(&mut line))
            .await
            .unwrap()
            .unwrap();
        assert!(
            n > 0,
            "connection closed before the version fence; got {lines:?}"
        );
        if line.starts_with("hourglass ") {
            let mut second = String::new();
            reader.read_line(&mut second).await.unwrap();
            return lines;
        }
        lines.push(line.trim_end_matches('\n').to_string());
    }
}

/// A parsed HTTP response.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Response {
    /// A header's value (names are lower-cased).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// An HTTP/1.1 connection that can carry several requests (keep-alive).
pub(crate) struct HttpConn {
    reader: BufReader<TcpStream>,
}

impl HttpConn {
    pub(crate) async fn open(addr: SocketAddr) -> Self {
        HttpConn {
            reader: BufReader::new(TcpStream::connect(addr).await.unwrap()),
        }
    }

    /// Writes bytes without reading an answer (a request sent in pieces).
    pub(crate) async fn write(&mut self, bytes: &[u8]) {
        self.reader.get_mut().write_all(bytes).await.unwrap();
    }

    /// The next answer, or `None` when none comes within `within`.
    pub(crate) async fn response_within(&mut self, within: Duration) -> Option<Response> {
        tokio::time::timeout(within, self.reader.fill_buf())
            .await
            .ok()
            .map(|read| assert!(!read.unwrap().is_empty(), "connection closed"))?;
        Some(self.read_response().await)
    }

    pub(crate) async fn send_raw(&mut self, head: &str, body: &[u8]) -> Response {
        self.reader
            .get_mut()
            .write_all(head.as_bytes())
            .await
            .unwrap();
        self.reader.get_mut().write_all(body).await.unwrap();
        self.read_response().await
    }

    pub(crate) async fn request(
        &mut self,
        method: &str,
        path: &str,
        extra_headers: &str,
        body: &[u8],
    ) -> Response {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n{extra_headers}\r\n",
            body.len()
        );
        self.send_raw(&head, body).await
    }

    async fn read_response(&mut self) -> Response {
        let mut status_line = String::new();
        tokio::time::timeout(
            Duration::from_secs(10),
            self.reader.read_line(&mut status_line),
        )
        .await
        .unwrap()
        .unwrap();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .unwrap_or_else(|| panic!("bad status line {status_line:?}"))
            .parse()
            .unwrap();
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).await.unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(':').unwrap();
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                self.reader.read_line(&mut size).await.unwrap();
                let size = usize::from_str_radix(size.trim(), 16).unwrap();
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk).await.unwrap();
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else {
            let len: usize = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .map_or(0, |(_, v)| v.parse().unwrap());
            body = vec![0; len];
            self.reader.read_exact(&mut body).await.unwrap();
        }
        Response {
            status,
            headers,
            body,
        }
    }
}

pub(crate) async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Response {
    HttpConn::open(addr)
        .await
        .request(method, path, "", body.as_bytes())
        .await
}

/// Runs each named `async fn name(backend: &str)` of the calling file once per backend
/// (memory, embedded, Bigtable on the emulator), as `memory::name` and so on.
#[macro_export]
macro_rules! on_every_backend {
    ($($test:ident),* $(,)?) => {
        $crate::on_every_backend!(@backend memory; $($test),*);
        $crate::on_every_backend!(@backend embedded; $($test),*);
        $crate::on_every_backend!(@backend bigtable; $($test),*);
    };
    (@backend $backend:ident; $($test:ident),*) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(stringify!($backend)).await;
                }
            )*
        }
    };
}

/// Runs each named `async fn name(backend: &str)` on the memory, embedded and Bigtable
/// (emulator) backends.
#[allow(unused_macros)]
macro_rules! on_backends {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test("memory").await;
                }
            )*
        }
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test("embedded").await;
                }
            )*
        }
        mod bigtable {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test("bigtable").await;
                }
            )*
        }
    };
}
