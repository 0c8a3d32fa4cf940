//! The UID registry: names to fixed-width UIDs and back, in the `tsdb-uid` table.
//!
//! Assignment follows OpenTSDB: increment the kind's MAXID counter, write the reverse
//! mapping (UID -> name), then create the forward mapping (name -> UID) with
//! check-and-mutate. Racing writers — threads or processes — agree on one UID per name:
//! the loser of the forward check-and-mutate wastes its UID, withdraws that UID's reverse
//! mapping (OpenTSDB leaves it dangling) and takes the winner's. Both directions are cached; mappings never change
//! except through `rename` and `delete`.
//!
//! Where the store writes several rows in one atomic call (the embedded store, which one
//! process owns), the three writes are one: MAXID moved from the value last known to the
//! next UID and both mappings created, under checks that MAXID is unmoved and both mappings
//! absent; the same UID and cells, one journal entry (RFC 0001, "UIDs in one write").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use hourglass_core::schema::{MAXID_ROW, Schema, UID_ID_FAMILY, UID_NAME_FAMILY};
use hourglass_core::uid::{Uid, UidKind, name_bytes, name_from_bytes};
use hourglass_storage::{
    Check, KeyRegex, Mutation, ReadOptions, RowCheck, RowMutation, ScanRequest, Store, TimeRange,
};
use parking_lot::Mutex;

use crate::{Error, Result};

use crate::Clock;
use crate::bounded::BoundedMap;
use crate::kept::{Asserted, Assertion, KeptStore};

/// `tsd.uid.lru.name.size` and `tsd.uid.lru.id.size`: OpenTSDB's default bounds.
pub const DEFAULT_CACHE_ENTRIES: usize = 5_000_000;

const MAX_ATTEMPTS: usize = 3;

/// Random metric UIDs tried before giving up (each taken one is a collision).
const RANDOM_ATTEMPTS: usize = 10;

/// The reads of one mapping, built once (a lookup of a new name builds none).
static ID_FAMILY: LazyLock<ReadOptions> = LazyLock::new(|| ReadOptions::family(UID_ID_FAMILY));
static NAME_FAMILY: LazyLock<ReadOptions> = LazyLock::new(|| ReadOptions::family(UID_NAME_FAMILY));

#[derive(Debug)]
struct KindCache {
    by_name: BoundedMap<String, Uid>,
    by_uid: BoundedMap<Uid, String>,
    /// Serializes assignments of this kind within the process (processes race via CAS).
    /// It holds MAXID as this process last wrote or read it, and the one write's requests.
    assign: Mutex<Assigner>,
}

/// What an assignment of one kind keeps under its lock.
#[derive(Debug, Default)]
struct Assigner {
    /// MAXID as this process last wrote or read it (`None`: not known), the expected value
    /// of the next assignment in one write ([`UidRegistry::assign_in_one_write`]).
    max: Option<u64>,
    /// The checks and rows of the last assignment in one write, rewritten in place for the
    /// next: their families, qualifiers and mutations are the kind's, only keys and values
    /// change, so an assignment builds no request of its own (a dozen allocations each).
    one_write: Option<OneWrite>,
}

/// The requests of an assignment in one write: MAXID, the reverse and the forward row.
#[derive(Debug)]
struct OneWrite {
    checks: [RowCheck; 3],
    rows: [RowMutation; 3],
}

