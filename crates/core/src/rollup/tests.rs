use super::*;

fn iv(interval: &str, span: &str) -> RollupInterval {
    RollupInterval::new("t", "p", interval, span, false).unwrap()
}

fn err(interval: &str, span: &str) -> String {
    RollupInterval::new("t", "p", interval, span, false)
        .unwrap_err()
        .to_string()
}

#[test]
fn intervals_are_checked_with_opentsdbs_words() {
    let cases = [
        ("1m", "1ms", "Milliseconds are not supported"),
        ("1m", "2d", "Multipliers are only usable with the 'h' unit"),
        ("1m", "3h", "The multiplier must be 1 or an even value"),
        ("1s", "1m", "Unrecogznied span 'm'"),
        ("1h", "1h", "Interval [3600] is too large for the span [h]"),
        (
            "1s",
            "1d",
            "Too many intervals [86400] in the span. Must be smaller than [7774] to fit in 14 bits",
        ),
        (
            "3h",
            "1d",
            "Not enough intervals [8] for the span. Must be at least [12]",
        ),
        ("1x", "1h", "Invalid duration (suffix): 1x"),
        ("1m", "1q", "Invalid units in the duration: q"),
        ("1m", "0h", "Zero or negative duration: 0h"),
    ];
    for (interval, span, want) in cases {
        assert_eq!(err(interval, span), want, "{interval} {span}");
    }
    assert_eq!(
        RollupInterval::new("", "p", "1m", "1h", false)
            .unwrap_err()
            .to_string(),
        "The rollup table cannot be null or empty"
    );
    assert_eq!(
        RollupInterval::new("t", "", "1m", "1h", false)
            .unwrap_err()
            .to_string(),
        "The pre-aggregate rollup table cannot be null or empty"
    );
}

#[test]
fn interval_counts_leave_room_for_the_longest_month_and_year() {
    assert_eq!(iv("1m", "1h").intervals, 60);
    assert_eq!(iv("1h", "1d").intervals, 24);
    assert_eq!(iv("1h", "1n").intervals, 768);
    assert_eq!(iv("1d", "1y").intervals, 366);
    assert_eq!(iv("10m", "6h").intervals, 36);
}

// Base times: 2.4.1's test/rollup/TestRollupUtils.java.
#[test]
fn base_times_as_opentsdbs_fixtures() {
    let hour = iv("1s", "1h");
    let day = iv("10m", "1d");
    let month = iv("1h", "1n");
    let six = iv("10m", "6h");
    let two = iv("10m", "2h");
    let cases: [(&RollupInterval, i64, u32); 14] = [
        (&hour, 1370530800, 1370530800),
        (&hour, 1370530800154, 1370530800),
        (&hour, 1370532925, 1370530800),
        (&hour, 1370534399999, 1370530800),
        (&six, 1370520000, 1370520000),
        (&six, 1370530800, 1370520000),
        (&six, 1370541599, 1370520000),
        (&two, 1370523660, 1370520000),
        (&two, 1370527199, 1370520000),
        (&day, 1370476800154, 1370476800),
        (&day, 1370532925, 1370476800),
        (&day, 1370563199999, 1370476800),
        (&month, 1370044800154, 1370044800),
        (&month, 1370532925, 1370044800),
    ];
    for (interval, ts, want) in cases {
        assert_eq!(interval.base_time(ts).unwrap(), want, "{ts}");
    }
    // Years start on January 1st (2013-01-01T00:00:00Z).
    assert_eq!(iv("1d", "1y").base_time(1370532925).unwrap(), 1356998400);
    assert_eq!(
        hour.base_time(-1).unwrap_err().to_string(),
        "Not supporting negative timestamps at this time: -1"
    );
}

