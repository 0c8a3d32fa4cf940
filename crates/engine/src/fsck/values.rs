//! Checks of single values and the texts that describe cells, points and times.

use super::*;

/// The value check of a single data point column.
pub(super) fn check_value(q: Qualifier, value: &[u8]) -> ValueCheck {
    let len = q.value_len();
    let point = |bytes: &[u8]| -> Option<Point> {
        decode_bits(q.flags(), bytes)
            .ok()
            .map(|bits| Point::new(q, bits))
    };
    if q.flags() & FLAG_FLOAT != 0 {
        if len == 4 && value.len() == 8 {
            let fixed = value
                .get(4..8)
                .and_then(|b| decode_bits(q.flags(), b).ok())
                .map(|bits| Point::new(q, bits));
            let Some(fixed) = fixed else {
                return ValueCheck::Bad("Unreadable floating point value.".into());
            };
            if value[..4] == [0xFF; 4] && q.encoded_len() == 2 {
                return ValueCheck::Encoding(
                    fixed,
                    "Floating point value with 0xFF most significant bytes, probably caused by sign extension bug present in revisions [96908436..607256fc].".into(),
                );
            }
            if value[..4] != [0; 4] {
                return ValueCheck::Bad(
                    "Floating point value was marked as 4 bytes long but was actually 8 bytes long and the first four bytes were not zeroed.".into(),
                );
            }
            return ValueCheck::Encoding(
                fixed,
                "Floating point value was marked as 4 bytes long but was actually 8 bytes long."
                    .into(),
            );
        }
        if len == 8 && value.len() == 4 {
            return ValueCheck::Bad(
                "This floating point value was marked as 8 bytes long but was only 4 bytes.".into(),
            );
        }
        if value.len() != 4 && value.len() != 8 {
            return ValueCheck::Bad(format!(
                "This floating point value must be encoded either on 4 or 8 bytes, but it's on {} bytes.",
                value.len()
            ));
        }
        if len != value.len() {
            return ValueCheck::Bad(format!(
                "The floating point flags give a length of {len} bytes (only 4 or 8 are valid) but the value is on {} bytes.",
                value.len()
            ));
        }
        return match point(value) {
            Some(p) => ValueCheck::Valid(p),
            None => ValueCheck::Bad("Unreadable floating point value.".into()),
        };
    }
    if value.len() != len {
        return ValueCheck::Bad(format!(
            "The integer value is {} bytes long but should be {len} bytes.",
            value.len()
        ));
    }
    let Some(p) = point(value).filter(|_| matches!(len, 1 | 2 | 4 | 8)) else {
        return ValueCheck::Bad(format!(
            "The integer value is on {len} bytes; only 1, 2, 4 or 8 are valid."
        ));
    };
    match shorter_int(p) {
        Some((short, saved)) => ValueCheck::Vle(p, short, saved),
        None => ValueCheck::Valid(p),
    }
}

/// An 8-byte integer that fits fewer bytes: the point on the fewest, and bytes saved.
pub(super) fn shorter_int(p: Point) -> Option<(Point, u64)> {
    if p.qualifier.is_float() || p.qualifier.value_len() != 8 {
        return None;
    }
    let v = p.bits as i64;
    let width = int_width(v);
    if width >= 8 {
        return None;
    }
    let raw = (p.qualifier.raw() & !0x7) | (width as u32 - 1);
    let q = Qualifier::from_raw(raw).ok()?;
    Some((Point::new(q, v as u64), (8 - width) as u64))
}

/// `qualifier [..], value [..]` of a cell, long byte strings shortened.
pub(super) fn describe_cell(c: &Cell) -> String {
    format!(
        "qualifier {}, value {}",
        bytes_text(&c.qualifier),
        bytes_text(&c.value)
    )
}

/// One duplicate for a finding line: qualifier, where it is, when written and its value.
pub(super) fn describe_dp(dp: &Dp, cells: &[&Cell], check: Option<&ValueCheck>) -> String {
    let cell = cells[dp.cell];
    let point = dp.point.or(match check {
        Some(ValueCheck::Valid(p) | ValueCheck::Vle(p, _, _) | ValueCheck::Encoding(p, _)) => {
            Some(*p)
        }
        _ => None,
    });
    let value = match point {
        Some(p) => value_text(p.value()),
        None => format!("unreadable {}", bytes_text(&cell.value)),
    };
    let place = if dp.compacted {
        format!("in compacted column {}", bytes_text(&cell.qualifier))
    } else {
        "single column".to_string()
    };
    format!(
        "qualifier {} ({place}, written {}, value {value})",
        bytes_text(&dp.qualifier.to_bytes()),
        cell.timestamp
    )
}

pub(super) fn value_text(v: Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Float(f) => format!("{f}"),
        Value::Double(d) => format!("{d}"),
    }
}

/// `[00 0A FF]`, shortened to the first 16 bytes and the length past that.
pub(super) fn bytes_text(bytes: &[u8]) -> String {
    const MAX: usize = 16;
    let shown: Vec<String> = bytes.iter().take(MAX).map(|b| format!("{b:02X}")).collect();
    if bytes.len() > MAX {
        format!("[{} ...] ({} bytes)", shown.join(" "), bytes.len())
    } else {
        format!("[{}]", shown.join(" "))
    }
}

/// `2013-01-01T00:00:30Z` (with `.mmm` when the milliseconds are not zero).
pub(super) fn iso_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    if millis == 0 {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
    } else {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{millis:03}Z")
    }
}
