//! The semantics of one row, shared by backends that keep rows themselves (memory, embedded):
//! applying mutations, version garbage collection, read filters, and a compact encoding.
//!
//! Encoded row: format `0x01` (plain cells) or `0x02` (a table with a codec: each cell says
//! whether it is coded), see docs/rfcs/0002-embedded-row-encoding.md:
//!
//! ```text
//! | format (1) | cell count (varint) | cells... |
//! cell: | [coded (1), format 0x02 only] | family len (varint) | family |
//!   plain: | qualifier len (varint) | qualifier | timestamp (zigzag varint) | value len (varint) | value |
//!   coded: | timestamp (zigzag varint) | blob len (varint) | blob |
//! ```
//!
//! or format `0x04` (a codec took the row's only cell), see
//! docs/rfcs/0015-one-coded-cell-rows.md:
//!
//! ```text
//! | 0x04 | family len (varint) | family | timestamp (zigzag varint) | blob: the rest |
//! ```
//!
//! or format `0x03` (no codec, at least two cells, one family, one qualifier length: the
//! cells as columns), see docs/rfcs/0011-column-rows.md:
//!
//! ```text
//! | 0x03 | cell count n (varint) | family len (varint) | family | qualifier len Q (varint) |
//! | first time (zigzag varint) | times len (varint) | value lengths len (varint) |
//! | n x Q qualifier bytes | times: n zigzag varints, each the difference from the time |
//! | before (the first cell's from the first time) | value lengths (n varints) | values |
//! ```

use crate::rice::{unzigzag, zigzag};
use crate::{Cell, CellForm, Check, Error, Mutation, ReadOptions, Result, Row, TableSpec};

/// Cells stored as they are.
const ROW_FORMAT_PLAIN: u8 = 1;
/// Each cell starts with a byte saying whether a [`CellCodec`] encoded it.
const ROW_FORMAT_CODED: u8 = 2;
/// Cells of one family and one qualifier length, stored as columns (RFC 0011).
const ROW_FORMAT_COLUMNS: u8 = 3;
/// The row's only cell, stored by a [`CellCodec`]: no count, coded byte or blob length (RFC
/// 0015).
const ROW_FORMAT_ONE_CODED: u8 = 4;

/// A compact stored form for some cells (e.g. compacted time series cells), chosen by the
/// backend's user. It must be lossless: `decode(encode(q, v)) == (q, v)`.
///
/// The joint form (RFC 0006, group format 0x02) stores the only cells of several rows of one
/// series and period together: one stream for all their points, and per cell a
/// [`JointShape`]. It must be lossless too: `decode_joint` of what `encode_joint` returned
/// gives back every cell it took, byte for byte. By default a codec takes no cell jointly.
pub trait CellCodec: Send + Sync + std::fmt::Debug {
    /// The compact form of a cell's qualifier and value, or `None` to store them as they are.
    fn encode(&self, family: &str, qualifier: &[u8], value: &[u8]) -> Option<Vec<u8>>;
    /// The qualifier and value of an encoded cell.
    fn decode(&self, family: &str, encoded: &[u8]) -> Result<(Vec<u8>, Vec<u8>)>;

    /// The joint form of `cells` (in offset order): for each cell its shape, `None` for a
    /// cell left out, and the stream of the cells taken. `None`: no cell taken.
    fn encode_joint(&self, _family: &str, _cells: &[JointCell<'_>]) -> Option<JointForm> {
        None
    }

    /// The qualifier and value of each member of a joint stream, in `members`' order.
    fn decode_joint(
        &self,
        _family: &str,
        _stream: &[u8],
        _members: &[JointMember],
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Err(Error::Corrupt(
            "bad joint stream: this store's codec has no joint form".into(),
        ))
    }
}

/// What [`CellCodec::encode_joint`] returns: each cell's shape (`None`: left out) and the
/// stream of the cells taken.
pub type JointForm = (Vec<Option<JointShape>>, Vec<u8>);

/// The value of a [`crate::CellForm::Joint`] cell, as a scan hands it over (never stored, so
/// laid out for speed, at fixed widths, little-endian): `| member count (4) | members:
/// offset s (4) | point count (4) | meta: 0x00 0x00, or 0x01 then the byte | cell timestamp
/// (8) | joint stream |`.
pub fn encode_joint_row(members: &[(JointMember, i64)], stream: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + members.len() * JOINT_MEMBER_BYTES + stream.len());
    out.extend_from_slice(&(members.len() as u32).to_le_bytes());
    for (m, timestamp) in members {
        let mut member = [0u8; JOINT_MEMBER_BYTES];
        member[..4].copy_from_slice(&m.offset_secs.to_le_bytes());
        member[4..8].copy_from_slice(&m.shape.points.to_le_bytes());
        if let Some(b) = m.shape.meta {
            member[8] = 1;
            member[9] = b;
        }
        member[10..].copy_from_slice(&timestamp.to_le_bytes());
        out.extend_from_slice(&member);
    }
    out.extend_from_slice(stream);
    out
}

/// Bytes of a member in a [`crate::CellForm::Joint`] cell's value.
const JOINT_MEMBER_BYTES: usize = 18;

/// A [`crate::CellForm::Joint`] cell's members (with their cell timestamps) and stream.
pub type JointRow<'a> = (Vec<(JointMember, i64)>, &'a [u8]);

/// The members and joint stream of a [`crate::CellForm::Joint`] cell's value.
pub fn decode_joint_row(bytes: &[u8]) -> Result<JointRow<'_>> {
    let bad = |what: &str| Error::Corrupt(format!("bad joint row: {what}"));
    let (count, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or_else(|| bad("cut short"))?;
    let n = u32::from_le_bytes(*count) as usize;
    let listed = n
        .checked_mul(JOINT_MEMBER_BYTES)
        .filter(|l| *l <= rest.len())
        .ok_or_else(|| bad("member count past its bytes"))?;
    let (list, stream) = rest.split_at(listed);
    let mut members = Vec::with_capacity(n);
    for m in list.chunks_exact(JOINT_MEMBER_BYTES) {
        let word = |at: usize| u32::from_le_bytes([m[at], m[at + 1], m[at + 2], m[at + 3]]);
        let meta = match m[8] {
            0 if m[9] == 0 => None,
            1 => Some(m[9]),
            _ => return Err(bad("value out of range")),
        };
        let mut timestamp = [0u8; 8];
        timestamp.copy_from_slice(&m[10..]);
        members.push((
            JointMember {
                offset_secs: word(0),
                shape: JointShape {
                    points: word(4),
                    meta,
                },
            },
            i64::from_le_bytes(timestamp),
        ));
    }
    Ok((members, stream))
}

/// A cell offered to [`CellCodec::encode_joint`]: a row's only cell, and the row's offset in
/// its group (seconds from the period start).
#[derive(Debug, Clone, Copy)]
pub struct JointCell<'a> {
    pub offset_secs: u32,
    pub qualifier: &'a [u8],
    pub value: &'a [u8],
}

/// What a jointly stored cell keeps beside its points in the stream: how many points it has
/// and its trailing meta byte, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JointShape {
    pub points: u32,
    pub meta: Option<u8>,
}

/// A member of a joint stream as [`CellCodec::decode_joint`] takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JointMember {
    pub offset_secs: u32,
    pub shape: JointShape,
}

/// The cells of one row, sorted by family, qualifier, then newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowData {
    cells: Vec<Cell>,
}

