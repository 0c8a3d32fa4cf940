//! A compact stored form for compacted data cells, used by the embedded backend. It is an
//! encoding of the same bytes, not a new format: every read gives back OpenTSDB's exact
//! qualifier and value, and a cell whose round trip is not exact is stored as it is.
//! Version 4 (docs/rfcs/0014-blob-choices-and-truncated-frames.md) is written, or for rows of
//! fewer than 64 points version 3 where that is not longer. Version 3
//! (docs/rfcs/0013-value-widths-from-values.md) is version 2 (docs/rfcs/0005-cell-codec-v2.md)
//! with its flag runs after a mode byte, and left out where each point's width is the one its
//! value gives; versions 2 and 1 (RFC 0003) are still read. Version 3's layout:
//!
//! ```text
//! | 0x03 | point count (varint) | has meta (1) | [meta byte] |
//! | resolution runs: count (varint), first is-ms (1), run lengths (varint)... |
//! | first offset ms (varint) | offset delta runs: count (varint), (zigzag delta, length)... |
//! | flag mode (1): 0x00 then flag runs: count (varint), (flags (1), length (varint))... |
//! |   or 0x01 (every point an integer) or 0x02 (every point a float), widths their values' |
//! |   or 0x03 then kind runs: count (varint), first is float (1), run lengths (varint)... |
//! | integers, when some point is one: first (zigzag varint), gcd of the deltas (varint), |
//! |           least delta / gcd (zigzag varint), then each delta / gcd minus that least, |
//! |           bit-packed (width (1), bits) |
//! | floats, when some point is one: |
//! |       0x00 k (1) then decimal mantissas x 10^k (k <= 18) packed as the integers |
//! |    or 0x01 then each value's bytes as stored |
//! |    or 0x02 k (1), the mantissas, then corrections: least (zigzag varint), each minus it |
//! |       bit-packed (width (1), bits); a value's bits are its mantissa's rebuilt bits plus |
//! |       its correction (wrapping, truncated to the value's length) |
//! ```
//!
//! Version 4 is version 3 with a one-byte meta code (0x00 none, 0x01 and 0x02 meta 0x00 and
//! 0x01, 0x03 the byte follows), a resolution mode (0x00 all seconds, 0x01 all milliseconds,
//! 0x02 runs follow) and a joint stream's choices (RFC 0013): a mode byte before the
//! offsets (0x00 runs, 0x01 a Rice sequence, 0x02 the first offset and one step), and before
//! each sequence's quotients and the
//! corrections (0x00 a Rice sequence, 0x01 a frame as above, 0x02 a truncated binary frame:
//! least value, span, then codes of the span's bit length or one less; `truncated`).
//! Version 1 differs from version 2 only in its version byte (0x01), in always writing both
//! sections (empty ones too), in float modes 0x00 (k <= 9) and 0x01 only, and in its
//! point-count limit.
//! Regular intervals collapse to one delta run, and slowly changing values to a few bits each;
//! floats a unit or two in the last place off a short decimal cost a few bits of correction.

use hourglass_core::compact::{self, Point};
use hourglass_core::qualifier::Qualifier;
use hourglass_core::schema::DATA_FAMILY;
use hourglass_core::value::{FLAG_FLOAT, FLAGS_MASK, Value, float_value, write_bits};

#[cfg(test)]
use crate::num::Num;
use crate::num::Sample;
use hourglass_storage::rice;
use hourglass_storage::{CellCodec, Error, JointCell, JointForm, JointMember, JointShape, Result};

mod truncated;

/// The version encode writes (RFC 0014): version 3 with a shorter head (a meta code, a
/// resolution mode) and a joint stream's choices (offsets as runs, a Rice sequence or one
/// step; each quotient sequence and the corrections as a Rice sequence, a frame or a
/// truncated binary frame).
const VERSION: u8 = 4;
/// RFC 0013's version (version 2 with a flag mode), still decoded and written where shorter.
const VERSION_3: u8 = 3;
/// RFC 0005's version, still decoded.
const VERSION_2: u8 = 2;
/// RFC 0003's version, still decoded.
const VERSION_1: u8 = 1;
/// The largest decimal scale of version 1.
const MAX_DECIMALS_V1: u32 = 9;
/// The largest decimal scale of version 2.
const MAX_DECIMALS: u32 = 18;
/// Version 2 encodes mantissas below 2^62 in magnitude (their deltas never overflow).
const MANTISSA_LIMIT: f64 = 4_611_686_018_427_387_904.0;

/// The codec for the data table's family `t`.
#[derive(Debug, Default, Clone, Copy)]
pub struct DataCellCodec;

impl CellCodec for DataCellCodec {
    fn encode(&self, family: &str, qualifier: &[u8], value: &[u8]) -> Option<Vec<u8>> {
        if family != DATA_FAMILY
            || !compact::is_data_qualifier(qualifier)
            || !compact::is_compacted(qualifier)
            || qualifier == compact::APPEND_QUALIFIER
        {
            return None;
        }
        encode_cell(qualifier, value, encode_points)
    }

    fn decode(&self, _family: &str, encoded: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
        decode_blob(encoded).map_err(|e| Error::Corrupt(format!("bad encoded data cell: {e}")))
    }

    fn encode_joint(&self, family: &str, cells: &[JointCell<'_>]) -> Option<JointForm> {
        if family != DATA_FAMILY {
            return None;
        }
        encode_joint(cells)
    }

    fn decode_joint(
        &self,
        _family: &str,
        stream: &[u8],
        members: &[JointMember],
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        decode_joint_cells(stream, members)
            .map_err(|e| Error::Corrupt(format!("bad joint stream: {e}")))
    }
}

/// The version of the joint stream written (RFC 0006, group formats 0x02 and 0x03): a
/// summary section (RFC 0009), then version 0x02's body with a flag mode (RFC 0013).
const JOINT_VERSION: u8 = 4;
/// Version 0x03: a summary section, then version 0x02's body; still decoded.
const JOINT_VERSION_3: u8 = 3;
/// Version 0x02: version 0x01's sections, with Rice sequences for the values and a second way
/// to write the offsets; still decoded.
const JOINT_VERSION_2: u8 = 2;
/// The first joint stream version (a version-2 blob's sections), still decoded.
const JOINT_VERSION_1: u8 = 1;
/// The body of a joint stream of version 0x02 or 0x03, as the body decoders take a version;
/// no blob has it.
const BODY_RICE: u8 = 0x82;
/// The body of a joint stream of version 0x04: version 0x02's with a flag mode; no blob has
/// it.
const BODY_RICE_WIDTHS: u8 = 0x84;

/// Whether a body of `version` has a flag mode before its flags (RFC 0013).
fn has_flag_mode(version: u8) -> bool {
    matches!(version, VERSION | VERSION_3 | BODY_RICE_WIDTHS)
}

/// How a body's integer sequences are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Packing {
    /// Each sequence at one bit width (blobs, joint stream version 0x01).
    Frame,
    /// Rice sequences (`rice`), and offsets as runs or as a Rice sequence (joint streams
    /// 0x02 and 0x03).
    Rice,
    /// As `Rice`, but the integers' and mantissas' quotients after a mode byte: a Rice
    /// sequence (0x00) or a frame (0x01), whichever is shorter (joint stream 0x04, RFC 0013).
    Chosen,
    /// As `Chosen`, with a truncated binary frame (0x02) as a third quotient mode (blob
    /// version 0x04, RFC 0014).
    ChosenTruncated,
}

impl Packing {
    fn of(body_version: u8) -> Packing {
        match body_version {
            BODY_RICE => Packing::Rice,
            BODY_RICE_WIDTHS => Packing::Chosen,
            VERSION => Packing::ChosenTruncated,
            _ => Packing::Frame,
        }
    }

    /// Whether each quotient sequence starts with its mode byte.
    fn moded(self) -> bool {
        matches!(self, Packing::Chosen | Packing::ChosenTruncated)
    }

    /// How a decimal float section's corrections are written: as the quotients are, but a
    /// Rice sequence without a mode byte in a joint stream of chosen packing (version 0x04
    /// chose for its quotients only).
    fn of_corrections(self) -> Packing {
        match self {
            Packing::Chosen => Packing::Rice,
            other => other,
        }
    }
}

/// A quotient sequence's mode under chosen packing: a Rice sequence follows.
const QUOTIENTS_RICE: u8 = 0;
/// A quotient sequence's mode under chosen packing: a frame follows (least value, width,
/// bits).
const QUOTIENTS_FRAME: u8 = 1;
/// A quotient sequence's mode in a version 0x04 blob: a truncated binary frame follows
/// (least value, span, bits; RFC 0014).
const QUOTIENTS_TRUNCATED: u8 = 2;

/// How a body's offsets are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offsets {
    Runs,
    Rice,
    Regular,
}

/// How one quotient sequence is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quotients {
    Rice,
    Frame,
    Truncated,
}

/// A sequence's quotients costed and not yet written, as [`rice::Planned`] is: a Rice
/// sequence, or under chosen packing a mode byte then the shortest of a Rice sequence, a
/// frame and (blob version 0x04) a truncated binary frame, the last only where it is a
/// sixteenth shorter than the frame. Ties go to Rice, then the frame.
#[derive(Debug)]
struct PlannedQuotients {
    rice: rice::Planned,
    /// Under chosen packing, whether a mode byte goes first.
    moded: bool,
    /// The quotients, the form kept and its length, when that is not Rice.
    other: Option<(Vec<i64>, Quotients, usize)>,
}

impl PlannedQuotients {
    fn new(quotients: Vec<i64>, packing: Packing) -> Self {
        let rice = rice::Planned::new(&quotients);
        let moded = packing.moded();
        let mut best = (Quotients::Rice, rice.encoded_len());
        let frame = if moded {
            frame_len(&quotients)
        } else {
            usize::MAX
        };
        if frame < best.1 {
            best = (Quotients::Frame, frame);
        }
        // A truncated frame takes twice a frame's time to read: it is worth that only when
        // it saves a sixteenth of the frame or more.
        if packing == Packing::ChosenTruncated
            && let Some(len) = truncated::encoded_len(&quotients)
            && len < best.1
            && len.saturating_mul(16) <= frame.saturating_mul(15)
        {
            best = (Quotients::Truncated, len);
        }
        let other = (best.0 != Quotients::Rice).then_some((quotients, best.0, best.1));
        Self { rice, moded, other }
    }

    fn encoded_len(&self) -> usize {
        usize::from(self.moded) + self.other.as_ref().map_or(self.rice.encoded_len(), |o| o.2)
    }

    fn write(&self, out: &mut Vec<u8>) {
        match &self.other {
            Some((quotients, Quotients::Truncated, _)) => {
                out.push(QUOTIENTS_TRUNCATED);
                truncated::write(quotients, out);
            }
            Some((quotients, _, _)) => {
                out.push(QUOTIENTS_FRAME);
                pack_above_floor(quotients, out);
            }
            None => {
                if self.moded {
                    out.push(QUOTIENTS_RICE);
                }
                self.rice.write(out);
            }
        }
    }
}

/// The bytes [`pack_above_floor`] writes for `values`.
fn frame_len(values: &[i64]) -> usize {
    let floor = values.iter().copied().min().unwrap_or(0);
    let top = values.iter().copied().max().unwrap_or(0);
    let width = 64 - (top.wrapping_sub(floor) as u64).leading_zeros() as usize;
    rice::varint_len(zigzag(floor)) + 1 + (values.len() * width).div_ceil(8)
}
/// An hour in ms: a row's span.
pub(crate) const HOUR_MS: i64 = 3_600_000;

/// A data cell's points appended to `out`, and its meta byte, when they rebuild its exact
/// bytes and every point lies in its hour: the cells the joint form takes (the append column
/// excepted). Nothing is appended to `out` for a cell not taken.
fn joint_points(qualifier: &[u8], value: &[u8], out: &mut Vec<Point>) -> Option<Option<u8>> {
    let start = out.len();
    let meta = joint_points_after(qualifier, value, start, out);
    if meta.is_none() {
        out.truncate(start);
    }
    meta
}

fn joint_points_after(
    qualifier: &[u8],
    value: &[u8],
    start: usize,
    out: &mut Vec<Point>,
) -> Option<Option<u8>> {
    if !compact::is_data_qualifier(qualifier) || qualifier == compact::APPEND_QUALIFIER {
        return None;
    }
    compact::decode_cell(qualifier, value, out).ok()?;
    let points = out.get(start..)?;
    if points.is_empty() || points.len() > u32::MAX as usize {
        return None;
    }
    let values_len: usize = points.iter().map(|p| p.qualifier.value_len()).sum();
    let meta = match value.len().checked_sub(values_len)? {
        0 => None,
        1 => value.last().copied(),
        _ => return None,
    };
    if points.iter().any(|p| i64::from(p.offset_ms()) >= HOUR_MS) {
        return None;
    }
    rebuilds_to(points, meta, qualifier, value).then_some(meta)
}

