//! The Cloud Bigtable backend: [`Store`] over Bigtable's data API (`bigtable_rs`) and table
//! admin API, for many TSDs sharing one instance. Works against Google's emulator
//! (`cbtemulator`) when an emulator host is given or `BIGTABLE_EMULATOR_HOST` is set.
//!
//! Mapping: cell timestamps are milliseconds here and microseconds in Bigtable (x1000; a cell
//! written without a timestamp gets the server's time). Row-key regexes go to the server as
//! RE2 (full match; the patterns already write bytes as `\xHH`). Bigtable collects old
//! versions lazily, so reads trim versions to each family's limit on the client.
//! Check-and-mutate is a column-range + value-range predicate; increments are
//! ReadModifyWrite on 8-byte big-endian counters.
//!
//! The trait is synchronous: calls run on this store's own Tokio runtime, and a caller on a
//! multi-threaded Tokio runtime blocks in place.

mod convert;
#[cfg(feature = "emulator")]
pub mod emulator;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bigtable_rs::bigtable::{BigTable, BigTableConnection};
use bigtable_rs::google::bigtable::v2 as data;
use googleapis_tonic_google_bigtable_admin_v2::google::bigtable::admin::v2 as admin;
use hourglass_storage::{
    Check, Error, FamilySpec, Mutation, ReadOptions, Result, Row, RowIter, RowMutation,
    ScanRequest, Store, TableSpec,
};
use parking_lot::RwLock;

use convert::{status_error, to_mutations, to_read_filter, to_row};

type AdminClient =
    admin::bigtable_table_admin_client::BigtableTableAdminClient<tonic::transport::Channel>;

/// Where the instance is.
#[derive(Debug, Clone)]
pub struct BigtableConfig {
    pub project: String,
    pub instance: String,
    /// `host:port` of an emulator; `None` reads `BIGTABLE_EMULATOR_HOST`, else real Bigtable.
    pub emulator_host: Option<String>,
    /// Per-call timeout.
    pub timeout: Duration,
}

impl BigtableConfig {
    pub fn new(project: &str, instance: &str) -> Self {
        BigtableConfig {
            project: project.to_string(),
            instance: instance.to_string(),
            emulator_host: None,
            timeout: Duration::from_secs(30),
        }
    }
}

pub struct BigtableStore {
    config: BigtableConfig,
    /// Always `Some` until drop, which shuts it down without blocking (drop may happen on
    /// another runtime's worker).
    runtime: Option<tokio::runtime::Runtime>,
    data: BigTable,
    admin: AdminClient,
    /// Real Bigtable: admin calls carry an OAuth token (application default credentials).
    admin_auth: bool,
    /// Families of each known table (and their version limits).
    tables: RwLock<HashMap<String, Arc<TableSpec>>>,
}

impl std::fmt::Debug for BigtableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BigtableStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

const RETRIES: usize = 4;
const ADMIN_SCOPE: &str = "https://www.googleapis.com/auth/bigtable.admin.table";