impl RowData {
    /// A row of these cells (sorted into [`RowData`]'s order).
    pub fn from_cells(mut cells: Vec<Cell>) -> RowData {
        cells.sort_by(|a, b| {
            (
                a.family.as_str(),
                a.qualifier.as_slice(),
                std::cmp::Reverse(a.timestamp),
            )
                .cmp(&(
                    b.family.as_str(),
                    b.qualifier.as_slice(),
                    std::cmp::Reverse(b.timestamp),
                ))
        });
        RowData { cells }
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    pub fn cells(&self) -> &[Cell] {
        &self.cells
    }

    /// Checks every family first, then applies all mutations: all or nothing.
    pub fn apply(&mut self, spec: &TableSpec, mutations: &[Mutation], now_ms: i64) -> Result<()> {
        for m in mutations {
            if let Some(family) = m.family() {
                family_of(spec, family)?;
            }
        }
        for m in mutations {
            match m {
                Mutation::SetCell {
                    family,
                    qualifier,
                    timestamp,
                    value,
                } => {
                    let ts = timestamp.unwrap_or(now_ms);
                    self.set(family, qualifier, ts, value.clone());
                    let max = family_of(spec, family)?.max_versions;
                    if let Some(max) = max {
                        self.keep_versions(family, qualifier, max as usize);
                    }
                }
                Mutation::DeleteCells {
                    family,
                    qualifier,
                    range,
                } => self.cells.retain(|c| {
                    !(c.family == *family
                        && c.qualifier == *qualifier
                        && range.contains(c.timestamp))
                }),
                Mutation::DeleteFamily { family } => self.cells.retain(|c| c.family != *family),
                Mutation::DeleteRow => self.cells.clear(),
            }
        }
        Ok(())
    }

    fn position(
        &self,
        family: &str,
        qualifier: &[u8],
        ts: i64,
    ) -> std::result::Result<usize, usize> {
        self.cells.binary_search_by(|c| {
            (
                c.family.as_str(),
                c.qualifier.as_slice(),
                std::cmp::Reverse(c.timestamp),
            )
                .cmp(&(family, qualifier, std::cmp::Reverse(ts)))
        })
    }

    fn set(&mut self, family: &str, qualifier: &[u8], timestamp: i64, value: Vec<u8>) {
        match self.position(family, qualifier, timestamp) {
            Ok(i) => self.cells[i].value = value,
            Err(i) => self.cells.insert(
                i,
                Cell {
                    family: family.to_string(),
                    qualifier: qualifier.to_vec(),
                    timestamp,
                    value,
                    form: CellForm::Plain,
                },
            ),
        }
    }

    fn keep_versions(&mut self, family: &str, qualifier: &[u8], max: usize) {
        let first = match self.position(family, qualifier, i64::MAX) {
            Ok(i) | Err(i) => i,
        };
        let mut n = 0;
        while first + n < self.cells.len()
            && self.cells[first + n].family == family
            && self.cells[first + n].qualifier == qualifier
        {
            n += 1;
        }
        if n > max {
            self.cells.drain(first + max..first + n);
        }
    }

    /// Newest cell of a column.
    pub fn newest(&self, family: &str, qualifier: &[u8]) -> Option<&Cell> {
        let i = match self.position(family, qualifier, i64::MAX) {
            Ok(i) | Err(i) => i,
        };
        self.cells
            .get(i)
            .filter(|c| c.family == family && c.qualifier == qualifier)
    }

    pub fn check(&self, check: &Check) -> bool {
        let newest = self.newest(&check.family, &check.qualifier);
        match (&check.expected, newest) {
            (None, None) => true,
            (Some(want), Some(cell)) => cell.value == *want,
            _ => false,
        }
    }

    /// Adds `delta` to the newest value of an 8-byte counter column and writes the sum.
    pub fn increment(
        &mut self,
        spec: &TableSpec,
        family: &str,
        qualifier: &[u8],
        delta: i64,
        now_ms: i64,
    ) -> Result<i64> {
        let current = match self.newest(family, qualifier) {
            None => 0,
            Some(cell) => {
                let bytes: [u8; 8] = cell.value.as_slice().try_into().map_err(|_| {
                    Error::InvalidRequest(format!(
                        "counter is not an 8-byte big-endian integer. length={}",
                        cell.value.len()
                    ))
                })?;
                i64::from_be_bytes(bytes)
            }
        };
        let next = current.wrapping_add(delta);
        let ts = self
            .newest(family, qualifier)
            .map_or(now_ms, |c| c.timestamp.max(now_ms));
        self.apply(
            spec,
            &[Mutation::set_at(family, qualifier, ts, next.to_be_bytes())],
            now_ms,
        )?;
        Ok(next)
    }

    /// The row as a reader sees it through `read`; `None` when no cell passes.
    pub fn read(&self, key: &[u8], read: &ReadOptions) -> Option<Row> {
        let mut cells = Vec::new();
        for c in &self.cells {
            if !read.wants_family(&c.family) || !read.time_range.contains(c.timestamp) {
                continue;
            }
            let repeats = |prev: &Cell| prev.family == c.family && prev.qualifier == c.qualifier;
            if read.latest_only && cells.last().is_some_and(repeats) {
                continue;
            }
            if read.keys_only {
                cells.push(Cell {
                    family: c.family.clone(),
                    qualifier: c.qualifier.clone(),
                    timestamp: c.timestamp,
                    value: Vec::new(),
                    form: c.form,
                });
            } else {
                cells.push(c.clone());
            }
        }
        if cells.is_empty() {
            None
        } else {
            Some(Row {
                key: key.to_vec(),
                cells,
            })
        }
    }

    /// [`RowData::read`] taking the cells and the key instead of copying them (a scan's
    /// decoded rows).
    pub fn into_read(self, key: Vec<u8>, read: &ReadOptions) -> Option<Row> {
        let mut cells = self.cells;
        let mut kept = 0;
        for i in 0..cells.len() {
            let c = &cells[i];
            if !read.wants_family(&c.family) || !read.time_range.contains(c.timestamp) {
                continue;
            }
            if read.latest_only
                && kept > 0
                && cells[kept - 1].family == c.family
                && cells[kept - 1].qualifier == c.qualifier
            {
                continue;
            }
            cells.swap(kept, i);
            if read.keys_only {
                cells[kept].value = Vec::new();
            }
            kept += 1;
        }
        cells.truncate(kept);
        (!cells.is_empty()).then_some(Row { key, cells })
    }

    /// The stored bytes of a row of one plain cell (no codec): [`RowData::encode`]'s bytes
    /// for that row, without building it.
    pub fn encode_one_plain(
        family: &str,
        qualifier: &[u8],
        timestamp: i64,
        value: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(family.len() + qualifier.len() + value.len() + 2 + 4 * 10);
        RowData::encode_one_plain_into(&mut out, family, qualifier, timestamp, value);
        out
    }

    /// [`RowData::encode_one_plain`] into `out` (cleared first): a writer of many such rows
    /// reuses one buffer.
    pub fn encode_one_plain_into(
        out: &mut Vec<u8>,
        family: &str,
        qualifier: &[u8],
        timestamp: i64,
        value: &[u8],
    ) {
        out.clear();
        out.push(ROW_FORMAT_PLAIN);
        put_varint(out, 1);
        put_varint(out, family.len() as u64);
        out.extend_from_slice(family.as_bytes());
        put_varint(out, qualifier.len() as u64);
        out.extend_from_slice(qualifier);
        put_varint(out, zigzag(timestamp));
        put_varint(out, value.len() as u64);
        out.extend_from_slice(value);
    }

    /// The stored bytes of the row; cells the codec takes are stored in its form.
    pub fn encode(&self, codec: Option<&dyn CellCodec>) -> Vec<u8> {
        if codec.is_none() && self.is_uniform() {
            return self.encode_columns();
        }
        // Each cell's blob, where the codec takes it (none, and nothing allocated, without
        // a codec).
        let coded: Vec<Option<Vec<u8>>> = match codec {
            Some(k) => self
                .cells
                .iter()
                .map(|c| k.encode(&c.family, &c.qualifier, &c.value))
                .collect(),
            None => Vec::new(),
        };
        if let ([c], [Some(blob)]) = (self.cells.as_slice(), coded.as_slice()) {
            let mut out = Vec::with_capacity(blob.len() + c.family.len() + 12);
            out.push(ROW_FORMAT_ONE_CODED);
            put_varint(&mut out, c.family.len() as u64);
            out.extend_from_slice(c.family.as_bytes());
            put_varint(&mut out, zigzag(c.timestamp));
            out.extend_from_slice(blob);
            return out;
        }
        let size: usize = self
            .cells
            .iter()
            .map(|c| c.family.len() + c.qualifier.len() + c.value.len() + 16)
            .sum();
        let mut out = Vec::with_capacity(size + 4);
        out.push(if codec.is_some() {
            ROW_FORMAT_CODED
        } else {
            ROW_FORMAT_PLAIN
        });
        put_varint(&mut out, self.cells.len() as u64);
        for (i, c) in self.cells.iter().enumerate() {
            let coded = coded.get(i).and_then(Option::as_ref);
            if codec.is_some() {
                out.push(u8::from(coded.is_some()));
            }
            put_varint(&mut out, c.family.len() as u64);
            out.extend_from_slice(c.family.as_bytes());
            match coded {
                Some(blob) => {
                    put_varint(&mut out, zigzag(c.timestamp));
                    put_varint(&mut out, blob.len() as u64);
                    out.extend_from_slice(blob);
                }
                None => {
                    put_varint(&mut out, c.qualifier.len() as u64);
                    out.extend_from_slice(&c.qualifier);
                    put_varint(&mut out, zigzag(c.timestamp));
                    put_varint(&mut out, c.value.len() as u64);
                    out.extend_from_slice(&c.value);
                }
            }
        }
        out
    }

    /// Whether the row is stored as columns (RFC 0011): at least two cells, one family, one
    /// qualifier length.
    fn is_uniform(&self) -> bool {
        let [first, rest @ ..] = self.cells.as_slice() else {
            return false;
        };
        !rest.is_empty()
            && rest
                .iter()
                .all(|c| c.family == first.family && c.qualifier.len() == first.qualifier.len())
    }

    /// Format `0x03`: the cells as columns (RFC 0011).
    fn encode_columns(&self) -> Vec<u8> {
        let (n, family) = (self.cells.len(), self.cells[0].family.as_bytes());
        let q_len = self.cells[0].qualifier.len();
        let first = self.cells[0].timestamp;
        let mut times = Vec::with_capacity(n + 10);
        let mut lens = Vec::with_capacity(n);
        let mut before = first;
        let mut values = 0;
        for c in &self.cells {
            let d = c.timestamp.wrapping_sub(before);
            put_varint(&mut times, zigzag(d));
            before = c.timestamp;
            put_varint(&mut lens, c.value.len() as u64);
            values += c.value.len();
        }
        let mut out =
            Vec::with_capacity(32 + family.len() + n * q_len + times.len() + lens.len() + values);
        out.push(ROW_FORMAT_COLUMNS);
        put_varint(&mut out, n as u64);
        put_varint(&mut out, family.len() as u64);
        out.extend_from_slice(family);
        put_varint(&mut out, q_len as u64);
        put_varint(&mut out, zigzag(first));
        put_varint(&mut out, times.len() as u64);
        put_varint(&mut out, lens.len() as u64);
        for c in &self.cells {
            out.extend_from_slice(&c.qualifier);
        }
        out.extend_from_slice(&times);
        out.extend_from_slice(&lens);
        for c in &self.cells {
            out.extend_from_slice(&c.value);
        }
        out
    }

    pub fn decode(bytes: &[u8], codec: Option<&dyn CellCodec>) -> Result<RowData> {
        RowData::decode_with(bytes, codec, false)
    }

    /// [`RowData::decode`]; with `keep_encoded`, cells the codec stored stay in its form
    /// (empty qualifier, the blob as value).
    pub fn decode_with(
        bytes: &[u8],
        codec: Option<&dyn CellCodec>,
        keep_encoded: bool,
    ) -> Result<RowData> {
        let mut r = Reader { bytes, pos: 0 };
        let coded_format = match r.byte()? {
            ROW_FORMAT_PLAIN => false,
            ROW_FORMAT_CODED => true,
            ROW_FORMAT_COLUMNS => {
                let mut columns = Columns::read(bytes)?;
                let family = std::str::from_utf8(columns.family)
                    .map_err(|_| Error::Corrupt("family name is not UTF-8".into()))?;
                let mut cells = Vec::with_capacity(columns.n);
                while let Some((qualifier, timestamp, value)) = columns.next_cell()? {
                    cells.push(Cell {
                        family: family.to_string(),
                        qualifier: qualifier.to_vec(),
                        timestamp,
                        value: value.to_vec(),
                        form: CellForm::Plain,
                    });
                }
                return Ok(RowData { cells });
            }
            ROW_FORMAT_ONE_CODED => {
                let family = String::from_utf8(r.chunk()?.to_vec())
                    .map_err(|_| Error::Corrupt("family name is not UTF-8".into()))?;
                let timestamp = unzigzag(r.varint()?);
                let blob = &bytes[r.pos..];
                let cell = coded_cell(family, timestamp, blob, codec, keep_encoded)?;
                return Ok(RowData { cells: vec![cell] });
            }
            _ => return Err(Error::Corrupt("unknown row format".into())),
        };
        let n = r.varint()? as usize;
        let mut cells = Vec::with_capacity(n.min(bytes.len()));
        for _ in 0..n {
            let coded = coded_format && r.byte()? == 1;
            let family = String::from_utf8(r.chunk()?.to_vec())
                .map_err(|_| Error::Corrupt("family name is not UTF-8".into()))?;
            if coded {
                let timestamp = unzigzag(r.varint()?);
                let blob = r.chunk()?;
                cells.push(coded_cell(family, timestamp, blob, codec, keep_encoded)?);
                continue;
            }
            let qualifier = r.chunk()?.to_vec();
            let timestamp = unzigzag(r.varint()?);
            cells.push(Cell {
                family,
                qualifier,
                timestamp,
                value: r.chunk()?.to_vec(),
                form: CellForm::Plain,
            });
        }
        if r.pos != bytes.len() {
            return Err(Error::Corrupt("trailing bytes after row".into()));
        }
        Ok(RowData { cells })
    }
}

/// A cell a codec stored as `blob` (row formats 0x02 and 0x04): decoded by `codec`, or with
/// `keep_encoded` in the codec's form (empty qualifier, the blob as value); refused without
/// a codec when it must be decoded.
fn coded_cell(
    family: String,
    timestamp: i64,
    blob: &[u8],
    codec: Option<&dyn CellCodec>,
    keep_encoded: bool,
) -> Result<Cell> {
    let (qualifier, value, form) = if keep_encoded {
        (Vec::new(), blob.to_vec(), CellForm::Encoded)
    } else {
        let codec = codec.ok_or_else(|| {
            Error::Corrupt("cell was stored with a codec this store was not given".into())
        })?;
        let (q, v) = codec.decode(&family, blob)?;
        (q, v, CellForm::Plain)
    };
    Ok(Cell {
        family,
        qualifier,
        timestamp,
        value,
        form,
    })
}

/// The cells of a stored row as a reader sees them through `read` (as
/// [`RowData::decode`] then [`RowData::into_read`] give them, and failing where they fail),
/// borrowed from `bytes`, into `out` (cleared first). A row with cells stored by a codec is
/// refused as [`RowData::decode`] without the codec refuses it.
pub fn lend_cells<'a>(
    bytes: &'a [u8],
    read: &ReadOptions,
    out: &mut Vec<crate::CellRef<'a>>,
) -> Result<()> {
    out.clear();
    let mut r = Reader { bytes, pos: 0 };
    let coded_format = match r.byte()? {
        ROW_FORMAT_PLAIN => false,
        ROW_FORMAT_CODED => true,
        ROW_FORMAT_COLUMNS => return lend_columns(bytes, read, out),
        ROW_FORMAT_ONE_CODED => {
            // Read as far as the decoder reads before asking for the codec.
            std::str::from_utf8(r.chunk()?)
                .map_err(|_| Error::Corrupt("family name is not UTF-8".into()))?;
            r.varint()?;
            return Err(Error::Corrupt(
                "cell was stored with a codec this store was not given".into(),
            ));
        }
        _ => return Err(Error::Corrupt("unknown row format".into())),
    };
    let n = r.varint()?;
    // The family of the cell before: a row's cells mostly share one, checked once.
    let mut last_family: (&[u8], &str) = (&[], "");
    for _ in 0..n {
        let coded = coded_format && r.byte()? == 1;
        let name = r.chunk()?;
        let family = if name == last_family.0 {
            last_family.1
        } else {
            let family = std::str::from_utf8(name)
                .map_err(|_| Error::Corrupt("family name is not UTF-8".into()))?;
            last_family = (name, family);
            family
        };
        if coded {
            // The blob's length is read first, as the decoder reads it before asking for
            // the codec.
            r.varint()?;
            r.chunk()?;
            return Err(Error::Corrupt(
                "cell was stored with a codec this store was not given".into(),
            ));
        }
        let qualifier = r.chunk()?;
        let z = r.varint()?;
        let timestamp = unzigzag(z);
        let value = r.chunk()?;
        if !read.wants_family(family) || !read.time_range.contains(timestamp) {
            continue;
        }
        if read.latest_only
            && out
                .last()
                .is_some_and(|p| p.family == family && p.qualifier == qualifier)
        {
            continue;
        }
        out.push(crate::CellRef {
            family,
            qualifier,
            timestamp,
            value: if read.keys_only { &[] } else { value },
            form: CellForm::Plain,
        });
    }
    if r.pos != bytes.len() {
        return Err(Error::Corrupt("trailing bytes after row".into()));
    }
    Ok(())
}

