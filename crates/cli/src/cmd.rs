pub(crate) mod auth;
pub(crate) mod create_tables;
pub(crate) mod debug_ingest;
pub(crate) mod fsck;
pub(crate) mod import;
pub(crate) mod index;
pub(crate) mod migrate;
pub(crate) mod query;
pub(crate) mod scan;
pub(crate) mod search;
pub(crate) mod tsd;
pub(crate) mod uid;
pub(crate) mod uid_fsck;
pub(crate) mod version;

/// The `START [END]` words of OpenTSDB's command-line queries, in ms; returns the index of
/// the first word after them and the Gnuplot parameters (`+key=value`) that may follow them,
/// which only OpenTSDB's `query --graph` reads. END is taken only when more words follow and
/// it looks like a date (OpenTSDB's rule); otherwise the range ends now. Absolute dates are
/// read in `tz` (`tsd.core.timezone`).
pub(crate) fn parse_range(
    words: &[String],
    now_ms: i64,
    tz: hourglass_core::time::Tz,
) -> anyhow::Result<(i64, i64, usize)> {
    if words.len() < 3 {
        anyhow::bail!("Not enough arguments.");
    }
    let start = hourglass_core::time::parse_time_in(&words[0], now_ms, tz)?;
    let w = &words[1];
    let looks_like_end = !w.starts_with('+')
        && (w.contains([':', '/', '-']) || w.parse::<i64>().is_ok_and(|v| v > 0));
    let (end, mut i) = if words.len() > 3 && looks_like_end {
        (hourglass_core::time::parse_time_in(w, now_ms, tz)?, 2)
    } else {
        (now_ms, 1)
    };
    while words.get(i).is_some_and(|w| w.starts_with('+')) {
        i += 1;
    }
    Ok((start, end, i))
}

/// One `TAGK=TAGV` word of a command-line query into `tags`, read as OpenTSDB's `Tags.parse`:
/// exactly one `=` with a name on each side (`invalid tag: W`), a tag key given again with
/// another value refused (`duplicate tag: W, tags={k=v, ...}`), the same pair again kept once.
pub(crate) fn parse_tag(word: &str, tags: &mut Vec<(String, String)>) -> anyhow::Result<()> {
    let mut parts = word.split('=');
    let (Some(k), Some(v), None) = (parts.next(), parts.next(), parts.next()) else {
        anyhow::bail!("invalid tag: {word}");
    };
    if k.is_empty() || v.is_empty() {
        anyhow::bail!("invalid tag: {word}");
    }
    match tags.iter().find(|(key, _)| key == k) {
        Some((_, value)) if value == v => Ok(()),
        Some(_) => {
            let known: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
            anyhow::bail!("duplicate tag: {word}, tags={{{}}}", known.join(", "))
        }
        None => {
            tags.push((k.to_string(), v.to_string()));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_read_as_opentsdb_reads_them() {
        let mut tags = Vec::new();
        parse_tag("host=a", &mut tags).unwrap();
        parse_tag("dc=lga", &mut tags).unwrap();
        parse_tag("host=a", &mut tags).unwrap();
        assert_eq!(tags.len(), 2);
        assert_eq!(
            parse_tag("host=b", &mut tags).unwrap_err().to_string(),
            "duplicate tag: host=b, tags={host=a, dc=lga}"
        );
        for bad in ["a=b=c", "a=", "=b", "a==b", "a=b="] {
            assert_eq!(
                parse_tag(bad, &mut tags).unwrap_err().to_string(),
                format!("invalid tag: {bad}")
            );
        }
    }
}
