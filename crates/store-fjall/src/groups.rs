//! Series-period groups (RFC 0006): the rows of one series in one closed period kept under
//! one key of a second keyspace (`g:<table>`), below the `Store` trait. Callers still see
//! OpenTSDB's rows: a row key's row is its value in the row keyspace if there is one, else
//! its member in its group, else nothing.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use hourglass_storage::model::RowData;
use hourglass_storage::rice;
use hourglass_storage::{
    Cell, CellCodec, CellForm, Error, JointCell, JointMember, JointShape, Result,
};

/// How a table groups rows: where the 4-byte base time sits in a row key (after the salt
/// and metric), the period a group spans, and how long after a period ends it is grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grouping {
    pub timestamp_offset: usize,
    pub period_secs: u32,
    pub grace_secs: u32,
}

/// The first byte of a group value.
pub(crate) const GROUP_FORMAT: u8 = 0x01;

/// A row key's window: its salt and metric bytes, and the start of its base time's period.
pub(crate) type Window<'a> = (&'a [u8], u32);

impl Grouping {
    /// A key's base time, when the key is long enough to hold one.
    pub(crate) fn base(&self, key: &[u8]) -> Option<u32> {
        let at = self.timestamp_offset;
        let b = key.get(at..at + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn period_start(&self, base: u32) -> u32 {
        base - base % self.period_secs
    }

    /// The window of a row key or group key (`None` for keys too short to be grouped).
    pub(crate) fn window<'a>(&self, key: &'a [u8]) -> Option<Window<'a>> {
        let base = self.base(key)?;
        Some((&key[..self.timestamp_offset], self.period_start(base)))
    }

    /// The end (exclusive, seconds) of a row key's period.
    pub(crate) fn period_end(&self, key: &[u8]) -> Option<u64> {
        let base = self.base(key)?;
        Some(u64::from(self.period_start(base)) + u64::from(self.period_secs))
    }

    /// Periods ending at or before this time (seconds) are closed at `now_secs`.
    pub(crate) fn closed_through(&self, now_secs: i64) -> u64 {
        let settled = now_secs.saturating_sub(i64::from(self.grace_secs)).max(0) as u64;
        settled - settled % u64::from(self.period_secs)
    }

    /// A row key's group key (its base time replaced by its period's start) and its
    /// offset in the group (seconds from the period's start).
    pub(crate) fn split(&self, key: &[u8]) -> Option<(Vec<u8>, u32)> {
        let base = self.base(key)?;
        let start = self.period_start(base);
        let mut group = key.to_vec();
        let at = self.timestamp_offset;
        group[at..at + 4].copy_from_slice(&start.to_be_bytes());
        Some((group, base - start))
    }

    /// The row key of member `offset` of a group.
    pub(crate) fn member_key(&self, group_key: &[u8], offset: u32) -> Option<Vec<u8>> {
        let mut key = group_key.to_vec();
        self.make_member_key(&mut key, offset)?;
        Some(key)
    }

    /// Turns `key`, a group's key or one of its members' keys, into member `offset`'s key in
    /// place (one buffer for all the members of a group).
    pub(crate) fn make_member_key(&self, key: &mut [u8], offset: u32) -> Option<()> {
        let start = self.period_start(self.base(key)?);
        let at = self.timestamp_offset;
        key[at..at + 4].copy_from_slice(&start.checked_add(offset)?.to_be_bytes());
        Some(())
    }

    /// A key with its base time moved to the end: the order of rows within a window, series
    /// by series, each in time order.
    pub(crate) fn series_major(&self, key: &[u8]) -> Vec<u8> {
        hourglass_storage::series_major(key, self.timestamp_offset)
    }

    /// The smallest group key whose members can be at or after `start`.
    pub(crate) fn group_scan_start(&self, start: &[u8]) -> Vec<u8> {
        let at = self.timestamp_offset;
        match self.base(start) {
            Some(base) => {
                let mut out = start[..at].to_vec();
                out.extend_from_slice(&self.period_start(base).to_be_bytes());
                out
            }
            None => start[..start.len().min(at)].to_vec(),
        }
    }

    /// A key with its base time (if it holds one) replaced by its period's start: the
    /// smallest group key at or after every row key from `key` on in its series and period.
    pub(crate) fn floor_key(&self, key: &[u8]) -> Vec<u8> {
        match self.split(key) {
            Some((group_key, _)) => group_key,
            None => key.to_vec(),
        }
    }

    /// `Some` when the two keys are in the same window.
    pub(crate) fn same_window(&self, a: &[u8], b: &[u8]) -> bool {
        matches!((self.window(a), self.window(b)), (Some(x), Some(y)) if x == y)
    }