/// [`lend_cells`] of a format `0x03` row.
fn lend_columns<'a>(
    bytes: &'a [u8],
    read: &ReadOptions,
    out: &mut Vec<crate::CellRef<'a>>,
) -> Result<()> {
    let mut columns = Columns::read(bytes)?;
    let family = std::str::from_utf8(columns.family)
        .map_err(|_| Error::Corrupt("family name is not UTF-8".into()))?;
    let wanted = read.wants_family(family);
    out.reserve(columns.n);
    while let Some((qualifier, timestamp, value)) = columns.next_cell()? {
        if !wanted || !read.time_range.contains(timestamp) {
            continue;
        }
        if read.latest_only && out.last().is_some_and(|p| p.qualifier == qualifier) {
            continue;
        }
        out.push(crate::CellRef {
            family,
            qualifier,
            timestamp,
            value: if read.keys_only { &[] } else { value },
            form: CellForm::Plain,
        });
    }
    Ok(())
}

/// The cells of a stored row as [`lend_cells`] gives them, but a column row (format
/// `0x03`) whose every stored cell the read keeps, with one byte a cell for its value
/// length and well-formed time differences (rollup rows), is lent as its columns: `Ok(Some(columns))`, `out` left
/// empty. Otherwise the cells are lent into `out` (cleared first) and `Ok(None)` returned.
/// Fails where [`lend_cells`] fails.
pub fn lend_row<'a>(
    bytes: &'a [u8],
    read: &ReadOptions,
    out: &mut Vec<crate::CellRef<'a>>,
) -> Result<Option<ColumnCells<'a>>> {
    if bytes.first() == Some(&ROW_FORMAT_COLUMNS) && !read.latest_only && !read.keys_only {
        let columns = Columns::read(bytes)?;
        let family = std::str::from_utf8(columns.family)
            .map_err(|_| Error::Corrupt("family name is not UTF-8".into()))?;
        // Time differences of more than a byte (cells written at times far apart, as a
        // year row's days computed one by one) are walked once here, so the columns' times
        // read without failing; a section that does not hold `n` varints ending at its end
        // is left to `lend_cells` (and its error).
        let times_ok = columns.small_times || {
            let mut times = Reader {
                bytes: columns.times.bytes,
                pos: columns.times.pos,
            };
            (0..columns.n).all(|_| times.varint().is_ok()) && times.pos == times.bytes.len()
        };
        if times_ok && columns.small_lens && read.wants_family(family) {
            let lens = columns
                .lens
                .bytes
                .get(columns.lens.pos..)
                .unwrap_or_default();
            let values = columns
                .values
                .bytes
                .get(columns.values.pos..)
                .unwrap_or_default();
            // Where walking the cells would fail: a value past the row's end, or bytes
            // left after the last.
            let total: usize = lens.iter().map(|b| usize::from(*b)).sum();
            if total > values.len() {
                return Err(Error::Corrupt("truncated row".into()));
            }
            if total < values.len() {
                return Err(Error::Corrupt("trailing bytes after row".into()));
            }
            let cells = ColumnCells {
                family,
                q_len: columns.q_len,
                qualifiers: columns.qualifiers,
                first_time: columns.before,
                small_times: columns.small_times,
                times: columns
                    .times
                    .bytes
                    .get(columns.times.pos..)
                    .unwrap_or_default(),
                lens,
                values,
            };
            let kept =
                read.time_range.is_all() || cells.times().all(|t| read.time_range.contains(t));
            if kept {
                out.clear();
                return Ok(Some(cells));
            }
        }
    }
    lend_cells(bytes, read, out).map(|()| None)
}

