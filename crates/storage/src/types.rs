/// One cell: a value at `(family, qualifier, timestamp)` in a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub family: String,
    /// Empty for a cell in its codec's form ([`CellForm::Encoded`]): the value holds it.
    pub qualifier: Vec<u8>,
    /// Milliseconds; meaning is the writer's (wall clock by default, logical if it chooses).
    pub timestamp: i64,
    pub value: Vec<u8>,
    pub form: CellForm,
}

/// A cell as [`crate::Store::scan_cells`] lends it, borrowed from the row it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellRef<'a> {
    pub family: &'a str,
    pub qualifier: &'a [u8],
    pub timestamp: i64,
    pub value: &'a [u8],
    pub form: CellForm,
}

impl<'a> From<&'a Cell> for CellRef<'a> {
    fn from(c: &'a Cell) -> CellRef<'a> {
        CellRef {
            family: &c.family,
            qualifier: &c.qualifier,
            timestamp: c.timestamp,
            value: &c.value,
            form: c.form,
        }
    }
}

/// The visitor of [`crate::Store::scan_cells`]: each row's key and its cells, as
/// [`crate::Store::scan`] would return them; an error ends the scan with it.
pub type CellVisitor<'v> = &'v mut dyn FnMut(&[u8], LentCells<'_, '_>) -> crate::Result<()>;

/// A row's cells as [`crate::Store::scan_cells`] lends them: one by one, or, for a row the
/// store keeps as columns (the embedded store's column rows, RFC 0011) and the read keeps
/// whole, as its columns.
///
/// With [`ReadOptions::series_rows`], a visit may also lend several rows of one series
/// together ([`LentCells::Series`]), the key given being the first one's.
#[derive(Debug, Clone, Copy)]
pub enum LentCells<'r, 'a> {
    Cells(&'r [CellRef<'a>]),
    Columns(crate::model::ColumnCells<'a>),
    Series(SeriesRows<'r, 'a>),
}

impl<'a> LentCells<'_, 'a> {
    /// The cells one by one: these, or the columns' lent into `buf`; for
    /// [`LentCells::Series`], the first row's (a reader asking for series rows reads
    /// them from the variant).
    pub fn cells<'s>(&'s self, buf: &'s mut Vec<CellRef<'a>>) -> &'s [CellRef<'a>] {
        match self {
            LentCells::Cells(cells) => cells,
            LentCells::Columns(columns) => {
                columns.lend(buf);
                buf
            }
            LentCells::Series(series) => {
                buf.clear();
                if let Some(row) = series.rows.first() {
                    row.cells.lend(buf);
                }
                buf
            }
        }
    }
}

/// Column rows of one series, in time order, lent in one visit of
/// [`crate::Store::scan_cells`] ([`ReadOptions::series_rows`]: the embedded store lends so
/// the members of a group of a grouped table without codec, RFC 0012). They are the rows a
/// visit each would lend as [`LentCells::Columns`], in the same order.
#[derive(Debug, Clone, Copy)]
pub struct SeriesRows<'r, 'a> {
    /// Where the 4-byte base time sits in the row keys: each row's key is the key of the
    /// visit (the first row's) with its own base time there.
    pub base_at: usize,
    pub rows: &'r [SeriesRow<'a>],
}

/// One row of [`SeriesRows`].
#[derive(Debug, Clone, Copy)]
pub struct SeriesRow<'a> {
    /// The row key's base time (seconds).
    pub base: u32,
    pub cells: crate::model::ColumnCells<'a>,
    /// Whether its qualifiers, cell time differences and value lengths are the row
    /// before's, byte for byte (its family too): what a reader found of the row before
    /// from them holds for this one.
    pub same_layout: bool,
}

/// A group of joint members as [`crate::Store::scan_joint`] lends it, in place of the
/// [`CellForm::Joint`] row [`crate::Store::scan`] would return for it: the same members,
/// borrowed from what the store read, no row built.
#[derive(Debug, Clone, Copy)]
pub struct LentGroup<'a> {
    /// The group key (the row key of a joint row: its base time the period's start).
    pub key: &'a [u8],
    /// The family of the joint cells.
    pub family: &'a str,
    /// Every member of the group, offsets increasing, also those outside the scan's key
    /// range (the stream holds their points): the reader skips those.
    pub members: &'a [crate::model::JointMember],
    /// Each member's cell timestamp, in member order; or none, when the read has no time
    /// range ([`TimeRange::ALL`]) and the store did not read them: a member's one cell has
    /// no other in its row to be ordered against, so a reader of its points needs none.
    pub timestamps: &'a [i64],
    /// The codec's joint stream of the members.
    pub stream: &'a [u8],
}

/// What [`crate::Store::scan_joint`] hands over: a row, or a group lent.
#[derive(Debug)]
pub enum Scanned<'a> {
    Row(Row),
    Group(LentGroup<'a>),
}

