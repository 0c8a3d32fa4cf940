use std::sync::Arc;
use std::time::{Duration, Instant};

use hourglass_core::config::Config;
use hourglass_engine::Tsdb;
use hourglass_engine::query::plan::Limits;
use tokio::sync::watch;

use crate::stats::ServerStats;

/// Server options from flags and `tsd.*` keys.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// `--read-only` / `tsd.mode = ro`: no writes accepted.
    pub read_only: bool,
    /// `tsd.core.timezone`: the zone of absolute dates given without one.
    pub timezone: hourglass_core::time::Tz,
    /// `tsd.mode = wo`: writes only; the query endpoints and the UI are not served.
    pub write_only: bool,
    /// `tsd.core.enable_api` (`--disable-api`): the `/api/*` endpoints are served.
    pub enable_api: bool,
    /// `tsd.core.enable_ui` (`--disable-ui`): the UI and OpenTSDB's older paths are served.
    pub enable_ui: bool,
    /// `tsd.http.request.cors_domains` and `cors_headers`: cross-origin requests allowed.
    pub cors: Option<Cors>,
    /// `tsd.no_diediedie = false` enables the `diediedie` command (off by default here).
    pub diediedie: bool,
    /// `tsd.network.max_line_length`: longest telnet line, in bytes (OpenTSDB: 1024).
    pub max_line_length: usize,
    /// `tsd.rpc.telnet.return_errors`: a telnet write the store fails (or throttles) is
    /// answered; off, it is silent, as OpenTSDB is (errors in the line are always answered).
    pub telnet_return_errors: bool,
    /// `tsd.http.request.max_body`: largest HTTP request body, in bytes, after decompression.
    pub max_body_bytes: usize,
    /// Per-query limits: `tsd.query.limits.data_points.default`, `…bytes.default`,
    /// `…series.default`, `…memory_points` and `tsd.query.timeout` (ms); 0 turns one off.
    pub query_limits: Limits,
    /// `tsd.query.limits.memory_points.total`: points every running sub-query may hold
    /// together (0: no limit); by default a quarter of the machine's memory at 36 bytes a
    /// point.
    pub query_memory_points: u64,
    /// `tsd.query.limits.overrides.config` (re-read every `…overrides.interval` ms):
    /// per-metric byte and point limits.
    pub(crate) limit_overrides: Option<Arc<crate::limit_overrides::LimitOverrides>>,
    /// `tsd.query.limits.bytes.allow_override`: a request's `overrideByteLimit` is honoured.
    pub allow_byte_limit_override: bool,
    /// `tsd.query.limits.data_points.allow_override`: `overrideDataPointLimit` is honoured.
    pub allow_point_limit_override: bool,
    /// `tsd.http.query.allow_delete`: queries may delete what they match.
    pub allow_delete: bool,
    /// `tsd.gnuplot.options.allowlist`: when set, the only `o=` options `/q` accepts
    /// (`;`-separated, each trimmed and URL-decoded, as OpenTSDB 2.4.1 reads it).
    pub graph_options_allowlist: Option<Vec<String>>,
    /// `tsd.query.cache.max_bytes`: memory for answers kept for identical queries (0: none
    /// kept; never over a store other TSDs write).
    pub query_cache_bytes: u64,
    /// `tsd.query.cache.max_age` (seconds): a kept answer older than this is computed again.
    pub query_cache_max_age: Duration,
    /// `tsd.query.inline`: a query naming its series over a store of this TSD's own runs on
    /// the connection's thread (one at a time per spare core) instead of being handed to a
    /// worker thread; its answer is the same either way.
    pub inline_queries: bool,
    /// `tsd.http.staticroot`: serve the web UI's files from this directory instead of the
    /// copies built into the binary (for working on the UI without rebuilding the server).
    pub static_root: Option<std::path::PathBuf>,
    /// `tsd.core.connections.limit`: open connections at most (0: no limit); a connection
    /// past it is closed at once, as OpenTSDB does.
    pub connections_limit: usize,
    /// `tsd.core.socket.timeout` (seconds; 0: none): a connection with nothing read or
    /// written for this long is closed.
    pub socket_timeout: Option<Duration>,
    /// `tsd.core.authentication.enable` with `tsd.core.authentication.users`: who may do
    /// what. `None`: everyone may do everything (OpenTSDB's default).
    pub auth: Option<Arc<crate::auth::CredentialsFile>>,
    /// `tsd.core.authentication.allow_unauthenticated`: paths served without credentials
    /// when authentication is on (`/api/version,/api/health`), compared after routing
    /// (lower case, `/api/v1/` as `/api/`, no trailing slash).
    pub open_paths: Vec<String>,
    /// `tsd.core.authentication.max_failures`: failed authentications one client address
    /// may make in a minute before its attempts are refused unchecked (0: no limit).
    pub max_auth_failures: u32,
    /// `tsd.network.tls.cert`, `.key` and `.mode`: TLS on the port.
    pub tls: Option<Arc<crate::tls::Tls>>,
    /// What the binary is, for `version` and `/api/version`.
    pub build: BuildInfo,
}