/// Rows lent together as their columns ([`crate::LentCells::Series`]): each of `rows` as
/// [`lend_row`] lends it, into `out` (cleared first) with whether its layout (every byte
/// but its first cell time and its values: family, qualifiers, time differences, value
/// lengths) is the row before's. A row of the layout of the row before is lent from it by
/// two comparisons of bytes, without reading its header or checking its columns again
/// (they are the same bytes). True when every row was lent as its columns; false (`out`
/// to be ignored) when one is not a column row the read keeps whole or does not read: the
/// caller lends them one by one instead (and meets the error, in row order).
pub fn lend_column_rows<'a>(
    rows: impl IntoIterator<Item = &'a [u8]>,
    read: &ReadOptions,
    out: &mut Vec<(ColumnCells<'a>, bool)>,
) -> bool {
    out.clear();
    let mut unused = Vec::new();
    // The row before lent from its header: its bytes and layout, and its columns.
    let mut before: Option<(&'a [u8], Layout, ColumnCells<'a>)> = None;
    for bytes in rows {
        if let Some((prev, layout, cells)) = before
            && let Some((first_time, values)) = layout.same_in(prev, bytes)
        {
            // Its qualifiers, time differences and lengths are the row before's bytes.
            let cells = ColumnCells {
                first_time,
                values,
                ..cells
            };
            if !read.time_range.is_all() && !cells.times().all(|t| read.time_range.contains(t)) {
                return false;
            }
            out.push((cells, true));
            continue;
        }
        let Ok(Some(cells)) = lend_row(bytes, read, &mut unused) else {
            return false;
        };
        let Some(layout) = Layout::of(bytes, cells.values.len()) else {
            return false;
        };
        before = Some((bytes, layout, cells));
        out.push((cells, false));
    }
    true
}

/// Where a column row's first cell time lies (`time_at..time_end`) and where its values
/// start: the bytes before the first time and those from its end to the values are the
/// row's layout.
#[derive(Debug, Clone, Copy)]
struct Layout {
    time_at: usize,
    time_end: usize,
    values_at: usize,
}

impl Layout {
    /// The layout of a column row `bytes` (lent as columns: its header reads) whose values
    /// are its last `values_len` bytes.
    fn of(bytes: &[u8], values_len: usize) -> Option<Layout> {
        let mut r = Reader { bytes, pos: 1 };
        r.varint().ok()?;
        r.chunk().ok()?;
        r.varint().ok()?;
        let time_at = r.pos;
        r.varint().ok()?;
        let values_at = bytes.len().checked_sub(values_len)?;
        (r.pos <= values_at).then_some(Layout {
            time_at,
            time_end: r.pos,
            values_at,
        })
    }

    /// The first time and the values of `bytes` when it is a row of this layout (that of
    /// `prev`): the same bytes before and after its first time, values as long.
    #[inline]
    fn same_in<'a>(&self, prev: &[u8], bytes: &'a [u8]) -> Option<(i64, &'a [u8])> {
        let head = prev.get(..self.time_at)?;
        if bytes.get(..self.time_at)? != head {
            return None;
        }
        let mut r = Reader {
            bytes,
            pos: self.time_at,
        };
        let z = r.varint().ok()?;
        let body = prev.get(self.time_end..self.values_at)?;
        let values_at = r.pos.checked_add(body.len())?;
        let values_len = prev.len() - self.values_at;
        if bytes.get(r.pos..values_at)? != body || bytes.len() - values_at != values_len {
            return None;
        }
        Some((unzigzag(z), bytes.get(values_at..)?))
    }
}