    /// Orders two windows (`None`, a key too short to group, sorts by its bytes).
    pub(crate) fn cmp_windows(&self, a: &[u8], b: &[u8]) -> Ordering {
        match (self.window(a), self.window(b)) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => a.cmp(b),
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The first byte of a group value holding joint members (phase 3), still read.
pub(crate) const GROUP_FORMAT_JOINT: u8 = 0x02;
/// The first byte of a group value holding joint members, its member fields in columns: what
/// is written.
pub(crate) const GROUP_FORMAT_COLUMNS: u8 = 0x03;
/// Member shapes of format 0x02: a row value, or a joint member without a meta byte, with
/// meta byte 0x00, with the meta byte that follows.
const SHAPE_ROW: u8 = 0x00;
const SHAPE_JOINT: u8 = 0x01;
const SHAPE_JOINT_META_0: u8 = 0x02;
const SHAPE_JOINT_META: u8 = 0x03;
const HOUR_SECS: u32 = 3600;

/// One member of a group value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Member<'a> {
    /// The member's row value (RFC 0002).
    Row(&'a [u8]),
    /// One cell of the group's joint family, rebuilt by the codec from the joint stream.
    Joint { shape: JointShape, timestamp: i64 },
}

/// A group value's members, offsets increasing, and for format 0x02 the family and stream
/// of its joint members.
#[derive(Debug)]
pub(crate) struct Group<'a> {
    pub(crate) members: Vec<(u32, Member<'a>)>,
    pub(crate) joint: Option<(&'a str, &'a [u8])>,
}

/// A group value of format 0x01:
/// `| format 0x01 | member count (varint) | members: offset delta (varint) | value length (varint) | value |`,
/// offsets strictly increasing (the first delta is the first offset), each value a row value
/// as the row keyspace holds it (RFC 0002).
pub(crate) fn encode_rows_group(members: &BTreeMap<u32, Vec<u8>>) -> Vec<u8> {
    let size: usize = members.values().map(|v| v.len() + 8).sum();
    let mut out = Vec::with_capacity(size + 6);
    out.push(GROUP_FORMAT);
    put_varint(&mut out, members.len() as u64);
    let mut previous = 0u32;
    for (i, (offset, value)) in members.iter().enumerate() {
        put_varint(
            &mut out,
            u64::from(if i == 0 { *offset } else { offset - previous }),
        );
        put_varint(&mut out, value.len() as u64);
        out.extend_from_slice(value);
        previous = *offset;
    }
    out
}

/// The group value of these member rows: format 0x03 when the codec takes some member's
/// only cell jointly (one family: the first one-cell member's), else format 0x01.
pub(crate) fn encode_group(
    members: &BTreeMap<u32, RowData>,
    codec: Option<&dyn CellCodec>,
) -> Vec<u8> {
    if let Some(codec) = codec
        && let Some(joint) = joint_group(members, codec)
    {
        return joint.columns();
    }
    encode_rows_group(
        &members
            .iter()
            .map(|(o, row)| (*o, row.encode(codec)))
            .collect(),
    )
}

/// One member's fields in formats 0x02 and 0x03.
enum Fields {
    /// A row value (RFC 0002, with the table's codec).
    Row(Vec<u8>),
    /// A joint member: its shape and its cell timestamp less the previous joint member's.
    Joint { shape: JointShape, timestamp: i64 },
}

/// Members with their steps (the offset delta as hours << 1, or seconds << 1 | 1), fields,
/// the joint family and the codec's stream: what formats 0x02 and 0x03 write.
struct JointGroup<'a> {
    members: Vec<(u64, Fields)>,
    family: &'a str,
    stream: Vec<u8>,
}

/// The joint form of `members`, when the codec takes a cell jointly.
fn joint_group<'a>(
    members: &'a BTreeMap<u32, RowData>,
    codec: &dyn CellCodec,
) -> Option<JointGroup<'a>> {
    let family = members.values().find_map(|row| match row.cells() {
        [cell] => Some(cell.family.as_str()),
        _ => None,
    })?;
    let candidates: Vec<(u32, &Cell)> = members
        .iter()
        .filter_map(|(o, row)| match row.cells() {
            [cell] if cell.family == family => Some((*o, cell)),
            _ => None,
        })
        .collect();
    let cells: Vec<JointCell<'_>> = candidates
        .iter()
        .map(|(o, c)| JointCell {
            offset_secs: *o,
            qualifier: &c.qualifier,
            value: &c.value,
        })
        .collect();
    let (shapes, stream) = codec.encode_joint(family, &cells)?;
    if shapes.len() != cells.len() || stream.is_empty() || shapes.iter().all(Option::is_none) {
        return None;
    }
    let joint: HashMap<u32, (JointShape, i64)> = candidates
        .iter()
        .zip(&shapes)
        .filter_map(|((o, c), shape)| shape.map(|s| (*o, (s, c.timestamp))))
        .collect();
    let (mut previous, mut previous_ts) = (0u32, 0i64);
    let mut out = Vec::with_capacity(members.len());
    for (i, (offset, row)) in members.iter().enumerate() {
        let d = if i == 0 { *offset } else { offset - previous };
        previous = *offset;
        let step = if d % HOUR_SECS == 0 {
            u64::from(d / HOUR_SECS) << 1
        } else {
            (u64::from(d) << 1) | 1
        };
        let fields = match joint.get(offset) {
            Some((shape, timestamp)) => {
                let delta = timestamp.wrapping_sub(previous_ts);
                previous_ts = *timestamp;
                Fields::Joint {
                    shape: *shape,
                    timestamp: delta,
                }
            }
            None => Fields::Row(row.encode(Some(codec))),
        };
        out.push((step, fields));
    }
    Some(JointGroup {
        members: out,
        family,
        stream,
    })
}

/// A joint member's shape byte, and its meta byte when the shape says one follows.
fn shape_byte(shape: &JointShape) -> (u8, Option<u8>) {
    match shape.meta {
        None => (SHAPE_JOINT, None),
        Some(0) => (SHAPE_JOINT_META_0, None),
        Some(m) => (SHAPE_JOINT_META, Some(m)),
    }
}