/// Whether `points` and `meta` rebuild exactly `qualifier` and `value` (what
/// [`rebuild_cell`] gives, compared as it is written).
fn rebuilds_to(points: &[Point], meta: Option<u8>, qualifier: &[u8], value: &[u8]) -> bool {
    let (mut q_at, mut v_at) = (0usize, 0usize);
    for p in points {
        // Each piece as `Qualifier::write` and `write_bits` write it, compared in place.
        let raw = p.qualifier.raw();
        let q_bytes = raw.to_be_bytes();
        let q_piece: &[u8] = if p.qualifier.is_millis() {
            &q_bytes
        } else {
            &q_bytes[2..]
        };
        if qualifier.get(q_at..q_at + q_piece.len()) != Some(q_piece) {
            return false;
        }
        q_at += q_piece.len();
        let v_bytes = p.bits.to_be_bytes();
        let Some(v_piece) = v_bytes.get(8usize.saturating_sub(p.qualifier.value_len())..) else {
            return false;
        };
        if value.get(v_at..v_at + v_piece.len()) != Some(v_piece) {
            return false;
        }
        v_at += v_piece.len();
    }
    if let Some(m) = meta {
        if value.get(v_at) != Some(&m) {
            return false;
        }
        v_at += 1;
    }
    q_at == qualifier.len() && v_at == value.len()
}

/// A cell's qualifier and value from its points and meta byte.
fn rebuild_cell(points: &[Point], meta: Option<u8>) -> (Vec<u8>, Vec<u8>) {
    let mut qualifier = Vec::with_capacity(points.len() * 2);
    let mut value = Vec::with_capacity(points.len() * 4 + 1);
    for p in points {
        p.qualifier.write(&mut qualifier);
        write_bits(p.bits, p.qualifier.flags(), &mut value);
    }
    if let Some(m) = meta {
        value.push(m);
    }
    (qualifier, value)
}

/// The joint stream of the cells it takes: version, then a version-2 blob's runs and value
/// sections over all their points, offsets from the period start. Checked back against every
/// cell taken; `None` when it takes none or the check fails.
fn encode_joint(cells: &[JointCell<'_>]) -> Option<JointForm> {
    encode_joint_as(cells, Packing::Chosen)
}

/// A joint stream of version 0x04 (chosen packing), or, for tests, of the versions written
/// before: 0x03 (Rice packing) and 0x01 (frame packing).
fn encode_joint_as(cells: &[JointCell<'_>], packing: Packing) -> Option<JointForm> {
    let mut shapes = Vec::with_capacity(cells.len());
    let mut members = Vec::with_capacity(cells.len());
    // A point takes at least 2 bytes of qualifier: room for every point at once.
    let most: usize = cells.iter().map(|c| c.qualifier.len() / 2).sum();
    let mut points = Vec::with_capacity(most);
    let mut offsets = Vec::with_capacity(most);
    for c in cells {
        let start = points.len();
        let Some(meta) = joint_points(c.qualifier, c.value, &mut points) else {
            shapes.push(None);
            continue;
        };
        let pts = &points[start..];
        let shape = JointShape {
            points: pts.len() as u32,
            meta,
        };
        let base = i64::from(c.offset_secs) * 1000;
        offsets.extend(pts.iter().map(|p| base + i64::from(p.offset_ms())));
        shapes.push(Some(shape));
        members.push(JointMember {
            offset_secs: c.offset_secs,
            shape,
        });
    }
    if points.is_empty() {
        return None;
    }
    let mut stream = Vec::with_capacity(points.len() * 2 + 16);
    // Truncated binary frames are a blob's only: a joint stream takes Rice or frames.
    let packing = match packing {
        Packing::ChosenTruncated => Packing::Chosen,
        other => other,
    };
    match packing {
        Packing::Frame => {
            stream.push(JOINT_VERSION_1);
            encode_runs(&points, &offsets, packing, Widths::Runs, &mut stream);
            encode_values(&points, packing, Widths::Runs, &mut stream);
        }
        Packing::Rice | Packing::Chosen | Packing::ChosenTruncated => {
            let chosen = packing == Packing::Chosen;
            stream.push(if chosen {
                JOINT_VERSION
            } else {
                JOINT_VERSION_3
            });
            let body_with = |widths: Widths| {
                let mut body = Vec::with_capacity(points.len() * 2 + 16);
                encode_runs(&points, &offsets, packing, widths, &mut body);
                encode_values(&points, packing, widths, &mut body);
                body
            };
            let body = if chosen {
                with_shorter_widths(&points, body_with)
            } else {
                body_with(Widths::Runs)
            };
            // A dense stream summarizes every member it can, the sparse hours of a series'
            // start, end or gaps too: one of them left out would have a query decode the
            // whole stream. A sparser one summarizes sums only, when they cost at most half
            // the points' bytes (RFC 0009).
            let extremes = points.len() >= SUMMARY_MIN_POINTS * members.len();
            let sums = points.len() >= SUM_SUMMARY_MIN_POINTS * members.len();
            let mut at = 0;
            let each: Vec<Option<MemberSummary>> = members
                .iter()
                .map(|m| {
                    let own = &points[at..at + m.shape.points as usize];
                    at += own.len();
                    if sums {
                        member_summary(own, extremes)
                    } else {
                        None
                    }
                })
                .collect();
            write_summaries(each, &mut stream);
            let section = stream.len() - 1;
            if !extremes && section * 2 > body.len() {
                stream.truncate(1);
                write_summaries(vec![None; members.len()], &mut stream);
            }
            stream.extend_from_slice(&body);
        }
    }
    // Lossless or not at all: the stream must give back every point taken (each taken cell
    // is exactly what its points and meta byte rebuild, checked by `joint_points`).
    if !joint_points_are(&stream, &members, &points, &offsets) {
        return None;
    }
    Some((shapes, stream))
}

/// A reader past a joint stream's version byte, the stream's point count (checked against
/// its members) and the version its body decodes as.
fn joint_reader<'a>(
    stream: &'a [u8],
    members: &[JointMember],
) -> Result<(Reader<'a>, usize, u8), &'static str> {
    let n = joint_count(stream, members)?;
    let mut r = Reader {
        bytes: stream,
        pos: 0,
    };
    let body = match r.byte()? {
        JOINT_VERSION_1 => VERSION_2,
        JOINT_VERSION_2 => BODY_RICE,
        JOINT_VERSION_3 => {
            read_summaries(&mut r, members.len(), |_| {})?;
            BODY_RICE
        }
        JOINT_VERSION => {
            read_summaries(&mut r, members.len(), |_| {})?;
            BODY_RICE_WIDTHS
        }
        _ => return Err("unknown version"),
    };
    Ok((r, n, body))
}

/// A joint member's points summarized (joint stream version 0x03, RFC 0009): what a
/// one-hour downsample of them by sum, avg, min, max or count gives, without reading the
/// points.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemberSummary {
    /// The member's points (none of them NaN).
    pub count: u32,
    /// The values as doubles folded in time order as a downsample folds them: the sum from
    /// 0.0 (summaries written before may have started it from -0.0, read as 0.0 plus it),
    /// the least and the greatest from NaN (the first of equal values kept).
    pub sum: f64,
    /// NaN when the summary holds the sum only (`extremes` false).
    pub min: f64,
    pub max: f64,
    /// Whether `min` and `max` are held: a summary of a sparser stream holds the sum only,
    /// enough for sum, avg and count.
    pub extremes: bool,
}

/// A stream of fewer points a member on average summarizes sums only: the least and the
/// greatest values would weigh on each point.
pub const SUMMARY_MIN_POINTS: usize = 120;

/// A stream of fewer points a member on average than this summarizes none: reading them
/// is cheap, and a sum's bytes would weigh on each point (at this density, at most a byte a
/// point; a five-minute series' twelve points an hour decode in about 2.5 µs, its sum reads
/// in a few tens of nanoseconds).
pub const SUM_SUMMARY_MIN_POINTS: usize = 10;

/// Magnitudes below this are whole doubles written as integers in a summary.
const EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// The summary of one member's points (with their least and greatest values, or the sum
/// only), when their times strictly increase (the query path reads them as columns) and no
/// value is NaN.
fn member_summary(points: &[Point], extremes: bool) -> Option<MemberSummary> {
    use crate::query::fold::{Fold, Max, Min, Sum};
    if !strictly_increasing(points) {
        return None;
    }
    let (mut sum, mut min, mut max) = (Sum::START, Min::START, Max::START);
    let mut n = 0u64;
    for p in points {
        let v = p.value().as_f64();
        if v.is_nan() {
            return None;
        }
        Sum::add(&mut sum, &mut n, v);
        Min::add(&mut min, &mut n, v);
        Max::add(&mut max, &mut n, v);
    }
    let (min, max) = if extremes {
        (min, max)
    } else {
        (f64::NAN, f64::NAN)
    };
    Some(MemberSummary {
        count: u32::try_from(points.len()).ok()?,
        sum,
        min,
        max,
        extremes,
    })
}

/// Whether the points' times strictly increase (no sort or duplicate check needed).
pub(crate) fn strictly_increasing(points: &[Point]) -> bool {
    points
        .windows(2)
        .all(|w| w[0].offset_ms() < w[1].offset_ms())
}

/// Whether `v` is written as an integer in a summary (a whole double, not -0.0, below 2^53
/// in magnitude: it rebuilds exactly).
fn integral(v: f64) -> bool {
    v.fract() == 0.0 && v.abs() < EXACT_INTEGER && !(v == 0.0 && v.is_sign_negative())
}

/// Summary kinds: sum, min and max as 8-byte little-endian doubles, or as zigzag varints
/// (each a whole double below 2^53 in magnitude, not -0.0); the sum alone, the same ways.
const SUMMARY_DOUBLES: u8 = 0x00;
const SUMMARY_INTEGERS: u8 = 0x01;
const SUM_DOUBLE: u8 = 0x02;
const SUM_INTEGER: u8 = 0x03;

/// The summary section: a bitmap of the members with a summary (bit i of byte i / 8, least
/// significant first), then each summary: a kind byte and its fields (the `SUMMARY_*` and
/// `SUM_*` kinds).
fn write_summaries(summaries: Vec<Option<MemberSummary>>, out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + summaries.len().div_ceil(8), 0);
    for (i, s) in summaries.iter().enumerate() {
        if s.is_some() {
            out[at + i / 8] |= 1 << (i % 8);
        }
    }
    for s in summaries.into_iter().flatten() {
        let all = [s.sum, s.min, s.max];
        let fields = if s.extremes { &all[..] } else { &all[..1] };
        let integers = fields.iter().all(|v| integral(*v));
        out.push(match (s.extremes, integers) {
            (true, true) => SUMMARY_INTEGERS,
            (true, false) => SUMMARY_DOUBLES,
            (false, true) => SUM_INTEGER,
            (false, false) => SUM_DOUBLE,
        });
        for v in fields {
            if integers {
                put_varint(out, zigzag(*v as i64));
            } else {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
}

/// The summary section of a joint stream of `members` joint members; the count of each
/// summarized member is its point count, filled in by the caller.
fn read_summaries(
    r: &mut Reader<'_>,
    members: usize,
    mut out: impl FnMut(Option<MemberSummary>),
) -> Result<(), &'static str> {
    let bitmap_len = members.div_ceil(8);
    let end = r.pos.checked_add(bitmap_len).ok_or("truncated")?;
    let bitmap = r.bytes.get(r.pos..end).ok_or("truncated")?;
    r.pos = end;
    if !members.is_multiple_of(8) && bitmap.last().is_some_and(|b| b >> (members % 8) != 0) {
        return Err("summary of no member");
    }
    for i in 0..members {
        if bitmap[i / 8] & (1 << (i % 8)) == 0 {
            out(None);
            continue;
        }
        let mut fields = [f64::NAN; 3];
        let kind = r.byte()?;
        let (extremes, integers) = match kind {
            SUMMARY_DOUBLES => (true, false),
            SUMMARY_INTEGERS => (true, true),
            SUM_DOUBLE => (false, false),
            SUM_INTEGER => (false, true),
            _ => return Err("unknown summary kind"),
        };
        let held = if extremes {
            &mut fields[..]
        } else {
            &mut fields[..1]
        };
        for f in held {
            if integers {
                let v = unzigzag(r.varint()?);
                if v.unsigned_abs() >= 1 << 53 {
                    return Err("summary integer out of range");
                }
                *f = v as f64;
            } else {
                let end = r.pos.checked_add(8).ok_or("truncated")?;
                let b = r.bytes.get(r.pos..end).ok_or("truncated")?;
                *f = f64::from_le_bytes(b.try_into().map_err(|_| "truncated")?);
                r.pos = end;
            }
        }
        out(Some(MemberSummary {
            count: 0,
            sum: fields[0],
            min: fields[1],
            max: fields[2],
            extremes,
        }));
    }
    Ok(())
}

/// The summaries of a joint stream's members (`None` for a stream of a version without
/// them), each with its member's point count.
pub fn joint_summaries(
    stream: &[u8],
    members: &[JointMember],
) -> Result<Option<Vec<Option<MemberSummary>>>> {
    let mut all = vec![None; members.len()];
    let have = for_each_summary(stream, members, |i, s| {
        all[i] = Some(s);
        Ok::<(), Error>(())
    })?;
    Ok(have.then_some(all))
}

/// Each summarized member of a joint stream, by its index among `members`, with its point
/// count, handed to `take` in member order: whether the stream's version has summaries
/// (none handed over when not). An error of `take`, or a bad section, ends the reading
/// with it (those before handed over already).
pub fn for_each_summary<E: From<Error>>(
    stream: &[u8],
    members: &[JointMember],
    mut take: impl FnMut(usize, MemberSummary) -> std::result::Result<(), E>,
) -> std::result::Result<bool, E> {
    if !matches!(stream.first(), Some(&(JOINT_VERSION | JOINT_VERSION_3))) {
        return Ok(false);
    }
    let mut r = Reader {
        bytes: stream,
        pos: 1,
    };
    let mut i = 0usize;
    let mut failed = None;
    read_summaries(&mut r, members.len(), |s| {
        if let (Some(mut s), None) = (s, &failed) {
            s.count = members.get(i).map_or(0, |m| m.shape.points);
            if let Err(e) = take(i, s) {
                failed = Some(e);
            }
        }
        i += 1;
    })
    .map_err(|e| E::from(Error::Corrupt(format!("bad joint stream: {e}"))))?;
    failed.map_or(Ok(true), Err)
}

/// The body of a joint stream over `members`, with its point count checked against its
/// length.
fn joint_body(stream: &[u8], members: &[JointMember]) -> Result<Body, &'static str> {
    let (mut r, n, version) = joint_reader(stream, members)?;
    let body = decode_body(&mut r, version, n, None)?;
    if r.pos != stream.len() {
        return Err("trailing bytes");
    }
    Ok(body)
}

/// The number of points of a joint stream's members, checked against its length.
fn joint_count(stream: &[u8], members: &[JointMember]) -> Result<usize, &'static str> {
    let mut n = 0usize;
    for m in members {
        if m.shape.points == 0 {
            return Err("member without points");
        }
        n = n
            .checked_add(m.shape.points as usize)
            .ok_or("point count too large")?;
    }
    if n == 0 {
        return Err("stream lengths differ");
    }
    let limit = (stream.len() as u64)
        .saturating_mul(64)
        .saturating_add(3600u64.saturating_mul(members.len() as u64));
    if n as u64 > limit {
        return Err("point count too large");
    }
    Ok(n)
}

