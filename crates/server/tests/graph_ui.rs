#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `/q` (ascii, json and PNG graphs with OpenTSDB's parameters and errors), the UI's files
//! and the status page, over real sockets.
mod common;

use common::{Response, TestServer, http, start, start_with};
use hourglass_core::config::Config;
use plotters::style::{Color, Palette, Palette99};
use serde_json::{Value, json};

/// OpenTSDB's fixture and a global annotation.
async fn load_fixture(srv: &TestServer) {
    common::load_fixture(srv).await;
    let note = json!({"startTime": 1357000000, "description": "deploy"});
    let r = http(srv.addr, "POST", "/api/annotation", &note.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

async fn get(srv: &TestServer, path: &str) -> Response {
    http(srv.addr, "GET", path, "").await
}

fn header<'a>(r: &'a Response, name: &str) -> &'a str {
    r.headers
        .iter()
        .find(|(k, _)| k == name)
        .map_or("", |(_, v)| v.as_str())
}

const RANGE: &str = "start=1356998400&end=1357010000";

/// Decoded PNG: width, height, RGB(A) pixels, bytes per pixel.
fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>, usize) {
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    buf.truncate(info.buffer_size());
    let channels = info.color_type.samples();
    (info.width, info.height, buf, channels)
}

/// Pixels of the n-th series colour.
fn series_pixels(rgb: &[u8], channels: usize, n: usize) -> usize {
    let (r, g, b) = Palette99::pick(n).to_rgba().rgb();
    rgb.chunks(channels)
        .filter(|p| p[0] == r && p[1] == g && p[2] == b)
        .count()
}

async fn ascii_and_json_match_the_query_api(backend: &str) {
    let srv = start(backend).await;
    load_fixture(&srv).await;
    for m in [
        "sum:sys.cpu.user%7Bhost=*%7D",
        "avg:1m-avg:sys.cpu.user",
        "sum:rate:sys.cpu.user%7Bhost=web01%7D",
    ] {
        let ascii = get(&srv, &format!("/q?{RANGE}&m={m}&ascii")).await;
        assert_eq!(ascii.status, 200, "{}", ascii.text());
        assert_eq!(header(&ascii, "content-type"), "text/plain");
        let api = get(&srv, &format!("/api/query?{RANGE}&m={m}")).await.json();
        // Every point of every group, in the same order, with the same number text.
        let mut expected = Vec::new();
        for g in api.as_array().unwrap() {
            let tags: String = g["tags"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| format!(" {k}={}", v.as_str().unwrap()))
                .collect();
            for (t, v) in g["dps"].as_object().unwrap() {
                expected.push(format!("sys.cpu.user {t} {v}{tags}"));
            }
        }
        let text = ascii.text();
        let got: Vec<&str> = text.lines().collect();
        assert!(!got.is_empty());
        assert_eq!(got, expected, "{m}");
    }
    let ascii = get(
        &srv,
        &format!("/q?{RANGE}&m=sum:sys.cpu.user%7Bhost=*%7D&ascii"),
    )
    .await
    .text();
    assert_eq!(ascii.lines().count(), 600);
    assert!(
        ascii.starts_with("sys.cpu.user 1356998430 1 host=web01\n"),
        "{ascii}"
    );
    assert!(ascii.contains("\nsys.cpu.user 1356998430 300 host=web02\n"));

    // gnuplot's key words, as OpenTSDB passes them on.
    let j = get(
        &srv,
        &format!("/q?{RANGE}&m=sum:sys.cpu.user&key=out%20right%20top%20box&json"),
    )
    .await;
    assert_eq!(j.status, 200, "{}", j.text());
    let j = get(&srv, &format!("/q?{RANGE}&m=sum:sys.cpu.user&json")).await;
    assert_eq!(j.status, 200);
    assert!(
        j.text().starts_with("{\"plotted\":300,\"timing\":"),
        "{}",
        j.text()
    );
    let v = j.json();
    assert_eq!(v["etags"], json!([["host"]]));
    assert_eq!(v["points"], json!(600));
    // Two sub-queries, the second without data: [] for the first as OpenTSDB, null after.
    let other = json!({"metric": "sys.cpu.nice", "timestamp": 1356998400, "value": 1, "tags": {"host": "web03"}});
    let r = http(srv.addr, "POST", "/api/put", &other.to_string()).await;
    assert_eq!(r.status, 204, "{}", r.text());
    let j = get(
        &srv,
        "/q?start=1356998400&end=1357010000&m=sum:sys.cpu.user%7Bhost=web01%7D&m=sum:sys.cpu.user%7Bhost=web03%7D&json",
    )
    .await;
    assert_eq!(j.status, 200, "{}", j.text());
    let j = j.json();
    assert_eq!(j["etags"], json!([[], null]));
    assert_eq!(j["plotted"], json!(300));
    srv.stop().await;
}