/// A column row (RFC 0011) lent as its columns by [`lend_row`]: every stored cell, in the
/// stored order (qualifier, then newest first), of one family and one qualifier length,
/// qualifiers and values borrowed from the stored bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnCells<'a> {
    family: &'a str,
    q_len: usize,
    /// `n x q_len` bytes.
    qualifiers: &'a [u8],
    first_time: i64,
    /// Every time difference is one byte (below 0x80).
    small_times: bool,
    /// One zigzag difference a cell: a byte each when `small_times`, else varints (checked
    /// when lent: exactly one a cell).
    times: &'a [u8],
    /// One length a cell (each below 0x80), adding up to `values`' length.
    lens: &'a [u8],
    values: &'a [u8],
}

impl<'a> ColumnCells<'a> {
    /// The cells' family.
    pub fn family(&self) -> &'a str {
        self.family
    }

    /// How many cells.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    /// Whether there is no cell (a stored column row has two at least).
    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// The length of every qualifier.
    pub fn qualifier_len(&self) -> usize {
        self.q_len
    }

    /// The qualifiers, concatenated (`len() x qualifier_len()` bytes, in cell order:
    /// ascending bytes).
    pub fn qualifiers(&self) -> &'a [u8] {
        self.qualifiers
    }

    /// The values' bytes, all cells together.
    pub fn value_bytes(&self) -> usize {
        self.values.len()
    }

    /// The `i`th cell's qualifier (empty past the last).
    pub fn qualifier(&self, i: usize) -> &'a [u8] {
        let at = i.saturating_mul(self.q_len);
        self.qualifiers
            .get(at..at.saturating_add(self.q_len))
            .unwrap_or_default()
    }

    /// The value lengths of the cells in `range` (clamped to the cells), one byte a cell,
    /// and the values' bytes from the first of them on (to the row's last value): the
    /// `k`th value of the range is the bytes after the first `k` lengths' sum.
    pub fn value_run(&self, range: std::ops::Range<usize>) -> (&'a [u8], &'a [u8]) {
        let end = range.end.min(self.len());
        let start = range.start.min(end);
        let at: usize = self.lens[..start].iter().map(|b| usize::from(*b)).sum();
        (
            &self.lens[start..end],
            self.values.get(at..).unwrap_or_default(),
        )
    }

    /// The values of the cells in `range` (clamped to the cells), in order.
    pub fn values(&self, range: std::ops::Range<usize>) -> ColumnValues<'a> {
        let end = range.end.min(self.len());
        let start = range.start.min(end);
        let at = self.lens[..start].iter().map(|b| usize::from(*b)).sum();
        ColumnValues {
            lens: &self.lens[start..end],
            values: self.values,
            at,
        }
    }

    /// The cells' times (ms), in order.
    fn times(&self) -> impl Iterator<Item = i64> + 'a {
        let mut before = self.first_time;
        let (small, mut times) = (
            self.small_times,
            Reader {
                bytes: self.times,
                pos: 0,
            },
        );
        (0..self.len()).map(move |_| {
            let z = if small {
                u64::from(times.byte().unwrap_or_default())
            } else {
                // Checked when lent: one varint a cell.
                times.varint().unwrap_or_default()
            };
            let d = unzigzag(z);
            before = before.wrapping_add(d);
            before
        })
    }

    /// The cells one by one, into `out` (cleared first).
    pub fn lend(&self, out: &mut Vec<crate::CellRef<'a>>) {
        out.clear();
        out.reserve(self.len());
        let values = self.values(0..self.len());
        for ((i, timestamp), value) in (0..self.len()).zip(self.times()).zip(values) {
            let qualifier = self.qualifier(i);
            out.push(crate::CellRef {
                family: self.family,
                qualifier,
                timestamp,
                value,
                form: CellForm::Plain,
            });
        }
    }
}

/// The values of a run of a column row's cells ([`ColumnCells::values`]).
#[derive(Debug, Clone)]
pub struct ColumnValues<'a> {
    lens: &'a [u8],
    values: &'a [u8],
    at: usize,
}

impl<'a> Iterator for ColumnValues<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let (&len, rest) = self.lens.split_first()?;
        self.lens = rest;
        let end = self.at + usize::from(len);
        // The lengths add up to the values' length (checked when lent).
        let value = self.values.get(self.at..end).unwrap_or_default();
        self.at = end;
        Some(value)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.lens.len(), Some(self.lens.len()))
    }
}

impl ExactSizeIterator for ColumnValues<'_> {}

/// A cell of a column row: qualifier, time, value.
type LentCell<'a> = (&'a [u8], i64, &'a [u8]);

/// A format `0x03` row being read: a cursor in each column.
struct Columns<'a> {
    n: usize,
    family: &'a [u8],
    q_len: usize,
    /// Cells read so far.
    done: usize,
    qualifiers: &'a [u8],
    times: Reader<'a>,
    lens: Reader<'a>,
    values: Reader<'a>,
    /// Every time difference, and every value length, is a one-byte varint (checked once
    /// for the row, so a cell reads each with a load).
    small_times: bool,
    small_lens: bool,
    /// The time of the cell before.
    before: i64,
}

impl<'a> Columns<'a> {
    /// The row's header and column bounds (`bytes` from its format byte on).
    fn read(bytes: &'a [u8]) -> Result<Columns<'a>> {
        let mut r = Reader { bytes, pos: 1 };
        let n = r.varint()?;
        let family = r.chunk()?;
        let q_len = r.varint()?;
        let z = r.varint()?;
        let first = unzigzag(z);
        let times_len = r.varint()?;
        let lens_len = r.varint()?;
        let rest = bytes.len() - r.pos;
        let bad = || Error::Corrupt("bad column row".into());
        // Each cell takes a byte of times and one of lengths at least.
        if n < 2 || n > rest as u64 {
            return Err(bad());
        }
        let q_bytes = n.checked_mul(q_len).filter(|b| *b <= rest as u64);
        let q_bytes = q_bytes.ok_or_else(bad)? as usize;
        let times_at = r.pos + q_bytes;
        let lens_at = (times_at as u64).checked_add(times_len);
        let values_at = lens_at.and_then(|l| l.checked_add(lens_len));
        let (lens_at, values_at) = match (lens_at, values_at) {
            (Some(l), Some(v)) if v <= bytes.len() as u64 => (l as usize, v as usize),
            _ => return Err(Error::Corrupt("truncated row".into())),
        };
        // No continuation bit in the section (its bytes ORed: one pass the compiler
        // vectorizes).
        let one_byte_each = |section: &[u8]| {
            section.len() as u64 == n && section.iter().fold(0u8, |all, b| all | b) < 0x80
        };
        Ok(Columns {
            n: n as usize,
            family,
            q_len: q_len as usize,
            done: 0,
            qualifiers: &bytes[r.pos..times_at],
            small_times: one_byte_each(&bytes[times_at..lens_at]),
            small_lens: one_byte_each(&bytes[lens_at..values_at]),
            times: Reader {
                bytes: &bytes[..lens_at],
                pos: times_at,
            },
            lens: Reader {
                bytes: &bytes[..values_at],
                pos: lens_at,
            },
            values: Reader {
                bytes,
                pos: values_at,
            },
            before: first,
        })
    }

    /// The next cell: qualifier, time, value; `None` after the last, once every column
    /// ended where it should.
    #[inline]
    fn next_cell(&mut self) -> Result<Option<LentCell<'a>>> {
        if self.done == self.n {
            if self.times.pos != self.times.bytes.len()
                || self.lens.pos != self.lens.bytes.len()
                || self.values.pos != self.values.bytes.len()
            {
                return Err(Error::Corrupt("trailing bytes after row".into()));
            }
            return Ok(None);
        }
        let at = self.done * self.q_len;
        let qualifier = &self.qualifiers[at..at + self.q_len];
        let z = if self.small_times {
            // One byte a cell, `n` of them: within the section.
            let b = self.times.bytes[self.times.pos];
            self.times.pos += 1;
            u64::from(b)
        } else {
            self.times.varint()?
        };
        let d = unzigzag(z);
        let timestamp = self.before.wrapping_add(d);
        self.before = timestamp;
        let len = if self.small_lens {
            let b = self.lens.bytes[self.lens.pos];
            self.lens.pos += 1;
            usize::from(b)
        } else {
            self.lens.varint()? as usize
        };
        let end = self.values.pos.checked_add(len);
        let end = end.filter(|e| *e <= self.values.bytes.len());
        let end = end.ok_or_else(|| Error::Corrupt("truncated row".into()))?;
        let value = &self.values.bytes[self.values.pos..end];
        self.values.pos = end;
        self.done += 1;
        Ok(Some((qualifier, timestamp, value)))
    }
}