/// A cell's qualifier and value.
type Rebuilt = (Vec<u8>, Vec<u8>);

/// Each joint member's qualifier and value, rebuilt from the stream.
fn decode_joint_cells(
    stream: &[u8],
    members: &[JointMember],
) -> Result<Vec<Rebuilt>, &'static str> {
    let body = joint_body(stream, members)?;
    let mut out = Vec::with_capacity(members.len());
    let mut at = 0usize;
    let mut points = Vec::new();
    for m in members {
        let base = i64::from(m.offset_secs) * 1000;
        points.clear();
        for i in at..at + m.shape.points as usize {
            if body.offsets[i].saturating_sub(base) >= HOUR_MS {
                return Err("offset out of range");
            }
            points.push(body_point(&body, i, base)?);
        }
        at += m.shape.points as usize;
        out.push(rebuild_cell(&points, m.shape.meta));
    }
    Ok(out)
}

/// Whether a joint stream over `members` decodes to exactly `points`, at `offsets` (each
/// point's time from the period start, ms): the same times, resolutions, flags and value
/// bits, which are all a point is.
fn joint_points_are(
    stream: &[u8],
    members: &[JointMember],
    points: &[Point],
    offsets: &[i64],
) -> bool {
    let Ok(body) = joint_body(stream, members) else {
        return false;
    };
    body.offsets == offsets
        && body.resolution.len() == points.len()
        && body.flags.len() == points.len()
        && body.bits.len() == points.len()
        && points.iter().enumerate().all(|(i, p)| {
            body.resolution[i] == p.qualifier.is_millis()
                && body.flags[i] == p.qualifier.flags()
                && body.bits[i] == p.bits
        })
}

/// The points of a joint stream's members, as times (the period's start `period_ms` plus
/// each offset) and values appended to `times` and `values`, and each member's number of
/// points appended to `counts`: what [`decode_columns`] gives for each member's cell, member
/// after member. Returns whether each member's times strictly increase.
pub fn decode_joint_columns<V: Sample>(
    stream: &[u8],
    members: &[JointMember],
    period_ms: i64,
    times: &mut Vec<i64>,
    values: &mut Vec<V>,
) -> Result<bool> {
    let (t0, v0) = (times.len(), values.len());
    joint_columns(stream, members, period_ms, times, values).map_err(|e| {
        times.truncate(t0);
        values.truncate(v0);
        Error::Corrupt(format!("bad joint stream: {e}"))
    })
}

fn joint_columns<V: Sample>(
    stream: &[u8],
    members: &[JointMember],
    period_ms: i64,
    times: &mut Vec<i64>,
    values: &mut Vec<V>,
) -> Result<bool, &'static str> {
    let (r, n, version) = joint_reader(stream, members)?;
    let limit = members
        .iter()
        .map(|m| i64::from(m.offset_secs) * 1000 + HOUR_MS)
        .max()
        .unwrap_or(0);
    let start = times.len();
    // Seconds points are checked whole from the period's start: so are the members'.
    let all_increasing = decode_body_columns(r, version, n, period_ms, limit, times, values)?;
    // Each member's points in its hour; whether each member's times strictly increase.
    let mut increasing = true;
    let mut at = start;
    for m in members {
        let low = period_ms.wrapping_add(i64::from(m.offset_secs) * 1000);
        let end = at + m.shape.points as usize;
        let own = times.get(at..end).ok_or("stream lengths differ")?;
        if all_increasing {
            // The whole stream's times strictly increase: a member's first and last are its
            // least and greatest, so they alone say whether all of its points are in its hour.
            let in_hour =
                |t: Option<&i64>| t.is_none_or(|t| (0..HOUR_MS).contains(&t.wrapping_sub(low)));
            if !in_hour(own.first()) || !in_hour(own.last()) {
                return Err("offset out of range");
            }
            at = end;
            continue;
        }
        for (i, t) in own.iter().enumerate() {
            let off = t.wrapping_sub(low);
            if !(0..HOUR_MS).contains(&off) {
                return Err("offset out of range");
            }
            if i > 0 && *t <= own[i - 1] {
                increasing = false;
            }
        }
        at = end;
    }
    Ok(increasing)
}

/// A compacted data cell's blob by `encoder` (points and meta byte to blob), when it is shorter
/// than the cell and decodes back to it.
fn encode_cell(
    qualifier: &[u8],
    value: &[u8],
    encoder: fn(&[Point], Option<u8>) -> Vec<u8>,
) -> Option<Vec<u8>> {
    let mut points = Vec::with_capacity(qualifier.len() / 2);
    compact::decode_cell(qualifier, value, &mut points).ok()?;
    let values_len: usize = points.iter().map(|p| p.qualifier.value_len()).sum();
    let meta = match value.len() - values_len {
        0 => None,
        _ => value.last().copied(),
    };
    let blob = encoder(&points, meta);
    if blob.len() >= qualifier.len() + value.len() {
        return None;
    }
    // Lossless or not at all: the blob must give back these points and meta byte. That is
    // the cell itself: a compacted cell is exactly its points' qualifiers and values in
    // order, then the meta byte, and `decode_cell` read each byte once (widths by the
    // qualifiers' flags, at most one byte left for the meta).
    blob_holds(&blob, &points, meta).then_some(blob)
}

/// Whether `blob` decodes to exactly `points` and `meta`, as [`decode_blob_points`] would
/// read it, compared field by field without building the points (a flush checks every blob
/// it writes).
fn blob_holds(blob: &[u8], points: &[Point], meta: Option<u8>) -> bool {
    let Ok((mut r, version, n, m)) = Reader::header(blob) else {
        return false;
    };
    if n != points.len() || m != meta {
        return false;
    }
    let Ok(body) = decode_body(&mut r, version, n, None) else {
        return false;
    };
    r.pos == blob.len()
        && points.iter().enumerate().all(|(i, p)| {
            let q = p.qualifier;
            // A seconds qualifier's offset is whole seconds: a body offset that is not
            // cannot equal it.
            q.is_canonical()
                && body.resolution[i] == q.is_millis()
                && body.offsets[i] == i64::from(q.offset_ms())
                && body.flags[i] & FLAGS_MASK == q.flags()
                && body.bits[i] == p.bits
        })
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// Run-length pairs of a sequence.
fn runs<T: PartialEq + Copy>(items: impl Iterator<Item = T>) -> Vec<(T, u64)> {
    let mut out: Vec<(T, u64)> = Vec::new();
    for x in items {
        match out.last_mut() {
            Some((v, n)) if *v == x => *n += 1,
            _ => out.push((x, 1)),
        }
    }
    out
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The greatest common divisor of `deltas` (1 when they are all zero or there are none).
/// Stops at the first delta that brings it to 1: noisy values reach 1 within a few deltas,
/// and each step is a division.
fn common_divisor(deltas: &[i64]) -> u64 {
    let mut g = 0u64;
    for d in deltas {
        g = gcd(g, d.unsigned_abs());
        if g == 1 {
            return 1;
        }
    }
    g.max(1)
}

/// `deltas` divided by `divisor` (a divisor of each), in place; nothing to do for 1.
fn divide_all(deltas: &mut [i64], divisor: u64) {
    if divisor != 1 {
        for d in deltas {
            *d /= divisor as i64;
        }
    }
}

/// A sequence as its first value (zigzag varint), the greatest common divisor of its deltas
/// (varint; counters often step in fixed multiples), the smallest quotient (zigzag varint),
/// then each quotient above it, bit-packed: constant steps cost no bits.
///
/// With Rice packing, the quotients are a Rice sequence instead.
fn pack_sequence(values: &[i64], packing: Packing, out: &mut Vec<u8>) {
    let (first, divisor, quotients) = sequence_parts(values);
    put_varint(out, zigzag(first));
    put_varint(out, divisor);
    match packing {
        Packing::Frame => pack_above_floor(&quotients, out),
        Packing::Rice => rice::write(&quotients, out),
        Packing::Chosen | Packing::ChosenTruncated => {
            PlannedQuotients::new(quotients, packing).write(out);
        }
    }
}

/// A packed sequence's first value, the divisor of its deltas and their quotients.
fn sequence_parts(values: &[i64]) -> (i64, u64, Vec<i64>) {
    let first = values.first().copied().unwrap_or(0);
    let mut quotients: Vec<i64> = values.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
    let divisor = common_divisor(&quotients);
    divide_all(&mut quotients, divisor);
    (first, divisor, quotients)
}

fn pack(values: &[u64], out: &mut Vec<u8>) {
    let width = values
        .iter()
        .map(|v| 64 - v.leading_zeros())
        .max()
        .unwrap_or(0);
    out.push(width as u8);
    if width == 0 {
        return;
    }
    let (mut acc, mut bits) = (0u128, 0u32);
    for v in values {
        acc |= u128::from(*v) << bits;
        bits += width;
        while bits >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            bits -= 8;
        }
    }
    if bits > 0 {
        out.push(acc as u8);
    }
}

fn is_float(p: &Point) -> bool {
    p.qualifier.flags() & FLAG_FLOAT != 0
}

fn float_f64(p: &Point) -> f64 {
    if p.qualifier.value_len() == 4 {
        f64::from(f32::from_bits(p.bits as u32))
    } else {
        f64::from_bits(p.bits)
    }
}

/// Exact powers of ten for the decimal scales (10^k is exact in binary64 up to 10^22).
const POW10: [f64; MAX_DECIMALS as usize + 1] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18,
];

fn float_bits(m: i64, k: u32, len: usize) -> u64 {
    let f = m as f64 / POW10[k as usize];
    if len == 4 {
        u64::from((f as f32).to_bits())
    } else {
        f.to_bits()
    }
}

/// The fewest decimals (at most 9) that write every float exactly as an integer mantissa:
/// version 1's float mode 0x00.
#[cfg(test)]
fn decimal_scale(floats: &[&Point]) -> Option<(u32, Vec<i64>)> {
    decimal_scale_from(floats, 0)
}

/// The fewest decimals, `from` or more (at most 9), that write every float exactly as an
/// integer mantissa: version 1's float mode 0x00 where no float is exact below `from`.
fn decimal_scale_from(floats: &[&Point], from: u32) -> Option<(u32, Vec<i64>)> {
    'k: for k in from..=MAX_DECIMALS_V1 {
        let scale = POW10[k as usize];
        let mut mantissas = Vec::with_capacity(floats.len());
        for p in floats {
            let m = (float_f64(p) * scale).round();
            if !m.is_finite() || m.abs() >= 9.0e15 {
                continue 'k;
            }
            let m = m as i64;
            if float_bits(m, k, p.qualifier.value_len()) != p.bits {
                continue 'k;
            }
            mantissas.push(m);
        }
        return Some((k, mantissas));
    }
    None
}

/// A float's mantissa at scale `k` (`round(v × 10^k)`, when finite and under 2^62 in
/// magnitude) and its correction.
fn decimal(p: &Point, k: u32) -> Option<(i64, i64)> {
    let m = round(float_f64(p) * POW10[k as usize])?;
    Some((m, correction(p, m, k)))
}

/// `x` rounded half away from zero, when finite and under 2^62 in magnitude (`f64::round`
/// without its library call).
fn round(x: f64) -> Option<i64> {
    if x.is_nan() || x.abs() >= MANTISSA_LIMIT {
        return None;
    }
    // Exact: below 2^53 the fraction is exact, above it every double is an integer.
    let whole = x as i64;
    let fraction = x - whole as f64;
    Some(whole + i64::from(fraction >= 0.5) - i64::from(fraction <= -0.5))
}

/// What to add to the bits mantissa `m` rebuilds at scale `k` to get the float's bits: the
/// difference as `i64` (wrapping) for doubles, of the 32-bit patterns read as `i32` for floats.
fn correction(p: &Point, m: i64, k: u32) -> i64 {
    let len = p.qualifier.value_len();
    let rebuilt = float_bits(m, k, len);
    if len == 4 {
        i64::from(p.bits as u32 as i32) - i64::from(rebuilt as u32 as i32)
    } else {
        (p.bits as i64).wrapping_sub(rebuilt as i64)
    }
}