/// The binary's version, the revision it was built from and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: String,
    pub revision: String,
    /// `yyyy/MM/dd HH:mm:ss +0000`, as OpenTSDB prints it.
    pub date: String,
    /// The same moment in Unix seconds (0 when unknown), as `/api/version` gives it.
    pub timestamp: i64,
}

impl Default for BuildInfo {
    fn default() -> Self {
        BuildInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            revision: "unknown".to_string(),
            date: "unknown".to_string(),
            timestamp: 0,
        }
    }
}

impl BuildInfo {
    /// Two lines, shaped as OpenTSDB's `version`: what this is, its revision and the API it
    /// speaks; then when and for what it was built.
    pub fn text(&self) -> String {
        format!(
            "hourglass {} built at revision {} (OpenTSDB 2.4 API)\nBuilt on {} for {} {}\n",
            self.version,
            self.revision,
            self.date,
            std::env::consts::OS,
            std::env::consts::ARCH
        )
    }
}

/// What a point held by a query costs in memory, about: its time and value where it is kept,
/// and its share of the answer written from it (16 sub-queries each holding 10M raw points
/// of 100 unaligned series for a `sum` peaked at 5.7 GB, 36 bytes a point).
pub(crate) const BYTES_A_HELD_POINT: u64 = 36;

/// A quarter of the machine's memory in held points; no limit when the memory is unknown.
fn default_query_memory_points() -> u64 {
    crate::stats::mem_total_bytes() / 4 / BYTES_A_HELD_POINT
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            read_only: false,
            timezone: hourglass_core::time::Tz::UTC,
            write_only: false,
            enable_api: true,
            enable_ui: true,
            cors: None,
            diediedie: false,
            max_line_length: 1024,
            telnet_return_errors: true,
            max_body_bytes: 256 << 20,
            query_limits: Limits::default(),
            query_memory_points: default_query_memory_points(),
            limit_overrides: None,
            allow_byte_limit_override: false,
            allow_point_limit_override: false,
            allow_delete: false,
            graph_options_allowlist: None,
            query_cache_bytes: 64 << 20,
            query_cache_max_age: Duration::from_secs(300),
            inline_queries: true,
            static_root: None,
            connections_limit: 0,
            socket_timeout: None,
            auth: None,
            open_paths: Vec::new(),
            max_auth_failures: 10,
            tls: None,
            build: BuildInfo::default(),
        }
    }
}