fn family_of<'a>(spec: &'a TableSpec, family: &str) -> Result<&'a crate::FamilySpec> {
    spec.families
        .iter()
        .find(|f| f.name == family)
        .ok_or_else(|| Error::FamilyNotFound {
            table: spec.name.clone(),
            family: family.to_string(),
        })
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    #[inline]
    fn byte(&mut self) -> Result<u8> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| Error::Corrupt("truncated row".into()))?;
        self.pos += 1;
        Ok(b)
    }

    /// At most 10 bytes (64 bits); a last byte with its continuation bit set is too long.
    #[inline(always)]
    fn varint(&mut self) -> Result<u64> {
        // Lengths and counts: one byte, read where the varint is (a column row's header has
        // seven).
        if let Some(&b) = self.bytes.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        self.long_varint()
    }

    /// [`Reader::varint`] of more than one byte (or of none).
    #[inline(never)]
    fn long_varint(&mut self) -> Result<u64> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        // Up to 8 bytes at once when 8 are there: the first byte without its continuation
        // bit ends the varint, and the 7-bit groups before it are packed together.
        if let Some(word) = rest.get(..8).and_then(|w| <[u8; 8]>::try_from(w).ok()) {
            let word = u64::from_le_bytes(word);
            let ends = !word & 0x8080_8080_8080_8080;
            if ends != 0 {
                let len = ends.trailing_zeros() / 8 + 1;
                let kept = if len == 8 {
                    word
                } else {
                    word & ((1u64 << (len * 8)) - 1)
                };
                let mut x = kept & 0x7F7F_7F7F_7F7F_7F7F;
                x = ((x & 0x7F00_7F00_7F00_7F00) >> 1) | (x & 0x007F_007F_007F_007F);
                x = ((x & 0x3FFF_0000_3FFF_0000) >> 2) | (x & 0x0000_3FFF_0000_3FFF);
                x = ((x & 0x0FFF_FFFF_0000_0000) >> 4) | (x & 0x0000_0000_0FFF_FFFF);
                self.pos += len as usize;
                return Ok(x);
            }
        }
        let mut v = 0u64;
        for (i, &b) in rest.iter().take(10).enumerate() {
            v |= u64::from(b & 0x7F) << (7 * i);
            if b < 0x80 {
                self.pos += i + 1;
                return Ok(v);
            }
        }
        Err(Error::Corrupt(if rest.len() < 10 {
            "truncated row".into()
        } else {
            "varint too long".into()
        }))
    }

    #[inline]
    fn chunk(&mut self) -> Result<&'a [u8]> {
        let len = self.varint()? as usize;
        let end = self.pos.checked_add(len).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or_else(|| Error::Corrupt("truncated row".into()))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FamilySpec;

    #[test]
    fn a_one_cell_row_encodes_as_its_row_model() {
        let spec = TableSpec {
            name: "t".into(),
            families: vec![FamilySpec::new("p", Some(1))],
        };
        for (ts, value) in [
            (0, Vec::new()),
            (1_370_995_200_000, vec![0, 0, 7]),
            (-3, vec![9; 300]),
        ] {
            let mut row = RowData::default();
            row.apply(
                &spec,
                &[
                    Mutation::DeleteRow,
                    Mutation::set_at("p", b"s".to_vec(), ts, value.clone()),
                ],
                0,
            )
            .unwrap();
            let one = RowData::encode_one_plain("p", b"s", ts, &value);
            assert_eq!(one, row.encode(None));
            assert_eq!(RowData::decode(&one, None).unwrap(), row);
        }
    }

    #[test]
    fn varints_end_within_ten_bytes_or_are_refused() {
        let count = |bytes: &[u8]| RowData::decode(bytes, None).map(|r| r.cells.len());
        // Ten bytes, the last without its continuation bit: zero cells (the bits beyond 64
        // dropped), then the row's end.
        let mut ten = vec![1];
        ten.extend([0x80; 9]);
        ten.push(0x00);
        assert_eq!(count(&ten), Ok(0));
        let mut eleven = vec![1];
        eleven.extend([0xFF; 10]);
        eleven.push(0x01);
        assert_eq!(
            count(&eleven),
            Err(Error::Corrupt("varint too long".into()))
        );
        assert_eq!(
            count(&[1, 0x80, 0x80]),
            Err(Error::Corrupt("truncated row".into()))
        );
        assert_eq!(count(&[1]), Err(Error::Corrupt("truncated row".into())));
    }

    /// Table `t` of one family `f`, versions unlimited.
    fn spec_f() -> TableSpec {
        TableSpec {
            name: "t".into(),
            families: vec![FamilySpec::new("f", None)],
        }
    }

    #[test]
    fn encoding_round_trips_and_rejects_garbage() {
        let spec = spec_f();
        let mut row = RowData::default();
        row.apply(
            &spec,
            &[
                Mutation::set_at("f", b"q".to_vec(), -5, b"v".to_vec()),
                Mutation::set_at("f", vec![], i64::MAX, vec![0; 300]),
            ],
            0,
        )
        .unwrap();
        let bytes = row.encode(None);
        assert_eq!(RowData::decode(&bytes, None), Ok(row));
        for cut in 0..bytes.len() {
            assert!(RowData::decode(&bytes[..cut], None).is_err());
        }
        assert!(
            RowData::decode(
                &[
                    1, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01
                ],
                None
            )
            .is_err()
        );
    }

    /// The column row format's bytes (docs/rfcs/0011-column-rows.md): the RFC's example,
    /// read back as its cells; rows of one cell or of mixed families or qualifier lengths,
    /// and tables with a codec, keep their formats.
    #[test]
    fn column_rows_have_their_documented_bytes() {
        let spec = TableSpec {
            name: "r".into(),
            families: vec![FamilySpec::new("t", Some(1))],
        };
        let at = 1_356_998_400_000;
        let mut row = RowData::default();
        row.apply(
            &spec,
            &[
                Mutation::set_at("t", vec![0, 0, 0], at, vec![42]),
                Mutation::set_at("t", vec![1, 0, 0], at, vec![3]),
            ],
            0,
        )
        .unwrap();
        let bytes = row.encode(None);
        #[rustfmt::skip]
        let want = [
            0x03, 2, 1, b't', 3, // format, two cells, family `t`, 3-byte qualifiers
            0x80, 0xE0, 0xC2, 0xB6, 0xFE, 0x4E, // the first time
            2, 2, // 2 bytes of times, 2 of value lengths
            0, 0, 0, 1, 0, 0, // qualifiers
            0, 0, // times: +0, +0
            1, 1, 42, 3, // value lengths, values
        ];
        assert_eq!(bytes, want);
        assert_eq!(bytes.len(), 25);
        assert_eq!(RowData::decode(&bytes, None), Ok(row.clone()));
        // The same cells as plain cells: 30 bytes.
        let mut plain = row.clone();
        plain.cells.truncate(1);
        assert_eq!(plain.encode(None).len() * 2 - 2, 30);
        assert_eq!(plain.encode(None)[0], ROW_FORMAT_PLAIN);
        assert_eq!(row.encode(Some(&Tagged))[0], ROW_FORMAT_CODED);
        let mut mixed = row.clone();
        mixed
            .apply(
                &spec,
                &[Mutation::set_at("t", b"sum:\0\0".to_vec(), at, vec![1])],
                0,
            )
            .unwrap();
        assert_eq!(mixed.encode(None)[0], ROW_FORMAT_PLAIN);
        // A count below 2 and a qualifier column past the end are refused, as cuts are.
        let mut one = want;
        one[1] = 1;
        assert_eq!(
            RowData::decode(&one, None),
            Err(Error::Corrupt("bad column row".into()))
        );
        let mut long = want;
        long[4] = 30;
        // A varint of the times cut by its section's end is refused.
        let mut cut_time = want;
        cut_time[20] = 0x80;
        assert_eq!(
            RowData::decode(&cut_time, None),
            Err(Error::Corrupt("truncated row".into()))
        );
        assert_eq!(
            RowData::decode(&long, None),
            Err(Error::Corrupt("bad column row".into()))
        );
        for cut in 0..bytes.len() {
            assert!(RowData::decode(&bytes[..cut], None).is_err());
        }
    }

    /// A codec that stores qualifier `q` cells as `[0xC0, value...]`.
    #[derive(Debug)]
    struct Tagged;

    impl CellCodec for Tagged {
        fn encode(&self, _family: &str, qualifier: &[u8], value: &[u8]) -> Option<Vec<u8>> {
            (qualifier == b"q").then(|| [&[0xC0][..], value].concat())
        }
        fn decode(&self, _family: &str, encoded: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
            match encoded.split_first() {
                Some((0xC0, v)) => Ok((b"q".to_vec(), v.to_vec())),
                _ => Err(Error::Corrupt("not ours".into())),
            }
        }
    }

    /// The coded row format's bytes (docs/rfcs/0002-embedded-row-encoding.md), reading it
    /// back decoded or in the codec's form, and refusing it without the codec.
    #[test]
    fn coded_rows_have_their_documented_bytes() {
        let spec = spec_f();
        let mut row = RowData::default();
        row.apply(
            &spec,
            &[
                Mutation::set_at("f", b"q".to_vec(), 1, vec![7, 8]),
                Mutation::set_at("f", b"r".to_vec(), -1, vec![9]),
            ],
            0,
        )
        .unwrap();
        let bytes = row.encode(Some(&Tagged));
        assert_eq!(
            bytes,
            [
                0x02, 2, // coded format, two cells
                1, 1, b'f', 2, 3, 0xC0, 7, 8, // coded: family, zigzag ts 1, blob
                0, 1, b'f', 1, b'r', 1, 1, 9, // plain: family, qualifier, zigzag ts -1, value
            ]
        );
        assert_eq!(RowData::decode(&bytes, Some(&Tagged)), Ok(row.clone()));
        let kept = RowData::decode_with(&bytes, Some(&Tagged), true).unwrap();
        let coded = &kept.cells[0];
        assert_eq!(
            (
                coded.form,
                coded.qualifier.as_slice(),
                coded.value.as_slice()
            ),
            (CellForm::Encoded, &b""[..], &[0xC0, 7, 8][..])
        );
        assert_eq!(kept.cells[1].form, CellForm::Plain);
        assert_eq!(
            RowData::decode(&bytes, None),
            Err(Error::Corrupt(
                "cell was stored with a codec this store was not given".into()
            ))
        );
    }

    /// A row whose only cell the codec takes (RFC 0015): its bytes, read decoded, in the
    /// codec's form and refused without the codec; a second cell, or a cell the codec
    /// declines, keeps format 0x02.
    #[test]
    fn one_coded_cell_rows() {
        let spec = spec_f();
        let mut row = RowData::default();
        row.apply(
            &spec,
            &[Mutation::set_at("f", b"q".to_vec(), 1, vec![7, 8])],
            0,
        )
        .unwrap();
        let bytes = row.encode(Some(&Tagged));
        // Format, family, zigzag timestamp 1, blob: three bytes fewer than format 0x02.
        assert_eq!(bytes, [0x04, 1, b'f', 2, 0xC0, 7, 8]);
        let two = [0x02, 1, 1, 1, b'f', 2, 3, 0xC0, 7, 8];
        assert_eq!(RowData::decode(&two, Some(&Tagged)), Ok(row.clone()));
        assert_eq!(RowData::decode(&bytes, Some(&Tagged)), Ok(row.clone()));
        let kept = RowData::decode_with(&bytes, Some(&Tagged), true).unwrap();
        let coded = &kept.cells[0];
        assert_eq!(
            (
                coded.form,
                coded.qualifier.as_slice(),
                coded.timestamp,
                coded.value.as_slice()
            ),
            (CellForm::Encoded, &b""[..], 1, &[0xC0, 7, 8][..])
        );
        let refused = Err(Error::Corrupt(
            "cell was stored with a codec this store was not given".into(),
        ));
        assert_eq!(RowData::decode(&bytes, None), refused);
        let mut lent = Vec::new();
        assert_eq!(
            lend_cells(&bytes, &ReadOptions::default(), &mut lent),
            refused.map(|_: RowData| ())
        );
        // Cut within the family or the timestamp: refused with and without the codec; an
        // empty blob is the codec's to refuse.
        for cut in 1..4 {
            assert!(RowData::decode(&bytes[..cut], Some(&Tagged)).is_err());
            assert!(lend_cells(&bytes[..cut], &ReadOptions::default(), &mut lent).is_err());
        }
        assert!(RowData::decode(&bytes[..4], Some(&Tagged)).is_err());
        // Two cells, or one the codec declines: format 0x02.
        let mut more = row.clone();
        more.apply(
            &spec,
            &[Mutation::set_at("f", b"q".to_vec(), 2, vec![9])],
            0,
        )
        .unwrap();
        assert_eq!(more.encode(Some(&Tagged))[0], ROW_FORMAT_CODED);
        let mut declined = RowData::default();
        declined
            .apply(
                &spec,
                &[Mutation::set_at("f", b"r".to_vec(), 1, vec![9])],
                0,
            )
            .unwrap();
        assert_eq!(declined.encode(Some(&Tagged))[0], ROW_FORMAT_CODED);
    }
}