/// The least value (zigzag varint), then each value minus it, bit-packed: a packed
/// sequence's quotients, and version 2's corrections.
fn pack_above_floor(values: &[i64], out: &mut Vec<u8>) {
    let floor = values.iter().copied().min().unwrap_or(0);
    put_varint(out, zigzag(floor));
    let packed: Vec<u64> = values
        .iter()
        .map(|v| v.wrapping_sub(floor) as u64)
        .collect();
    pack(&packed, out);
}

/// The smallest scale at which a float is within one unit in the last place of what its
/// mantissa rebuilds, below 2^47 (about 14 digits: longer mantissas save little against the
/// raw bytes, and trying them costs time).
/// Before the division, a cheap necessary condition: `v × 10^k` within a few units in its
/// last place of an integer (2^-48 of it, 2^-19 for 4-byte floats).
fn near_scale(p: &Point) -> Option<u32> {
    let v = float_f64(p);
    let tolerance = if p.qualifier.value_len() == 4 {
        NEAR_F32
    } else {
        NEAR_F64
    };
    let near = |k: u32| {
        let x = v * POW10[k as usize];
        round(x).is_some_and(|m| (x - m as f64).abs() <= x.abs() * tolerance)
            && decimal(p, k).is_some_and(|(_, c)| c.unsigned_abs() <= 1)
    };
    // Most floats of monitoring data have a few decimals: the first scales are tried first,
    // each by the cheap test alone unless it passes (no division).
    for k in 0..SHORT_SCALES {
        let x = v * POW10[k as usize];
        if x.is_nan() || x.abs() >= NEAR_LIMIT {
            // Nor does any larger scale fit.
            return None;
        }
        if near(k) {
            return Some(k);
        }
    }
    // The scales tried end before the mantissa reaches 2^47. `|v| × 10^k` grows with `k`
    // (rounding keeps the order), so the scales that fit are a prefix, found by halving.
    let fitting = POW10.partition_point(|scale| {
        let x = v * scale;
        !x.is_nan() && x.abs() < NEAR_LIMIT
    });
    let last = u32::try_from(fitting).ok()?.checked_sub(1)?;
    // A float near a decimal at a scale is near it at every larger one (the same mantissa
    // times ten rebuilds the same float), so one far at the largest is far at all: most
    // full-precision floats are settled by one test instead of one a scale.
    if last < SHORT_SCALES || !near(last) {
        return None;
    }
    (SHORT_SCALES..=last).find(|k| near(*k))
}

/// The scales [`near_scale`] tries first, one by one.
const SHORT_SCALES: u32 = 4;

/// 2^-48 and 2^-19: a few units in the last place of a double or a float, relative.
const NEAR_F64: f64 = 1.0 / 281_474_976_710_656.0;
const NEAR_F32: f64 = 1.0 / 524_288.0;
/// 2^47.
const NEAR_LIMIT: f64 = 140_737_488_355_328.0;

/// A float section's raw length (its bytes written as they are) and its candidate decimal
/// scales, a bit each: 0 always, each float's smallest scale within one unit in the last
/// place, and version 1's scale.
fn float_candidates(floats: &[&Point]) -> (usize, u32) {
    let raw_len = 1 + floats
        .iter()
        .map(|p| p.qualifier.value_len())
        .sum::<usize>();
    let mut candidates = 1u32;
    // Where every float has a near scale, the greatest: no float is exact below it (an exact
    // float is within one unit in the last place), so version 1's scale is not either.
    let mut exact_from = Some(0);
    for p in floats {
        match near_scale(p) {
            Some(k) => {
                candidates |= 1 << k;
                exact_from = exact_from.map(|from: u32| from.max(k));
            }
            None => exact_from = None,
        }
    }
    if let Some((k, _)) = decimal_scale_from(floats, exact_from.unwrap_or(0)) {
        candidates |= 1 << k;
    }
    (raw_len, candidates)
}

/// The shortest float section among raw bytes and the decimal scales worth trying: 0, each
/// float's smallest scale within one unit in the last place, and version 1's scale. Larger
/// scales go first; a scale is dropped as soon as its corrections need more than 32 bits (its
/// values are not near decimals) or alone would take the best section's size. With Rice
/// packing each scale's section is costed without writing its bits ([`PlannedDecimal`]) and
/// only the shortest is written; frame-packed sections are written to be measured.
fn encode_floats(floats: &[&Point], packing: Packing, out: &mut Vec<u8>) {
    // The raw section's length; its bytes are written only if no scale beats it.
    let (raw_len, candidates) = float_candidates(floats);
    let scales = (0..=MAX_DECIMALS)
        .rev()
        .filter(|k| candidates & (1 << k) != 0);
    match packing {
        Packing::Rice | Packing::Chosen | Packing::ChosenTruncated => {
            let mut best: Option<PlannedDecimal> = None;
            for k in scales {
                let best_len = best.as_ref().map_or(raw_len, |b| b.len);
                if let Some(planned) = PlannedDecimal::new(floats, k, best_len, packing)
                    && planned.len < best_len
                {
                    best = Some(planned);
                }
            }
            if let Some(best) = best {
                best.write(out);
                return;
            }
        }
        Packing::Frame => {
            let (mut best, mut section) = (Vec::new(), Vec::new());
            for k in scales {
                let best_len = if best.is_empty() { raw_len } else { best.len() };
                section.clear();
                if decimal_section(floats, k, Some(best_len), packing, &mut section)
                    && section.len() < best_len
                {
                    std::mem::swap(&mut best, &mut section);
                }
            }
            if !best.is_empty() {
                out.extend_from_slice(&best);
                return;
            }
        }
    }
    out.reserve(raw_len);
    out.push(1);
    for p in floats {
        write_bits(p.bits, p.qualifier.flags(), out);
    }
}

/// The float section at decimal scale `k`: mode 0x00 when every correction is zero, else 0x02.
/// With a `limit`, gives up (false) once the corrections need more than 32 bits or alone would
/// take `limit` bytes or more.
fn decimal_section(
    floats: &[&Point],
    k: u32,
    limit: Option<usize>,
    packing: Packing,
    out: &mut Vec<u8>,
) -> bool {
    let Some((mantissas, corrections)) = decimal_values(floats, k, limit) else {
        return false;
    };
    let exact = corrections.iter().all(|c| *c == 0);
    out.push(if exact { 0 } else { 2 });
    out.push(k as u8);
    pack_sequence(&mantissas, packing, out);
    if !exact {
        match packing.of_corrections() {
            Packing::Frame => pack_above_floor(&corrections, out),
            Packing::Rice => rice::write(&corrections, out),
            moded => PlannedQuotients::new(corrections, moded).write(out),
        }
    }
    true
}

/// Each float's mantissa at decimal scale `k` and its correction. With a `limit`, `None` once
/// the corrections need more than 32 bits or, frame-packed, alone would take `limit` bytes or
/// more.
fn decimal_values(floats: &[&Point], k: u32, limit: Option<usize>) -> Option<(Vec<i64>, Vec<i64>)> {
    let mut mantissas = Vec::with_capacity(floats.len());
    let mut corrections = Vec::with_capacity(floats.len());
    let (mut previous, mut low, mut high) = (0, i64::MAX, i64::MIN);
    for p in floats {
        // A value without a mantissa keeps the previous one: its correction says it all.
        let (m, c) = decimal(p, k).unwrap_or_else(|| (previous, correction(p, previous, k)));
        mantissas.push(m);
        corrections.push(c);
        previous = m;
        if c < low || c > high {
            (low, high) = (low.min(c), high.max(c));
            let width = 64 - (high.wrapping_sub(low) as u64).leading_zeros() as usize;
            let bytes = 2 + (floats.len() * width).div_ceil(8);
            if limit.is_some_and(|limit| width > 32 || bytes >= limit) {
                return None;
            }
        }
    }
    Some((mantissas, corrections))
}

/// A version 2 float section at a decimal scale with Rice packing, costed and not yet
/// written: the bytes [`decimal_section`] would write, in [`PlannedDecimal::write`].
#[derive(Debug)]
struct PlannedDecimal {
    k: u32,
    first: i64,
    divisor: u64,
    quotients: PlannedQuotients,
    /// `None` when every correction is zero (mode 0x00).
    corrections: Option<PlannedQuotients>,
    /// The section's bytes.
    len: usize,
}