impl ServerSettings {
    pub fn from_config(c: &Config) -> Result<Self, hourglass_core::Error> {
        let d = ServerSettings::default();
        Ok(ServerSettings {
            read_only: c.get_str("tsd.mode", "rw").eq_ignore_ascii_case("ro"),
            timezone: c.timezone()?,
            write_only: c.get_str("tsd.mode", "rw").eq_ignore_ascii_case("wo"),
            // OpenTSDB compares these two with the exact text "true".
            enable_api: c.get_str("tsd.core.enable_api", "true") == "true",
            enable_ui: c.get_str("tsd.core.enable_ui", "true") == "true",
            cors: Cors::from_config(c)?,
            diediedie: !c.get_bool("tsd.no_diediedie", true),
            max_line_length: c
                .get_int("tsd.network.max_line_length", d.max_line_length as i64)?
                .max(16) as usize,
            telnet_return_errors: c.get_bool("tsd.rpc.telnet.return_errors", true),
            max_body_bytes: c
                .get_int("tsd.http.request.max_body", d.max_body_bytes as i64)?
                .max(1024) as usize,
            query_limits: {
                let q = d.query_limits;
                let count = |key: &str, default: u64| -> Result<u64, hourglass_core::Error> {
                    Ok(c.get_int(key, default as i64)?.max(0) as u64)
                };
                let timeout_ms = count("tsd.query.timeout", 0)?;
                Limits {
                    max_points: count("tsd.query.limits.data_points.default", q.max_points)?,
                    max_bytes: count("tsd.query.limits.bytes.default", q.max_bytes)?,
                    max_series: count("tsd.query.limits.series.default", q.max_series)?,
                    max_held_points: count("tsd.query.limits.memory_points", q.max_held_points)?,
                    timeout: (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms)),
                }
            },
            query_memory_points: match c.get_str("tsd.query.limits.memory_points.total", "") {
                "" => d.query_memory_points,
                _ => c
                    .get_int("tsd.query.limits.memory_points.total", 0)?
                    .max(0) as u64,
            },
            limit_overrides: match c.get_str("tsd.query.limits.overrides.config", "") {
                "" => None,
                path => {
                    let interval = c.get_int("tsd.query.limits.overrides.interval", 60_000)?;
                    let o = crate::limit_overrides::LimitOverrides::load(
                        path.into(),
                        Duration::from_millis(interval.max(0) as u64),
                    )
                    .map_err(|e| {
                        hourglass_core::Error::InvalidInput(format!(
                            "tsd.query.limits.overrides.config: {e}"
                        ))
                    })?;
                    Some(Arc::new(o))
                }
            },
            allow_byte_limit_override: c.get_bool("tsd.query.limits.bytes.allow_override", false),
            allow_point_limit_override: c
                .get_bool("tsd.query.limits.data_points.allow_override", false),
            allow_delete: c.get_bool("tsd.http.query.allow_delete", false),
            graph_options_allowlist: Some(c.get_str("tsd.gnuplot.options.allowlist", ""))
                .filter(|list| !list.is_empty())
                .map(|list| {
                    list.split(';')
                        .map(|o| {
                            crate::http::request::decode_component(o.trim(), false)
                                .unwrap_or_else(|_| o.trim().to_string())
                        })
                        .collect()
                }),
            query_cache_bytes: c
                .get_int("tsd.query.cache.max_bytes", d.query_cache_bytes as i64)?
                .max(0) as u64,
            query_cache_max_age: Duration::from_secs(
                c.get_int(
                    "tsd.query.cache.max_age",
                    d.query_cache_max_age.as_secs() as i64,
                )?
                .max(0) as u64,
            ),
            inline_queries: c.get_bool("tsd.query.inline", d.inline_queries),
            static_root: Some(c.get_str("tsd.http.staticroot", ""))
                .filter(|d| !d.is_empty())
                .map(std::path::PathBuf::from)
                .filter(|d| {
                    // OpenTSDB's own static files (a migrated config) would replace the UI
                    // with a page that is not there: only a directory holding this UI counts.
                    let ui = d.join("index.html").is_file() && d.join("app.js").is_file();
                    if !ui {
                        tracing::warn!(dir = %d.display(), "tsd.http.staticroot holds no Hourglass web UI (index.html, app.js): serving the built-in one");
                    }
                    ui
                }),
            connections_limit: c.get_int("tsd.core.connections.limit", 0)?.max(0) as usize,
            socket_timeout: Some(c.get_int("tsd.core.socket.timeout", 0)?)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(s as u64)),
            auth: authenticator(c)?,
            open_paths: c
                .get_str("tsd.core.authentication.allow_unauthenticated", "")
                .split(',')
                .map(|p| p.trim().trim_end_matches('/').to_ascii_lowercase())
                .filter(|p| !p.is_empty())
                .collect(),
            max_auth_failures: c
                .get_int(
                    "tsd.core.authentication.max_failures",
                    i64::from(d.max_auth_failures),
                )?
                .clamp(0, i64::from(u32::MAX)) as u32,
            tls: crate::tls::Tls::from_config(c)
                .map_err(|e| hourglass_core::Error::InvalidInput(e.to_string()))?
                .map(Arc::new),
            build: BuildInfo::default(),
        })
    }
}