/// The per-row part of a scan: key regex, cell filters and the row limit.
#[derive(Debug)]
pub struct ScanFilter {
    regex: Option<crate::KeyRegex>,
    read: ReadOptions,
    limit: Option<usize>,
}

impl ScanFilter {
    pub fn new(request: &crate::ScanRequest) -> Result<ScanFilter> {
        let regex = request
            .key_regex
            .as_deref()
            .map(crate::KeyRegex::new)
            .transpose()?;
        Ok(ScanFilter {
            regex,
            read: request.read.clone(),
            limit: request.limit,
        })
    }

    /// Whether a row key passes the regex (check before decoding the row).
    pub fn key_matches(&self, key: &[u8]) -> bool {
        self.regex.as_ref().is_none_or(|r| r.is_match(key))
    }

    pub fn accept(&self, key: &[u8], row: &RowData) -> Option<Row> {
        if !self.key_matches(key) {
            return None;
        }
        row.read(key, &self.read)
    }

    /// [`ScanFilter::accept`] for a key already known to pass the regex, taking the row.
    pub fn accept_matched(&self, key: Vec<u8>, row: RowData) -> Option<Row> {
        row.into_read(key, &self.read)
    }

    /// The cell filters.
    pub fn read(&self) -> &ReadOptions {
        &self.read
    }

    /// True once `returned` rows reach the limit.
    pub fn is_full(&self, returned: usize) -> bool {
        self.limit.is_some_and(|l| returned >= l)
    }
}

#[cfg(test)]
mod fuzz_tests {
    use super::RowData;