impl PlannedDecimal {
    /// The section at scale `k`, `None` where [`decimal_values`] gives up under `limit`.
    fn new(floats: &[&Point], k: u32, limit: usize, packing: Packing) -> Option<Self> {
        let (mantissas, corrections) = decimal_values(floats, k, Some(limit))?;
        let (first, divisor, quotients) = sequence_parts(&mantissas);
        let quotients = PlannedQuotients::new(quotients, packing);
        let corrections = corrections
            .iter()
            .any(|c| *c != 0)
            .then(|| PlannedQuotients::new(corrections, packing.of_corrections()));
        let len = 2
            + rice::varint_len(zigzag(first))
            + rice::varint_len(divisor)
            + quotients.encoded_len()
            + corrections
                .as_ref()
                .map_or(0, PlannedQuotients::encoded_len);
        Some(Self {
            k,
            first,
            divisor,
            quotients,
            corrections,
            len,
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.push(if self.corrections.is_some() { 2 } else { 0 });
        out.push(self.k as u8);
        put_varint(out, zigzag(self.first));
        put_varint(out, self.divisor);
        self.quotients.write(out);
        if let Some(corrections) = &self.corrections {
            corrections.write(out);
        }
        debug_assert_eq!(out.len() - start, self.len);
    }
}

/// How a body writes its points' widths (RFC 0013).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Widths {
    /// Flag runs, without a mode byte (blob versions 1 and 2, joint streams 0x01 to 0x03).
    Runs,
    /// Flag mode 0x00, then flag runs.
    RunsAfterMode,
    /// Flag modes 0x01 to 0x03: each point's width the one its value gives, floats written
    /// as doubles.
    FromValues,
}

impl Widths {
    /// The widths a body with a flag mode writes for `points`: from their values when each
    /// point's are the ones its value gives ([`width_from_value`]).
    fn of(points: &[Point]) -> Widths {
        if points
            .iter()
            .all(|p| width_from_value(p) == Some(p.qualifier.flags()))
        {
            Widths::FromValues
        } else {
            Widths::RunsAfterMode
        }
    }
}

/// The flags a point's value gives it (RFC 0013): an integer on the fewest of 1, 2, 4 or 8
/// bytes that hold it, as OpenTSDB writes integers; a float on 4 bytes when its value as a
/// double is exactly a float, as OpenTSDB's `put` chooses (NaN never is), else on 8. `None`
/// for flags no value gives (lengths other than those) and for a 4-byte float the double
/// does not give back bit for bit (a signalling NaN).
fn width_from_value(p: &Point) -> Option<u8> {
    if !is_float(p) {
        let shift = 64 - 8 * p.qualifier.value_len() as u32;
        return Some(Value::Int(((p.bits << shift) as i64) >> shift).flags());
    }
    let double = float_f64(p);
    let exact = match p.qualifier.value_len() {
        4 => (double as f32).to_bits() == p.bits as u32,
        len => len == 8,
    };
    if !exact {
        return None;
    }
    Some(float_value(double).flags())
}

/// A point's value written as a double, for a float section of widths from values: a 4-byte
/// float's value as the double it is exactly.
fn as_double(p: &Point) -> Point {
    if p.qualifier.value_len() == 4 && is_float(p) {
        Point::new(
            p.qualifier.with_flags(FLAG_FLOAT | 7),
            float_f64(p).to_bits(),
        )
    } else {
        *p
    }
}

/// Everything before the value sections, flags as runs (after mode 0x00 where the version has
/// a flag mode).
#[cfg(test)]
fn encode_head(points: &[Point], meta: Option<u8>, version: u8, out: &mut Vec<u8>) {
    let widths = if has_flag_mode(version) {
        Widths::RunsAfterMode
    } else {
        Widths::Runs
    };
    encode_head_with(points, meta, version, widths, out);
}

fn encode_head_with(
    points: &[Point],
    meta: Option<u8>,
    version: u8,
    widths: Widths,
    out: &mut Vec<u8>,
) {
    out.push(version);
    put_varint(out, points.len() as u64);
    if version == VERSION {
        // One byte for the usual meta bytes (RFC 0014).
        match meta {
            None => out.push(META_NONE),
            Some(m @ (0 | 1)) => out.push(META_ZERO + m),
            Some(m) => out.extend_from_slice(&[META_BYTE, m]),
        }
    } else {
        out.push(u8::from(meta.is_some()));
        if let Some(m) = meta {
            out.push(m);
        }
    }
    let offsets: Vec<i64> = points.iter().map(|p| i64::from(p.offset_ms())).collect();
    encode_runs(points, &offsets, Packing::of(version), widths, out);
}

/// The resolution, offset and flag runs of `points`, at `offsets` (ms: from the hour in a
/// blob, from the period in a joint stream). With Rice packing, the offsets are a mode byte
/// then their runs (0x00) or a Rice sequence (0x01), whichever is shorter. The flags as
/// `widths` says.
fn encode_runs(
    points: &[Point],
    offsets: &[i64],
    packing: Packing,
    widths: Widths,
    out: &mut Vec<u8>,
) {
    let resolution = runs(points.iter().map(|p| p.qualifier.is_millis()));
    // Version 4 (RFC 0014): a mode byte, then runs only where resolutions mix.
    let moded = packing == Packing::ChosenTruncated;
    match resolution.as_slice() {
        [(false, _)] if moded => out.push(RESOLUTION_SECONDS),
        [(true, _)] if moded => out.push(RESOLUTION_MILLIS),
        _ => {
            if moded {
                out.push(RESOLUTION_RUNS);
            }
            put_varint(out, resolution.len() as u64);
            out.push(u8::from(resolution.first().is_some_and(|r| r.0)));
            for (_, n) in &resolution {
                put_varint(out, *n);
            }
        }
    }
    encode_offsets(offsets, packing, out);
    encode_flags(points, widths, out);
}

/// The offsets: as runs; with Rice packing after a mode byte, as runs (0x00) or a Rice
/// sequence (0x01), whichever is shorter; in a version 4 blob, where every step is the same
/// positive one, as the first offset and that step (0x02).
fn encode_offsets(offsets: &[i64], packing: Packing, out: &mut Vec<u8>) {
    let deltas = runs(offsets.windows(2).map(|w| w[1] - w[0]));
    if packing == Packing::Frame {
        return offset_runs(offsets, &deltas, out);
    }
    if let ([(step, _)], Packing::ChosenTruncated) = (deltas.as_slice(), packing)
        && *step > 0
    {
        out.push(OFFSETS_REGULAR);
        put_varint(out, offsets[0] as u64);
        put_varint(out, *step as u64);
        return;
    }
    let mut as_runs = vec![OFFSETS_RUNS];
    offset_runs(offsets, &deltas, &mut as_runs);
    // A Rice sequence takes at least its first offset, a divisor byte, two bytes of center
    // and length, and 6 bits a block: regular offsets' few runs are not worth writing it to
    // see.
    let blocks = offsets.len().saturating_sub(1).div_ceil(rice::BLOCK);
    let rice_least = rice::varint_len(offsets.first().copied().unwrap_or(0) as u64)
        + 3
        + (6 * blocks).div_ceil(8);
    if as_runs.len() <= 1 + rice_least {
        out.extend_from_slice(&as_runs);
        return;
    }
    let mut as_rice = vec![OFFSETS_RICE];
    offset_rice(offsets, &mut as_rice);
    out.extend_from_slice(if as_rice.len() < as_runs.len() {
        &as_rice
    } else {
        &as_runs
    });
}

/// Offset modes of Rice bodies: runs follow.
const OFFSETS_RUNS: u8 = 0;
/// A Rice sequence of the steps' changes follows.
const OFFSETS_RICE: u8 = 1;
/// Version 4 blobs (RFC 0014): the first offset and the one step between all points follow.
const OFFSETS_REGULAR: u8 = 2;

/// Version 4 blobs' resolution modes (RFC 0014): every point of seconds resolution.
const RESOLUTION_SECONDS: u8 = 0;
/// Every point of milliseconds resolution.
const RESOLUTION_MILLIS: u8 = 1;
/// Resolution runs follow, as in version 3.
const RESOLUTION_RUNS: u8 = 2;

/// Version 4 blobs' meta codes (RFC 0014): no meta byte.
const META_NONE: u8 = 0;
/// Meta byte 0x00 (0x02: 0x01).
const META_ZERO: u8 = 1;
/// The meta byte follows.
const META_BYTE: u8 = 3;

/// The flags of `points` as `widths` says: a flag mode and kind runs, or flag runs (after
/// mode 0x00 where the version has a flag mode).
fn encode_flags(points: &[Point], widths: Widths, out: &mut Vec<u8>) {
    match widths {
        Widths::FromValues => {
            let kinds = runs(points.iter().map(is_float));
            match kinds.as_slice() {
                [(false, _)] => out.push(FLAG_MODE_INTEGERS),
                [(true, _)] => out.push(FLAG_MODE_FLOATS),
                _ => {
                    out.push(FLAG_MODE_KINDS);
                    put_varint(out, kinds.len() as u64);
                    out.push(u8::from(kinds.first().is_some_and(|k| k.0)));
                    for (_, n) in &kinds {
                        put_varint(out, *n);
                    }
                }
            }
            return;
        }
        Widths::RunsAfterMode => out.push(FLAG_MODE_RUNS),
        Widths::Runs => {}
    }
    let flags = runs(points.iter().map(|p| p.qualifier.flags()));
    put_varint(out, flags.len() as u64);
    for (f, n) in &flags {
        out.push(*f);
        put_varint(out, *n);
    }
}

/// Flag modes (RFC 0013): flag runs follow.
const FLAG_MODE_RUNS: u8 = 0;
/// Every point an integer, on the width its value gives.
const FLAG_MODE_INTEGERS: u8 = 1;
/// Every point a float, on the width its value gives.
const FLAG_MODE_FLOATS: u8 = 2;
/// Runs of integers and floats follow, each on the width its value gives.
const FLAG_MODE_KINDS: u8 = 3;

/// The first offset, then `deltas`: the runs of equal deltas between the offsets.
fn offset_runs(offsets: &[i64], deltas: &[(i64, u64)], out: &mut Vec<u8>) {
    put_varint(out, offsets.first().copied().unwrap_or(0) as u64);
    put_varint(out, deltas.len() as u64);
    for (d, n) in deltas {
        put_varint(out, zigzag(*d));
        put_varint(out, *n);
    }
}

/// The first offset, the divisor of the deltas, then a Rice sequence of the first delta's
/// quotient and each later quotient less the one before (jittered intervals cost a few bits,
/// where each jitter would start two runs).
fn offset_rice(offsets: &[i64], out: &mut Vec<u8>) {
    put_varint(out, offsets.first().copied().unwrap_or(0) as u64);
    let mut changes: Vec<i64> = offsets.windows(2).map(|w| w[1] - w[0]).collect();
    let divisor = common_divisor(&changes);
    put_varint(out, divisor);
    divide_all(&mut changes, divisor);
    let mut previous = 0i64;
    for c in &mut changes {
        let q = *c;
        *c = q.wrapping_sub(previous);
        previous = q;
    }
    rice::write(&changes, out);
}

/// The integer points' values, sign-extended.
fn int_values(points: &[Point]) -> Vec<i64> {
    points
        .iter()
        .filter_map(|p| match p.value() {
            Value::Int(i) => Some(i),
            _ => None,
        })
        .collect()
}

/// A version 4 blob; for fewer than [`BOTH_VERSIONS_BELOW`] points, the version 3 one
/// instead where that is not longer. Version 4 can write every choice version 3 makes, at
/// the cost of a mode byte for mixed resolutions, its offsets and each sequence (at most
/// five, one paid back by the meta code where the meta byte is 0x00 or 0x01): a row of a
/// few points may not win them back, a longer one loses at most those bytes and is not
/// worth encoding twice. Either with widths from values where the points allow it and that
/// is not longer (4-byte floats written as doubles may take more bits than as floats).
fn encode_points(points: &[Point], meta: Option<u8>) -> Vec<u8> {
    let chosen = with_shorter_widths(points, |widths| encode_blob(points, meta, VERSION, widths));
    if points.len() >= BOTH_VERSIONS_BELOW {
        return chosen;
    }
    let framed = with_shorter_widths(points, |widths| {
        encode_blob(points, meta, VERSION_3, widths)
    });
    if framed.len() <= chosen.len() {
        framed
    } else {
        chosen
    }
}

/// Rows of fewer points are encoded in versions 4 and 3, the shorter kept.
const BOTH_VERSIONS_BELOW: usize = 64;

/// What `encode` writes for `points` with the widths a flag mode allows ([`Widths::of`]);
/// where those are from values and some float is on 4 bytes, with flag runs too, the shorter
/// kept: a 4-byte float written as a double may take more bits. From [`BOTH_VERSIONS_BELOW`]
/// points, flag runs are not encoded to see when every 4-byte float is a short decimal
/// ([`is_short_decimal`], as floats from collectors' text of a few decimals are), every float
/// is under 2^47 in magnitude ([`settled_floats`]) (so that a scale of four places fits each one's mantissa: a
/// double too large for any scale above 0 would leave a half on 4 bytes a correction of 2^29
/// as a double, 1 as a float) and the body came out at under [`SHORT_BODY_BYTES`] a float:
/// such a float is then as short a decimal as a double, and the body's floats are a decimal
/// section shorter than raw 4-byte floats would be (where a body's floats are raw bytes, a
/// float takes 8 bytes as a double and 4 with flag runs). What may be left: a few bits a
/// value where 4-byte floats need more places than every double beside them and a float's
/// coarser unit would let a smaller scale fit.
fn with_shorter_widths(points: &[Point], encode: impl Fn(Widths) -> Vec<u8>) -> Vec<u8> {
    let widths = Widths::of(points);
    let bytes = encode(widths);
    if widths != Widths::FromValues || !has_4_byte_float(points) {
        return bytes;
    }
    let settled = points.len() >= BOTH_VERSIONS_BELOW
        && settled_floats(points).is_some_and(|floats| bytes.len() < SHORT_BODY_BYTES * floats);
    if !settled {
        let listed = encode(Widths::RunsAfterMode);
        if listed.len() < bytes.len() {
            return listed;
        }
    }
    bytes
}

/// The bytes a float below which a body with widths from values is taken as it is (see
/// [`with_shorter_widths`]): raw 4-byte floats take 4.
const SHORT_BODY_BYTES: usize = 4;

fn encode_blob(points: &[Point], meta: Option<u8>, version: u8, widths: Widths) -> Vec<u8> {
    let mut out = Vec::with_capacity(points.len() + 16);
    encode_head_with(points, meta, version, widths, &mut out);
    encode_values(points, Packing::of(version), widths, &mut out);
    out
}

fn has_4_byte_float(points: &[Point]) -> bool {
    points
        .iter()
        .any(|p| is_float(p) && p.qualifier.value_len() == 4)
}

/// The most decimals a 4-byte float's value may need and still count as short for
/// [`with_shorter_widths`]: its lowest set bit at 2^-4 or above (`912.25`, `0.0625`). A float
/// that came from text of at most four decimals is one.
const SHORT_FLOAT_DECIMALS: i32 = 4;

/// How many of `points` are floats, when every float is under 2^47 in magnitude and every
/// 4-byte one a short decimal ([`is_short_decimal`]); `None` when one is not (a float written
/// with all its digits, such as `0.1f32`'s `0.10000000149011612`, a large or non-finite one).
fn settled_floats(points: &[Point]) -> Option<usize> {
    let mut floats = 0;
    for p in points.iter().filter(|p| is_float(p)) {
        // NaN and infinities are not under the limit.
        let small = float_f64(p).abs() < NEAR_LIMIT;
        let short = p.qualifier.value_len() != 4 || is_short_decimal(p.bits as u32);
        if !(small && short) {
            return None;
        }
        floats += 1;
    }
    Some(floats)
}

/// Whether the float of `bits` is under 2^24 in magnitude (where a float still holds every
/// whole number, and a decimal's mantissa at four places fits in 38 bits) and exactly a decimal
/// of at most [`SHORT_FLOAT_DECIMALS`] places: a binary fraction m * 2^e (m odd) has exactly
/// max(0, -e) decimals.
fn is_short_decimal(bits: u32) -> bool {
    let exponent = ((bits >> 23) & 0xFF) as i32;
    let fraction = bits & 0x7F_FFFF;
    // 2^24 and up (infinities and NaN among them).
    if exponent >= 127 + 24 {
        return false;
    }
    if exponent == 0 && fraction == 0 {
        return true;
    }
    let (mantissa, scale) = if exponent == 0 {
        (fraction, -149)
    } else {
        (fraction | 0x80_0000, exponent - 150)
    };
    scale + mantissa.trailing_zeros() as i32 >= -SHORT_FLOAT_DECIMALS
}

/// Version 2's integer and float sections, each present only when some point needs it; with
/// widths from values, every float as a double.
fn encode_values(points: &[Point], packing: Packing, widths: Widths, out: &mut Vec<u8>) {
    let ints = int_values(points);
    if !ints.is_empty() {
        pack_sequence(&ints, packing, out);
    }
    let doubles: Vec<Point>;
    let floats: Vec<&Point> = if widths == Widths::FromValues && has_4_byte_float(points) {
        doubles = points
            .iter()
            .filter(|p| is_float(p))
            .map(as_double)
            .collect();
        doubles.iter().collect()
    } else {
        points.iter().filter(|p| is_float(p)).collect()
    };
    if !floats.is_empty() {
        encode_floats(&floats, packing, out);
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, &'static str> {
        let b = *self.bytes.get(self.pos).ok_or("truncated")?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, &'static str> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7F) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err("varint too long")
    }

    /// The `n` values written by `pack_sequence`.
    fn unpack_deltas(&mut self, n: usize, packing: Packing) -> Result<Vec<i64>, &'static str> {
        let mut v = unzigzag(self.varint()?);
        let divisor = self.varint()? as i64;
        let mut out = Vec::with_capacity(n);
        if n > 0 {
            out.push(v);
        }
        self.quotients_each(n.saturating_sub(1), packing, |q| {
            v = v.wrapping_add(q.wrapping_mul(divisor));
            out.push(v);
        })?;
        Ok(out)
    }