impl JointGroup<'_> {
    /// Format 0x03: `| 0x03 | member count (varint) | steps | shapes | meta bytes | point
    /// counts | timestamp deltas | row values | family | stream |`, the steps and shapes a
    /// Rice sequence over every member, the meta bytes one per member of shape 0x03, the
    /// point counts and timestamp deltas a Rice sequence over the joint members, the row
    /// values (length varint, value) of the row members, all in member order.
    fn columns(&self) -> Vec<u8> {
        let n = self.members.len();
        let (mut steps, mut shapes) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut metas, mut counts, mut timestamps) = (Vec::new(), Vec::new(), Vec::new());
        let mut rows = Vec::new();
        for (step, fields) in &self.members {
            steps.push(*step as i64);
            match fields {
                Fields::Joint { shape, timestamp } => {
                    let (byte, meta) = shape_byte(shape);
                    shapes.push(i64::from(byte));
                    metas.extend(meta);
                    counts.push(i64::from(shape.points));
                    timestamps.push(*timestamp);
                }
                Fields::Row(value) => {
                    shapes.push(i64::from(SHAPE_ROW));
                    put_varint(&mut rows, value.len() as u64);
                    rows.extend_from_slice(value);
                }
            }
        }
        let mut out = Vec::with_capacity(self.stream.len() + rows.len() + 32);
        out.push(GROUP_FORMAT_COLUMNS);
        put_varint(&mut out, n as u64);
        rice::write(&steps, &mut out);
        rice::write(&shapes, &mut out);
        out.extend_from_slice(&metas);
        rice::write(&counts, &mut out);
        rice::write(&timestamps, &mut out);
        out.extend_from_slice(&rows);
        self.tail(&mut out);
        out
    }

    /// Format 0x02, member after member (written before format 0x03; kept to test that it
    /// is still read).
    #[cfg(test)]
    fn members_format(&self) -> Vec<u8> {
        let mut out = vec![GROUP_FORMAT_JOINT];
        put_varint(&mut out, self.members.len() as u64);
        for (step, fields) in &self.members {
            put_varint(&mut out, *step);
            match fields {
                Fields::Joint { shape, timestamp } => {
                    let (byte, meta) = shape_byte(shape);
                    out.push(byte);
                    out.extend(meta);
                    put_varint(&mut out, u64::from(shape.points));
                    put_varint(&mut out, ((timestamp << 1) ^ (timestamp >> 63)) as u64);
                }
                Fields::Row(value) => {
                    out.push(SHAPE_ROW);
                    put_varint(&mut out, value.len() as u64);
                    out.extend_from_slice(value);
                }
            }
        }
        self.tail(&mut out);
        out
    }

    /// The family and the stream, after the members.
    fn tail(&self, out: &mut Vec<u8>) {
        put_varint(out, self.family.len() as u64);
        out.extend_from_slice(self.family.as_bytes());
        out.extend_from_slice(&self.stream);
    }
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

fn corrupt(what: &str) -> Error {
    Error::Corrupt(format!("bad row group: {what}"))
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| corrupt("truncated"))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(corrupt("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or_else(|| corrupt("truncated"))?;
        let out = self
            .bytes
            .get(self.pos..end)
            .ok_or_else(|| corrupt("truncated"))?;
        self.pos = end;
        Ok(out)
    }

    fn chunk(&mut self) -> Result<&'a [u8]> {
        let len = usize::try_from(self.varint()?).map_err(|_| corrupt("truncated"))?;
        self.take(len)
    }
}

/// A group value's members (formats 0x01, 0x02 and 0x03), values borrowed.
pub(crate) fn decode_group(bytes: &[u8]) -> Result<Group<'_>> {
    let joint_format = match bytes.first() {
        Some(&GROUP_FORMAT) => false,
        Some(&GROUP_FORMAT_JOINT) => true,
        Some(&GROUP_FORMAT_COLUMNS) => return decode_columns(bytes),
        _ => return Err(Error::Corrupt("unknown group format".into())),
    };
    let mut r = Reader { bytes, pos: 1 };
    let n = r.varint()?;
    if n > bytes.len() as u64 {
        return Err(corrupt("member count past its bytes"));
    }
    let mut members = Vec::with_capacity(n as usize);
    let (mut offset, mut timestamp, mut joint) = (0u64, 0i64, false);
    for i in 0..n {
        let delta = if joint_format {
            step_secs(r.varint()?)
        } else {
            r.varint()?
        };
        offset = next_offset(offset, delta, i == 0)?;
        let shape = if joint_format { r.byte()? } else { SHAPE_ROW };
        let member = match shape {
            SHAPE_ROW => Member::Row(r.chunk()?),
            SHAPE_JOINT | SHAPE_JOINT_META_0 | SHAPE_JOINT_META => {
                let meta = match shape {
                    SHAPE_JOINT => None,
                    SHAPE_JOINT_META_0 => Some(0),
                    _ => Some(r.byte()?),
                };
                let points = u32::try_from(r.varint()?)
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| corrupt("bad point count"))?;
                timestamp = timestamp.wrapping_add(unzigzag(r.varint()?));
                joint = true;
                Member::Joint {
                    shape: JointShape { points, meta },
                    timestamp,
                }
            }
            _ => return Err(corrupt("unknown member shape")),
        };
        members.push((offset as u32, member));
    }
    let joint = if joint_format {
        if !joint {
            return Err(corrupt("no joint member"));
        }
        let family =
            std::str::from_utf8(r.chunk()?).map_err(|_| corrupt("family name is not UTF-8"))?;
        let stream = &bytes[r.pos..];
        if stream.is_empty() {
            return Err(corrupt("truncated"));
        }
        r.pos = bytes.len();
        Some((family, stream))
    } else {
        None
    };
    if r.pos != bytes.len() {
        return Err(corrupt("trailing bytes"));
    }
    Ok(Group { members, joint })
}