impl BigtableStore {
    /// Connects (lazily: an unreachable instance shows up as `Unavailable` errors on use).
    pub fn connect(config: BigtableConfig) -> Result<BigtableStore> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("bigtable")
            .enable_all()
            .build()
            .map_err(|e| Error::Internal(format!("cannot start the bigtable runtime: {e}")))?;
        let emulator = config
            .emulator_host
            .clone()
            .or_else(|| std::env::var("BIGTABLE_EMULATOR_HOST").ok());
        let (config_for_setup, emulator_for_setup) = (config.clone(), emulator.clone());
        let setup = async move {
            let (config, emulator) = (config_for_setup, emulator_for_setup);
            let connection = match &emulator {
                Some(host) => BigTableConnection::new_with_emulator(
                    host,
                    &config.project,
                    &config.instance,
                    false,
                    2,
                    Some(config.timeout),
                ),
                None => {
                    BigTableConnection::new(
                        &config.project,
                        &config.instance,
                        false,
                        2,
                        Some(config.timeout),
                    )
                    .await
                }
            }
            .map_err(|e| Error::Unavailable(format!("cannot connect to bigtable: {e}")))?;
            let endpoint = match &emulator {
                Some(host) => format!("http://{host}"),
                None => "https://bigtableadmin.googleapis.com".to_string(),
            };
            let mut endpoint = tonic::transport::Channel::from_shared(endpoint)
                .map_err(|e| Error::InvalidRequest(format!("bad bigtable endpoint: {e}")))?
                .timeout(config.timeout);
            if emulator.is_none() {
                endpoint = endpoint
                    .tls_config(tonic::transport::ClientTlsConfig::new().with_webpki_roots())
                    .map_err(|e| Error::Internal(format!("bigtable admin TLS: {e}")))?;
            }
            let channel = endpoint.connect_lazy();
            let mut data = connection.client();
            // Cells may hold up to 100 MiB in Bigtable; tonic's default limit is 4 MiB.
            data.configure_inner_client(|c| {
                c.max_decoding_message_size(256 << 20)
                    .max_encoding_message_size(256 << 20)
            });
            Ok::<_, Error>((data, AdminClient::new(channel)))
        };
        // Not `block_on`: the caller may itself be on a Tokio runtime.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(setup.await);
        });
        let (data, admin) = wait(|| rx.recv())
            .map_err(|_| Error::Internal("bigtable setup was abandoned".into()))??;
        Ok(BigtableStore {
            admin_auth: emulator.is_none(),
            config,
            runtime: Some(runtime),
            data,
            admin,
            tables: RwLock::new(HashMap::new()),
        })
    }

    fn handle(&self) -> Result<&tokio::runtime::Handle> {
        self.runtime
            .as_ref()
            .map(|r| r.handle())
            .ok_or_else(|| Error::Internal("bigtable store is closed".into()))
    }

    /// An admin request with routing metadata and, on real Bigtable, a bearer token.
    fn admin_request<T: Send + 'static>(
        &self,
        message: T,
        routing: String,
    ) -> Result<tonic::Request<T>> {
        let token = if self.admin_auth {
            let fetched = self.run(async {
                let provider = gcp_auth::provider().await?;
                provider.token(&[ADMIN_SCOPE]).await
            })?;
            Some(fetched.map_err(|e| {
                Error::Unavailable(format!("no credentials for bigtable admin: {e}"))
            })?)
        } else {
            None
        };
        let mut request = tonic::Request::new(message);
        let meta = request.metadata_mut();
        if let Ok(v) = routing.parse() {
            meta.insert("x-goog-request-params", v);
        }
        if let Some(t) = token
            && let Ok(v) = format!("Bearer {}", t.as_str()).parse()
        {
            meta.insert("authorization", v);
        }
        Ok(request)
    }

    fn instance_name(&self) -> String {
        format!(
            "projects/{}/instances/{}",
            self.config.project, self.config.instance
        )
    }

    fn table_name(&self, table: &str) -> String {
        format!("{}/tables/{table}", self.instance_name())
    }

    /// Runs a future on this store's runtime and waits for it, from any thread.
    fn run<T: Send + 'static>(&self, fut: impl Future<Output = T> + Send + 'static) -> Result<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle()?.spawn(async move {
            let _ = tx.send(fut.await);
        });
        wait(|| rx.recv()).map_err(|_| Error::Internal("bigtable call was abandoned".into()))
    }

    /// The table's families, from cache or the admin API.
    fn spec(&self, table: &str) -> Result<Arc<TableSpec>> {
        if let Some(spec) = self.tables.read().get(table) {
            return Ok(Arc::clone(spec));
        }
        let mut admin = self.admin.clone();
        let name = self.table_name(table);
        let request = self.admin_request(
            admin::GetTableRequest {
                name: name.clone(),
                view: 0,
            },
            format!("name={name}"),
        )?;
        let got = self.run(async move { admin.get_table(request).await })?;
        match got {
            Ok(resp) => {
                let spec = Arc::new(spec_of(table, &resp.into_inner()));
                self.tables
                    .write()
                    .insert(table.to_string(), Arc::clone(&spec));
                Ok(spec)
            }
            Err(s) if s.code() == tonic::Code::NotFound => {
                Err(Error::TableNotFound(table.to_string()))
            }
            Err(s) => Err(status_error(&s)),
        }
    }

    fn check_families<'a>(
        &self,
        spec: &TableSpec,
        families: impl Iterator<Item = &'a str>,
    ) -> Result<()> {
        for f in families {
            if !spec.families.iter().any(|have| have.name == f) {
                return Err(Error::FamilyNotFound {
                    table: spec.name.clone(),
                    family: f.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Runs an idempotent call, retrying transient failures with backoff.
    fn with_retries<T: Send + 'static, F, Fut>(&self, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let mut delay = Duration::from_millis(50);
        for attempt in 0..RETRIES {
            match self.run(call()).and_then(|r| r) {
                Err(Error::Unavailable(msg)) if attempt + 1 < RETRIES => {
                    tracing::warn!(%msg, attempt, "bigtable call failed; retrying");
                    std::thread::sleep(delay);
                    delay *= 4;
                }
                other => return other,
            }
        }
        Err(Error::Unavailable("bigtable retries exhausted".into()))
    }
}

impl Drop for BigtableStore {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Blocks on `f`, stepping out of a multi-threaded Tokio runtime's scheduler first if called
/// from one of its workers.
fn wait<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

fn spec_of(table: &str, t: &admin::Table) -> TableSpec {
    let mut families: Vec<FamilySpec> = t
        .column_families
        .iter()
        .map(|(name, cf)| {
            let max = cf.gc_rule.as_ref().and_then(|r| match r.rule {
                Some(admin::gc_rule::Rule::MaxNumVersions(n)) if n > 0 => Some(n as u32),
                _ => None,
            });
            FamilySpec::new(name, max)
        })
        .collect();
    families.sort_by(|a, b| a.name.cmp(&b.name));
    TableSpec {
        name: table.to_string(),
        families,
    }
}

fn column_family(f: &FamilySpec) -> admin::ColumnFamily {
    admin::ColumnFamily {
        gc_rule: f.max_versions.map(|n| admin::GcRule {
            rule: Some(admin::gc_rule::Rule::MaxNumVersions(n as i32)),
        }),
        value_type: None,
    }
}

impl Store for BigtableStore {
    fn backend(&self) -> &'static str {
        "bigtable"
    }

    fn create_table(&self, spec: &TableSpec) -> Result<()> {
        self.tables.write().remove(&spec.name);
        let existing = match self.spec(&spec.name) {
            Ok(s) => Some(s),
            Err(Error::TableNotFound(_)) => None,
            Err(e) => return Err(e),
        };
        let mut admin = self.admin.clone();
        match existing {
            None => {
                let request = admin::CreateTableRequest {
                    parent: self.instance_name(),
                    table_id: spec.name.clone(),
                    table: Some(admin::Table {
                        column_families: spec
                            .families
                            .iter()
                            .map(|f| (f.name.clone(), column_family(f)))
                            .collect(),
                        ..Default::default()
                    }),
                    initial_splits: Vec::new(),
                };
                let request =
                    self.admin_request(request, format!("parent={}", self.instance_name()))?;
                let created = self.run(async move { admin.create_table(request).await })?;
                match created {
                    Ok(_) => {}
                    // Another TSD created it first: add what is missing below.
                    Err(s) if s.code() == tonic::Code::AlreadyExists => {
                        return self.create_table(spec);
                    }
                    Err(s) => return Err(status_error(&s)),
                }
            }
            Some(have) => {
                let missing: Vec<admin::modify_column_families_request::Modification> = spec
                    .families
                    .iter()
                    .filter(|f| !have.families.iter().any(|h| h.name == f.name))
                    .map(|f| admin::modify_column_families_request::Modification {
                        id: f.name.clone(),
                        update_mask: None,
                        r#mod: Some(
                            admin::modify_column_families_request::modification::Mod::Create(
                                column_family(f),
                            ),
                        ),
                    })
                    .collect();
                if !missing.is_empty() {
                    let request = admin::ModifyColumnFamiliesRequest {
                        name: self.table_name(&spec.name),
                        modifications: missing,
                        ignore_warnings: true,
                    };
                    let request = self
                        .admin_request(request, format!("name={}", self.table_name(&spec.name)))?;
                    self.run(async move { admin.modify_column_families(request).await })?
                        .map_err(|s| status_error(&s))?;
                }
            }
        }
        self.tables.write().remove(&spec.name);
        self.spec(&spec.name).map(|_| ())
    }

    fn table_exists(&self, table: &str) -> Result<bool> {
        match self.spec(table) {
            Ok(_) => Ok(true),
            Err(Error::TableNotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn get(&self, table: &str, key: &[u8], read: &ReadOptions) -> Result<Option<Row>> {
        let request = ScanRequest {
            start: key.to_vec(),
            end: None,
            key_regex: None,
            read: read.clone(),
            limit: Some(1),
            skip: None,
            series_filter: false,
        };
        let spec = self.spec(table)?;
        let mut req = self.read_request(table, &request)?;
        req.rows = Some(data::RowSet {
            row_keys: vec![key.to_vec()],
            row_ranges: Vec::new(),
        });
        let rows = self.read_all(req)?;
        Ok(rows
            .into_iter()
            .next()
            .and_then(|(k, cells)| to_row(&spec, read, k, cells)))
    }

    fn get_rows(
        &self,
        table: &str,
        keys: &[Vec<u8>],
        read: &ReadOptions,
    ) -> Result<Vec<Option<Row>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let spec = self.spec(table)?;
        let mut req = self.read_request(
            table,
            &ScanRequest {
                read: read.clone(),
                ..Default::default()
            },
        )?;
        req.rows = Some(data::RowSet {
            row_keys: keys.to_vec(),
            row_ranges: Vec::new(),
        });
        let mut found: HashMap<Vec<u8>, Row> = HashMap::new();
        for (k, cells) in self.read_all(req)? {
            if let Some(row) = to_row(&spec, read, k.clone(), cells) {
                found.insert(k, row);
            }
        }
        Ok(keys.iter().map(|k| found.get(k).cloned()).collect())
    }

    fn mutate_row(&self, table: &str, key: &[u8], mutations: &[Mutation]) -> Result<()> {
        let spec = self.spec(table)?;
        self.check_families(&spec, mutations.iter().filter_map(Mutation::family))?;
        let request = data::MutateRowRequest {
            table_name: self.table_name(table),
            row_key: key.to_vec(),
            mutations: to_mutations(mutations),
            ..Default::default()
        };
        let client = self.data.clone();
        self.with_retries(move || {
            let mut client = client.clone();
            let request = request.clone();
            async move {
                client
                    .mutate_row(request)
                    .await
                    .map(|_| ())
                    .map_err(convert::client_error)
            }
        })
    }

    fn mutate_rows(&self, table: &str, rows: &[RowMutation]) -> Result<()> {
        let spec = self.spec(table)?;
        self.check_families(
            &spec,
            rows.iter()
                .flat_map(|r| r.mutations.iter().filter_map(Mutation::family)),
        )?;
        for chunk in rows.chunks(1000) {
            let mut pending: Vec<data::mutate_rows_request::Entry> = chunk
                .iter()
                .map(|r| data::mutate_rows_request::Entry {
                    row_key: r.key.clone(),
                    mutations: to_mutations(&r.mutations),
                    idempotency: None,
                })
                .collect();
            let mut delay = Duration::from_millis(50);
            for attempt in 0..RETRIES {
                let request = data::MutateRowsRequest {
                    table_name: self.table_name(table),
                    entries: pending.clone(),
                    ..Default::default()
                };
                let mut client = self.data.clone();
                let failed = self.run(async move {
                    use futures_util::StreamExt;
                    let mut stream = client
                        .mutate_rows(request)
                        .await
                        .map_err(convert::client_error)?;
                    let mut failed: Vec<(usize, tonic::Code, String)> = Vec::new();
                    while let Some(resp) = stream.next().await {
                        let resp = resp.map_err(|s| status_error(&s))?;
                        for e in resp.entries {
                            if let Some(st) = e.status.filter(|st| st.code != 0) {
                                failed.push((
                                    e.index as usize,
                                    tonic::Code::from_i32(st.code),
                                    st.message,
                                ));
                            }
                        }
                    }
                    Ok::<_, Error>(failed)
                })??;
                if failed.is_empty() {
                    break;
                }
                let transient = failed.iter().all(|(_, c, _)| convert::is_transient(*c));
                if !transient || attempt + 1 == RETRIES {
                    let (_, code, msg) = &failed[0];
                    return Err(status_error(&tonic::Status::new(*code, msg.clone())));
                }
                pending = failed
                    .iter()
                    .filter_map(|(i, _, _)| pending.get(*i).cloned())
                    .collect();
                std::thread::sleep(delay);
                delay *= 4;
            }
        }
        Ok(())
    }

    fn scan(&self, table: &str, request: &ScanRequest) -> Result<RowIter> {
        let spec = self.spec(table)?;
        let req = self.read_request(table, request)?;
        // The stream's task waits for room without holding a runtime thread, which the
        // reader may need meanwhile (a lookup between two rows of a full stream: with a
        // blocking send, two full scans took both threads and every call waited forever).
        // The reader takes rows on its own thread, from any context, and says when it took
        // one.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Row>>(256);
        let room = Arc::new(tokio::sync::Notify::new());
        let taken = Arc::clone(&room);
        let send = move |row: Result<Row>| {
            let (tx, room) = (tx.clone(), Arc::clone(&room));
            async move {
                let mut row = row;
                loop {
                    match tx.try_send(row) {
                        Ok(()) => return true,
                        Err(std::sync::mpsc::TrySendError::Full(back)) => {
                            row = back;
                            room.notified().await;
                        }
                        Err(std::sync::mpsc::TrySendError::Disconnected(_)) => return false,
                    }
                }
            }
        };
        let mut client = self.data.clone();
        let read = request.read.clone();
        // The call's timeout covers the answer's start only: a store that stops answering in
        // the middle of a stream would hold the scan (and the query reading it) as long as it
        // stays silent. Each wait for the stream's next rows gets the same bound.
        let timeout = self.config.timeout;
        let stalled = move || {
            Error::Unavailable(format!(
                "bigtable scan stalled: no answer for {} s",
                timeout.as_secs_f64()
            ))
        };
        self.handle()?.spawn(async move {
            use futures_util::StreamExt;
            let stream = match tokio::time::timeout(timeout, client.stream_rows(req)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    send(Err(convert::client_error(e))).await;
                    return;
                }
                Err(_) => {
                    send(Err(stalled())).await;
                    return;
                }
            };
            futures_util::pin_mut!(stream);
            loop {
                let item = match tokio::time::timeout(timeout, stream.next()).await {
                    Ok(Some(item)) => item,
                    Ok(None) => return,
                    Err(_) => {
                        send(Err(stalled())).await;
                        return;
                    }
                };
                let row = match item {
                    Ok((key, cells)) => match to_row(&spec, &read, key, cells) {
                        Some(row) => Ok(row),
                        None => continue,
                    },
                    Err(e) => Err(convert::client_error(e)),
                };
                let stop = row.is_err();
                if !send(row).await || stop {
                    return;
                }
            }
        });
        // The first answer tells whether the request itself was accepted (a bad regex is an
        // error of `scan`, not of the first row).
        let next = move || {
            let row = wait(|| rx.recv().ok());
            taken.notify_one();
            row
        };
        let first = next();
        if let Some(Err(e)) = first {
            return Err(e);
        }
        Ok(Box::new(first.into_iter().chain(std::iter::from_fn(next))))
    }

    fn increment(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        delta: i64,
    ) -> Result<i64> {
        let one = [hourglass_storage::Increment::new(family, qualifier, delta)];
        let values = self.increment_many(table, key, &one)?;
        values
            .first()
            .copied()
            .ok_or_else(|| Error::Internal("increment returned no cell".into()))
    }

    /// One ReadModifyWriteRow with a rule per counter: all applied together.
    fn increment_many(
        &self,
        table: &str,
        key: &[u8],
        increments: &[hourglass_storage::Increment],
    ) -> Result<Vec<i64>> {
        hourglass_storage::check_distinct(increments)?;
        if increments.is_empty() {
            return Ok(Vec::new());
        }
        let spec = self.spec(table)?;
        self.check_families(&spec, increments.iter().map(|i| i.family.as_str()))?;
        let request = data::ReadModifyWriteRowRequest {
            table_name: self.table_name(table),
            row_key: key.to_vec(),
            rules: increments
                .iter()
                .map(|i| data::ReadModifyWriteRule {
                    family_name: i.family.clone(),
                    column_qualifier: i.qualifier.clone(),
                    rule: Some(data::read_modify_write_rule::Rule::IncrementAmount(i.delta)),
                })
                .collect(),
            ..Default::default()
        };
        let mut client = self.data.clone();
        let resp = self
            .run(async move { client.get_client().read_modify_write_row(request).await })?
            .map_err(|s| match s.code() {
                // The emulator answers UNKNOWN ("increment on non-64-bit value") where Bigtable
                // answers FAILED_PRECONDITION: either way the stored counter is the problem.
                tonic::Code::Unknown | tonic::Code::FailedPrecondition => {
                    Error::InvalidRequest(format!(
                        "counter is not an 8-byte big-endian integer: {}",
                        s.message()
                    ))
                }
                _ => status_error(&s),
            })?;
        let families = resp
            .into_inner()
            .row
            .map(|r| r.families)
            .unwrap_or_default();
        increments
            .iter()
            .map(|i| {
                let cell = families
                    .iter()
                    .filter(|f| f.name == i.family)
                    .flat_map(|f| &f.columns)
                    .find(|c| c.qualifier == i.qualifier)
                    .and_then(|c| c.cells.first())
                    .ok_or_else(|| {
                        Error::Internal(format!(
                            "increment returned no cell. family={} qualifier={:02x?}",
                            i.family, i.qualifier
                        ))
                    })?;
                let bytes: [u8; 8] = cell.value.as_slice().try_into().map_err(|_| {
                    Error::InvalidRequest(format!(
                        "counter is not an 8-byte big-endian integer. length={}",
                        cell.value.len()
                    ))
                })?;
                Ok(i64::from_be_bytes(bytes))
            })
            .collect()
    }

    /// Bigtable's check-and-mutate covers one row, and other TSDs write the same tables:
    /// `None`, callers take their one-row way.
    fn check_and_mutate_rows(
        &self,
        table: &str,
        checks: &[hourglass_storage::RowCheck],
        rows: &[RowMutation],
    ) -> Result<Option<bool>> {
        hourglass_storage::fallback::check_and_mutate_rows(self, table, checks, rows)
    }

    fn check_and_mutate(
        &self,
        table: &str,
        key: &[u8],
        check: &Check,
        mutations: &[Mutation],
    ) -> Result<bool> {
        let spec = self.spec(table)?;
        self.check_families(
            &spec,
            mutations
                .iter()
                .filter_map(Mutation::family)
                .chain(std::iter::once(check.family.as_str())),
        )?;
        let predicate = convert::check_predicate(check);
        let (true_mutations, false_mutations) = match check.expected {
            Some(_) => (to_mutations(mutations), Vec::new()),
            None => (Vec::new(), to_mutations(mutations)),
        };
        let request = data::CheckAndMutateRowRequest {
            table_name: self.table_name(table),
            row_key: key.to_vec(),
            predicate_filter: Some(predicate),
            true_mutations,
            false_mutations,
            ..Default::default()
        };
        let mut client = self.data.clone();
        let matched = self
            .run(async move { client.check_and_mutate_row(request).await })?
            .map_err(convert::client_error)?
            .predicate_matched;
        Ok(if check.expected.is_some() {
            matched
        } else {
            !matched
        })
    }

    fn sync(&self) -> Result<()> {
        Ok(()) // acknowledged writes are durable in Bigtable
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn put_cells(
        &self,
        table: &str,
        rows: &[hourglass_storage::CellRow<'_>],
    ) -> hourglass_storage::Result<()> {
        hourglass_storage::fallback::put_cells(self, table, rows)
    }

    fn scan_cells(
        &self,
        table: &str,
        request: &hourglass_storage::ScanRequest,
        visit: hourglass_storage::CellVisitor<'_>,
    ) -> hourglass_storage::Result<()> {
        hourglass_storage::fallback::scan_cells(self, table, request, visit)
    }

    fn scan_joint(
        &self,
        table: &str,
        request: &hourglass_storage::ScanRequest,
        visit: hourglass_storage::JointVisitor<'_>,
    ) -> hourglass_storage::Result<()> {
        hourglass_storage::fallback::scan_joint(self, table, request, visit)
    }

    fn append(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        suffix: &[u8],
    ) -> hourglass_storage::Result<()> {
        hourglass_storage::fallback::append(self, table, key, family, qualifier, suffix)
    }

    fn checkpoint(&self) -> hourglass_storage::Result<()> {
        Ok(())
    }

    fn make_table_durable(&self, table: &str) -> hourglass_storage::Result<()> {
        // A write is durable in Bigtable when it returns: nothing to write again.
        if !self.table_exists(table)? {
            return Err(Error::TableNotFound(table.to_string()));
        }
        Ok(())
    }

    fn maintain(&self, _now_ms: i64) -> hourglass_storage::Result<()> {
        Ok(())
    }
}

impl BigtableStore {
    fn read_request(&self, table: &str, request: &ScanRequest) -> Result<data::ReadRowsRequest> {
        let range = data::RowRange {
            start_key: Some(data::row_range::StartKey::StartKeyClosed(
                request.start.clone(),
            )),
            end_key: request.end.clone().map(data::row_range::EndKey::EndKeyOpen),
        };
        Ok(data::ReadRowsRequest {
            table_name: self.table_name(table),
            rows: Some(data::RowSet {
                row_keys: Vec::new(),
                row_ranges: vec![range],
            }),
            filter: to_read_filter(request.key_regex.as_deref(), &request.read),
            rows_limit: request.limit.map_or(0, |l| l as i64),
            ..Default::default()
        })
    }

    fn read_all(
        &self,
        req: data::ReadRowsRequest,
    ) -> Result<Vec<(Vec<u8>, Vec<bigtable_rs::bigtable::RowCell>)>> {
        let client = self.data.clone();
        self.with_retries(move || {
            let mut client = client.clone();
            let req = req.clone();
            async move { client.read_rows(req).await.map_err(convert::client_error) }
        })
    }
}