    /// A sequence of `n` values written as quotients are under `packing` (no first value,
    /// no divisor): a decimal float section's corrections.
    fn sequence(&mut self, n: usize, packing: Packing) -> Result<Vec<i64>, &'static str> {
        let mut out = Vec::with_capacity(n);
        self.quotients_each(n, packing, |q| out.push(q))?;
        Ok(out)
    }

    /// Each of `n` quotients written under `packing` given to `f`, in order: after a mode
    /// byte under chosen packing, a frame (least value, then bit-packed), a Rice sequence or
    /// a truncated binary frame.
    fn quotients_each(
        &mut self,
        n: usize,
        packing: Packing,
        mut f: impl FnMut(i64),
    ) -> Result<(), &'static str> {
        match self.quotients(packing)? {
            Quotients::Frame => {
                let floor = unzigzag(self.varint()?);
                for d in self.unpack(n)? {
                    f((d as i64).wrapping_add(floor));
                }
            }
            Quotients::Rice => self.rice_each(n, |q| {
                f(q);
                Ok(())
            })?,
            Quotients::Truncated => {
                let rest = self.bytes.get(self.pos..).unwrap_or(&[]);
                self.pos += truncated::read(rest, n, f)?;
            }
        }
        Ok(())
    }

    /// How a sequence's quotients are written: under chosen packing, its mode byte read.
    fn quotients(&mut self, packing: Packing) -> Result<Quotients, &'static str> {
        let mode = match packing {
            Packing::Frame => return Ok(Quotients::Frame),
            Packing::Rice => return Ok(Quotients::Rice),
            Packing::Chosen | Packing::ChosenTruncated => self.byte()?,
        };
        match mode {
            QUOTIENTS_RICE => Ok(Quotients::Rice),
            QUOTIENTS_FRAME => Ok(Quotients::Frame),
            QUOTIENTS_TRUNCATED if packing == Packing::ChosenTruncated => Ok(Quotients::Truncated),
            _ => Err("bad sequence mode"),
        }
    }

    /// Each of a Rice sequence's `n` values given to `f`, in order.
    fn rice_each(
        &mut self,
        n: usize,
        f: impl FnMut(i64) -> Result<(), &'static str>,
    ) -> Result<(), &'static str> {
        let rest = self.bytes.get(self.pos..).unwrap_or(&[]);
        self.pos += rice::read(rest, n, f)?;
        Ok(())
    }

    /// The `n - 1` offset deltas (ms) after the first offset, written by `offset_rice`.
    fn offset_deltas(&mut self, n: usize) -> Result<Vec<i64>, &'static str> {
        let divisor = i64::try_from(self.varint()?).map_err(|_| "offset overflow")?;
        let mut q = 0i64;
        let mut out = Vec::with_capacity(n.saturating_sub(1));
        self.rice_each(n.saturating_sub(1), |change| {
            q = q.checked_add(change).ok_or("offset overflow")?;
            out.push(q.checked_mul(divisor).ok_or("offset overflow")?);
            Ok(())
        })?;
        Ok(out)
    }

    /// A body's flag mode (RFC 0013) and what follows it when not flag runs: the kinds of its
    /// `n` points, runs of (is float, length) adding up to `n`. `None`, nothing read, for a
    /// version without a flag mode; `None` after mode 0x00, the flag runs next.
    fn kinds(&mut self, version: u8, n: usize) -> Result<Option<Vec<(bool, usize)>>, &'static str> {
        if !has_flag_mode(version) {
            return Ok(None);
        }
        match self.byte()? {
            FLAG_MODE_RUNS => return Ok(None),
            FLAG_MODE_INTEGERS => return Ok(Some(vec![(false, n)])),
            FLAG_MODE_FLOATS => return Ok(Some(vec![(true, n)])),
            FLAG_MODE_KINDS => {}
            _ => return Err("bad flag mode"),
        }
        let count = self.varint()? as usize;
        let mut float = match self.byte()? {
            0 => false,
            1 => true,
            _ => return Err("bad kind run"),
        };
        let mut out = Vec::with_capacity(count.min(n));
        let mut total = 0usize;
        for _ in 0..count {
            let len = self.varint()? as usize;
            total = run_total(total, len, n).ok_or("kind runs overflow")?;
            out.push((float, len));
            float = !float;
        }
        if total != n {
            return Err("stream lengths differ");
        }
        Ok(Some(out))
    }

    /// How a body's offsets are written: runs, or after a Rice body's mode byte a Rice
    /// sequence or (a version 4 blob) one step.
    fn offset_mode(&mut self, version: u8) -> Result<Offsets, &'static str> {
        let packing = Packing::of(version);
        if packing == Packing::Frame {
            return Ok(Offsets::Runs);
        }
        match self.byte()? {
            OFFSETS_RUNS => Ok(Offsets::Runs),
            OFFSETS_RICE => Ok(Offsets::Rice),
            OFFSETS_REGULAR if packing == Packing::ChosenTruncated => Ok(Offsets::Regular),
            _ => Err("bad offset mode"),
        }
    }

    /// A body's resolution: whether its first run is of milliseconds, and the runs'
    /// lengths (alternating resolutions), adding up to at most `n`. A version 4 blob writes
    /// one run for all `n` points as a mode byte.
    fn resolution(&mut self, version: u8, n: usize) -> Result<(bool, Vec<usize>), &'static str> {
        if version == VERSION {
            match self.byte()? {
                RESOLUTION_SECONDS => return Ok((false, vec![n])),
                RESOLUTION_MILLIS => return Ok((true, vec![n])),
                RESOLUTION_RUNS => {}
                _ => return Err("bad resolution mode"),
            }
        }
        let count = self.varint()? as usize;
        let first_ms = self.byte()? == 1;
        let mut lengths = Vec::with_capacity(count.min(n));
        let mut total = 0usize;
        for _ in 0..count {
            let len = self.varint()? as usize;
            total = run_total(total, len, n).ok_or("resolution runs overflow")?;
            lengths.push(len);
        }
        Ok((first_ms, lengths))
    }

    fn unpack(&mut self, n: usize) -> Result<Vec<u64>, &'static str> {
        let width = u32::from(self.byte()?);
        if width > 64 {
            return Err("bad bit width");
        }
        if width == 0 {
            return Ok(vec![0; n]);
        }
        let bytes = (n * width as usize).div_ceil(8);
        let data = self
            .bytes
            .get(self.pos..self.pos + bytes)
            .ok_or("truncated")?;
        self.pos += bytes;
        let mask = if width == 64 {
            u64::MAX
        } else {
            (1u64 << width) - 1
        };
        let mut out = Vec::with_capacity(n);
        let (mut acc, mut bits, mut i) = (0u128, 0u32, 0usize);
        for _ in 0..n {
            while bits < width {
                acc |= u128::from(data[i]) << bits;
                i += 1;
                bits += 8;
            }
            out.push((acc as u64) & mask);
            acc >>= width;
            bits -= width;
        }
        Ok(out)
    }
}

/// A run's length added to the lengths before it, when the sum stays within `limit`.
fn run_total(total: usize, len: usize, limit: usize) -> Option<usize> {
    total.checked_add(len).filter(|t| *t <= limit)
}

/// Whether a blob of `version` holds the integer or float section of `count` values: version 1
/// always does, version 2 only when there are values.
fn has_section(version: u8, count: usize) -> bool {
    version == VERSION_1 || count > 0
}

enum FloatMode {
    /// Mantissas at a decimal scale (modes 0x00 and, version 2, 0x02 with corrections).
    Decimal { corrected: bool },
    /// Each value's bytes (mode 0x01).
    Raw,
}

fn float_mode(version: u8, mode: u8) -> Result<FloatMode, &'static str> {
    match mode {
        0 => Ok(FloatMode::Decimal { corrected: false }),
        1 => Ok(FloatMode::Raw),
        2 if version != VERSION_1 => Ok(FloatMode::Decimal { corrected: true }),
        _ => Err("bad float mode"),
    }
}

/// The streams of a blob's body (or a joint stream's), point by point.
struct Body {
    /// Whether each point has millisecond resolution.
    resolution: Vec<bool>,
    /// Each point's offset (ms).
    offsets: Vec<i64>,
    flags: Vec<u8>,
    /// Each point's value bits, the low bytes of its value length.
    bits: Vec<u64>,
}

/// Decodes a blob into its points (appended to `out`); returns the cell's meta byte.
fn decode_blob_points(blob: &[u8], out: &mut Vec<Point>) -> Result<Option<u8>, &'static str> {
    let (mut r, version, n, meta) = Reader::header(blob)?;
    let body = decode_body(&mut r, version, n, None)?;
    if r.pos != blob.len() {
        return Err("trailing bytes");
    }
    out.reserve(n);
    for i in 0..n {
        out.push(body_point(&body, i, 0)?);
    }
    Ok(meta)
}

/// Point `i` of a body, its offset taken less `base_ms` (the start of its hour).
fn body_point(body: &Body, i: usize, base_ms: i64) -> Result<Point, &'static str> {
    let off = body.offsets[i]
        .checked_sub(base_ms)
        .and_then(|o| u32::try_from(o).ok())
        .ok_or("offset out of range")?;
    let flags = body.flags[i];
    let q = if body.resolution[i] {
        Qualifier::millis(off, flags)
    } else {
        if off % 1000 != 0 {
            return Err("second offset not whole");
        }
        Qualifier::seconds(off / 1000, flags)
    }
    .map_err(|_| "offset out of range")?;
    Ok(Point::new(q, body.bits[i]))
}

/// The bytes of each section of a joint stream ([`joint_sections`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JointSections {
    /// The version byte.
    pub version: usize,
    /// The hour summaries (version 0x03): the bitmap and each summary.
    pub summaries: usize,
    /// The resolution runs.
    pub runs: usize,
    /// The flag runs.
    pub flags: usize,
    /// The points' offsets: their times.
    pub offsets: usize,
    /// The integer points' values.
    pub integers: usize,
    /// The float section's mode and scale bytes.
    pub float_head: usize,
    /// The decimal mantissas (first, divisor, packed quotients).
    pub mantissas: usize,
    /// The decimal corrections.
    pub corrections: usize,
    /// Floats stored as their bytes (mode 0x01).
    pub raw_floats: usize,
    pub integer_points: usize,
    pub float_points: usize,
    /// The float section's decimal scale (`None`: raw, or no floats).
    pub scale: Option<u32>,
}

/// Adds the bytes from `*mark` to `pos` to a section's count, when counting.
fn add_section(
    sections: &mut Option<&mut JointSections>,
    mark: &mut usize,
    pos: usize,
    field: fn(&mut JointSections) -> &mut usize,
) {
    if let Some(s) = sections.as_deref_mut() {
        *field(s) += pos - *mark;
    }
    *mark = pos;
}

/// Where a joint stream's bytes go, section by section (tools accounting for the store's
/// bytes); refuses what the other readers refuse.
pub fn joint_sections(stream: &[u8], members: &[JointMember]) -> Result<JointSections> {
    let corrupt = |e: &str| Error::Corrupt(format!("bad joint stream: {e}"));
    let (mut r, n, version) = joint_reader(stream, members).map_err(corrupt)?;
    let mut sections = JointSections {
        version: 1,
        summaries: r.pos - 1,
        ..JointSections::default()
    };
    decode_body(&mut r, version, n, Some(&mut sections)).map_err(corrupt)?;
    if r.pos != stream.len() {
        return Err(corrupt("trailing bytes"));
    }
    Ok(sections)
}

/// The bytes of each section of an encoded data cell (a blob, RFC 0003 and RFC 0005), its
/// head (version, point count, meta byte) counted as the version.
pub fn cell_sections(blob: &[u8]) -> Result<JointSections> {
    let corrupt = |e: &str| Error::Corrupt(format!("bad encoded data cell: {e}"));
    let (mut r, version, n, _) = Reader::header(blob).map_err(corrupt)?;
    let mut sections = JointSections {
        version: r.pos,
        ..JointSections::default()
    };
    decode_body(&mut r, version, n, Some(&mut sections)).map_err(corrupt)?;
    if r.pos != blob.len() {
        return Err(corrupt("trailing bytes"));
    }
    Ok(sections)
}