/// The members of a group value of format 0x01 (row values only: a table without codec)
/// into `out` (cleared first), offsets increasing, as [`decode_group`] gives them, without
/// a vector of its own. False for any other format, or bytes [`decode_group`] refuses
/// (`out` then to be ignored: the caller decodes the group its usual way and meets the
/// error there).
pub(crate) fn row_members<'a>(bytes: &'a [u8], out: &mut Vec<(u32, &'a [u8])>) -> bool {
    out.clear();
    if bytes.first() != Some(&GROUP_FORMAT) {
        return false;
    }
    let mut r = Reader { bytes, pos: 1 };
    let walked = (|| -> Result<()> {
        let n = r.varint()?;
        if n > bytes.len() as u64 {
            return Err(corrupt("member count past its bytes"));
        }
        let mut offset = 0u64;
        for i in 0..n {
            offset = next_offset(offset, r.varint()?, i == 0)?;
            out.push((offset as u32, r.chunk()?));
        }
        Ok(())
    })();
    walked.is_ok() && r.pos == bytes.len()
}

impl<'a> Reader<'a> {
    /// Passes over a Rice sequence of `n` values unread: its header (center, byte length,
    /// see `hourglass_storage::rice`) and that many bytes, the length checked as
    /// `rice::read` checks it against `n`.
    fn skip_rice(&mut self, n: usize) -> Result<()> {
        self.varint()?;
        let len = usize::try_from(self.varint()?).map_err(|_| corrupt("truncated"))?;
        if n.div_ceil(rice::BLOCK) > len.saturating_mul(8) / 6 {
            return Err(corrupt("truncated"));
        }
        self.take(len)?;
        Ok(())
    }

    /// A Rice sequence of `n` values, appended to `out`.
    fn rice(&mut self, n: usize, out: &mut Vec<i64>) -> Result<()> {
        let rest = self.bytes.get(self.pos..).unwrap_or(&[]);
        self.pos += rice::read(rest, n, |v| {
            out.push(v);
            Ok(())
        })
        .map_err(corrupt)?;
        Ok(())
    }
}

/// The offset delta a step stands for: whole hours (`hours << 1`) or seconds
/// (`seconds << 1 | 1`).
fn step_secs(step: u64) -> u64 {
    if step & 1 == 0 {
        (step >> 1).saturating_mul(u64::from(HOUR_SECS))
    } else {
        step >> 1
    }
}

/// A member's offset, `delta` after the previous `offset`: strictly increasing after the
/// `first`, within `u32`.
fn next_offset(offset: u64, delta: u64, first: bool) -> Result<u64> {
    if !first && delta == 0 {
        return Err(corrupt("offsets not increasing"));
    }
    offset
        .checked_add(delta)
        .filter(|o| *o <= u64::from(u32::MAX))
        .ok_or_else(|| corrupt("offset out of range"))
}

/// A group value of format 0x03: format 0x02's member fields, each a Rice sequence over the
/// members that have it (see [`encode_group`]).
fn decode_columns(bytes: &[u8]) -> Result<Group<'_>> {
    let mut r = Reader { bytes, pos: 1 };
    let n = usize::try_from(r.varint()?).map_err(|_| corrupt("member count past its bytes"))?;
    // Every Rice block takes at least 6 bits.
    if n.div_ceil(rice::BLOCK) > bytes.len().saturating_mul(8) / 6 {
        return Err(corrupt("member count past its bytes"));
    }
    // The four sequences in one buffer: steps, shapes, then point counts and timestamp
    // deltas of the joint members (room made up front for groups of a usual size).
    let mut columns = Vec::with_capacity(n.min(1024) * 4);
    r.rice(n, &mut columns)?;
    r.rice(n, &mut columns)?;
    let shapes = columns.get(n..).unwrap_or_default();
    let with_meta = shapes
        .iter()
        .filter(|s| **s == i64::from(SHAPE_JOINT_META))
        .count();
    let joint_count = shapes
        .iter()
        .filter(|s| **s != i64::from(SHAPE_ROW))
        .count();
    let metas = r.take(with_meta)?;
    r.rice(joint_count, &mut columns)?;
    r.rice(joint_count, &mut columns)?;
    let (steps, rest) = columns.split_at(n.min(columns.len()));
    let (shapes, rest) = rest.split_at(n.min(rest.len()));
    let (counts, timestamps) = rest.split_at(joint_count.min(rest.len()));
    let mut members = Vec::with_capacity(n);
    let (mut offset, mut timestamp) = (0u64, 0i64);
    let (mut meta_at, mut joint_at) = (0usize, 0usize);
    for (i, (step, shape)) in steps.iter().zip(shapes).enumerate() {
        let step = u64::try_from(*step).map_err(|_| corrupt("bad step"))?;
        let delta = step_secs(step);
        offset = next_offset(offset, delta, i == 0)?;
        let member = match u8::try_from(*shape) {
            Ok(SHAPE_ROW) => Member::Row(r.chunk()?),
            Ok(shape @ (SHAPE_JOINT | SHAPE_JOINT_META_0 | SHAPE_JOINT_META)) => {
                let meta = match shape {
                    SHAPE_JOINT => None,
                    SHAPE_JOINT_META_0 => Some(0),
                    _ => {
                        meta_at += 1;
                        Some(metas[meta_at - 1])
                    }
                };
                let points = u32::try_from(counts[joint_at])
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| corrupt("bad point count"))?;
                timestamp = timestamp.wrapping_add(timestamps[joint_at]);
                joint_at += 1;
                Member::Joint {
                    shape: JointShape { points, meta },
                    timestamp,
                }
            }
            _ => return Err(corrupt("unknown member shape")),
        };
        members.push((offset as u32, member));
    }
    if joint_count == 0 {
        return Err(corrupt("no joint member"));
    }
    let family =
        std::str::from_utf8(r.chunk()?).map_err(|_| corrupt("family name is not UTF-8"))?;
    let stream = &bytes[r.pos..];
    if stream.is_empty() {
        return Err(corrupt("truncated"));
    }
    Ok(Group {
        members,
        joint: Some((family, stream)),
    })
}