impl OneWrite {
    fn new(kind: UidKind) -> OneWrite {
        let qualifier = kind.qualifier().as_bytes();
        let absent = |key: Vec<u8>, family: &str| RowCheck {
            key,
            check: Check {
                family: family.into(),
                qualifier: qualifier.to_vec(),
                expected: None,
            },
        };
        let set = |key: Vec<u8>, family: &str| RowMutation {
            key,
            mutations: vec![Mutation::set(family, qualifier, Vec::new())],
        };
        let mut maxid = set(MAXID_ROW.to_vec(), UID_ID_FAMILY);
        // The counter's one cell replaced, whatever its timestamp (an increment writes the
        // sum over it).
        maxid.mutations.insert(
            0,
            Mutation::DeleteCells {
                family: UID_ID_FAMILY.into(),
                qualifier: qualifier.to_vec(),
                range: TimeRange::ALL,
            },
        );
        OneWrite {
            checks: [
                absent(MAXID_ROW.to_vec(), UID_ID_FAMILY),
                absent(Vec::new(), UID_NAME_FAMILY),
                absent(Vec::new(), UID_ID_FAMILY),
            ],
            rows: [
                maxid,
                set(Vec::new(), UID_NAME_FAMILY),
                set(Vec::new(), UID_ID_FAMILY),
            ],
        }
    }

    /// Rewrites the requests for `name` taking UID `id` (`uid_bytes`) with MAXID at `max`.
    fn prepare(&mut self, max: u64, id: u64, uid_bytes: &[u8], name: &[u8]) {
        let [maxid, reverse, forward] = &mut self.checks;
        match (&mut maxid.check.expected, max) {
            (expected, 0) => *expected = None,
            (Some(v), _) => refill(v, &max.to_be_bytes()),
            (expected, _) => *expected = Some(max.to_be_bytes().to_vec()),
        }
        refill(&mut reverse.key, uid_bytes);
        refill(&mut forward.key, name);
        let [maxid, reverse, forward] = &mut self.rows;
        set_value(&mut maxid.mutations, &id.to_be_bytes());
        refill(&mut reverse.key, uid_bytes);
        set_value(&mut reverse.mutations, name);
        refill(&mut forward.key, name);
        set_value(&mut forward.mutations, uid_bytes);
    }
}

fn refill(v: &mut Vec<u8>, bytes: &[u8]) {
    v.clear();
    v.extend_from_slice(bytes);
}

/// Sets the value of the last mutation of `mutations` (a [`Mutation::SetCell`]).
fn set_value(mutations: &mut [Mutation], bytes: &[u8]) {
    if let Some(Mutation::SetCell { value, .. }) = mutations.last_mut() {
        refill(value, bytes);
    }
}

impl KindCache {
    fn new(names: usize, ids: usize) -> KindCache {
        KindCache {
            by_name: BoundedMap::new(names),
            by_uid: BoundedMap::new(ids),
            assign: Mutex::new(Assigner::default()),
        }
    }
}

/// Cache counters per kind (indexed by [`UidKind::index`]), for `/api/stats`.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub hits: [AtomicU64; 3],
    pub misses: [AtomicU64; 3],
    /// Random metric UIDs found taken (`tsd.core.uid.random_metrics`).
    pub random_collisions: AtomicU64,
}

/// One name/UID mapping found by [`UidRegistry::grep`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UidMapping {
    pub kind: String,
    pub name: String,
    pub uid: Vec<u8>,
}

#[derive(Debug)]
pub struct UidRegistry {
    store: Arc<dyn Store>,
    schema: Schema,
    caches: [KindCache; 3],
    /// `tsd.core.meta.enable_realtime_uid`: write UIDMeta for each new UID.
    realtime_meta: bool,
    /// `tsd.core.uid.random_metrics`: metric UIDs are drawn at random (MAXID untouched), as
    /// OpenTSDB does to spread new metrics over the key space.
    random_metrics: Option<Mutex<crate::sim::Rng>>,
    /// The database's store layer keeping writes until a sync covers them, and its clock:
    /// each mapping this registry writes (or finds after a write of unknown outcome) is
    /// kept there, written again after a failed sync (RFC 0001, "UIDs after a failed
    /// sync").
    kept: Option<(Arc<KeptStore>, Clock)>,
    /// The ticket of the last mapping kept: a batch whose points are logged syncs the store
    /// through it first, so a log entry never names a UID the store could lose.
    kept_ticket: AtomicU64,
    /// Cleared once the store answered that it cannot write several rows atomically
    /// ([`Store::check_and_mutate_rows`]): assignments take the per-row protocol.
    one_write: AtomicBool,
    pub stats: CacheStats,
}

