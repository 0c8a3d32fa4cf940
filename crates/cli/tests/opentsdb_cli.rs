#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The `tsdb` tools against OpenTSDB 2.4.1's: where options may stand, its common flags,
//! the query grammar's Gnuplot words, exit statuses and output lines a script reads, and the
//! config values the tools refuse as the TSD does (docs/research/opentsdb-cli-fidelity.md).

use std::path::Path;
use std::process::{Command, Output};

/// `tsdb ARGS...` with the data dir given last, as OpenTSDB's tools take options anywhere.
fn tsdb(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A data dir holding `m.a host=a`: 1 at 2013-01-01T00:00:00Z and 12345678.5 (stored as the
/// float 12345678) a second later.
fn data_dir(dir: &Path) -> std::path::PathBuf {
    let file = dir.join("points.txt");
    std::fs::write(
        &file,
        "m.a 1356998400 1 host=a\nm.a 1356998401 12345678.5 host=a\n",
    )
    .unwrap();
    let data = dir.join("data");
    let o = tsdb(&data, &["import", "--auto-metric", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", err(&o));
    data
}

fn config(dir: &Path, text: &str) -> String {
    let path = dir.join("opentsdb.conf");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn options_after_the_words_and_common_flags() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(dir.path());
    // `--import` after the query, as `tsdb scan 1h-ago sum m --import` in OpenTSDB.
    let o = tsdb(
        &data,
        &["scan", "2013/01/01", "2013/01/02", "sum", "m.a", "--import"],
    );
    assert_eq!(
        out(&o),
        "m.a 1356998400 1 host=a\nm.a 1356998401 1.2345678E7 host=a\n",
        "{}",
        err(&o)
    );
    // ZooKeeper's flags, every tool's in OpenTSDB: accepted, no effect (no ZooKeeper).
    let o = tsdb(
        &data,
        &[
            "query",
            "--zkquorum",
            "zk1:2181",
            "2013/01/01",
            "2013/01/02",
            "sum",
            "m.a",
            "--zkbasedir=/hbase",
        ],
    );
    // The long 1 prints as a double: OpenTSDB's `AggregationIterator.isInteger()` is false
    // while any point it holds (the next one included) is a float.
    assert_eq!(
        out(&o),
        "m.a 1356998400000 1.000000 {host=a}\nm.a 1356998401000 12345678.000000 {host=a}\n",
        "{}",
        err(&o)
    );
    let o = tsdb(&data, &["uid", "metrics", "1", "--zkquorum=zk1"]);
    assert_eq!(out(&o), "metrics m.a: [0, 0, 1]\n", "{}", err(&o));
}

#[test]
fn gnuplot_words_are_skipped_and_graph_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(dir.path());
    // `+key=value` after the dates are Gnuplot parameters: only `--graph` reads them.
    for tool in ["query", "scan"] {
        let o = tsdb(
            &data,
            &[
                tool,
                "--import",
                "2013/01/01",
                "2013/01/02",
                "+yrange=[0:]",
                "+title=x",
                "sum",
                "m.a",
            ]
            .iter()
            .filter(|w| tool == "scan" || **w != "--import")
            .copied()
            .collect::<Vec<_>>(),
        );
        assert!(o.status.success(), "{tool}: {}", err(&o));
        assert_eq!(out(&o).lines().count(), 2, "{tool}: {}", out(&o));
    }
    let o = tsdb(
        &data,
        &["query", "--graph", "/tmp/plot", "2013/01/01", "sum", "m.a"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains(
            "--graph writes Gnuplot files, which this version of Hourglass does not provide"
        ),
        "{}",
        err(&o)
    );
    assert!(out(&o).is_empty());
}

#[test]
fn unknown_command_as_the_tsdb_script() {
    let o = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .arg("mkmetrc")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        err(&o),
        "tsdb: error: unknown command 'mkmetrc'\nusage: tsdb <command> [args]\n"
    );
    let valid = out(&o);
    assert!(valid.starts_with("Valid commands: "), "{valid}");
    for name in [
        "fsck", "import", "mkmetric", "query", "tsd", "scan", "search", "uid", "version",
    ] {
        assert!(
            valid.contains(&format!(" {name},")) || valid.ends_with(&format!(" {name}\n")),
            "{name}: {valid}"
        );
    }
    let o = Command::new(env!("CARGO_BIN_EXE_tsdb")).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).starts_with("tsdb: error: unknown command ''\n"));
}

#[test]
fn uid_idwidth_and_exit_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(dir.path());
    // The configured width (3) is OpenTSDB's default --idwidth.
    let o = tsdb(&data, &["uid", "--idwidth", "3", "metrics", "1"]);
    assert_eq!(out(&o), "metrics m.a: [0, 0, 1]\n", "{}", err(&o));
    let o = tsdb(&data, &["mkmetric", "--idwidth=3", "m.b"]);
    assert_eq!(out(&o), "metrics m.b: [0, 0, 2]\n", "{}", err(&o));
    // Another width would read or write other UIDs than those stored: refused.
    let o = tsdb(
        &data,
        &["uid", "assign", "metrics", "m.c", "--idwidth", "4"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains(
            "--idwidth 4 differs from the metrics UID width, 3 bytes (tsd.storage.uid.width.metric)"
        ),
        "{}",
        err(&o)
    );
    assert!(out(&o).is_empty());
    let o = tsdb(&data, &["uid", "metrics", "m.c"]);
    assert_eq!(o.status.code(), Some(1), "m.c was not assigned");
    // OpenTSDB: `Negative or 0 --idwidth`, the usage, exit 3.
    let o = tsdb(&data, &["uid", "--idwidth", "0", "metrics", "1"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(err(&o).starts_with("Negative or 0 --idwidth\nUsage: uid <subcommand> args\n"));
    let o = tsdb(&data, &["uid", "metrics", "16777216"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        err(&o),
        "16777216 is too large to fit on 3 bytes.  Maybe you forgot to adjust --idwidth?\n"
    );
    // A kind OpenTSDB does not know.
    let o = tsdb(&data, &["uid", "assign", "metric_names", "m.c"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains("Invalid type requested: metric_names"),
        "{}",
        err(&o)
    );
    // A tree ID that is not a number: OpenTSDB's treepurge fails with 3, as its other
    // meta commands do on an error.
    let o = tsdb(&data, &["uid", "treepurge", "abc"]);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(err(&o).contains("Invalid tree ID: abc"), "{}", err(&o));
    let o = tsdb(&data, &["uid", "treepurge", "0"]);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    let o = tsdb(&data, &["uid", "treepurge"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
}

/// `tsd.core.timezone`: the tools read absolute dates in it (and `scan` prints them in it),
/// as OpenTSDB's do in the JVM's default zone; a zone Java does not know is refused.
#[test]
fn tools_read_dates_in_the_configured_zone() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(dir.path());
    // The points are at 00:00:00Z and 00:00:01Z on 2013-01-01: 00:30 in Paris (UTC+1) is
    // before them, 00:30 UTC after.
    let paris = config(dir.path(), "tsd.core.timezone = Europe/Paris\n");
    let o = tsdb(
        &data,
        &[
            "query",
            "2013/01/01-00:30",
            "sum",
            "m.a",
            "--config",
            &paris,
        ],
    );
    assert_eq!(out(&o).lines().count(), 2, "{}", err(&o));
    let o = tsdb(&data, &["query", "2013/01/01-00:30", "sum", "m.a"]);
    assert_eq!(out(&o), "", "{}", err(&o));
    assert!(o.status.success(), "{}", err(&o));
    // `scan` prints dates as Java's `Date.toString()` in the zone.
    let o = tsdb(
        &data,
        &["scan", "2013/01/01-00:30", "sum", "m.a", "--config", &paris],
    );
    assert!(
        out(&o).contains("(Tue Jan 01 01:00:00 CET 2013)"),
        "{}{}",
        out(&o),
        err(&o)
    );
    let o = tsdb(&data, &["scan", "2013/01/01", "sum", "m.a"]);
    assert!(
        out(&o).contains("(Tue Jan 01 00:00:00 UTC 2013)"),
        "{}",
        out(&o)
    );
    // OpenTSDB's words for a name Java does not know; nothing is read.
    let bad = config(dir.path(), "tsd.core.timezone = Europe/Pariss\n");
    for args in [
        vec!["query", "2013/01/01", "sum", "m.a"],
        vec!["scan", "2013/01/01", "sum", "m.a"],
        vec!["fsck", "2013/01/01", "sum", "m.a"],
    ] {
        let mut args = args.clone();
        args.extend(["--config", &bad]);
        let o = tsdb(&data, &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(
            err(&o).contains("Invalid timezone name: Europe/Pariss"),
            "{args:?}: {}",
            err(&o)
        );
        assert!(out(&o).is_empty(), "{args:?}");
    }
}

#[test]
fn tools_refuse_the_config_values_the_tsd_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(dir.path());
    // Duplicates resolved by value: refused where points are written or duplicates resolved.
    let by_value = config(dir.path(), "tsd.storage.use_otsdb_timestamp = true\n");
    let file = dir.path().join("more.txt");
    std::fs::write(&file, "m.a 1356998402 3 host=a\n").unwrap();
    for args in [
        vec!["import", file.to_str().unwrap()],
        vec!["migrate", "--from", "http://127.0.0.1:9"],
        vec!["query", "2013/01/01", "sum", "m.a"],
        vec!["fsck", "--full-scan", "--resolve-duplicates", "--fix"],
        vec!["scan", "--compact", "2013/01/01", "sum", "m.a"],
    ] {
        let mut args = args.clone();
        args.extend(["--config", &by_value]);
        let o = tsdb(&data, &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(
            err(&o).contains("tsd.storage.use_otsdb_timestamp = true asks for duplicate points resolved by their values"),
            "{args:?}: {}",
            err(&o)
        );
    }
    let o = tsdb(
        &data,
        &[
            "scan",
            "--import",
            "2013/01/01",
            "sum",
            "m.a",
            "--config",
            &by_value,
        ],
    );
    assert_eq!(
        out(&o).lines().count(),
        2,
        "a dump resolves nothing: {}",
        err(&o)
    );

    // OpenTSDB's metasync sends what it writes to the search plugin.
    let search = config(dir.path(), "tsd.search.enable = true\n");
    let o = tsdb(&data, &["uid", "metasync", "--config", &search]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains("tsd.search.enable = true asks for a search plugin"),
        "{}",
        err(&o)
    );
    let o = tsdb(&data, &["uid", "metasync"]);
    assert!(o.status.success(), "{}", err(&o));
}

/// Tag words of a command-line query as OpenTSDB's `Tags.parse` reads them.
#[test]
fn query_tags_are_read_as_opentsdb_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(dir.path());
    let o = tsdb(&data, &["query", "2013/01/01", "sum", "m.a", "host=a=b"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).starts_with("invalid tag: host=a=b\n"),
        "{}",
        err(&o)
    );
    for tool in ["query", "scan", "fsck"] {
        let o = tsdb(
            &data,
            &[tool, "2013/01/01", "sum", "m.a", "host=a", "host=b"],
        );
        assert_eq!(o.status.code(), Some(2), "{tool}");
        assert!(
            err(&o).contains("duplicate tag: host=b, tags={host=a}"),
            "{tool}: {}",
            err(&o)
        );
        assert!(out(&o).is_empty(), "{tool}");
    }
    // The same pair twice is one tag.
    let o = tsdb(
        &data,
        &["query", "2013/01/01", "sum", "m.a", "host=a", "host=a"],
    );
    assert_eq!(out(&o).lines().count(), 2, "{}", err(&o));
}

/// A row whose tag value has no name any more: OpenTSDB's scan prints the exception in place
/// of the tags and goes on; `--import` (which needs the names) fails.
#[test]
fn scan_prints_rows_with_unnamed_tags() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(dir.path());
    let o = tsdb(&data, &["uid", "delete", "tagv", "a"]);
    assert!(o.status.success(), "{}", err(&o));
    let o = tsdb(&data, &["scan", "2013/01/01", "2013/01/02", "sum", "m.a"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = out(&o);
    assert_eq!(
        text.lines().next(),
        Some(
            "[0, 0, 1, 80, -30, 39, 0, 0, 0, 1, 0, 0, 1] m.a 1356998400 (Tue Jan 01 00:00:00 UTC 2013) \
             net.opentsdb.uid.NoSuchUniqueId: No such unique ID for 'tagv': [0, 0, 1]"
        ),
        "{text}"
    );
    assert_eq!(
        text.lines().count(),
        4,
        "its compacted cell and points: {text}"
    );
    let o = tsdb(&data, &["scan", "--import", "2013/01/01", "sum", "m.a"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains("No such unique ID for 'tagv': [0, 0, 1]"),
        "{}",
        err(&o)
    );
}

/// `tsdb tsd` with a port or a thread count that is not a number: OpenTSDB's words, exit 1
/// (not a parser's usage error, exit 2).
#[test]
fn tsd_numbers_refused_in_opentsdbs_words() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for (args, says) in [
        (
            vec!["tsd", "--port", "abc"],
            "Invalid network port setting: tsd.network.port = abc",
        ),
        (
            vec!["tsd", "--port=70000"],
            "Invalid network port setting: tsd.network.port = 70000",
        ),
        (
            vec!["tsd", "--port", "0", "--worker-threads", "many"],
            "Invalid worker thread count: tsd.network.worker_threads = many",
        ),
        (
            vec!["tsd", "--port", "0", "--max-connections", "lots"],
            "Invalid connections limit: tsd.core.connections.limit = lots",
        ),
        // Read as the config file's numbers are, with the same words.
        (
            vec!["tsd", "--port", "0", "--backlog", "deep"],
            "config value is not an integer. key=tsd.network.backlog value=deep",
        ),
        (
            vec!["tsd", "--port", "0", "--backlog=-5"],
            "tsd.network.backlog must be a positive number, not -5",
        ),
    ] {
        let o = tsdb(&data, &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", err(&o));
        assert!(err(&o).contains(says), "{args:?}: {}", err(&o));
    }
}

/// Doubles as Java's `%f` prints them: 2^-7 = 0.0078125 exactly, a tie at the sixth decimal
/// that Java rounds up (Rust's `{:.6}` rounds it to even, 0.007812).
#[test]
fn query_doubles_round_as_javas_percent_f() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("points.txt");
    std::fs::write(
        &file,
        "m.f 1356998400 0.0078125 host=a\nm.f 1356998401 2.5000005 host=a\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let o = tsdb(&data, &["import", "--auto-metric", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", err(&o));
    let o = tsdb(&data, &["query", "2013/01/01", "2013/01/02", "sum", "m.f"]);
    assert_eq!(
        out(&o),
        // 2.5000005 is stored as the float 2.500000476837158 (OpenTSDB's importer too).
        "m.f 1356998400000 0.007813 {host=a}\nm.f 1356998401000 2.500000 {host=a}\n",
        "{}",
        err(&o)
    );
}

/// `--bind` (`tsd.network.bind`) takes a host name, as OpenTSDB's `InetAddress.getByName`.
#[test]
fn tsd_binds_to_a_host_name() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["tsd", "--port", "0", "--bind", "localhost", "--data-dir"])
        .arg(dir.path().join("data"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut ready = None;
    let mut seen = Vec::new();
    for line in lines {
        let line = line.unwrap();
        if let Some(rest) = line.split("Ready to serve on ").nth(1) {
            ready = Some(rest.split_whitespace().next().unwrap().to_string());
            break;
        }
        seen.push(line);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let addr: std::net::SocketAddr = ready
        .unwrap_or_else(|| panic!("not ready: {seen:?}"))
        .parse()
        .unwrap();
    assert!(addr.ip().is_loopback(), "{addr}");
}

/// A flag without a value given one (`--import=true`): set, whatever the value, as `ArgP`
/// reads it.
#[test]
fn flags_given_a_value_are_set() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(dir.path());
    for flag in ["--import=true", "--import=false"] {
        let o = tsdb(
            &data,
            &["scan", flag, "2013/01/01", "2013/01/02", "sum", "m.a"],
        );
        assert_eq!(
            out(&o),
            "m.a 1356998400 1 host=a\nm.a 1356998401 1.2345678E7 host=a\n",
            "{flag}: {}",
            err(&o)
        );
    }
    // And given twice (`-v` is `--verbose`), as ArgP takes a flag again.
    let o = tsdb(&data, &["uid", "-v", "metrics", "1", "--verbose=yes"]);
    assert_eq!(out(&o), "metrics m.a: [0, 0, 1]\n", "{}", err(&o));
    let o = tsdb(
        &data,
        &["scan", "--import", "2013/01/01", "sum", "m.a", "--import"],
    );
    assert_eq!(out(&o).lines().count(), 2, "{}", err(&o));
    // An option given twice: the last value counts (the data dir is given last).
    let o = tsdb(
        &data,
        &["uid", "--data-dir", "/nonexistent/dir", "metrics", "1"],
    );
    assert_eq!(out(&o), "metrics m.a: [0, 0, 1]\n", "{}", err(&o));
}