/// Buffers a scan lends groups from (`Store::scan_joint`), reused from group to group.
#[derive(Debug, Default)]
pub(crate) struct JointScratch {
    /// A group's Rice sequences (format 0x03).
    columns: Vec<i64>,
    /// The members of the last group decoded, and their cell timestamps.
    pub(crate) members: Vec<JointMember>,
    pub(crate) timestamps: Vec<i64>,
    /// A member's key, built in place.
    pub(crate) key: Vec<u8>,
}

/// A group value's members, when every one is joint (formats 0x02 and 0x03), into
/// `scratch.members` and, with `timestamps`, their cell timestamps into
/// `scratch.timestamps` (else left empty: format 0x03's sequence of them is passed over by
/// its length, unread): the family and the stream. `None` for a group holding a row member
/// or none joint (format 0x01): read as rows. The checks are [`decode_group`]'s (but for the
/// timestamps passed over); nothing is allocated once the buffers hold a group of this size.
pub(crate) fn decode_joint_members<'a>(
    bytes: &'a [u8],
    scratch: &mut JointScratch,
    timestamps: bool,
) -> Result<Option<(&'a str, &'a [u8])>> {
    scratch.members.clear();
    scratch.timestamps.clear();
    match bytes.first() {
        Some(&GROUP_FORMAT_COLUMNS) => {}
        Some(&GROUP_FORMAT_JOINT) => {
            let group = decode_group(bytes)?;
            for (offset, member) in &group.members {
                let Member::Joint { shape, timestamp } = member else {
                    return Ok(None);
                };
                scratch.members.push(JointMember {
                    offset_secs: *offset,
                    shape: *shape,
                });
                if timestamps {
                    scratch.timestamps.push(*timestamp);
                }
            }
            return Ok(group.joint);
        }
        _ => return Ok(None),
    }
    let mut r = Reader { bytes, pos: 1 };
    let n = usize::try_from(r.varint()?).map_err(|_| corrupt("member count past its bytes"))?;
    if n.div_ceil(rice::BLOCK) > bytes.len().saturating_mul(8) / 6 {
        return Err(corrupt("member count past its bytes"));
    }
    let columns = &mut scratch.columns;
    columns.clear();
    r.rice(n, columns)?;
    r.rice(n, columns)?;
    let shapes = columns.get(n..).unwrap_or_default();
    if shapes.contains(&i64::from(SHAPE_ROW)) {
        return Ok(None);
    }
    if n == 0 {
        return Err(corrupt("no joint member"));
    }
    let with_meta = shapes
        .iter()
        .filter(|s| **s == i64::from(SHAPE_JOINT_META))
        .count();
    let metas = r.take(with_meta)?;
    // Every member is joint: a point count and a timestamp delta each.
    r.rice(n, columns)?;
    if timestamps {
        r.rice(n, columns)?;
    } else {
        r.skip_rice(n)?;
    }
    let (steps, rest) = columns.split_at(n.min(columns.len()));
    let (shapes, rest) = rest.split_at(n.min(rest.len()));
    let (counts, deltas) = rest.split_at(n.min(rest.len()));
    let (mut offset, mut timestamp, mut meta_at) = (0u64, 0i64, 0usize);
    scratch.members.reserve(n);
    if timestamps {
        scratch.timestamps.reserve(n);
    }
    for (i, (step, shape)) in steps.iter().zip(shapes).enumerate() {
        let step = u64::try_from(*step).map_err(|_| corrupt("bad step"))?;
        let delta = step_secs(step);
        // Offsets strictly increase, within `u32` (as `next_offset` checks them).
        if i > 0 && delta == 0 {
            return Err(corrupt("offsets not increasing"));
        }
        offset = offset
            .checked_add(delta)
            .filter(|o| *o <= u64::from(u32::MAX))
            .ok_or_else(|| corrupt("offset out of range"))?;
        let meta = match u8::try_from(*shape) {
            Ok(SHAPE_JOINT) => None,
            Ok(SHAPE_JOINT_META_0) => Some(0),
            Ok(SHAPE_JOINT_META) => {
                meta_at += 1;
                Some(metas[meta_at - 1])
            }
            _ => return Err(corrupt("unknown member shape")),
        };
        let count = counts.get(i).ok_or_else(|| corrupt("truncated"))?;
        let points = u32::try_from(*count)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| corrupt("bad point count"))?;
        scratch.members.push(JointMember {
            offset_secs: offset as u32,
            shape: JointShape { points, meta },
        });
        if let Some(delta) = deltas.get(i) {
            timestamp = timestamp.wrapping_add(*delta);
            scratch.timestamps.push(timestamp);
        }
    }
    if scratch.members.len() != n {
        return Err(corrupt("truncated"));
    }
    let family =
        std::str::from_utf8(r.chunk()?).map_err(|_| corrupt("family name is not UTF-8"))?;
    let stream = &bytes[r.pos..];
    if stream.is_empty() {
        return Err(corrupt("truncated"));
    }
    Ok(Some((family, stream)))
}