/// The resolution, offset and flag runs and the value sections of `n` points (`n` checked
/// against the bytes by the caller); each section's bytes added to `sections` if given.
fn decode_body(
    r: &mut Reader<'_>,
    version: u8,
    n: usize,
    mut sections: Option<&mut JointSections>,
) -> Result<Body, &'static str> {
    let mut mark = r.pos;
    let (mut is_ms, runs) = r.resolution(version, n)?;
    let mut resolution = Vec::with_capacity(n);
    for len in runs {
        resolution.extend(std::iter::repeat_n(is_ms, len));
        is_ms = !is_ms;
    }
    add_section(&mut sections, &mut mark, r.pos, |s| &mut s.runs);
    let mut offsets = Vec::with_capacity(n);
    let form = r.offset_mode(version)?;
    let mut at = r.varint()? as i64;
    offsets.push(at);
    if form == Offsets::Rice {
        for d in r.offset_deltas(n)? {
            at = at.checked_add(d).ok_or("offset overflow")?;
            offsets.push(at);
        }
    } else if form == Offsets::Regular {
        let step = i64::try_from(r.varint()?).map_err(|_| "offset overflow")?;
        for _ in 1..n {
            at = at.checked_add(step).ok_or("offset overflow")?;
            offsets.push(at);
        }
    } else {
        let delta_runs = r.varint()? as usize;
        for _ in 0..delta_runs {
            let d = unzigzag(r.varint()?);
            let len = r.varint()? as usize;
            if offsets.len() + len > n {
                return Err("offset runs overflow");
            }
            for _ in 0..len {
                at = at.checked_add(d).ok_or("offset overflow")?;
                offsets.push(at);
            }
        }
    }
    add_section(&mut sections, &mut mark, r.pos, |s| &mut s.offsets);
    // With widths from values, `flags` holds only each point's float bit until the values
    // are read.
    let kinds = r.kinds(version, n)?;
    let from_values = kinds.is_some();
    let mut flags = Vec::with_capacity(n);
    if let Some(kinds) = kinds {
        for (float, len) in kinds {
            flags.extend(std::iter::repeat_n(
                if float { FLAG_FLOAT | 7 } else { 0 },
                len,
            ));
        }
    } else {
        let flag_runs = r.varint()? as usize;
        for _ in 0..flag_runs {
            let f = r.byte()?;
            let len = r.varint()? as usize;
            if flags.len() + len > n {
                return Err("flag runs overflow");
            }
            flags.extend(std::iter::repeat_n(f, len));
        }
    }
    if resolution.len() != n || offsets.len() != n || flags.len() != n {
        return Err("stream lengths differ");
    }
    add_section(&mut sections, &mut mark, r.pos, |s| &mut s.flags);
    let float_count = flags.iter().filter(|f| *f & FLAG_FLOAT != 0).count();
    let ints = if has_section(version, n - float_count) {
        r.unpack_deltas(n - float_count, Packing::of(version))?
    } else {
        Vec::new()
    };
    add_section(&mut sections, &mut mark, r.pos, |s| &mut s.integers);
    let mut float_bits_out = Vec::with_capacity(float_count);
    let float_lens: Vec<usize> = flags
        .iter()
        .filter(|f| *f & FLAG_FLOAT != 0)
        .map(|f| usize::from(f & 7) + 1)
        .collect();
    if has_section(version, float_count) {
        match float_mode(version, r.byte()?)? {
            FloatMode::Decimal { corrected } => {
                let k = r.scale(version)?;
                add_section(&mut sections, &mut mark, r.pos, |s| &mut s.float_head);
                let mantissas = r.unpack_deltas(float_count, Packing::of(version))?;
                add_section(&mut sections, &mut mark, r.pos, |s| &mut s.mantissas);
                let corrections = if corrected && Packing::of(version) != Packing::Frame {
                    r.sequence(float_count, Packing::of(version).of_corrections())?
                        .into_iter()
                        .map(|c| c as u64)
                        .collect()
                } else if corrected {
                    let floor = unzigzag(r.varint()?);
                    r.unpack(float_count)?
                        .into_iter()
                        .map(|u| u.wrapping_add(floor as u64))
                        .collect()
                } else {
                    vec![0; float_count]
                };
                add_section(&mut sections, &mut mark, r.pos, |s| &mut s.corrections);
                if let Some(s) = sections.as_deref_mut() {
                    s.scale = Some(k);
                }
                for ((m, c), len) in mantissas.into_iter().zip(corrections).zip(&float_lens) {
                    float_bits_out.push(float_bits(m, k, *len).wrapping_add(c));
                }
            }
            FloatMode::Raw => {
                add_section(&mut sections, &mut mark, r.pos, |s| &mut s.float_head);
                for len in &float_lens {
                    let b = r.bytes.get(r.pos..r.pos + len).ok_or("truncated")?;
                    r.pos += len;
                    float_bits_out.push(b.iter().fold(0u64, |a, x| (a << 8) | u64::from(*x)));
                }
                add_section(&mut sections, &mut mark, r.pos, |s| &mut s.raw_floats);
            }
        }
    }
    if let Some(s) = sections {
        s.integer_points += n - float_count;
        s.float_points += float_count;
    }
    let mut bits = Vec::with_capacity(n);
    let (mut ii, mut fi) = (0usize, 0usize);
    for f in &mut flags {
        let b = if *f & FLAG_FLOAT != 0 {
            let b = *float_bits_out.get(fi).ok_or("missing float")?;
            fi += 1;
            if from_values {
                // A double; on 4 bytes when it is exactly a float.
                let v = float_value(f64::from_bits(b));
                *f = v.flags();
                v.to_bits()
            } else {
                b
            }
        } else {
            let v = *ints.get(ii).ok_or("missing integer")?;
            ii += 1;
            if from_values {
                *f = Value::Int(v).flags();
            }
            v as u64
        };
        // As read from the value bytes: the low `len` bytes, zero-extended.
        let len = usize::from(*f & 7) + 1;
        bits.push(if len >= 8 {
            b
        } else {
            b & ((1u64 << (8 * len)) - 1)
        });
    }
    Ok(Body {
        resolution,
        offsets,
        flags,
        bits,
    })
}

/// The points of an encoded data cell, straight from its stored form (no byte rebuild).
pub fn decode_points(blob: &[u8], out: &mut Vec<Point>) -> Result<()> {
    let start = out.len();
    decode_blob_points(blob, out).map(|_| ()).map_err(|e| {
        out.truncate(start);
        Error::Corrupt(format!("bad encoded data cell: {e}"))
    })
}

/// Bits read from a packed stream of `width`-bit values (as `pack` writes them), one at a
/// time, eight bytes at once where the stream has them.
struct Unpacker<'a> {
    data: &'a [u8],
    width: u32,
    mask: u64,
    bit: usize,
}

impl Unpacker<'_> {
    fn next(&mut self) -> u64 {
        if self.width == 0 {
            return 0;
        }
        let (byte, shift) = (self.bit / 8, (self.bit % 8) as u32);
        self.bit += self.width as usize;
        let word = match self.data.get(byte..byte + 8) {
            Some(w) if self.width + shift <= 64 => {
                u64::from_le_bytes(w.try_into().unwrap_or_default()) >> shift
            }
            _ => {
                // Near the end, or wider than a word allows: gather what is there.
                let mut acc = 0u128;
                for (i, b) in self.data.iter().skip(byte).take(9).enumerate() {
                    acc |= u128::from(*b) << (8 * i);
                }
                (acc >> shift) as u64
            }
        };
        word & self.mask
    }
}

/// The values `pack_sequence` wrote, one at a time.
struct Deltas<'a> {
    value: i64,
    divisor: i64,
    floor: i64,
    bits: Unpacker<'a>,
    /// A Rice sequence's values, decoded whole when its section was read (`bits` is then
    /// empty).
    listed: Option<std::vec::IntoIter<i64>>,
}

impl Deltas<'_> {
    /// An absent section: no values (reads as zeros).
    fn empty() -> Self {
        Deltas::listed(Vec::new())
    }

    /// Values decoded already.
    fn listed(values: Vec<i64>) -> Self {
        Deltas {
            value: 0,
            divisor: 1,
            floor: 0,
            bits: Unpacker {
                data: &[],
                width: 0,
                mask: 0,
                bit: 0,
            },
            listed: Some(values.into_iter()),
        }
    }

    /// The next value (after the last one, the stream reads as zero bits: no harm done).
    fn next(&mut self) -> i64 {
        if let Some(values) = &mut self.listed {
            return values.next().unwrap_or(0);
        }
        let v = self.value;
        let d = self.bits.next() as i64;
        self.value = v.wrapping_add(d.wrapping_add(self.floor).wrapping_mul(self.divisor));
        v
    }

    /// The next `n` values as integers read from `len` bytes, appended to `out`.
    fn ints_into<V: Sample>(&mut self, n: usize, len: u32, out: &mut Vec<V>) {
        let shift = 64 - 8 * len;
        if let Some(values) = &mut self.listed {
            // Decoded already (a Rice sequence): a run's values in one pass over the slice,
            // zeros past the end as `next` gives them.
            let listed = values.as_slice();
            let take = n.min(listed.len());
            out.reserve(n);
            out.extend(
                listed[..take]
                    .iter()
                    .map(|v| V::from_int((v << shift) >> shift)),
            );
            out.extend((take..n).map(|_| V::from_int(0)));
            if take > 0 {
                values.nth(take - 1);
            }
            return;
        }
        let (floor, divisor) = (self.floor, self.divisor);
        let bits = &mut self.bits;
        let mut v = self.value;
        let mut left = n;
        if bits.width > 0 && bits.width <= 56 {
            // While eight bytes remain after a value's first byte, read it as one word.
            let width = bits.width as usize;
            let words = (bits.data.len().saturating_sub(8) * 8).saturating_sub(bits.bit) / width;
            let fast = words.min(left);
            let unpack = Unpack {
                data: bits.data,
                mask: bits.mask,
                width,
                floor,
                divisor,
            };
            // Slots first, then a loop whose state stays in registers.
            let from = out.len();
            out.resize(from + fast, V::from_int(0));
            let slots = &mut out[from..];
            // Narrow values: several from each word read, by shifts known at compile time;
            // sign-extended only where that could change one.
            let extend =
                width <= 16 && shift != 0 && !fits(v, fast, floor, divisor, bits.mask, len);
            macro_rules! by_width {
                ($($w:literal)*) => {
                    match (width, extend) {
                        $(
                            ($w, false) => Some(unpack.grouped::<V, $w, false>(slots, bits.bit, v, 0)),
                            ($w, true) => Some(unpack.grouped::<V, $w, true>(slots, bits.bit, v, shift)),
                        )*
                        _ => None,
                    }
                };
            }
            let done = by_width!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);
            // Wider values a word each, their sign extension by a constant shift for the
            // usual lengths (no shift for 8 bytes).
            (bits.bit, v) = done.unwrap_or_else(|| match shift {
                0 => unpack.ints::<V, 0>(slots, bits.bit, v, shift),
                32 => unpack.ints::<V, 32>(slots, bits.bit, v, shift),
                48 => unpack.ints::<V, 48>(slots, bits.bit, v, shift),
                56 => unpack.ints::<V, 56>(slots, bits.bit, v, shift),
                _ => unpack.ints::<V, 64>(slots, bits.bit, v, shift),
            });
            left -= fast;
        }
        self.value = v;
        out.extend((0..left).map(|_| V::from_int(sign_extend(self.next(), len))));
    }
}

/// Whether the `n` values from `v` on, each the one before plus `(floor + d) * divisor` for
/// some `d` in `0..=mask`, all lie within the signed range of `len` bytes (so that sign
/// extension from `len` bytes leaves every one as it is, and none wraps around).
fn fits(v: i64, n: usize, floor: i64, divisor: i64, mask: u64, len: u32) -> bool {
    let steps = [
        i128::from(floor).checked_mul(i128::from(divisor)),
        (i128::from(floor) + i128::from(mask)).checked_mul(i128::from(divisor)),
    ];
    let [Some(a), Some(b)] = steps else {
        return false;
    };
    let n = n as i128;
    let (Some(down), Some(up)) = (
        n.checked_mul(a.min(b).min(0)),
        n.checked_mul(a.max(b).max(0)),
    ) else {
        return false;
    };
    let (Some(lowest), Some(highest)) = (
        i128::from(v).checked_add(down),
        i128::from(v).checked_add(up),
    ) else {
        return false;
    };
    let half = 1i128 << (8 * len.clamp(1, 8) - 1);
    lowest >= -half && highest < half
}

/// The eight bytes of `data` from bit `bit`'s byte on as a little-endian word, shifted down
/// to that bit; 0 where fewer than eight bytes are left (callers read only where eight are).
#[inline(always)]
fn word_from(data: &[u8], bit: usize) -> u64 {
    let at = bit / 8;
    data.get(at..at + 8)
        .map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
        >> (bit % 8)
}

/// A frame's values read from eight-byte words: one a word ([`Unpack::ints`]) or several
/// ([`Unpack::grouped`]) (see [`Deltas::ints_into`]).
struct Unpack<'a> {
    data: &'a [u8],
    mask: u64,
    width: usize,
    floor: i64,
    divisor: i64,
}

impl Unpack<'_> {
    /// Fills `slots` with the integers from bit `bit` on, the first being `v`, each sign
    /// extended from its length by `SHIFT` bits (64: by `shift`, read at run time). Returns
    /// the bit and the value after them.
    #[inline(always)]
    fn ints<V: Sample, const SHIFT: u32>(
        &self,
        slots: &mut [V],
        mut bit: usize,
        mut v: i64,
        shift: u32,
    ) -> (usize, i64) {
        let Unpack {
            data,
            mask,
            width,
            floor,
            divisor,
        } = *self;
        for slot in slots {
            let d = (word_from(data, bit) & mask) as i64;
            bit += width;
            let value = if SHIFT == 64 {
                (v << shift) >> shift
            } else {
                (v << SHIFT) >> SHIFT
            };
            *slot = V::from_int(value);
            v = v.wrapping_add(d.wrapping_add(floor).wrapping_mul(divisor));
        }
        (bit, v)
    }

    /// [`Unpack::ints`] for values of `W` bits (as `self.mask` says; up to 16, three a
    /// word): the `57 / W` values that follow a word's first bit taken from it by constant
    /// shifts, the rest of `slots` (fewer than that) one a word. Each sign-extended by `shift`
    /// when `EXTEND`; else none may need it ([`fits`]), and none is.
    #[inline(always)]
    fn grouped<V: Sample, const W: usize, const EXTEND: bool>(
        &self,
        slots: &mut [V],
        mut bit: usize,
        mut v: i64,
        shift: u32,
    ) -> (usize, i64) {
        let Unpack {
            data,
            mask,
            floor,
            divisor,
            ..
        } = *self;
        // A word read from a value's first byte holds its bit offset (at most 7) and then
        // this many whole values.
        let per_word = 57 / W;
        let mut chunks = slots.chunks_exact_mut(per_word);
        for chunk in &mut chunks {
            let word = word_from(data, bit);
            for (i, slot) in chunk.iter_mut().enumerate() {
                let d = ((word >> (i * W)) & mask) as i64;
                *slot = V::from_int(if EXTEND { (v << shift) >> shift } else { v });
                v = v.wrapping_add(d.wrapping_add(floor).wrapping_mul(divisor));
            }
            bit += per_word * W;
        }
        let rest = chunks.into_remainder();
        if EXTEND {
            self.ints::<V, 64>(rest, bit, v, shift)
        } else {
            self.ints::<V, 0>(rest, bit, v, 0)
        }
    }
}

