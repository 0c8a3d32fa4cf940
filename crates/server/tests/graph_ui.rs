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
        assert_eq!(header(&ascii, "content-type"), "text/plain; charset=UTF-8");
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
    let j = get(
        &srv,
        "/q?start=1356998400&end=1357010000&m=sum:sys.cpu.user%7Bhost=web01%7D&m=sum:sys.cpu.user%7Bhost=web01%7D&json",
    )
    .await
    .json();
    assert_eq!(j["etags"], json!([[], []]));
    assert_eq!(j["plotted"], json!(600));
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
    let r = get(&srv, "/q?start=1h-ago&m=sum:sys.cpu.user%7Bhost=*%7D").await;
    assert_eq!(r.status, 302);
    assert_eq!(
        header(&r, "location"),
        "/#start=1h-ago&m=sum:sys.cpu.user%7Bhost=*%7D"
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
            "start=1356998400&m=sum:sys.cpu.user&wxh=50x5000",
            "Invalid wxh parameter: 50x5000, width smaller than 100 in 50x5000",
        ),
        (
            "start=1356998400&m=sum:sys.cpu.user&o=&o=",
            "2 `o' parameters, but 1 `m' parameters.",
        ),
        (
            "start=1357010000&end=1356998400&m=sum:sys.cpu.user",
            "start time (1357010000) is greater than or equal to end time: 1356998400",
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
        assert_eq!(err(&r), message, "{query}");
    }
    // png: an empty 400; ascii: OpenTSDB's page with the reason, escaped.
    let r = get(&srv, "/q?start=1356998400&m=sum:nope&png").await;
    assert_eq!((r.status, r.body.len()), (400, 0));
    let r = get(&srv, "/q?start=1356998400&m=sum:nope&ascii").await;
    assert_eq!(r.status, 400);
    assert!(header(&r, "content-type").starts_with("text/html"));
    assert!(
        r.text()
            .contains("No such name for &#39;metrics&#39;: &#39;nope&#39;"),
        "{}",
        r.text()
    );
    assert_eq!(
        http(srv.addr, "PUT", "/q?start=1h-ago&m=sum:x&json", "")
            .await
            .status,
        405
    );
    // Nothing above lost a point or the server.
    assert_eq!(srv.points("sys.cpu.user").len(), 600);
    srv.stop().await;
}

on_every_backend!(
    ascii_and_json_match_the_query_api,
    png_graphs,
    errors_and_redirect,
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
    assert_eq!(http(srv.addr, "POST", "/", "").await.status, 405);
    for missing in [
        "/s/nope.js",
        "/s/../Cargo.toml",
        "/s/%2e%2e/Cargo.toml",
        "/nope",
    ] {
        assert_eq!(get(&srv, missing).await.status, 404, "{missing}");
    }
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
    srv.stop().await;
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    let srv = start_with("memory", c).await;
    load_fixture(&srv).await;
    let r = get(&srv, &q("axis%20x1y1")).await;
    assert_eq!(r.status, 200, "{}", r.text());
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
    std::fs::write(&outside, "secret").unwrap();
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
        assert_eq!(r.status, 404, "{escape}");
        assert!(!r.text().contains("secret"));
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