/// Every member of a group value as its row: row values decoded (`keep_encoded` as
/// [`RowData::decode_with`]), joint members rebuilt by the codec (one plain cell each).
pub(crate) fn member_rows(
    bytes: &[u8],
    codec: Option<&dyn CellCodec>,
    keep_encoded: bool,
) -> Result<Vec<(u32, RowData)>> {
    let group = decode_group(bytes)?;
    let mut joint_cells = match group.joint {
        Some((family, stream)) => {
            let codec = codec.ok_or_else(|| {
                Error::Corrupt("cell was stored with a codec this store was not given".into())
            })?;
            let members: Vec<JointMember> = group
                .members
                .iter()
                .filter_map(|(o, m)| match m {
                    Member::Joint { shape, .. } => Some(JointMember {
                        offset_secs: *o,
                        shape: *shape,
                    }),
                    Member::Row(_) => None,
                })
                .collect();
            let cells = codec.decode_joint(family, stream, &members)?;
            if cells.len() != members.len() {
                return Err(corrupt("joint stream does not match its members"));
            }
            Some((family, cells.into_iter()))
        }
        None => None,
    };
    let mut out = Vec::with_capacity(group.members.len());
    for (offset, member) in group.members {
        let row = match member {
            Member::Row(value) => RowData::decode_with(value, codec, keep_encoded)?,
            Member::Joint { timestamp, .. } => {
                let Some((family, cells)) = &mut joint_cells else {
                    return Err(corrupt("no joint stream"));
                };
                let (qualifier, value) = cells
                    .next()
                    .ok_or_else(|| corrupt("joint stream does not match its members"))?;
                RowData::from_cells(vec![Cell {
                    family: (*family).to_string(),
                    qualifier,
                    timestamp,
                    value,
                    form: CellForm::Plain,
                }])
            }
        };
        out.push((offset, row));
    }
    Ok(out)
}

/// A group value's members as the row values it holds (a table without codec, whose groups
/// hold no joint member): to change some and write the others back as they are.
pub(crate) fn stored_members(bytes: Option<&[u8]>) -> Result<BTreeMap<u32, Vec<u8>>> {
    let Some(bytes) = bytes else {
        return Ok(BTreeMap::new());
    };
    decode_group(bytes)?
        .members
        .into_iter()
        .map(|(offset, member)| match member {
            Member::Row(value) => Ok((offset, value.to_vec())),
            Member::Joint { .. } => Err(Error::Corrupt(
                "cell was stored with a codec this store was not given".into(),
            )),
        })
        .collect()
}