/// The visitor of [`crate::Store::scan_joint`]; an error ends the scan with it.
pub type JointVisitor<'v> = &'v mut dyn FnMut(Scanned<'_>) -> crate::Result<()>;

/// What a cell read holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CellForm {
    /// Its qualifier and value as written.
    #[default]
    Plain,
    /// A table codec's compact form of qualifier and value, in `value` (asked for with
    /// [`ReadOptions::encoded_cells`]; decoded by the reader that knows the codec).
    Encoded,
    /// A group's joint members in one cell (asked for with [`ReadOptions::joint_rows`]): the
    /// row key is the group key, the value [`crate::model::encode_joint_row`]'s form.
    Joint,
}

impl Cell {
    /// Whether the cell is in its codec's compact form.
    pub fn is_encoded(&self) -> bool {
        self.form == CellForm::Encoded
    }
}

/// A row as read: cells sorted by family, then qualifier (byte order), then newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub key: Vec<u8>,
    pub cells: Vec<Cell>,
}

impl Row {
    /// Newest value of a cell.
    pub fn value(&self, family: &str, qualifier: &[u8]) -> Option<&[u8]> {
        self.cells
            .iter()
            .find(|c| c.family == family && c.qualifier == qualifier)
            .map(|c| c.value.as_slice())
    }
}

/// A change to one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Writes a cell version; `timestamp: None` takes the store's clock (ms).
    /// Writing an existing `(family, qualifier, timestamp)` replaces its value.
    SetCell {
        family: String,
        qualifier: Vec<u8>,
        timestamp: Option<i64>,
        value: Vec<u8>,
    },
    /// Deletes the versions of one column within `range`.
    DeleteCells {
        family: String,
        qualifier: Vec<u8>,
        range: TimeRange,
    },
    /// Deletes every cell of a family in the row.
    DeleteFamily { family: String },
    /// Deletes the whole row.
    DeleteRow,
}

impl Mutation {
    pub fn set(family: &str, qualifier: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Mutation::SetCell {
            family: family.to_string(),
            qualifier: qualifier.into(),
            timestamp: None,
            value: value.into(),
        }
    }

    pub fn set_at(
        family: &str,
        qualifier: impl Into<Vec<u8>>,
        timestamp: i64,
        value: impl Into<Vec<u8>>,
    ) -> Self {
        Mutation::SetCell {
            family: family.to_string(),
            qualifier: qualifier.into(),
            timestamp: Some(timestamp),
            value: value.into(),
        }
    }

    /// Deletes every version of one column.
    pub fn delete(family: &str, qualifier: impl Into<Vec<u8>>) -> Self {
        Mutation::DeleteCells {
            family: family.to_string(),
            qualifier: qualifier.into(),
            range: TimeRange::ALL,
        }
    }

    pub fn family(&self) -> Option<&str> {
        match self {
            Mutation::SetCell { family, .. }
            | Mutation::DeleteCells { family, .. }
            | Mutation::DeleteFamily { family } => Some(family),
            Mutation::DeleteRow => None,
        }
    }
}

/// Mutations of one row in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowMutation {
    pub key: Vec<u8>,
    pub mutations: Vec<Mutation>,
}

/// A row of one cell, written whole by [`crate::Store::put_cells`]: the row's other cells,
/// if any, are removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellRow<'a> {
    pub key: &'a [u8],
    pub family: &'a str,
    pub qualifier: &'a [u8],
    pub timestamp: i64,
    pub value: &'a [u8],
}

impl CellRow<'_> {
    /// The same write as mutations: delete the row, then set the cell.
    pub fn to_mutation(&self) -> RowMutation {
        RowMutation {
            key: self.key.to_vec(),
            mutations: vec![
                Mutation::DeleteRow,
                Mutation::set_at(self.family, self.qualifier, self.timestamp, self.value),
            ],
        }
    }
}

/// Cell timestamps `start <= t < end` (no end: unbounded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    pub start: i64,
    pub end: Option<i64>,
}

impl TimeRange {
    pub const ALL: TimeRange = TimeRange {
        start: i64::MIN,
        end: None,
    };

    pub fn new(start: i64, end: Option<i64>) -> Self {
        TimeRange { start, end }
    }

    pub fn contains(&self, t: i64) -> bool {
        t >= self.start && self.end.is_none_or(|e| t < e)
    }

    pub fn is_all(&self) -> bool {
        *self == TimeRange::ALL
    }
}

impl Default for TimeRange {
    fn default() -> Self {
        TimeRange::ALL
    }
}