impl<'a> Reader<'a> {
    /// A reader past a blob's version, point count and meta byte, with those three.
    fn header(blob: &'a [u8]) -> Result<(Reader<'a>, u8, usize, Option<u8>), &'static str> {
        let mut r = Reader {
            bytes: blob,
            pos: 0,
        };
        let version = r.byte()?;
        // Version 2 also allows a whole hour of seconds, however regular.
        let limit = match version {
            VERSION_1 => blob.len() * 64,
            VERSION_2 | VERSION_3 | VERSION => blob.len() * 64 + 3600,
            _ => return Err("unknown version"),
        };
        let n = r.varint()?;
        if n > limit as u64 {
            return Err("point count too large");
        }
        let n = n as usize;
        let meta = if version == VERSION {
            match r.byte()? {
                META_NONE => None,
                m @ (META_ZERO | 2) => Some(m - META_ZERO),
                META_BYTE => Some(r.byte()?),
                _ => return Err("bad meta"),
            }
        } else if r.byte()? == 1 {
            Some(r.byte()?)
        } else {
            None
        };
        Ok((r, version, n, meta))
    }

    /// A float section's decimal scale, within its version's range.
    fn scale(&mut self, version: u8) -> Result<u32, &'static str> {
        let k = u32::from(self.byte()?);
        let max = if version == VERSION_1 {
            MAX_DECIMALS_V1
        } else {
            MAX_DECIMALS
        };
        if k > max {
            return Err("bad decimal scale");
        }
        Ok(k)
    }

    /// Skips a `pack_sequence` stream of `n` values, returning a reader over them (a Rice
    /// sequence is decoded here, whole).
    fn deltas(&mut self, n: usize, packing: Packing) -> Result<Deltas<'a>, &'static str> {
        let at = self.pos;
        let first = unzigzag(self.varint()?);
        let divisor = self.varint()? as i64;
        if self.quotients(packing)? != Quotients::Frame {
            self.pos = at;
            return Ok(Deltas::listed(self.unpack_deltas(n, packing)?));
        }
        let floor = unzigzag(self.varint()?);
        let bits = self.packed(n.saturating_sub(1))?;
        Ok(Deltas {
            value: first,
            divisor,
            floor,
            bits,
            listed: None,
        })
    }

    /// Skips `n` packed values (width byte, then bits), returning a reader over them.
    fn packed(&mut self, n: usize) -> Result<Unpacker<'a>, &'static str> {
        let width = u32::from(self.byte()?);
        if width > 64 {
            return Err("bad bit width");
        }
        let bytes = if width == 0 {
            0
        } else {
            n.checked_mul(width as usize)
                .ok_or("truncated")?
                .div_ceil(8)
        };
        let end = self.pos.checked_add(bytes).ok_or("truncated")?;
        let data = self.bytes.get(self.pos..end).ok_or("truncated")?;
        self.pos = end;
        let mask = if width == 64 {
            u64::MAX
        } else {
            (1u64 << width) - 1
        };
        Ok(Unpacker {
            data,
            width,
            mask,
            bit: 0,
        })
    }
}

/// Where `decode_columns` takes the floats' bits from.
enum Floats<'a> {
    /// Mantissas at a decimal scale, with their corrections.
    Decimal {
        mantissas: Deltas<'a>,
        scale: u32,
        corrections: Option<Corrections<'a>>,
    },
    /// Each value's bytes.
    Raw(Reader<'a>),
    /// No float section (version 2, no floats).
    Absent,
}

/// A decimal float section's corrections.
enum Corrections<'a> {
    /// Their least value and the packed rest.
    Packed(u64, Unpacker<'a>),
    /// A Rice sequence's, decoded.
    Listed(std::vec::IntoIter<i64>),
}

impl Corrections<'_> {
    fn next(&mut self) -> u64 {
        match self {
            Corrections::Packed(floor, c) => c.next().wrapping_add(*floor),
            Corrections::Listed(values) => values.next().unwrap_or(0) as u64,
        }
    }
}

/// Sign-extends the low `len` bytes of `v`, as a value read from `len` bytes.
fn sign_extend(v: i64, len: u32) -> i64 {
    let shift = 64 - 8 * len;
    (v << shift) >> shift
}

/// Decodes a blob straight into the points' times (`base_ms` plus each offset) and values,
/// appended to `times` and `values`: the same points [`decode_points`] gives, without
/// building qualifiers, in a few passes over runs. Returns whether the times strictly
/// increase (every time delta is positive).
pub fn decode_columns<V: Sample>(
    blob: &[u8],
    base_ms: i64,
    times: &mut Vec<i64>,
    values: &mut Vec<V>,
) -> Result<bool> {
    let (t0, v0) = (times.len(), values.len());
    decode_blob_columns(blob, base_ms, times, values).map_err(|e| {
        times.truncate(t0);
        values.truncate(v0);
        Error::Corrupt(format!("bad encoded data cell: {e}"))
    })
}

fn decode_blob_columns<V: Sample>(
    blob: &[u8],
    base_ms: i64,
    times: &mut Vec<i64>,
    values: &mut Vec<V>,
) -> Result<bool, &'static str> {
    let (r, version, n, _meta) = Reader::header(blob)?;
    decode_body_columns(r, version, n, base_ms, HOUR_MS, times, values)
}

/// The columns of a body of `n` points from `r` on to the end of its bytes (a blob's after
/// its header, a joint stream's after its version), every offset below `limit_ms`.
fn decode_body_columns<V: Sample>(
    mut r: Reader<'_>,
    version: u8,
    n: usize,
    base_ms: i64,
    limit_ms: i64,
    times: &mut Vec<i64>,
    values: &mut Vec<V>,
) -> Result<bool, &'static str> {
    let blob = r.bytes;
    if n == 0 {
        return Err("stream lengths differ");
    }
    // Resolution runs (alternating, from the first run's resolution).
    let (first_ms, res_runs) = r.resolution(version, n)?;
    let res_total: usize = res_runs.iter().sum();
    // Offsets: the first, then runs of equal deltas (or a Rice sequence, or one step),
    // written out as times.
    let form = r.offset_mode(version)?;
    let first = r.varint()? as i64;
    let start = times.len();
    times.reserve(n);
    times.push(base_ms.wrapping_add(first));
    let (mut low, mut high, mut at) = (first, first, first);
    let mut whole_seconds = first % 1000 == 0;
    let mut increasing = true;
    // One step is a run of it for every point after the first.
    let regular = if form == Offsets::Regular {
        let step = i64::try_from(r.varint()?).map_err(|_| "offset overflow")?;
        Some((step, n - 1))
    } else {
        None
    };
    let delta_runs = if form == Offsets::Rice {
        for d in r.offset_deltas(n)? {
            at = at.checked_add(d).ok_or("offset overflow")?;
            whole_seconds &= d % 1000 == 0;
            increasing &= d > 0;
            (low, high) = (low.min(at), high.max(at));
            times.push(base_ms.wrapping_add(at));
        }
        0
    } else if regular.is_some() {
        1
    } else {
        r.varint()? as usize
    };
    for _ in 0..delta_runs {
        let (d, len) = match regular {
            Some(run) => run,
            None => (unzigzag(r.varint()?), r.varint()? as usize),
        };
        if times.len() - start + len > n {
            return Err("offset runs overflow");
        }
        if len == 0 {
            continue;
        }
        let last = i128::from(at) + i128::from(d) * len as i128;
        let last = i64::try_from(last).map_err(|_| "offset overflow")?;
        whole_seconds &= d % 1000 == 0;
        increasing &= d > 0;
        // base + k × d for k in 1..=len, by one addition each.
        let mut t = base_ms.wrapping_add(at);
        let from = times.len();
        times.resize(from + len, 0);
        for slot in &mut times[from..] {
            t = t.wrapping_add(d);
            *slot = t;
        }
        (low, high, at) = (low.min(last), high.max(last), last);
    }
    if low < 0 || high >= limit_ms {
        return Err("offset out of range");
    }
    // Flag runs; with widths from values, the kind runs as the flags of 8-byte values (an
    // integer's value is the same on any width that holds it, a float's as a double).
    let flag_runs: Vec<(u8, usize)> = if let Some(kinds) = r.kinds(version, n)? {
        kinds
            .into_iter()
            .map(|(float, len)| (if float { FLAG_FLOAT | 7 } else { 7 }, len))
            .collect()
    } else {
        let count = r.varint()? as usize;
        let mut runs = Vec::with_capacity(count.min(n));
        for _ in 0..count {
            let f = r.byte()?;
            runs.push((f, r.varint()? as usize));
        }
        runs
    };
    let mut float_count = 0usize;
    let mut flag_total = 0usize;
    for &(f, len) in &flag_runs {
        flag_total = run_total(flag_total, len, n).ok_or("flag runs overflow")?;
        if f & FLAG_FLOAT != 0 {
            float_count += len;
        }
    }
    if res_total != n || times.len() - start != n || flag_total != n {
        return Err("stream lengths differ");
    }
    // Seconds-resolution points must fall on whole seconds.
    if !(whole_seconds || res_runs.len() == 1 && first_ms) {
        let (mut i, mut is_ms) = (start, first_ms);
        for len in res_runs {
            if !is_ms && times[i..i + len].iter().any(|t| (t - base_ms) % 1000 != 0) {
                return Err("second offset not whole");
            }
            i += len;
            is_ms = !is_ms;
        }
    }
    let mut ints = if has_section(version, n - float_count) {
        r.deltas(n - float_count, Packing::of(version))?
    } else {
        Deltas::empty()
    };
    let mut floats = if has_section(version, float_count) {
        match float_mode(version, r.byte()?)? {
            FloatMode::Decimal { corrected } => {
                let scale = r.scale(version)?;
                let mantissas = r.deltas(float_count, Packing::of(version))?;
                let corrections = if corrected && Packing::of(version) != Packing::Frame {
                    let packing = Packing::of(version).of_corrections();
                    Some(Corrections::Listed(
                        r.sequence(float_count, packing)?.into_iter(),
                    ))
                } else if corrected {
                    let floor = unzigzag(r.varint()?);
                    Some(Corrections::Packed(floor as u64, r.packed(float_count)?))
                } else {
                    None
                };
                Floats::Decimal {
                    mantissas,
                    scale,
                    corrections,
                }
            }
            FloatMode::Raw => {
                let raw = Reader {
                    bytes: blob,
                    pos: r.pos,
                };
                // Skip the floats' bytes: their lengths come from the flags.
                for &(f, len) in &flag_runs {
                    if f & FLAG_FLOAT != 0 {
                        let bytes = len * (usize::from(f & 7) + 1);
                        r.pos = r.pos.checked_add(bytes).ok_or("truncated")?;
                    }
                }
                Floats::Raw(raw)
            }
        }
    } else {
        Floats::Absent
    };
    if r.pos != blob.len() {
        return Err("trailing bytes");
    }
    // Values, run by run of equal flags.
    values.reserve(n);
    for &(f, len) in &flag_runs {
        let value_len = u32::from(f & 7) + 1;
        if f & FLAG_FLOAT == 0 {
            ints.ints_into(len, value_len, values);
            continue;
        }
        for _ in 0..len {
            let bits = match &mut floats {
                Floats::Decimal {
                    mantissas,
                    scale,
                    corrections,
                } => {
                    let bits = float_bits(mantissas.next(), *scale, value_len as usize);
                    match corrections {
                        Some(c) => bits.wrapping_add(c.next()),
                        None => bits,
                    }
                }
                Floats::Raw(raw) => {
                    let b = raw
                        .bytes
                        .get(raw.pos..raw.pos + value_len as usize)
                        .ok_or("truncated")?;
                    raw.pos += value_len as usize;
                    b.iter().fold(0u64, |a, x| (a << 8) | u64::from(*x))
                }
                // Unreachable: floats counted from these same runs.
                Floats::Absent => return Err("missing float"),
            };
            let bits = if value_len >= 8 {
                bits
            } else {
                bits & ((1u64 << (8 * value_len)) - 1)
            };
            values.push(match Value::from_bits(f, bits) {
                Value::Int(i) => V::from_int(i),
                other => V::from_float(other.as_f64()),
            });
        }
    }
    Ok(increasing)
}

fn decode_blob(blob: &[u8]) -> Result<(Vec<u8>, Vec<u8>), &'static str> {
    let mut points = Vec::new();
    let meta = decode_blob_points(blob, &mut points)?;
    Ok(rebuild_cell(&points, meta))
}

#[cfg(test)]
mod tests;
