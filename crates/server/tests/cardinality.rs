#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Cardinality through the real server (RFC 0007 phase 4): the series cap refuses new
//! series past `tsd.index.max_series_per_metric` over telnet and `/api/put` as other
//! per-point errors, keeping the good points beside them; `/api/stats` and the status page
//! show series counts per metric and tag key.
mod common;

use common::{http, start_with, telnet};
use hourglass_core::config::Config;

fn capped(cap: u64) -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.index.enable", "true");
    c.set("tsd.index.max_series_per_metric", &cap.to_string());
    c
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

async fn the_cap_refuses_new_series_only(backend: &str) {
    let srv = start_with(backend, capped(2)).await;
    let t = now() - 60;
    let replies = telnet(
        srv.addr,
        &format!(
            "put sys.cap {t} 1 host=a\n\
             put sys.cap {t} 2 host=b\n\
             put sys.cap {t} 3 host=c\n\
             put sys.cap {} 4 host=a\n\
             put other.metric {t} 5 host=c\n",
            t + 1
        ),
    )
    .await;
    assert_eq!(
        replies,
        vec![
            "put: illegal argument: Too many series for metric: sys.cap has 2 series today, \
             maximum allowed: 2 (tsd.index.max_series_per_metric), tags: {host=c}"
                .to_string()
        ],
        "{backend}"
    );
    srv.state.tsdb.flush().unwrap();
    // Over HTTP: the refused series fails as a per-point error, the others are stored.
    let body = format!(
        r#"[{{"metric":"sys.cap","timestamp":{t},"value":6,"tags":{{"host":"d"}}}},
            {{"metric":"sys.cap","timestamp":{},"value":7,"tags":{{"host":"b"}}}}]"#,
        t + 2
    );
    let details = http(srv.addr, "POST", "/api/put?details", &body).await;
    assert_eq!(details.status, 400, "{backend}");
    let d = details.json();
    assert_eq!(d["success"], 1, "{backend}");
    assert_eq!(d["failed"], 1, "{backend}");
    assert_eq!(
        d["errors"][0]["error"],
        "Too many series for metric: sys.cap has 2 series today, maximum allowed: 2 \
         (tsd.index.max_series_per_metric), tags: {host=d}",
        "{backend}"
    );
    let hosts: std::collections::BTreeSet<String> = srv
        .points("sys.cap")
        .into_iter()
        .map(|p| p.2[0].1.clone())
        .collect();
    assert_eq!(
        hosts.into_iter().collect::<Vec<_>>(),
        ["a", "b"],
        "{backend}"
    );
    assert_eq!(srv.points("other.metric").len(), 1, "{backend}");
    // The counts, in /api/stats and on the status page.
    srv.state.tsdb.flush().unwrap();
    let stats = http(srv.addr, "GET", "/api/stats", "").await.json();
    let find = |metric: &str, tags: &[(&str, &str)]| {
        stats
            .as_array()
            .unwrap()
            .iter()
            .find(|s| {
                s["metric"] == metric
                    && tags.iter().all(|(k, v)| s["tags"][*k].as_str() == Some(*v))
            })
            .map(|s| {
                s["value"]
                    .as_i64()
                    .or_else(|| s["value"].as_str()?.parse().ok())
                    .unwrap()
            })
    };
    assert_eq!(
        find(
            "tsd.index.series",
            &[("metric", "sys.cap"), ("period", "all")]
        ),
        Some(2),
        "{backend}"
    );
    assert_eq!(
        find(
            "tsd.index.series",
            &[("metric", "sys.cap"), ("period", "current")]
        ),
        Some(2),
        "{backend}"
    );
    assert_eq!(
        find(
            "tsd.index.tagk.values",
            &[("metric", "sys.cap"), ("tagk", "host")]
        ),
        Some(2),
        "{backend}"
    );
    assert_eq!(
        find(
            "tsd.index.tagk.series",
            &[("metric", "other.metric"), ("tagk", "host")]
        ),
        Some(1),
        "{backend}"
    );
    assert_eq!(
        find("tsd.index.series.refused", &[("metric", "sys.cap")]),
        Some(2),
        "{backend}"
    );
    let page = http(srv.addr, "GET", "/status", "").await.text();
    assert!(
        page.contains(
            "<td>tsd.index.series</td><td>metric=sys.cap period=all</td><td class=\"n\">2</td>"
        ),
        "{backend}: {page}"
    );
    // Restarted (nothing in the series cache): a series counted today goes on, a new one
    // is still refused.
    let store = std::sync::Arc::clone(srv.state.tsdb.store());
    srv.stop().await;
    let srv = common::start_on(store, capped(2)).await;
    let replies = telnet(
        srv.addr,
        &format!("put sys.cap {} 8 host=a\nput sys.cap {t} 9 host=e\n", t + 3),
    )
    .await;
    assert_eq!(
        replies,
        vec![
            "put: illegal argument: Too many series for metric: sys.cap has 2 series today, \
             maximum allowed: 2 (tsd.index.max_series_per_metric), tags: {host=e}"
                .to_string()
        ],
        "{backend}"
    );
    assert_eq!(srv.points("sys.cap").len(), 5, "{backend}");
    srv.stop().await;
}

on_every_backend!(the_cap_refuses_new_series_only);