async fn png_graphs(backend: &str) {
    let srv = start(backend).await;
    load_fixture(&srv).await;
    let r = get(
        &srv,
        &format!("/q?{RANGE}&m=sum:sys.cpu.user%7Bhost=*%7D&wxh=640x300&title=CPU&ylabel=percent&global_annotations&png"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(header(&r, "content-type"), "image/png");
    assert_eq!(
        header(&r, "cache-control"),
        "max-age=86400",
        "an old, absolute range"
    );
    let (w, h, px, ch) = decode_png(&r.body);
    assert_eq!((w, h), (640, 300));
    assert!(series_pixels(&px, ch, 0) > 200, "web01 drawn");
    assert!(series_pixels(&px, ch, 1) > 200, "web02 drawn");

    // One group: one colour; the default size is OpenTSDB's 1024x768.
    let r = get(
        &srv,
        &format!("/q?{RANGE}&m=sum:sys.cpu.user%7Bhost=web01%7D&png"),
    )
    .await;
    let (w, h, px, ch) = decode_png(&r.body);
    assert_eq!((w, h), (1024, 768));
    assert!(series_pixels(&px, ch, 0) > 200);
    assert_eq!(series_pixels(&px, ch, 1), 0, "no second series");

    // The right axis, log scales, fixed ranges, colours and no key all draw.
    let r = get(
        &srv,
        &format!(
            "/q?{RANGE}&m=sum:sys.cpu.user%7Bhost=web01%7D&o=&m=sum:sys.cpu.user%7Bhost=web02%7D&o=axis%20x1y2\
             &ylog&y2log&yrange=[1:1000]&y2range=[:500]&bgcolor=x202020&fgcolor=xF0F0F0&nokey&style=points&png"
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let (_, _, px, ch) = decode_png(&r.body);
    assert!(
        px.chunks(ch)
            .filter(|p| p[..3] == [0x20, 0x20, 0x20])
            .count()
            > 100_000
    );
    assert!(
        series_pixels(&px, ch, 1) > 50,
        "the right-axis series drawn"
    );

    // No data: still an image.
    let r = get(
        &srv,
        "/q?start=1356998400&end=1356999000&m=sum:sys.cpu.user%7Bhost=web01%7D&wxh=200x100&png",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(decode_png(&r.body).0, 200);
    srv.stop().await;
}

async fn errors_and_redirect(backend: &str) {
    let srv = start(backend).await;
    load_fixture(&srv).await;
    // OpenTSDB's redirect: a 200 with Location and a page refreshing to it.
    let r = get(&srv, "/q?start=1h-ago&m=sum:sys.cpu.user%7Bhost=*%7D").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        header(&r, "location"),
        "/#start=1h-ago&m=sum:sys.cpu.user%7Bhost=*%7D"
    );
    assert_eq!(header(&r, "content-type"), "text/html; charset=UTF-8");
    assert_eq!(
        r.text(),
        "<html></head><meta http-equiv=\"refresh\" content=\"0; url=/#start=1h-ago&m=sum:sys.cpu.user%7Bhost=*%7D\"></head></html>"
    );

    let err = |r: &Response| r.json()["err"].as_str().unwrap_or_default().to_string();
    for (query, message) in [
        (
            "start=1356998400&m=sum:nope",
            "No such name for 'metrics': 'nope'",
        ),
        ("m=sum:sys.cpu.user", "Missing parameter <code>start</code>"),
        ("start=1356998400", "Missing sub queries"),
        (
            "start=1356998400&m=sum:sys.cpu.user&wxh=5000x50",
            "Invalid wxh parameter: 5000x50, height smaller than 100 in 5000x50",
        ),
        (
            "start=1357010000&end=1356998400&m=sum:sys.cpu.user",
            "End time [1356998400000] must be greater than the start time [1357010000000]",
        ),
        (
            "start=1356998400&m=sum:sys.cpu.user&title=%60id%60",
            "Parameter title contained a back-tick. That's a no-no.",
        ),
        (
            "start=1356998400&m=sum:sys.cpu.user&yrange=0:10",
            "'yrange' was invalid. Must be in the format [min:max].",
        ),
        (
            "start=1356998400&m=nosuchagg:sys.cpu.user",
            "No such aggregation function: nosuchagg",
        ),
    ] {
        let r = get(&srv, &format!("/q?{query}&json")).await;
        assert_eq!(r.status, 400, "{query}: {}", r.text());
        assert_eq!(header(&r, "content-type"), "application/json", "{query}");
        assert_eq!(err(&r), message, "{query}");
    }
    // Without json: OpenTSDB's page with the reason (its <code> markup kept), png alike.
    for output in ["png", "ascii"] {
        let r = get(&srv, &format!("/q?start=1356998400&m=sum:nope&{output}")).await;
        assert_eq!(r.status, 400);
        assert_eq!(header(&r, "content-type"), "text/html; charset=UTF-8");
        let page = r.text();
        assert!(page.starts_with("<!DOCTYPE html><html><head><meta http-equiv=content-type content=\"text/html;charset=utf-8\"><title>Bad Request</title>\n<style><!--\n"), "{page}");
        assert!(
            page.contains("The reason provided was:<blockquote>No such name for 'metrics': 'nope'</blockquote>"),
            "{page}"
        );
    }
    let r = get(&srv, "/q?m=sum:sys.cpu.user&png").await;
    assert!(
        r.text()
            .contains("<blockquote>Missing parameter <code>start</code></blockquote>"),
        "{}",
        r.text()
    );
    // Every method is served, as OpenTSDB's graph handler checks none.
    let r = http(
        srv.addr,
        "PUT",
        &format!("/q?{RANGE}&m=sum:sys.cpu.user&json"),
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Nothing above lost a point or the server.
    assert_eq!(srv.points("sys.cpu.user").len(), 600);
    srv.stop().await;
}

/// `ascii` and `png` go out as OpenTSDB sends its files (typed by their name, `max-age`, 0
/// included, and `Age`); `json` as a reply, typed by its first byte, without a cache header.
async fn answers_are_typed_and_cached_as_opentsdb_sends_them(backend: &str) {
    let srv = start(backend).await;
    load_fixture(&srv).await;
    let m = "m=sum:sys.cpu.user";
    let r = get(&srv, &format!("/q?{RANGE}&{m}&ascii")).await;
    assert_eq!(header(&r, "content-type"), "text/plain");
    assert_eq!(header(&r, "cache-control"), "max-age=86400");
    assert_eq!(header(&r, "age"), "0");
    let r = get(&srv, &format!("/q?{RANGE}&{m}&json")).await;
    assert_eq!(header(&r, "content-type"), "application/json");
    assert_eq!(header(&r, "cache-control"), "");
    // A range reaching into the future may not be kept.
    let r = get(
        &srv,
        &format!("/q?start=1356998400&end=4000000000&{m}&ascii"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(header(&r, "cache-control"), "max-age=0");
    let r = get(&srv, &format!("/q?start=1356998400&end=4000000000&{m}&png")).await;
    assert_eq!(header(&r, "content-type"), "image/png");
    assert_eq!(header(&r, "cache-control"), "max-age=0");
    srv.stop().await;
}

/// The checks of 2.4.1's graph handler, in its words: plot parameters decoded a second time
/// and read with its patterns (found anywhere, no character list of their own), `tz` read
/// only by absolute dates, the times in seconds, `o=` counted only with an allow list,
/// duplicate sub-queries asked once.
async fn parameters_are_checked_as_opentsdb_2_4_1_checks_them(backend: &str) {
    let srv = start(backend).await;
    load_fixture(&srv).await;
    let m = "m=sum:sys.cpu.user%7Bhost=web01%7D";
    let q = |extra: &str| format!("/q?{RANGE}&{m}&{extra}&json");
    for accepted in [
        "ylabel=bytes/s",
        "title=CPU%20(%2525)",
        "ylabel=%C3%A9t%C3%A9%201",
        "yformat=%2525H:%2525M",
        "bgcolor=0x102030",
        "smooth=xbezier",
        "style=linespoints",
        "yrange=[0:5]",
        "wxh=640x480%0A",
        // 2.4.1 reads `o=` only with tsd.gnuplot.options.allowlist: none is counted here.
        "o=&o=",
        "tz=Nowhere/Such",
    ] {
        let r = get(&srv, &q(accepted)).await;
        assert_eq!(r.status, 200, "{accepted}: {}", r.text());
    }
    let err = |r: &Response| r.json()["err"].as_str().unwrap_or_default().to_string();
    for (given, message) in [
        (
            "ylabel=%2521",
            "'ylabel' was invalid. Must satisfy the pattern [a-zA-z0-9 \\-_]",
        ),
        (
            "title=100%25",
            "URLDecoder: Incomplete trailing escape (%) pattern",
        ),
        (
            "ylabel=%25zz",
            "URLDecoder: Illegal hex characters in escape (%) pattern - For input string: \"zz\"",
        ),
        (
            "title=%2560id%2560",
            "Parameter title contained a back-tick. That's a no-no.",
        ),
        (
            "yformat=%2525.2f",
            "'yformat' was invalid. Must satisfy the pattern (%[a-zA-Z])+[:\\/]?\\s?",
        ),
        (
            "style=bars",
            "'style' was invalid. Must satisfy the pattern (linespoint|points|circles|dots)",
        ),
        (
            "smooth=spline",
            "'smooth' was invalid. Must satisfy the pattern unique|frequency|fnormal|cumulative|cnormal|bins|csplines|acsplines|mcsplines|bezier|sbezier|unwrap|zsort",
        ),
        ("wxh=50x5000", "Invalid wxh parameter: 50x5000"),
        (
            "wxh=40000x480",
            "Can't parse wxh '40000x480': Value out of range. Value:\"40000\" Radix:10",
        ),
    ] {
        let r = get(&srv, &q(given)).await;
        assert_eq!(r.status, 400, "{given}: {}", r.text());
        assert_eq!(err(&r), message, "{given}");
    }
    // `tz` is read by an absolute date only.
    let r = get(
        &srv,
        &format!("/q?start=2013/01/01&end=2013/01/02&{m}&tz=Nowhere/Such&json"),
    )
    .await;
    assert_eq!(err(&r), "Invalid timezone name: Nowhere/Such");
    // The same second at both ends: TsdbQuery's words, after the names are read.
    let r = get(
        &srv,
        &format!("/q?start=1356998400000ms&end=1356998400500ms&{m}&json"),
    )
    .await;
    assert_eq!(
        err(&r),
        "end time: new end time (1356998400) is less than or equal to start time: 1356998400"
    );
    let r = get(
        &srv,
        "/q?start=1356998400000ms&end=1356998400500ms&m=sum:nope&wxh=1x1&json",
    )
    .await;
    assert_eq!(err(&r), "No such name for 'metrics': 'nope'");
    // Times a query cannot take (`TsdbQuery.setStartTime`/`setEndTime`), in milliseconds.
    let r = get(&srv, &format!("/q?start=100y-ago&{m}&json")).await;
    assert!(err(&r).starts_with("Invalid timestamp: -"), "{}", r.text());
    let r = get(
        &srv,
        &format!("/q?start=1356998400&end=99999999999999&{m}&json"),
    )
    .await;
    assert_eq!(err(&r), "Invalid timestamp: 99999999999999");
    // A sub-query asked twice is asked once.
    let r = get(&srv, &format!("/q?{RANGE}&{m}&{m}&json")).await.json();
    assert_eq!(r["etags"], json!([[]]));
    assert_eq!(r["plotted"], json!(300));
    srv.stop().await;
}

/// `ascii` lines carry a series' tags as 2.4.1 prints its tag map: a Java `HashMap`, whose
/// order is neither the names' nor the UIDs' (`host` before `dc`); `etags` as the Java
/// `HashSet` it is.
async fn ascii_tags_in_javas_hash_map_order(backend: &str) {
    let srv = start(backend).await;
    // `dc` named first: its UID comes before `host`'s.
    let first =
        json!({"metric": "net.other", "timestamp": 1356998400, "value": 1, "tags": {"dc": "lga"}});
    let r = http(srv.addr, "POST", "/api/put", &first.to_string()).await;
    assert_eq!(r.status, 204, "{}", r.text());
    let points: Vec<Value> = (0..3)
        .flat_map(|i| {
            [("lga", "web01"), ("sjc", "web02")].map(|(dc, host)| {
                json!({"metric": "net.bytes", "timestamp": 1356998400 + i * 60, "value": i,
                       "tags": {"dc": dc, "host": host}})
            })
        })
        .collect();
    let r = http(
        srv.addr,
        "POST",
        "/api/put",
        &Value::Array(points).to_string(),
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.text());
    let r = get(
        &srv,
        &format!("/q?{RANGE}&m=sum:net.bytes%7Bhost=*%7D&ascii"),
    )
    .await;
    assert_eq!(
        r.text().lines().next(),
        Some("net.bytes 1356998400 0 host=web01 dc=lga"),
        "{}",
        r.text()
    );
    let r = get(&srv, &format!("/q?{RANGE}&m=sum:net.bytes&json"))
        .await
        .json();
    assert_eq!(r["etags"], json!([["host", "dc"]]));
    srv.stop().await;
}

on_every_backend!(
    ascii_and_json_match_the_query_api,
    png_graphs,
    errors_and_redirect,
    answers_are_typed_and_cached_as_opentsdb_sends_them,
    parameters_are_checked_as_opentsdb_2_4_1_checks_them,
    ascii_tags_in_javas_hash_map_order,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_files_are_served_from_the_binary() {
    let srv = start("memory").await;
    let dist = concat!(env!("CARGO_MANIFEST_DIR"), "/../../web/dist/");
    for (path, file, kind) in [
        ("/", "index.html", "text/html; charset=UTF-8"),
        ("/app.js", "app.js", "text/javascript; charset=UTF-8"),
        ("/app.css", "app.css", "text/css; charset=UTF-8"),
        ("/s/app.js", "app.js", "text/javascript; charset=UTF-8"),
    ] {
        let r = get(&srv, path).await;
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(header(&r, "content-type"), kind, "{path}");
        assert_eq!(
            r.body,
            std::fs::read(format!("{dist}{file}")).unwrap(),
            "{path}"
        );
        // Revalidation answers 304 without a body.
        let etag = header(&r, "etag").to_string();
        assert!(!etag.is_empty());
        let again = common::HttpConn::open(srv.addr)
            .await
            .request("GET", path, &format!("If-None-Match: {etag}\r\n"), b"")
            .await;
        assert_eq!((again.status, again.body.len()), (304, 0), "{path}");
    }
    assert!(get(&srv, "/").await.text().contains("app.js"));
    // HEAD: the headers only (read raw: the length announced has no body behind it).
    let mut raw = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(
        &mut raw,
        b"HEAD /app.css HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut raw, &mut head)
        .await
        .unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "no body: {head}");
    // OpenTSDB serves its pages and files for any method.
    let r = http(srv.addr, "POST", "/", "").await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("app.js"));
    assert_eq!(http(srv.addr, "DELETE", "/s/app.css", "").await.status, 200);
    // A file it cannot read: its API error shape, worded for a page (a `jsonp` wraps it).
    for missing in ["/s/nope.js", "/s/%2e%2e/Cargo.toml", "/favicon.ico"] {
        let r = get(&srv, missing).await;
        assert_eq!(r.status, 404, "{missing}");
        assert_eq!(
            r.text(),
            "{\"error\":{\"code\":404,\"message\":\"Page not found\"}}",
            "{missing}"
        );
    }
    let r = get(&srv, "/s/nope.js?jsonp=cb").await;
    assert_eq!(
        r.text(),
        "cb({\"error\":{\"code\":404,\"message\":\"Page not found\"}})"
    );
    // `/s` alone, and `..` anywhere after `/s/` (the query string too): 400s with its words.
    for (path, reason) in [
        ("/s", "URI too short <code>/s</code>"),
        (
            "/s/../Cargo.toml",
            "Malformed URI <code>/s/../Cargo.toml</code>",
        ),
        (
            "/s/app.js?v=1..2",
            "Malformed URI <code>/s/app.js?v=1..2</code>",
        ),
    ] {
        let r = get(&srv, path).await;
        assert_eq!(r.status, 400, "{path}");
        assert!(
            r.text().contains(&format!(
                "The reason provided was:<blockquote>{reason}</blockquote>"
            )),
            "{path}: {}",
            r.text()
        );
    }
    let r = get(&srv, "/nope").await;
    assert_eq!(r.status, 404);
    assert!(r.text().contains("<h1>Page Not Found</h1>"));
    srv.stop().await;
}

/// `tsd.gnuplot.options.allowlist` (OpenTSDB 2.4.1): `/q` refuses an `o=` option not in
/// the list (`;`-separated, trimmed, URL-decoded); unset, every option is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graph_options_outside_the_allow_list_are_refused() {
    let q = |o: &str| {
        format!(
            "/q?{RANGE}&m=sum:sys.cpu.user%7Bhost=web01%7D&o={o}\
             &m=sum:sys.cpu.user%7Bhost=web02%7D&o=&json"
        )
    };
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set(
        "tsd.gnuplot.options.allowlist",
        " axis%20x1y2 ; ;with lines",
    );
    let srv = start_with("memory", c).await;
    load_fixture(&srv).await;
    for allowed in ["axis%20x1y2", "axis+x1y2", "with%20lines"] {
        let r = get(&srv, &q(allowed)).await;
        assert_eq!(r.status, 200, "{allowed}: {}", r.text());
    }
    let r = get(&srv, &q("axis%20x1y1")).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["err"],
        "Query option at index 0 was not in the allow list."
    );
    // With an allow list the options are counted against the sub-queries.
    let r = get(
        &srv,
        &format!("/q?{RANGE}&m=sum:sys.cpu.user&o=axis%20x1y2&o=&json"),
    )
    .await;
    assert_eq!(r.json()["err"], "2 `o' parameters, but 1 `m' parameters.");
    srv.stop().await;
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    let srv = start_with("memory", c).await;
    load_fixture(&srv).await;
    let r = get(&srv, &q("axis%20x1y1")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    srv.stop().await;
}

/// A query over its limits: 2.4.1's graph handler lets the `QueryException` through to its
/// catch-all, a 500 (OpenTSDB's "Internal Server Error" page, or `{"err"}` with `json`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphs_over_the_limits_fail_as_opentsdbs_do() {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.query.limits.data_points.default", "100");
    let srv = start_with("memory", c).await;
    load_fixture(&srv).await;
    let limit = "Sorry, you have attempted to fetch more than our limit of 100 data points. \
                 Please try filtering using more tags or decrease your time range.";
    let r = get(&srv, &format!("/q?{RANGE}&m=sum:sys.cpu.user&json")).await;
    assert_eq!(r.status, 500, "{}", r.text());
    assert_eq!(r.json(), json!({ "err": limit }));
    let r = get(&srv, &format!("/q?{RANGE}&m=sum:sys.cpu.user&png")).await;
    assert_eq!(r.status, 500);
    let page = r.text();
    assert!(
        page.contains("<title>Internal Server Error</title>"),
        "{page}"
    );
    assert!(page.contains("Houston, we have a problem"), "{page}");
    assert!(page.contains(&format!("<pre>{limit}</pre>")), "{page}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_root_serves_files_from_disk() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("index.html"), "<p>dev build</p>").unwrap();
    std::fs::write(root.path().join("app.js"), "// dev build").unwrap();
    std::fs::create_dir(root.path().join("img")).unwrap();
    std::fs::write(root.path().join("img/logo.svg"), "<svg/>").unwrap();
    let outside = root.path().parent().unwrap().join("hourglass-secret.txt");
    std::fs::write(&outside, "classified 42").unwrap();
    let mut c = Config::default();
    c.set("tsd.http.staticroot", root.path().to_str().unwrap());
    let srv = start_with("memory", c).await;
    assert_eq!(get(&srv, "/").await.text(), "<p>dev build</p>");
    let svg = get(&srv, "/s/img/logo.svg").await;
    assert_eq!((svg.status, svg.text().as_str()), (200, "<svg/>"));
    assert_eq!(header(&svg, "content-type"), "image/svg+xml");
    assert_eq!(get(&srv, "/app.css").await.status, 404, "not in this root");
    for escape in [
        "/s/../hourglass-secret.txt",
        "/s/img/../../hourglass-secret.txt",
    ] {
        let r = get(&srv, escape).await;
        assert_eq!(r.status, 400, "{escape}");
        assert!(!r.text().contains("classified"));
    }
    std::fs::remove_file(outside).unwrap();
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_reads_as_a_page() {
    let srv = start("embedded").await;
    let put = json!([{"metric": "sys.cpu.user", "timestamp": 1356998430, "value": 1, "tags": {"host": "a"}}]);
    assert_eq!(
        http(srv.addr, "POST", "/api/put", &put.to_string())
            .await
            .status,
        204
    );
    let r = get(&srv, "/status").await;
    assert_eq!(r.status, 200);
    assert_eq!(header(&r, "content-type"), "text/html; charset=UTF-8");
    let page = r.text();
    for expected in [
        "<dt>Version</dt><dd>Hourglass ",
        "<dt>Storage backend</dt><dd>embedded</dd>",
        "<dt>Uptime</dt><dd>",
        "<td>tsd.datapoints.received</td><td></td><td class=\"n\">1</td>",
        "<td>tsd.rpc.received</td><td>type=http</td>",
    ] {
        assert!(page.contains(expected), "{expected} missing from {page}");
    }
    assert_eq!(http(srv.addr, "DELETE", "/status", "").await.status, 405);
    let stats: Value = get(&srv, "/api/stats").await.json();
    assert!(stats.as_array().unwrap().len() > 10);
    srv.stop().await;
}