/// Which cells of a row to return.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Only these families (all when `None`).
    pub families: Option<Vec<String>>,
    pub time_range: TimeRange,
    /// Only the newest version of each column (after the time filter).
    pub latest_only: bool,
    /// In a scan, cells a table's [`crate::CellCodec`] stored come back in its encoded form
    /// ([`CellForm::Encoded`], empty qualifier), for a reader that decodes that form itself
    /// (a single-row get always decodes). Stores without codecs return every cell as it is.
    /// Not to be combined with `latest_only` on a family holding several coded cells: their
    /// empty qualifiers would read as one column.
    pub encoded_cells: bool,
    /// In a scan of a grouped table (RFC 0006), a group whose members are all joint, none in
    /// the scan shadowed by a row of the row keyspace, may come back as one row: the group
    /// key, one cell of form [`CellForm::Joint`] (the members and their joint stream, see
    /// [`crate::model::decode_joint_row`]), for a reader that decodes it itself. It lists
    /// every member of the group, also those outside the scan's key range (the stream holds
    /// their points): the reader skips those. Such a row counts once toward a scan's limit.
    /// Other stores ignore it.
    pub joint_rows: bool,
    /// In [`crate::Store::scan_cells`] of a grouped table without codec (RFC 0012), the
    /// rows of a group, none in the scan shadowed by a row of the row keyspace, each a
    /// column row the read keeps whole, may be lent in one visit ([`LentCells::Series`]).
    /// Each row counts toward a scan's limit (a scan with a limit lends them one by one).
    /// Other stores, and [`crate::Store::scan`], ignore it.
    pub series_rows: bool,
    /// Cells come back with empty values (family, qualifier and timestamp kept): a scan
    /// that needs only which rows and columns exist moves no values (Bigtable: a
    /// strip-value filter).
    pub keys_only: bool,
}

impl ReadOptions {
    pub fn latest() -> Self {
        ReadOptions {
            latest_only: true,
            ..Default::default()
        }
    }

    pub fn family(family: &str) -> Self {
        ReadOptions {
            families: Some(vec![family.to_string()]),
            ..Default::default()
        }
    }

    /// Keys, qualifiers and timestamps only ([`ReadOptions::keys_only`]).
    pub fn keys_only() -> Self {
        ReadOptions {
            keys_only: true,
            ..Default::default()
        }
    }

    pub fn wants_family(&self, family: &str) -> bool {
        self.families
            .as_ref()
            .is_none_or(|f| f.iter().any(|x| x == family))
    }
}

/// A range scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanRequest {
    /// First key (inclusive).
    pub start: Vec<u8>,
    /// Key to stop before (exclusive); `None` scans to the end.
    pub end: Option<Vec<u8>>,
    /// RE2-style regex that must match the whole row key, byte-wise: write bytes
    /// above 0x7F as `\xHH` escapes. `.` matches `\n` only under `(?s)`.
    pub key_regex: Option<String>,
    pub read: ReadOptions,
    /// Maximum number of rows.
    pub limit: Option<usize>,
    /// Where the next row the regex accepts can be, for backends that can seek.
    pub skip: Option<SkipHint>,
    /// The regex and the skip hint never look at a data-table key's base time (they filter
    /// series): a backend keeping a series' rows together (RFC 0006) may test them once
    /// per series and period, on a key with any base time in place.
    pub series_filter: bool,
}

/// A scan's hint of where the next matching row can be: given a row key the regex refused,
/// the smallest key that may still match (`None`: no hint). Every key between the two is
/// refused by the regex, so a backend may jump there or read on: the rows are the same.
#[derive(Clone)]
pub struct SkipHint(pub std::sync::Arc<SkipFn>);

/// See [`SkipHint`].
pub type SkipFn = dyn Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync;

impl std::fmt::Debug for SkipHint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SkipHint")
    }
}

impl PartialEq for SkipHint {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SkipHint {}

impl ScanRequest {
    pub fn range(start: impl Into<Vec<u8>>, end: Option<Vec<u8>>) -> Self {
        ScanRequest {
            start: start.into(),
            end,
            ..Default::default()
        }
    }

    /// All rows starting with `prefix`.
    pub fn prefix(prefix: &[u8]) -> Self {
        ScanRequest::range(prefix.to_vec(), prefix_end(prefix))
    }
}

/// The first key after every key starting with `prefix` (`None` if there is none).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// One counter of [`crate::Store::increment_many`]: `delta` added to the 8-byte big-endian
/// counter at `(family, qualifier)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Increment {
    pub family: String,
    pub qualifier: Vec<u8>,
    pub delta: i64,
}

impl Increment {
    pub fn new(family: &str, qualifier: impl Into<Vec<u8>>, delta: i64) -> Self {
        Increment {
            family: family.to_string(),
            qualifier: qualifier.into(),
            delta,
        }
    }
}

/// Condition of a check-and-mutate on one column's newest version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub family: String,
    pub qualifier: Vec<u8>,
    /// `None`: the column must have no cell. `Some(v)`: its newest value must equal `v`.
    pub expected: Option<Vec<u8>>,
}

/// One row's condition in [`crate::Store::check_and_mutate_rows`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowCheck {
    pub key: Vec<u8>,
    pub check: Check,
}

/// A table and its column families.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    pub name: String,
    pub families: Vec<FamilySpec>,
}

/// A column family and its garbage-collection rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilySpec {
    pub name: String,
    /// Versions kept per column (`None`: all).
    pub max_versions: Option<u32>,
}

impl FamilySpec {
    pub fn new(name: &str, max_versions: Option<u32>) -> Self {
        FamilySpec {
            name: name.to_string(),
            max_versions,
        }
    }
}