/// The credentials file when `tsd.core.authentication.enable` is on; its absence, or a file
/// that cannot be read or parsed, refuses the start.
fn authenticator(
    c: &Config,
) -> Result<Option<Arc<crate::auth::CredentialsFile>>, hourglass_core::Error> {
    if !c.get_bool("tsd.core.authentication.enable", false) {
        return Ok(None);
    }
    let path = c.get_str("tsd.core.authentication.users", "").trim();
    if path.is_empty() {
        return Err(hourglass_core::Error::InvalidInput(
            "tsd.core.authentication.enable = true but tsd.core.authentication.users is not set: \
             name a credentials file (tsdb auth add-user --file FILE ... creates one)"
                .into(),
        ));
    }
    let auth = crate::auth::CredentialsFile::load(std::path::Path::new(path))
        .map_err(|e| hourglass_core::Error::InvalidInput(e.to_string()))?;
    if auth.current().is_empty() {
        tracing::warn!(
            path,
            "the credentials file names nobody: every request will be refused"
        );
    }
    Ok(Some(Arc::new(auth)))
}

/// Cross-origin requests, as OpenTSDB allows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cors {
    /// Allowed origins, upper-cased; `None`: any (`*`).
    pub domains: Option<Vec<String>>,
    /// `Access-Control-Allow-Headers`.
    pub headers: String,
}

/// OpenTSDB's default `tsd.http.request.cors_headers`.
pub(crate) const DEFAULT_CORS_HEADERS: &str = "Authorization, Content-Type, Accept, Origin, User-Agent, DNT, Cache-Control, X-Mx-ReqToken, Keep-Alive, X-Requested-With, If-Modified-Since";

impl Cors {
    /// `None` when `tsd.http.request.cors_domains` is empty (CORS off). Refuses `*` mixed
    /// with named domains, and header lists that are not plain header names, in OpenTSDB's
    /// words.
    pub fn from_config(c: &Config) -> Result<Option<Cors>, hourglass_core::Error> {
        let domains = c.get_str("tsd.http.request.cors_domains", "");
        if domains.trim().is_empty() {
            return Ok(None);
        }
        let list: Vec<String> = domains
            .split(',')
            .map(|d| d.trim().to_ascii_uppercase())
            .collect();
        let any = list.iter().any(|d| d == "*");
        if any && list.len() > 1 {
            return Err(hourglass_core::Error::InvalidInput(
                "tsd.http.request.cors_domains must be a public resource (*) or a list of specific domains, you cannot mix both.".into(),
            ));
        }
        let headers = c
            .get_str("tsd.http.request.cors_headers", DEFAULT_CORS_HEADERS)
            .trim()
            .to_string();
        let name_ok = |h: &str| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        };
        if !headers.split(',').map(str::trim).all(name_ok) {
            return Err(hourglass_core::Error::InvalidInput(
                "tsd.http.request.cors_headers must be a list of validly-formed HTTP header names. No wildcards are allowed.".into(),
            ));
        }
        Ok(Some(Cors {
            domains: (!any).then_some(list),
            headers,
        }))
    }

    /// Whether `origin` may make requests.
    pub fn allows(&self, origin: &str) -> bool {
        self.domains
            .as_ref()
            .is_none_or(|d| d.iter().any(|d| d.eq_ignore_ascii_case(origin)))
    }
}