// Qualifiers: 2.4.1's buildRollupQualifier fixtures (aggregator id 42, flags 7).
#[test]
fn qualifiers_as_opentsdbs_fixtures() {
    let base = 1370530800;
    let cases = [
        ("1s", 1370530800, [42, 0x00, 0x07]),
        ("1s", 1370532925, [42, 0x84, 0xD7]),
        ("1s", 1370534399, [42, 0xE0, 0xF7]),
        ("30s", 1370530800, [42, 0x00, 0x07]),
        ("30s", 1370532925, [42, 0x04, 0x67]),
        ("30s", 1370534399, [42, 0x07, 0x77]),
        ("1m", 1370530800, [42, 0x00, 0x07]),
        ("1m", 1370532925, [42, 0x02, 0x37]),
        ("1m", 1370534399, [42, 0x03, 0xB7]),
    ];
    for (interval, ts, want) in cases {
        let q = iv(interval, "1h").qualifier(ts, base, 7, 42).unwrap();
        assert_eq!(q, want, "{interval} {ts}");
    }
    assert_eq!(
        iv("1s", "1h")
            .qualifier(1370534400, base, 7, 42)
            .unwrap_err()
            .to_string(),
        "Offset of 3600 was greater than the configured intervals 3600"
    );
}

const CONFIG: &str = r#"{
  "aggregationIds": {"sum": 0, "count": 1, "MAX": 2, "min": 3},
  "intervals": [
    {"table": "tsdb", "preAggregationTable": "tsdb-agg", "interval": "1m", "rowSpan": "1h", "defaultInterval": true},
    {"table": "tsdb-rollup-1h", "preAggregationTable": "tsdb-rollup-agg-1h", "interval": "1h", "rowSpan": "1n"}
  ]
}"#;

fn known(name: &str) -> bool {
    ["sum", "count", "max", "min", "avg", "dev"].contains(&name)
}

#[test]
fn config_parses_as_opentsdbs() {
    let c = RollupConfig::parse(CONFIG, &known).unwrap();
    assert_eq!(c.default_interval().interval, "1m");
    assert_eq!(c.interval("1h").unwrap().table, "tsdb-rollup-1h");
    assert_eq!(
        c.interval("13m").unwrap_err().to_string(),
        "No rollups configured for the interval: 13m"
    );
    assert_eq!(c.id_for("Max").unwrap(), 2);
    assert_eq!(
        c.id_for("p99").unwrap_err().to_string(),
        "No ID found mapping to aggregator: p99"
    );
    assert_eq!(
        c.tables(),
        ["tsdb", "tsdb-agg", "tsdb-rollup-1h", "tsdb-rollup-agg-1h"]
    );
}