/// A group value's members as rows (to change and encode again).
pub(crate) fn group_members(
    bytes: Option<&[u8]>,
    codec: Option<&dyn CellCodec>,
) -> Result<BTreeMap<u32, RowData>> {
    let Some(bytes) = bytes else {
        return Ok(BTreeMap::new());
    };
    Ok(member_rows(bytes, codec, false)?.into_iter().collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use hourglass_storage::JointForm;
    use proptest::prelude::*;

    const G: Grouping = Grouping {
        timestamp_offset: 3,
        period_secs: 86_400,
        grace_secs: 3_600,
    };

    fn key(metric: u8, base: u32, tags: &[u8]) -> Vec<u8> {
        let mut k = vec![0, 0, metric];
        k.extend_from_slice(&base.to_be_bytes());
        k.extend_from_slice(tags);
        k
    }

    #[test]
    fn keys_split_into_group_and_offset_and_back() {
        let k = key(1, 86_400 * 3 + 7_200, &[0, 0, 1, 0, 0, 2]);
        let (group, offset) = G.split(&k).unwrap();
        assert_eq!(group, key(1, 86_400 * 3, &[0, 0, 1, 0, 0, 2]));
        assert_eq!(offset, 7_200);
        assert_eq!(G.member_key(&group, offset).unwrap(), k);
        assert_eq!(G.window(&k), Some((&[0u8, 0, 1][..], 86_400 * 3)));
        assert_eq!(G.period_end(&k), Some(86_400 * 4));
        assert!(
            G.split(&[0, 0, 1, 0]).is_none(),
            "too short to hold a base time"
        );
        assert_eq!(
            G.group_scan_start(&key(1, 86_400 + 5, &[])),
            key(1, 86_400, &[])
        );
        // A period closes one grace after it ends.
        assert_eq!(G.closed_through(86_400 * 4 + 3_599), 86_400 * 3);
        assert_eq!(G.closed_through(86_400 * 4 + 3_600), 86_400 * 4);
    }

    #[test]
    fn groups_refuse_bad_bytes() {
        let mut members = BTreeMap::new();
        members.insert(0u32, vec![1, 2]);
        members.insert(3_600u32, vec![]);
        let bytes = encode_rows_group(&members);
        assert_eq!(bytes, vec![1, 2, 0, 2, 1, 2, 0x90, 0x1C, 0]);
        let group = decode_group(&bytes).unwrap();
        assert_eq!(
            group.members,
            vec![(0, Member::Row(&[1, 2])), (3_600, Member::Row(&[]))]
        );
        assert!(group.joint.is_none());
        for bad in [
            vec![],
            vec![3, 0],
            vec![1, 1, 0, 5, 1],
            vec![1, 2, 0, 0, 0, 0],
            vec![1, 0, 0],
            vec![1, 200],
            // Format 0x02: no joint member; a joint member without family and stream; an
            // unknown shape; a zero point count; an offset that does not increase.
            vec![2, 1, 0, 0, 0],
            vec![2, 1, 0, 1, 1, 0],
            vec![2, 1, 0, 1, 1, 0, 1, b't'],
            vec![2, 1, 0, 4, 1, 0, 1, b't', 9],
            vec![2, 1, 0, 1, 0, 0, 1, b't', 9],
            vec![2, 2, 0, 1, 1, 0, 0, 1, 1, 0, 1, b't', 9],
        ] {
            assert!(decode_group(&bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            decode_group(&[2, 1, 0, 1, 1, 0, 1, b't', 9]).unwrap().joint,
            Some(("t", &[9u8][..]))
        );
    }

    /// A joint codec for the tests: takes a cell of qualifier `[0]`, `[1]` or `[2]` whose
    /// value does not start with 7; its shape has the value's length plus one points and
    /// meta `Some(q)` (`None` for 2); the stream is `A7` then the values taken.
    #[derive(Debug)]
    pub(crate) struct Toy;

    impl CellCodec for Toy {
        fn encode(&self, _family: &str, _qualifier: &[u8], _value: &[u8]) -> Option<Vec<u8>> {
            None
        }
        fn decode(&self, _family: &str, _encoded: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
            Err(Error::Corrupt("no blobs".into()))
        }
        fn encode_joint(&self, _family: &str, cells: &[JointCell<'_>]) -> Option<JointForm> {
            let mut stream = vec![0xA7];
            let shapes: Vec<Option<JointShape>> = cells
                .iter()
                .map(|c| match c.qualifier {
                    [q @ 0..=2] if c.value.first() != Some(&7) => {
                        stream.extend_from_slice(c.value);
                        Some(JointShape {
                            points: c.value.len() as u32 + 1,
                            meta: (*q < 2).then_some(*q),
                        })
                    }
                    _ => None,
                })
                .collect();
            shapes
                .iter()
                .any(Option::is_some)
                .then_some((shapes, stream))
        }
        fn decode_joint(
            &self,
            _family: &str,
            stream: &[u8],
            members: &[JointMember],
        ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
            let bad = || Error::Corrupt("bad toy stream".into());
            let (first, mut rest) = stream.split_first().ok_or_else(bad)?;
            if *first != 0xA7 {
                return Err(bad());
            }
            let mut out = Vec::new();
            for m in members {
                let n = m.shape.points as usize - 1;
                let value = rest.get(..n).ok_or_else(bad)?;
                rest = &rest[n..];
                out.push((vec![m.shape.meta.unwrap_or(2)], value.to_vec()));
            }
            if rest.is_empty() { Ok(out) } else { Err(bad()) }
        }
    }

    fn cell(family: &str, qualifier: &[u8], timestamp: i64, value: &[u8]) -> Cell {
        Cell {
            family: family.into(),
            qualifier: qualifier.to_vec(),
            timestamp,
            value: value.to_vec(),
            form: CellForm::Plain,
        }
    }

    /// The members of RFC 0006's examples of formats 0x02 and 0x03.
    fn example_members() -> BTreeMap<u32, RowData> {
        let mut members = BTreeMap::new();
        members.insert(0, RowData::from_cells(vec![cell("t", &[0], 1000, &[5, 6])]));
        members.insert(3600, RowData::from_cells(vec![cell("t", &[2], 1000, &[])]));
        members.insert(
            5400,
            RowData::from_cells(vec![cell("t", &[0], 1, &[1]), cell("t", &[1], 1, &[2])]),
        );
        members.insert(7200, RowData::from_cells(vec![cell("t", &[1], 998, &[8])]));
        members
    }

    /// RFC 0006's example of format 0x02: joint members at 0 (meta 0x00, 3 points) and
    /// 3600 (no meta, 1 point), a row member at 5400 (two cells), a joint member at 7200
    /// (meta 0x01, 2 points, written 2 ms earlier); the stream is the codec's. Format 0x02
    /// is no longer written, and still read.
    #[test]
    fn format_2_has_its_documented_bytes() {
        let members = example_members();
        let bytes = joint_group(&members, &Toy).unwrap().members_format();
        #[rustfmt::skip]
        let want = vec![
            0x02, 0x04,                     // format 0x02, 4 members
            0x00, 0x02, 0x03, 0xD0, 0x0F,   // step 0 h, joint meta 0x00, 3 points, timestamp +1000
            0x02, 0x01, 0x01, 0x00,         // step 1 h, joint no meta, 1 point, timestamp +0
            0x91, 0x1C, 0x00, 0x12,         // step 1800 s, row value of 18 bytes (RFC 0002):
            0x02, 0x02,                     //   coded format, 2 cells, both plain
            0x00, 0x01, b't', 0x01, 0x00, 0x02, 0x01, 0x01,
            0x00, 0x01, b't', 0x01, 0x01, 0x02, 0x01, 0x02,
            0x91, 0x1C, 0x03, 0x01,         // step 1800 s, joint meta 0x01,
            0x02, 0x03,                     //   2 points, timestamp -2
            0x01, b't',                     // family
            0xA7, 5, 6, 8,                  // the codec's stream
        ];
        assert_eq!(bytes, want);
        assert_eq!(group_members(Some(&bytes), Some(&Toy)).unwrap(), members);
        // Without the codec the joint members cannot be read.
        assert!(group_members(Some(&bytes), None).is_err());
    }

    /// RFC 0006's example of format 0x03: the members of format 0x02's example, their fields
    /// in columns.
    #[test]
    fn format_3_has_its_documented_bytes() {
        let members = example_members();
        let bytes = encode_group(&members, Some(&Toy));
        let mut want = vec![0x03, 0x04]; // format 0x03, 4 members
        rice::write(&[0, 2, 3601, 3601], &mut want); // steps: 0 h, 1 h, 1800 s, 1800 s
        rice::write(&[2, 1, 0, 3], &mut want); // shapes: meta 0x00, no meta, row, meta byte
        want.push(0x01); // the meta byte of the shape-0x03 member
        rice::write(&[3, 1, 2], &mut want); // the joint members' point counts
        rice::write(&[1000, 0, -2], &mut want); // their timestamp deltas
        #[rustfmt::skip]
        want.extend_from_slice(&[
            0x12,                           // the row member's value, 18 bytes (RFC 0002)
            0x02, 0x02,
            0x00, 0x01, b't', 0x01, 0x00, 0x02, 0x01, 0x01,
            0x00, 0x01, b't', 0x01, 0x01, 0x02, 0x01, 0x02,
            0x01, b't',                     // family
            0xA7, 5, 6, 8,                  // the codec's stream
        ]);
        assert_eq!(bytes, want);
        // The steps' Rice sequence starts: center 3601 (zigzag 7202), 8 bytes of bits, r = 11
        // ("110100"), then 7201 (-3601 zigzagged) as q = 3 ("1110") and its low 11 bits.
        assert_eq!(&bytes[2..6], &[0xA2, 0x38, 0x08, 0xCB][..]);
        assert_eq!(group_members(Some(&bytes), Some(&Toy)).unwrap(), members);
        assert!(group_members(Some(&bytes), None).is_err());
        // A codec taking nothing jointly: format 0x01, the same rows.
        let plain = encode_group(&members, None);
        assert_eq!(plain[0], 0x01);
        assert_eq!(group_members(Some(&plain), None).unwrap(), members);
    }

    fn any_row() -> impl Strategy<Value = RowData> {
        let one = (0u8..4, prop::collection::vec(any::<u8>(), 0..4), -3i64..3)
            .prop_map(|(q, v, ts)| vec![cell("t", &[q], ts, &v)]);
        let other = (0u8..3, prop::collection::vec(any::<u8>(), 0..3))
            .prop_map(|(q, v)| vec![cell("u", &[q], 5, &v)]);
        let several = prop::collection::vec((0u8..3, any::<u8>()), 2..4).prop_map(|cells| {
            cells
                .into_iter()
                .enumerate()
                .map(|(i, (q, v))| cell("t", &[q, i as u8], 1, &[v]))
                .collect()
        });
        prop_oneof![6 => one, 1 => other, 1 => several].prop_map(RowData::from_cells)
    }

    proptest! {
        #[test]
        fn groups_round_trip(members in prop::collection::btree_map(any::<u32>(), prop::collection::vec(any::<u8>(), 0..20), 0..30)) {
            let bytes = encode_rows_group(&members);
            let group = decode_group(&bytes).unwrap();
            let back: BTreeMap<u32, Vec<u8>> = group.members.into_iter().map(|(o, m)| match m {
                Member::Row(v) => (o, v.to_vec()),
                Member::Joint { .. } => panic!("a joint member in format 0x01"),
            }).collect();
            prop_assert_eq!(back, members);
        }

        /// Every member shape (joint with and without meta bytes, rows of several cells or
        /// another family, cells the codec declines), at any offsets, reads back as written;
        /// the format is 0x03 exactly when a member is joint.
        #[test]
        fn joint_groups_round_trip(
            members in prop::collection::btree_map(
                prop_oneof![0u32..30_000, any::<u32>(), (0u32..24).prop_map(|h| h * 3600)],
                any_row(),
                1..30,
            )
        ) {
            let bytes = encode_group(&members, Some(&Toy));
            prop_assert_eq!(group_members(Some(&bytes), Some(&Toy)).unwrap(), members.clone());
            // Lent (every member joint): the members, family and stream `decode_group` reads,
            // the timestamps only when asked for; a group with a row member is not lent.
            let group = decode_group(&bytes).unwrap();
            let all_joint = group.joint.is_some()
                && group.members.iter().all(|(_, m)| matches!(m, Member::Joint { .. }));
            let mut scratch = JointScratch::default();
            for timestamps in [true, false] {
                let lent = decode_joint_members(&bytes, &mut scratch, timestamps).unwrap();
                prop_assert_eq!(lent.is_some(), all_joint);
                if all_joint {
                    prop_assert_eq!(lent, group.joint);
                    let want: Vec<(JointMember, i64)> = group.members.iter().filter_map(|(o, m)| match m {
                        Member::Joint { shape, timestamp } => Some((JointMember { offset_secs: *o, shape: *shape }, *timestamp)),
                        Member::Row(_) => None,
                    }).collect();
                    let got: Vec<JointMember> = scratch.members.clone();
                    prop_assert_eq!(got, want.iter().map(|(m, _)| *m).collect::<Vec<_>>());
                    if timestamps {
                        prop_assert_eq!(scratch.timestamps.clone(), want.iter().map(|(_, t)| *t).collect::<Vec<_>>());
                    } else {
                        prop_assert!(scratch.timestamps.is_empty());
                    }
                }
            }
            // Format 0x02 of the same members still reads back.
            if let Some(joint) = joint_group(&members, &Toy) {
                let format_2 = joint.members_format();
                prop_assert_eq!(format_2[0], 2);
                prop_assert_eq!(group_members(Some(&format_2), Some(&Toy)).unwrap(), members.clone());
            }
            let first_single = members.values().find_map(|r| match r.cells() {
                [c] => Some(c.family.clone()),
                _ => None,
            });
            let joint = members.values().any(|r| match r.cells() {
                [c] => Some(&c.family) == first_single.as_ref()
                    && matches!(c.qualifier[..], [0..=2])
                    && c.value.first() != Some(&7),
                _ => false,
            });
            prop_assert_eq!(bytes[0], if joint { 3 } else { 1 });
        }

        #[test]
        fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_group(&bytes);
            let _ = member_rows(&bytes, Some(&Toy), false);
            let _ = member_rows(&bytes, None, true);
            let _ = decode_joint_members(&bytes, &mut JointScratch::default(), false);
            let _ = decode_joint_members(&bytes, &mut JointScratch::default(), true);
        }

        #[test]
        fn decode_never_panics_after_a_format_byte(format in 1u8..4, rest in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut bytes = vec![format];
            bytes.extend(rest);
            let _ = decode_group(&bytes);
            let _ = member_rows(&bytes, Some(&Toy), false);
            let _ = decode_joint_members(&bytes, &mut JointScratch::default(), false);
            let _ = decode_joint_members(&bytes, &mut JointScratch::default(), true);
        }
    }
}