/// What every connection shares.
#[derive(Debug)]
pub struct State {
    pub tsdb: Arc<Tsdb>,
    pub config: Config,
    pub settings: ServerSettings,
    pub(crate) stats: ServerStats,
    /// Failed authentications per client address.
    pub(crate) auth_throttle: crate::auth::throttle::Throttle,
    pub(crate) started: Instant,
    shutdown: watch::Sender<bool>,
    /// Woken when buffered points are back under their budget (held-back telnet
    /// connections wait on it instead of each polling).
    pub(crate) room: tokio::sync::Notify,
    /// Connections held back now, waiting for room (the room announcer polls only then).
    pub(crate) held_back: std::sync::atomic::AtomicUsize,
    /// Given a permit when a connection begins to be held back.
    pub(crate) held_back_changed: tokio::sync::Notify,
    /// Answers kept for identical queries, when on and this TSD alone writes its store.
    pub(crate) query_cache: Option<crate::query_cache::QueryCache>,
    /// Queries running on connection threads now (see [`ServerSettings::inline_queries`]).
    pub(crate) inline_running: std::sync::atomic::AtomicUsize,
    /// HTTP write bodies parsed and stored at once: one per core, at least two. Parsed
    /// points take many times their body's bytes, so the rest wait their turn.
    pub(crate) put_jobs: Arc<tokio::sync::Semaphore>,
    /// The bytes request bodies held at once may take ([`crate::http::body`]).
    pub(crate) body_budget: crate::http::body::BodyBudget,
    /// `/api/version`'s answer, written once (nothing in it changes while the TSD runs).
    pub(crate) version_answer: std::sync::OnceLock<axum::body::Bytes>,
}

impl State {
    /// Bytes of the request body budget not held by a body now.
    pub fn body_bytes_free(&self) -> usize {
        self.body_budget.available_bytes()
    }

    pub fn new(tsdb: Arc<Tsdb>, config: Config, settings: ServerSettings) -> Arc<State> {
        let (shutdown, _) = watch::channel(false);
        let max_auth_failures = settings.max_auth_failures;
        let body_budget = crate::http::body::BodyBudget::new(settings.max_body_bytes);
        tsdb.query_memory().set_limit(settings.query_memory_points);
        let query_cache = (settings.query_cache_bytes > 0 && tsdb.changes().is_some()).then(|| {
            crate::query_cache::QueryCache::new(
                settings.query_cache_bytes,
                settings.query_cache_max_age,
            )
        });
        Arc::new(State {
            tsdb,
            config,
            settings,
            stats: ServerStats::default(),
            auth_throttle: crate::auth::throttle::Throttle::new(max_auth_failures),
            started: Instant::now(),
            shutdown,
            room: tokio::sync::Notify::new(),
            held_back: std::sync::atomic::AtomicUsize::new(0),
            held_back_changed: tokio::sync::Notify::new(),
            query_cache,
            inline_running: std::sync::atomic::AtomicUsize::new(0),
            body_budget,
            version_answer: std::sync::OnceLock::new(),
            put_jobs: Arc::new(tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, |n| n.get().max(2)),
            )),
        })
    }

    pub(crate) fn subscribe_shutdown(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Whether the server has begun to stop.
    pub(crate) fn stopping(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Reads the credentials file and the TLS certificate and key again (SIGHUP). A file
    /// that cannot be used leaves what is in force, and the log says why.
    pub fn reload(&self) {
        if let Some(tls) = &self.settings.tls {
            match tls.reload() {
                Ok(()) => tracing::info!("TLS certificate and key reloaded"),
                Err(e) => tracing::error!(
                    error = %e,
                    "TLS certificate and key not reloaded: the previous ones stay in force"
                ),
            }
        }
        let Some(file) = &self.settings.auth else {
            return;
        };
        match file.reload() {
            Ok(count) => {
                tracing::info!(path = %file.path().display(), count, "credentials reloaded")
            }
            Err(e) => tracing::error!(
                error = %e,
                "credentials not reloaded: the previous ones stay in force"
            ),
        }
    }

    /// Asks the server to stop (as `diediedie` does).
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }
}