impl UidRegistry {
    pub fn new(store: Arc<dyn Store>, schema: Schema) -> Self {
        UidRegistry {
            store,
            schema,
            caches: std::array::from_fn(|_| {
                KindCache::new(DEFAULT_CACHE_ENTRIES, DEFAULT_CACHE_ENTRIES)
            }),
            realtime_meta: false,
            random_metrics: None,
            kept: None,
            kept_ticket: AtomicU64::new(0),
            one_write: AtomicBool::new(true),
            stats: CacheStats::default(),
        }
    }

    /// Keeps every mapping this registry writes in `kept` until a sync covers it (see the
    /// field's docs); `clock` dates them.
    pub(crate) fn with_kept(mut self, kept: Arc<KeptStore>, clock: Clock) -> Self {
        self.kept = Some((kept, clock));
        self
    }

    /// The ticket of the last mapping written (or found while assigning) and kept: the
    /// caller syncs the store through it ([`KeptStore::sync_through`]) before logging points
    /// that use UIDs, so a log entry that outlives a power loss never names a UID the store
    /// lost (and may give to another name). 0 when none was.
    pub(crate) fn kept_ticket(&self) -> u64 {
        self.kept_ticket.load(Ordering::Acquire)
    }

    /// The cells of `name`'s mappings to each UID `tried` (and MAXID at least the highest,
    /// when UIDs of `kind` are counted, not drawn at random), as kept until synced.
    fn mapping_cells(&self, kind: UidKind, name: &str, tried: &[Uid]) -> Vec<Asserted> {
        let qualifier = kind.qualifier().as_bytes();
        let cell = |key: Vec<u8>, family: &'static str, what| Asserted {
            key,
            family,
            qualifier: qualifier.to_vec(),
            what,
        };
        let name = name_bytes(name);
        let mut cells = Vec::with_capacity(2 * tried.len() + 1);
        for uid in tried {
            let uid_bytes = uid.to_bytes(self.width(kind));
            cells.push(cell(
                uid_bytes.clone(),
                UID_NAME_FAMILY,
                Assertion::Holds(name.to_vec()),
            ));
            cells.push(cell(
                name.to_vec(),
                UID_ID_FAMILY,
                Assertion::Holds(uid_bytes),
            ));
        }
        if let Some(highest) = tried.iter().max().filter(|_| self.counted(kind)) {
            cells.push(cell(
                MAXID_ROW.to_vec(),
                UID_ID_FAMILY,
                Assertion::AtLeast(highest.0 as i64),
            ));
        }
        cells
    }

    /// Notes a kept write's ticket: batches logged from now on sync the store through it.
    pub(crate) fn kept_through(&self, ticket: u64) {
        self.kept_ticket.fetch_max(ticket, Ordering::AcqRel);
    }

    /// Bounds the caches of each kind: at most `names` names to UIDs and `ids` UIDs to
    /// names, the least recently used leaving first (`tsd.uid.lru.name.size`,
    /// `tsd.uid.lru.id.size`).
    pub fn with_cache_bounds(mut self, names: usize, ids: usize) -> Self {
        self.caches = std::array::from_fn(|_| KindCache::new(names, ids));
        self
    }

    /// Writes UIDMeta (created now) for every UID this registry assigns.
    pub fn with_realtime_meta(mut self, on: bool) -> Self {
        self.realtime_meta = on;
        self
    }

    /// Draws new metric UIDs at random (`tsd.core.uid.random_metrics`).
    pub fn with_random_metrics(self, on: bool) -> Self {
        if !on {
            return self;
        }
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ (u64::from(std::process::id()) << 32);
        self.with_random_metrics_seeded(seed)
    }

    /// Draws new metric UIDs at random from a generator seeded with `seed`: the same seed
    /// draws the same UIDs, so tests that depend on collisions are repeatable.
    pub fn with_random_metrics_seeded(mut self, seed: u64) -> Self {
        self.random_metrics = Some(Mutex::new(crate::sim::Rng::new(seed)));
        self
    }

    /// Whether metric UIDs are drawn at random.
    pub fn random_metrics(&self) -> bool {
        self.random_metrics.is_some()
    }

    /// Names of `kind` starting with `prefix`, in storage (byte) order, at most `max`: a
    /// bounded range scan of the forward mappings. An empty prefix lists names from `!` to
    /// `~` (the printable range), as OpenTSDB.
    pub fn suggest(&self, kind: UidKind, prefix: &str, max: usize) -> Result<Vec<String>> {
        let (start, end) = if prefix.is_empty() {
            (b"!".to_vec(), Some(b"~".to_vec()))
        } else {
            let start = name_bytes(prefix).to_vec();
            let end = hourglass_storage::prefix_end(&start);
            (start, end)
        };
        let request = ScanRequest {
            start,
            end,
            read: ReadOptions::family(UID_ID_FAMILY),
            ..Default::default()
        };
        let qualifier = kind.qualifier().as_bytes();
        let mut out = Vec::new();
        if max == 0 {
            return Ok(out);
        }
        for row in self.store.scan(self.table(), &request)? {
            let row = row?;
            if row.value(UID_ID_FAMILY, qualifier).is_some() {
                out.push(name_from_bytes(&row.key));
                if out.len() >= max {
                    break;
                }
            }
        }
        Ok(out)
    }

    fn table(&self) -> &str {
        &self.schema.uid_table
    }

    fn width(&self, kind: UidKind) -> u8 {
        self.schema.uid_width(kind)
    }

    fn cached(&self, kind: UidKind, name: &str) -> Option<Uid> {
        self.caches[kind.index()].by_name.get(name)
    }

    fn remember(&self, kind: UidKind, name: &str, uid: Uid) {
        let c = &self.caches[kind.index()];
        c.by_name.insert(name.to_string(), uid);
        c.by_uid.insert(uid, name.to_string());
    }

    /// The UID of `name`, from cache or storage.
    pub fn get_id(&self, kind: UidKind, name: &str) -> Result<Uid> {
        if let Some(uid) = self.cached(kind, name) {
            self.stats.hits[kind.index()].fetch_add(1, Ordering::Relaxed);
            return Ok(uid);
        }
        self.stats.misses[kind.index()].fetch_add(1, Ordering::Relaxed);
        match self.read_forward(kind, name)? {
            Some(uid) => {
                self.remember(kind, name, uid);
                Ok(uid)
            }
            None => Err(Error::NoSuchName {
                kind,
                name: name.to_string(),
            }),
        }
    }

    fn read_forward(&self, kind: UidKind, name: &str) -> Result<Option<Uid>> {
        let row = self
            .store
            .get(self.table(), &name_bytes(name), &ID_FAMILY)?;
        let Some(bytes) = row
            .as_ref()
            .and_then(|r| r.value(UID_ID_FAMILY, kind.qualifier().as_bytes()))
        else {
            return Ok(None);
        };
        if bytes.len() != usize::from(self.width(kind)) {
            return Err(Error::Corrupt(format!(
                "Found id.length = {} which is != {} required for '{kind}'",
                bytes.len(),
                self.width(kind)
            )));
        }
        Ok(Some(Uid::from_bytes(bytes)?))
    }

    /// The name of `uid`, from cache or storage.
    /// `f` of the name of `uid`, without a copy of the name when it is cached (a query
    /// checking a thousand names against a filter); else read as [`UidRegistry::get_name`].
    pub fn with_name<R>(&self, kind: UidKind, uid: Uid, mut f: impl FnMut(&str) -> R) -> Result<R> {
        let found = self.caches[kind.index()]
            .by_uid
            .get_with(&uid, &mut |name: &String| f(name));
        if let Some(r) = found {
            self.stats.hits[kind.index()].fetch_add(1, Ordering::Relaxed);
            return Ok(r);
        }
        let name = self.get_name(kind, uid)?;
        Ok(f(&name))
    }

    pub fn get_name(&self, kind: UidKind, uid: Uid) -> Result<String> {
        if let Some(name) = self.caches[kind.index()].by_uid.get(&uid) {
            self.stats.hits[kind.index()].fetch_add(1, Ordering::Relaxed);
            return Ok(name);
        }
        self.stats.misses[kind.index()].fetch_add(1, Ordering::Relaxed);
        let key = uid.to_bytes(self.width(kind));
        let row = self.store.get(self.table(), &key, &NAME_FAMILY)?;
        match row
            .as_ref()
            .and_then(|r| r.value(UID_NAME_FAMILY, kind.qualifier().as_bytes()))
        {
            Some(name) => {
                let name = name_from_bytes(name);
                self.remember(kind, &name, uid);
                Ok(name)
            }
            None => Err(Error::NoSuchId {
                kind,
                uid: format_signed_bytes(&key),
            }),
        }
    }

    /// The UID of `name`, assigning a new one if it has none.
    pub fn get_or_create_id(&self, kind: UidKind, name: &str) -> Result<Uid> {
        self.get_or_create_id_noting(kind, name).map(|(uid, _)| uid)
    }

    /// The UID of `name`, assigning a new one if it has none, and whether this call assigned
    /// it. UIDs come from an atomic counter (or a check-and-mutate on the reverse mapping),
    /// so a UID this call assigned was nobody's a moment before, in any process sharing the
    /// store: nothing written before names it (but rows left by a deleted name whose UID is
    /// drawn again, which only random metric UIDs allow).
    pub fn get_or_create_id_noting(&self, kind: UidKind, name: &str) -> Result<(Uid, bool)> {
        match self.get_id(kind, name) {
            Err(Error::NoSuchName { .. }) => {}
            other => return other.map(|uid| (uid, false)),
        }
        let cache = &self.caches[kind.index()];
        let mut assigner = cache.assign.lock();
        // Another thread may have assigned it while we waited.
        if let Some(uid) = self.cached(kind, name) {
            return Ok((uid, false));
        }
        let Some((kept, clock)) = &self.kept else {
            return self.assign_locked(kind, name, &mut assigner, &mut Vec::new());
        };
        let started = kept.start();
        let mut tried = Vec::new();
        let assigned = self.assign_locked(kind, name, &mut assigner, &mut tried);
        // Whatever the outcome: a write that failed may have been applied (a remote store's
        // timeout), and the mapping found by the next lookup. Each cell is written again
        // after a failed sync only while it holds what was tried, so a UID another writer
        // won or that was withdrawn is left alone.
        if !tried.is_empty() {
            let cells = self.mapping_cells(kind, name, &tried);
            self.kept_through(kept.keep(started, self.table(), cells, clock.now_ms()));
        }
        assigned
    }

    /// Assigns a UID to `name` under its kind's assign lock (`assigner` holds its MAXID as
    /// last known): in one write where the store can, else by the per-row protocol.
    fn assign_locked(
        &self,
        kind: UidKind,
        name: &str,
        assigner: &mut Assigner,
        tried: &mut Vec<Uid>,
    ) -> Result<(Uid, bool)> {
        if let Some(uid) = self.assign_in_one_write(kind, name, assigner, tried)? {
            return Ok((uid, true));
        }
        if let Some(uid) = self.read_forward(kind, name)? {
            // Perhaps written by an assignment of ours whose outcome was unknown (kept by
            // it all the same), or by another writer.
            self.remember(kind, name, uid);
            return Ok((uid, false));
        }
        self.assign(kind, name, tried)
    }

    /// Assigns the UID after MAXID as `assigner` knows it to `name` in one write: MAXID
    /// moved to it and both mappings created, only while MAXID still holds that and neither
    /// mapping exists ([`Store::check_and_mutate_rows`], one journal entry on the embedded
    /// store). The UID is the one MAXID's increment would give, so the UIDs assigned and
    /// the table's cells are those of the per-row protocol, without its three writes and
    /// reads. `None` when the store cannot, when UIDs of `kind` are drawn at random or
    /// would pass the width, or when a check failed (another writer moved MAXID, or the
    /// name has a mapping): nothing was written, and the caller takes the per-row
    /// protocol, which reads the forward mapping first and reports exhaustion.
    fn assign_in_one_write(
        &self,
        kind: UidKind,
        name: &str,
        assigner: &mut Assigner,
        tried: &mut Vec<Uid>,
    ) -> Result<Option<Uid>> {
        if !self.counted(kind) || !self.one_write.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let max = match assigner.max {
            Some(max) => max,
            None => self.max_id(kind)?,
        };
        let width = self.width(kind);
        let Some(id) = max
            .checked_add(1)
            .filter(|id| *id <= Uid::max_for_width(width))
        else {
            return Ok(None);
        };
        let uid = Uid(id);
        let be = id.to_be_bytes();
        let uid_bytes = &be[8 - usize::from(width)..];
        let request = assigner
            .one_write
            .get_or_insert_with(|| OneWrite::new(kind));
        request.prepare(max, id, uid_bytes, &name_bytes(name));
        match self
            .store
            .check_and_mutate_rows(self.table(), &request.checks, &request.rows)
        {
            Ok(Some(true)) => {
                tried.push(uid);
                assigner.max = Some(id);
                self.assigned(kind, name, uid);
                Ok(Some(uid))
            }
            Ok(Some(false)) => {
                assigner.max = None;
                Ok(None)
            }
            Ok(None) => {
                self.one_write.store(false, Ordering::Relaxed);
                Ok(None)
            }
            Err(e) => {
                // Perhaps applied (a write of unknown outcome): kept all the same.
                tried.push(uid);
                assigner.max = None;
                Err(e.into())
            }
        }
    }

    /// Notes a UID this registry assigned to `name`: cached, and its UIDMeta written when
    /// asked.
    fn assigned(&self, kind: UidKind, name: &str, uid: Uid) {
        self.remember(kind, name, uid);
        if self.realtime_meta {
            let now = hourglass_storage::now_ms() / 1000;
            if let Err(e) = crate::meta::store_new_uid_meta(
                self.store.as_ref(),
                &self.schema,
                kind,
                uid,
                name,
                now,
            ) {
                tracing::error!(error = %e, kind = %kind, name, "unable to write UID meta data");
            }
        }
    }

    /// Whether UIDs of `kind` come from MAXID's counter (not drawn at random).
    fn counted(&self, kind: UidKind) -> bool {
        kind != UidKind::Metric || self.random_metrics.is_none()
    }

    /// Assigns a UID to `name`: the UID and whether it is ours (false: another writer won
    /// the race for the name, and its UID is returned). Every UID it tried to map (the
    /// counter gave it, or it was drawn) goes in `tried`, whatever the outcome.
    fn assign(&self, kind: UidKind, name: &str, tried: &mut Vec<Uid>) -> Result<(Uid, bool)> {
        let width = self.width(kind);
        let qualifier = kind.qualifier().as_bytes();
        let random = self
            .random_metrics
            .as_ref()
            .filter(|_| kind == UidKind::Metric);
        let attempts = if random.is_some() {
            RANDOM_ATTEMPTS
        } else {
            MAX_ATTEMPTS
        };
        for _ in 0..attempts {
            let id = match random {
                // 1 ..= the largest UID of the width.
                Some(rng) => 1 + rng.lock().below(Uid::max_for_width(width)) as i64,
                None => {
                    self.store
                        .increment(self.table(), MAXID_ROW, UID_ID_FAMILY, qualifier, 1)?
                }
            };
            if id <= 0 {
                return Err(Error::Corrupt(format!(
                    "Got a negative ID from storage: {id}"
                )));
            }
            if id as u64 > Uid::max_for_width(width) {
                return Err(Error::UidsExhausted { kind, width });
            }
            let uid = Uid(id as u64);
            tried.push(uid);
            let uid_bytes = uid.to_bytes(width);
            let reverse_free = Check {
                family: UID_NAME_FAMILY.into(),
                qualifier: qualifier.to_vec(),
                expected: None,
            };
            let reverse = [Mutation::set(
                UID_NAME_FAMILY,
                qualifier.to_vec(),
                name_bytes(name).to_vec(),
            )];
            if !self
                .store
                .check_and_mutate(self.table(), &uid_bytes, &reverse_free, &reverse)?
            {
                if random.is_some() {
                    self.stats.random_collisions.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(kind = %kind, uid = %uid.to_hex(width), "random UID already taken: drawing another");
                } else {
                    tracing::error!(kind = %kind, uid = %uid.to_hex(width), "reverse mapping already taken: MAXID is behind the table; run uid fsck");
                }
                continue;
            }
            let forward_free = Check {
                family: UID_ID_FAMILY.into(),
                qualifier: qualifier.to_vec(),
                expected: None,
            };
            let forward = [Mutation::set(
                UID_ID_FAMILY,
                qualifier.to_vec(),
                uid_bytes.clone(),
            )];
            if self.store.check_and_mutate(
                self.table(),
                &name_bytes(name),
                &forward_free,
                &forward,
            )? {
                self.assigned(kind, name, uid);
                return Ok((uid, true));
            }
            // Lost the race to another writer: use its UID. Ours is wasted, and its reverse
            // mapping is withdrawn (only if it still names us) so that each name keeps exactly
            // one mapping each way.
            tracing::warn!(kind = %kind, name, uid = %uid.to_hex(width), "race on UID assignment: UID wasted");
            let ours = Check {
                family: UID_NAME_FAMILY.into(),
                qualifier: qualifier.to_vec(),
                expected: Some(name_bytes(name).to_vec()),
            };
            self.store.check_and_mutate(
                self.table(),
                &uid_bytes,
                &ours,
                &[Mutation::delete(UID_NAME_FAMILY, qualifier.to_vec())],
            )?;
            return match self.read_forward(kind, name)? {
                Some(winner) => {
                    self.remember(kind, name, winner);
                    Ok((winner, false))
                }
                None => Err(Error::Internal(format!(
                    "forward mapping for {kind} {name} vanished during assignment"
                ))),
            };
        }
        Err(Error::Internal(format!(
            "failed to assign a UID for {kind} {name} after {attempts} attempts"
        )))
    }

    /// Gives `old`'s UID to `new`: reverse mapping rewritten, new forward mapping written,
    /// old forward mapping deleted; a tag value's rows in the tag index renamed too.
    pub fn rename(&self, kind: UidKind, old: &str, new: &str) -> Result<Uid> {
        let uid = self.get_id(kind, old)?;
        if let Some(taken) = self.read_forward(kind, new)? {
            return Err(Error::invalid(format!(
                "When trying rename(\"{old}\", \"{new}\") on UniqueId({}, {kind}, {}): new name already assigned ID={}",
                self.table(),
                self.width(kind),
                format_signed_bytes(&taken.to_bytes(self.width(kind)))
            )));
        }
        let width = self.width(kind);
        let q = kind.qualifier().as_bytes().to_vec();
        self.store.mutate_row(
            self.table(),
            &uid.to_bytes(width),
            &[Mutation::set(
                UID_NAME_FAMILY,
                q.clone(),
                name_bytes(new).to_vec(),
            )],
        )?;
        self.store.mutate_row(
            self.table(),
            &name_bytes(new),
            &[Mutation::set(UID_ID_FAMILY, q.clone(), uid.to_bytes(width))],
        )?;
        self.store.mutate_row(
            self.table(),
            &name_bytes(old),
            &[Mutation::delete(UID_ID_FAMILY, q)],
        )?;
        let c = &self.caches[kind.index()];
        c.by_name.remove(old);
        self.remember(kind, new, uid);
        // Tag value names are part of the tag index's keys (RFC 0007): rewritten before
        // the rename answers.
        if kind == UidKind::TagValue {
            crate::index::rename_value(
                self.store.as_ref(),
                &self.schema,
                &uid.to_bytes(width),
                old,
                new,
            )?;
        }
        Ok(uid)
    }

    /// Removes both mappings of `name` (and its UID meta cell). Data rows using the UID stay.
    pub fn delete(&self, kind: UidKind, name: &str) -> Result<Uid> {
        let uid = self.get_id(kind, name)?;
        let width = self.width(kind);
        let q = kind.qualifier().as_bytes().to_vec();
        let meta = format!("{}_meta", kind_word(kind)).into_bytes();
        self.store.mutate_row(
            self.table(),
            &name_bytes(name),
            &[Mutation::delete(UID_ID_FAMILY, q.clone())],
        )?;
        self.store.mutate_row(
            self.table(),
            &uid.to_bytes(width),
            &[
                Mutation::delete(UID_NAME_FAMILY, q),
                Mutation::delete(UID_NAME_FAMILY, meta),
            ],
        )?;
        let c = &self.caches[kind.index()];
        c.by_name.remove(name);
        c.by_uid.remove(&uid);
        Ok(uid)
    }

    /// Forward mappings whose name contains a match of `pattern` (a partial match, as
    /// OpenTSDB's `uid grep`), optionally of one kind.
    pub fn grep(
        &self,
        kind: Option<UidKind>,
        pattern: &str,
        ignore_case: bool,
    ) -> Result<Vec<UidMapping>> {
        let flags = if ignore_case { "(?i)" } else { "" };
        let regex = regex_for_grep(&format!("{flags}{pattern}"))?;
        let mut out = Vec::new();
        let request = ScanRequest {
            read: ReadOptions::family(UID_ID_FAMILY),
            ..Default::default()
        };
        for row in self.store.scan(self.table(), &request)? {
            let row = row?;
            if row.key == MAXID_ROW || !regex.is_match(&row.key) {
                continue;
            }
            for cell in &row.cells {
                let kind_word = String::from_utf8_lossy(&cell.qualifier).into_owned();
                if kind.is_some_and(|k| k.qualifier() != kind_word) {
                    continue;
                }
                out.push(UidMapping {
                    kind: kind_word,
                    name: name_from_bytes(&row.key),
                    uid: cell.value.clone(),
                });
            }
        }
        Ok(out)
    }

    /// The current MAXID counter of a kind (0 when none was assigned).
    pub fn max_id(&self, kind: UidKind) -> Result<u64> {
        let row = self.store.get(self.table(), MAXID_ROW, &ID_FAMILY)?;
        Ok(row
            .as_ref()
            .and_then(|r| r.value(UID_ID_FAMILY, kind.qualifier().as_bytes()))
            .and_then(|v| <[u8; 8]>::try_from(v).ok())
            .map_or(0, u64::from_be_bytes))
    }

    pub fn drop_caches(&self) {
        for c in &self.caches {
            c.by_name.clear();
            c.by_uid.clear();
        }
    }

    /// Number of cached names per kind (metrics, tagk, tagv).
    pub fn cache_sizes(&self) -> [usize; 3] {
        [0, 1, 2].map(|i| self.caches[i].by_name.len())
    }
}

fn kind_word(kind: UidKind) -> &'static str {
    match kind {
        UidKind::Metric => "metric",
        UidKind::TagKey => "tagk",
        UidKind::TagValue => "tagv",
    }
}

fn regex_for_grep(pattern: &str) -> Result<KeyRegex> {
    // A partial match anywhere in the name, like HBase's RegexStringComparator.
    KeyRegex::new(&format!("(?s).*(?:{pattern}).*")).map_err(|e| Error::invalid(e.to_string()))
}

/// Java's `Arrays.toString(byte[])`: signed bytes, e.g. `[0, 0, -1]`.
pub fn format_signed_bytes(bytes: &[u8]) -> String {
    let parts: Vec<String> = bytes.iter().map(|b| (*b as i8).to_string()).collect();
    format!("[{}]", parts.join(", "))
}