    /// [`super::lend_row`]'s cells, from its columns or lent one by one.
    fn lent_row<'a>(
        bytes: &'a [u8],
        read: &crate::ReadOptions,
    ) -> crate::Result<Vec<crate::CellRef<'a>>> {
        let mut out = Vec::new();
        if let Some(columns) = super::lend_row(bytes, read, &mut out)? {
            assert!(out.is_empty(), "columns lent with cells");
            columns.lend(&mut out);
        }
        Ok(out)
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = RowData::decode(&bytes, None);
            let _ = super::decode_joint_row(&bytes);
        }

        #[test]
        fn lent_cells_are_the_decoded_cells_read(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120),
            cells in proptest::collection::vec((0u8..3, proptest::collection::vec(0u8..3, 0..3), -3i64..3, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3)), 0..12),
            family in proptest::option::of(0u8..3),
            range in proptest::option::of((-3i64..3, proptest::option::of(-3i64..4))),
            latest_only in proptest::prelude::any::<bool>(),
            keys_only in proptest::prelude::any::<bool>(),
        ) {
            let name = |f: u8| ["t", "f", "g"][usize::from(f)].to_string();
            let cells = cells
                .into_iter()
                .map(|(f, qualifier, timestamp, value)| crate::Cell {
                    family: name(f),
                    qualifier,
                    timestamp,
                    value,
                    form: crate::CellForm::Plain,
                })
                .collect();
            let read = crate::ReadOptions {
                families: family.map(|f| vec![name(f)]),
                time_range: range.map_or(crate::TimeRange::ALL, |(s, e)| crate::TimeRange::new(s, e)),
                latest_only,
                keys_only,
                ..Default::default()
            };
            let stored = RowData::from_cells(cells).encode(None);
            // Garbage, and stored rows whole and cut short.
            for b in [&bytes[..], &stored[..], &stored[..stored.len() / 2]] {
                let decoded = RowData::decode(b, None).map(|r| r.into_read(b"k".to_vec(), &read));
                let mut lent = Vec::new();
                let got = super::lend_cells(b, &read, &mut lent);
                proptest::prop_assert_eq!(lent_row(b, &read), got.clone().map(|()| lent.clone()));
                match decoded {
                    Ok(row) => {
                        proptest::prop_assert_eq!(got, Ok(()));
                        let want: Vec<crate::CellRef<'_>> = row
                            .as_ref()
                            .map(|r| r.cells.iter().map(crate::CellRef::from).collect())
                            .unwrap_or_default();
                        proptest::prop_assert_eq!(lent, want);
                    }
                    Err(e) => proptest::prop_assert_eq!(got, Err(e)),
                }
            }
        }

        #[test]
        fn column_rows_round_trip_and_lend_their_cells(
            q_len in 0usize..4,
            cells in proptest::collection::vec((proptest::collection::vec(proptest::prelude::any::<u8>(), 4), proptest::prelude::any::<i64>(), proptest::collection::vec(proptest::prelude::any::<u8>(), 0..10)), 0..24),
            same_time in proptest::prelude::any::<bool>(),
            latest_only in proptest::prelude::any::<bool>(),
        ) {
            let cells: Vec<crate::Cell> = cells
                .into_iter()
                .map(|(q, t, value)| crate::Cell {
                    family: "t".into(),
                    qualifier: q[..q_len].to_vec(),
                    timestamp: if same_time { 1_356_998_400_000 } else { t },
                    value,
                    form: crate::CellForm::Plain,
                })
                .collect();
            let row = RowData::from_cells(cells);
            let stored = row.encode(None);
            let columns = row.cells().len() >= 2;
            proptest::prop_assert_eq!(stored[0] == super::ROW_FORMAT_COLUMNS, columns);
            proptest::prop_assert_eq!(RowData::decode(&stored, None), Ok(row.clone()));
            let read = crate::ReadOptions { latest_only, ..Default::default() };
            let mut lent = Vec::new();
            proptest::prop_assert_eq!(super::lend_cells(&stored, &read, &mut lent), Ok(()));
            let want = row.clone().into_read(b"k".to_vec(), &read);
            let want: Vec<crate::CellRef<'_>> = want
                .as_ref()
                .map(|r| r.cells.iter().map(crate::CellRef::from).collect())
                .unwrap_or_default();
            proptest::prop_assert_eq!(&lent, &want);
            // As columns when one byte a cell holds each length, whatever the times.
            let small = row.cells().iter().all(|c| c.value.len() < 0x80);
            let mut out = Vec::new();
            let got = super::lend_row(&stored, &read, &mut out);
            proptest::prop_assert_eq!(got.is_ok_and(|c| c.is_some()), columns && small && !latest_only);
            proptest::prop_assert_eq!(lent_row(&stored, &read), Ok(want));
            for cut in 0..stored.len() {
                proptest::prop_assert!(RowData::decode(&stored[..cut], None).is_err());
                let mut lent = Vec::new();
                proptest::prop_assert_eq!(
                    lent_row(&stored[..cut], &read),
                    super::lend_cells(&stored[..cut], &read, &mut lent).map(|()| lent)
                );
            }
            // The last time difference's last byte with its continuation bit set (the
            // varint runs into the lengths) fails as walking the cells fails.
            if columns && small {
                let lens_at = stored.len() - row.cells().iter().map(|c| c.value.len()).sum::<usize>() - row.cells().len();
                let mut bad = stored.clone();
                bad[lens_at - 1] |= 0x80;
                let mut lent = Vec::new();
                proptest::prop_assert_eq!(
                    lent_row(&bad, &read),
                    super::lend_cells(&bad, &read, &mut lent).map(|()| lent)
                );
            }
            // A value length off by one either way fails as walking the cells fails.
            if columns && small && !row.cells().is_empty() {
                let last_len = stored.len() - row.cells().iter().map(|c| c.value.len()).sum::<usize>() - 1;
                for delta in [1u8, 0xFF] {
                    let mut bad = stored.clone();
                    bad[last_len] = bad[last_len].wrapping_add(delta);
                    let mut lent = Vec::new();
                    proptest::prop_assert_eq!(
                        lent_row(&bad, &read),
                        super::lend_cells(&bad, &read, &mut lent).map(|()| lent)
                    );
                }
            }
        }

        #[test]
        fn varints_read_as_the_plain_loop_reads_them(
            values in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..6),
            small in proptest::collection::vec(0u64..1 << 21, 0..6),
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
        ) {
            // The plain loop: one byte at a time, at most 10.
            fn plain(bytes: &[u8], pos: usize) -> Option<(u64, usize)> {
                let mut v = 0u64;
                for i in 0..10 {
                    let b = *bytes.get(pos + i)?;
                    v |= u64::from(b & 0x7F) << (7 * i);
                    if b < 0x80 {
                        return Some((v, pos + i + 1));
                    }
                }
                None
            }
            let mut bytes = Vec::new();
            for v in values.iter().chain(&small) {
                super::put_varint(&mut bytes, *v);
            }
            bytes.extend_from_slice(&tail);
            let mut r = super::Reader { bytes: &bytes, pos: 0 };
            let mut at = 0;
            for v in values.iter().chain(&small) {
                proptest::prop_assert_eq!(r.varint(), Ok(*v));
                at = r.pos;
            }
            // Then whatever the tail holds, from every position.
            for start in at..=bytes.len() {
                let mut r = super::Reader { bytes: &bytes, pos: start };
                let got = r.varint().ok().map(|v| (v, r.pos));
                proptest::prop_assert_eq!(got, plain(&bytes, start));
            }
        }

        #[test]
        fn joint_rows_round_trip(
            members in proptest::collection::vec((proptest::prelude::any::<u32>(), proptest::prelude::any::<u32>(), proptest::option::of(proptest::prelude::any::<u8>()), proptest::prelude::any::<i64>()), 0..10),
            stream in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20),
        ) {
            let members: Vec<(super::JointMember, i64)> = members
                .into_iter()
                .map(|(offset_secs, points, meta, ts)| (super::JointMember { offset_secs, shape: super::JointShape { points, meta } }, ts))
                .collect();
            let bytes = super::encode_joint_row(&members, &stream);
            let (m, s) = super::decode_joint_row(&bytes).unwrap();
            proptest::prop_assert_eq!(m, members);
            proptest::prop_assert_eq!(s, stream.as_slice());
        }
    }
}