#[test]
fn config_errors_use_opentsdbs_words() {
    let interval = |extra: &str| {
        format!(
            r#"{{"table":"a","preAggregationTable":"b","interval":"1m","rowSpan":"1h"{extra}}}"#
        )
    };
    let cases = [
        (
            r#"{"aggregationIds":{"sum":0}}"#.to_string(),
            "Rollup config given but no intervals were found.",
        ),
        (
            format!(r#"{{"intervals":[{}]}}"#, interval("")),
            "Rollup config given but no aggegation ID mappings found.",
        ),
        (
            format!(
                r#"{{"aggregationIds":{{"sum":128}},"intervals":[{}]}}"#,
                interval(",\"defaultInterval\":true")
            ),
            "ID for aggregator must be between 0 and 127: sum=128",
        ),
        (
            format!(
                r#"{{"aggregationIds":{{"sum":1,"max":1}},"intervals":[{}]}}"#,
                interval(",\"defaultInterval\":true")
            ),
            "Multiple mappings for the ID '1' are not allowed.",
        ),
        (
            format!(
                r#"{{"aggregationIds":{{"p42":1}},"intervals":[{}]}}"#,
                interval(",\"defaultInterval\":true")
            ),
            "No such aggregator found for p42",
        ),
        (
            format!(
                r#"{{"aggregationIds":{{"sum":0}},"intervals":[{}]}}"#,
                interval("")
            ),
            "None of the rollup intervals were marked as the \"default\".",
        ),
        (
            format!(
                r#"{{"aggregationIds":{{"sum":0}},"intervals":[{},{}]}}"#,
                interval(""),
                interval("")
            ),
            "Only one interval of each type can be configured: table=a, preAggTable=b, rowSpan=1h, isDefaultInterval=false, interval=1m",
        ),
    ];
    for (json, want) in cases {
        assert_eq!(
            RollupConfig::parse(&json, &known).unwrap_err().to_string(),
            want,
            "{json}"
        );
    }
    assert!(
        RollupConfig::parse("{", &known)
            .unwrap_err()
            .to_string()
            .starts_with("Unable to parse the rollup config")
    );
}

#[test]
fn interval_and_aggregators_split_as_opentsdb() {
    let s = |i, a, g| IntervalAgg {
        interval: i,
        aggregator: a,
        group_by: g,
    };
    assert_eq!(
        split_interval_agg("1h-sum"),
        s(Some("1h"), Some("sum"), None)
    );
    assert_eq!(
        split_interval_agg("1h-sum:max"),
        s(Some("1h"), Some("sum"), Some("max"))
    );
    assert_eq!(split_interval_agg("sum"), s(None, Some("sum"), Some("sum")));
    assert_eq!(
        split_interval_agg("1h-sum:"),
        s(Some("1h"), Some("sum"), None)
    );
    assert_eq!(
        split_interval_agg(":sum"),
        s(None, Some("sum"), Some("sum"))
    );
}

#[test]
fn offsets_past_twelve_bits_are_refused_not_wrapped() {
    // 7200 intervals pass OpenTSDB's check (at most 7774), but the qualifier keeps 12 bits.
    let i = iv("1s", "2h");
    assert_eq!(i.intervals, 7200);
    assert_eq!(i.qualifier(4095, 0, 0, 1).unwrap(), [1, 0xFF, 0xF0]);
    assert_eq!(
        i.qualifier(4096, 0, 0, 1).unwrap_err().to_string(),
        "Offset of 4096 does not fit the qualifier's 12 bits (OpenTSDB would store it as 0); use a shorter row span for interval 1s"
    );
}

proptest::proptest! {
    #[test]
    fn rollup_lines_never_panic(line in "\\PC{0,60}") {
        let mut tags = Vec::new();
        let _ = parse_rollup_line(&line, &mut tags);
    }

    #[test]
    fn intervals_and_times_never_panic(
        interval in proptest::prop_oneof!["[1-9][0-9]?(s|m|h|d)", "[0-9]{0,12}(ms|s|m|h|d|w|n|y|x)?"],
        span in proptest::prop_oneof!["[1-9]?[02468](h|d|n|y)", "[0-9]{0,12}(ms|s|m|h|d|n|y|q)?"],
        ts in proptest::prop_oneof![0i64..5_000_000_000_000, proptest::prelude::any::<i64>()],
        flags in proptest::prelude::any::<u8>(),
    ) {
        if let Ok(i) = RollupInterval::new("t", "p", &interval, &span, false)
            && let Ok(base) = i.base_time(ts)
            // Every time of a row has a qualifier in it (offset below 4096) or is refused.
            && let Ok(q) = i.qualifier(ts, base, flags, 1)
        {
            let offset = i64::from(u16::from_be_bytes([q[1], q[2]]) >> 4);
            let secs = if crate::time::is_millis(ts) { ts / 1000 } else { ts };
            proptest::prop_assert_eq!(
                offset,
                (secs - i64::from(base)) / i64::from(i.interval_seconds)
            );
        }
    }
}

#[test]
fn retention_is_read_per_interval_and_bad_durations_are_refused() {
    let ok = |_: &str| true;
    let json = |r: &str| {
        format!(
            r#"{{"aggregationIds":{{"sum":0}},"intervals":[{{"table":"tsdb","preAggregationTable":"p","interval":"1m","rowSpan":"1h","defaultInterval":true}},{{"table":"r","preAggregationTable":"q","interval":"1h","rowSpan":"1d","retention":"{r}"}}]}}"#
        )
    };
    let c = RollupConfig::parse(&json("365d"), &ok).unwrap();
    assert_eq!(c.intervals()[0].retention_ms, None);
    assert_eq!(c.intervals()[1].retention_ms, Some(365 * 86_400_000));
    assert_eq!(
        RollupConfig::parse(&json("15x"), &ok)
            .unwrap_err()
            .to_string(),
        "rollup interval 1h: retention: Invalid duration (suffix): 15x"
    );
}

#[test]
fn span_ends_follow_the_calendar() {
    // 2024-02-01 00:00 UTC: a leap February.
    let feb = 1_706_745_600;
    assert_eq!(iv("1h", "1n").span_end(feb), i64::from(feb) + 29 * 86_400);
    assert_eq!(iv("1d", "1y").span_end(1_704_067_200), 1_735_689_600);
    assert_eq!(iv("1m", "2h").span_end(7_200), 14_400);
    assert_eq!(iv("1m", "1d").span_end(86_400), 172_800);
}
