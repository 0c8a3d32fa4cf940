#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Kept answers (`tsd.query.cache.*`): a TSD that keeps answers answers every query exactly
//! as one that keeps none, through random writes (backfills included), deletions, global
//! annotations, renames and flushes; over a store other TSDs write, no answer is kept.
mod common;

use common::{TestServer, http, start_with};
use hourglass_core::config::Config;
use serde_json::{Value, json};

const BASE: i64 = 1_700_000_000;

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn config(cache_bytes: Option<&str>) -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.http.query.allow_delete", "true");
    if let Some(b) = cache_bytes {
        c.set("tsd.query.cache.max_bytes", b);
    }
    c
}

/// `/api/stats` as `metric -> value` for the untagged counters.
async fn stats(srv: &TestServer) -> std::collections::HashMap<String, u64> {
    let r = http(srv.addr, "GET", "/api/stats", "").await;
    assert_eq!(r.status, 200);
    r.json()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| {
            let name = s["metric"].as_str()?.to_string();
            let v = s["value"].as_str().and_then(|v| v.parse().ok())?;
            Some((name, v))
        })
        .collect()
}

/// The queries asked after each change: GET and POST forms, raw, downsampled, rates,
/// filters, a tag value that a rename takes away, and global annotations.
fn queries() -> Vec<(&'static str, String, String)> {
    let (s, e) = (BASE, BASE + 6 * 3600);
    vec![
        (
            "GET",
            format!("/api/query?start={s}&end={e}&m=sum:m.a"),
            String::new(),
        ),
        (
            "GET",
            format!(
                "/api/query?start={}&end={}&m=max:10m-avg:m.a%7Bhost=*%7D",
                s + 3600,
                s + 3 * 3600
            ),
            String::new(),
        ),
        (
            "GET",
            format!("/api/query?start={s}&end={e}&m=sum:rate:m.b&global_annotations"),
            String::new(),
        ),
        (
            "GET",
            format!("/api/query?start={s}&end={e}&m=sum:1h-count:m.a%7Bhost=h3%7D"),
            String::new(),
        ),
        (
            "POST",
            "/api/query".to_string(),
            json!({"start": s * 1000 + 1500, "end": (e - 7200) * 1000, "msResolution": true,
                   "globalAnnotations": true,
                   "queries": [{"aggregator": "sum", "metric": "m.b", "downsample": "30m-sum",
                                "filters": [{"type": "literal_or", "tagk": "host",
                                             "filter": "h1|h2", "groupBy": true}]}]})
            .to_string(),
        ),
    ]
}

/// Applies one random change to both servers.
async fn change(rng: &mut Rng, servers: [&TestServer; 2], renamed: &mut bool) {
    let roll = rng.below(100);
    for_both(
        servers,
        |srv| srv.state.tsdb.flush().map(|_| ()).unwrap(),
        roll < 8,
    );
    if roll < 8 {
        return;
    }
    let (method, path, body) = match roll {
        8..=70 => {
            let points: Vec<Value> = (0..1 + rng.below(4))
                .map(|_| {
                    let metric = if rng.below(2) == 0 { "m.a" } else { "m.b" };
                    let host = format!("h{}", 1 + rng.below(3));
                    let ts = BASE + rng.below(6 * 3600) as i64;
                    let value = if rng.below(2) == 0 {
                        json!(rng.below(1000))
                    } else {
                        json!(rng.below(100_000) as f64 / 7.0)
                    };
                    json!({"metric": metric, "timestamp": ts, "value": value,
                           "tags": {"host": host}})
                })
                .collect();
            (
                "POST",
                "/api/put".to_string(),
                Value::Array(points).to_string(),
            )
        }
        71..=78 => {
            let s = BASE + rng.below(6 * 3600) as i64;
            let body = json!({"start": s, "end": s + 1 + rng.below(1800) as i64, "delete": true,
                              "queries": [{"aggregator": "sum", "metric": "m.a"}]});
            ("POST", "/api/query".to_string(), body.to_string())
        }
        79..=88 => {
            let t = BASE + rng.below(6 * 3600) as i64;
            let body = json!({"startTime": t, "description": format!("note {}", rng.below(9))});
            ("POST", "/api/annotation".to_string(), body.to_string())
        }
        89..=94 => {
            let s = BASE + rng.below(6 * 3600) as i64;
            let path = format!(
                "/api/annotation/bulk?start_time={s}&end_time={}&global",
                s + 7200
            );
            ("DELETE", path, String::new())
        }
        _ => {
            let (from, to) = if *renamed {
                ("h3x", "h3")
            } else {
                ("h3", "h3x")
            };
            *renamed = !*renamed;
            let body = json!({"tagv": from, "name": to});
            ("POST", "/api/uid/rename".to_string(), body.to_string())
        }
    };
    let a = http(servers[0].addr, method, &path, &body).await;
    let b = http(servers[1].addr, method, &path, &body).await;
    assert_eq!(a.status, b.status, "{method} {path} {body}: {}", a.text());
}

fn for_both(servers: [&TestServer; 2], f: impl Fn(&TestServer), when: bool) {
    if when {
        for s in servers {
            f(s);
        }
    }
}

async fn kept_answers_are_the_computed_answers(backend: &str) {
    let mut hits = 0;
    for seed in 1..=3u64 {
        let keeping = start_with(backend, config(None)).await;
        let computing = start_with(backend, config(Some("0"))).await;
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ seed);
        let mut renamed = false;
        for step in 0..150 {
            change(&mut rng, [&keeping, &computing], &mut renamed).await;
            for (method, path, body) in queries() {
                // Twice: the second is served from the cache when nothing changed.
                for _ in 0..2 {
                    let a = http(keeping.addr, method, &path, &body).await;
                    let b = http(computing.addr, method, &path, &body).await;
                    assert_eq!(
                        (a.status, a.text()),
                        (b.status, b.text()),
                        "seed {seed} step {step}: {method} {path} {body}"
                    );
                }
            }
        }
        let kept = stats(&keeping).await;
        hits += kept["tsd.query.cache.hits"];
        assert!(kept["tsd.query.cache.stale"] > 0, "{kept:?}");
        assert!(
            !stats(&computing).await.contains_key("tsd.query.cache.hits"),
            "max_bytes 0 turns the cache off"
        );
        keeping.stop().await;
        computing.stop().await;
    }
    // Most second asks are hits: the test checked kept answers, not only computed ones.
    assert!(hits > 1000, "{hits} answers served from the cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_answers_are_the_computed_answers_in_memory() {
    kept_answers_are_the_computed_answers("memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_answers_are_the_computed_answers_embedded() {
    kept_answers_are_the_computed_answers("embedded").await;
}

/// A point written into the range of a kept answer is in the next answer; one written
/// elsewhere in time leaves the kept answer served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_into_a_kept_answer_is_seen_at_once() {
    let srv = start_with("embedded", config(None)).await;
    let put = |ts: i64, v: i64| {
        json!([{"metric": "m.a", "timestamp": ts, "value": v, "tags": {"host": "h1"}}]).to_string()
    };
    assert_eq!(
        http(srv.addr, "POST", "/api/put", &put(BASE, 1))
            .await
            .status,
        204
    );
    let q = format!("/api/query?start={BASE}&end={}&m=sum:m.a", BASE + 3600);
    let first = http(srv.addr, "GET", &q, "").await.json();
    assert_eq!(first[0]["dps"].as_object().unwrap().len(), 1);
    assert_eq!(http(srv.addr, "GET", &q, "").await.json(), first);
    assert_eq!(stats(&srv).await["tsd.query.cache.hits"], 1);
    // `nocache` computes the answer and keeps nothing.
    let nocache = format!("{q}&nocache");
    assert_eq!(http(srv.addr, "GET", &nocache, "").await.json(), first);
    assert_eq!(http(srv.addr, "GET", &nocache, "").await.json(), first);
    assert_eq!(stats(&srv).await["tsd.query.cache.hits"], 1);
    // A day later: not in the range read.
    http(srv.addr, "POST", "/api/put", &put(BASE + 86_400, 5)).await;
    assert_eq!(http(srv.addr, "GET", &q, "").await.json(), first);
    assert_eq!(stats(&srv).await["tsd.query.cache.hits"], 2);
    http(srv.addr, "POST", "/api/put", &put(BASE + 60, 2)).await;
    let next = http(srv.addr, "GET", &q, "").await.json();
    assert_eq!(next[0]["dps"].as_object().unwrap().len(), 2, "{next}");
    // Renaming the metric changes the answer's name.
    let r = http(
        srv.addr,
        "POST",
        "/api/uid/rename",
        &json!({"metric": "m.a", "name": "m.z"}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let z = format!("/api/query?start={BASE}&end={}&m=sum:m.z", BASE + 3600);
    assert_eq!(
        http(srv.addr, "GET", &z, "").await.json()[0]["metric"],
        "m.z"
    );
    assert_eq!(
        http(srv.addr, "GET", &q, "").await.status,
        400,
        "m.a is gone"
    );
    srv.stop().await;
}

/// Clients writing and asking the same query at once: each sees its own acknowledged points
/// in every answer after the acknowledgement, whichever client's read the answer was kept
/// from.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_see_their_points_in_the_shared_answer() {
    let srv = start_with("embedded", config(None)).await;
    let addr = srv.addr;
    let q = format!(
        "/api/query?start={BASE}&end={}&m=sum:m.c%7Bclient=*%7D",
        BASE + 3600
    );
    let mut tasks = Vec::new();
    for client in 0..4i64 {
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let name = client.to_string();
            for i in 0..60i64 {
                let ts = BASE + client * 900 + i;
                let body = json!([{"metric": "m.c", "timestamp": ts, "value": i,
                                   "tags": {"client": client.to_string()}}]);
                assert_eq!(
                    http(addr, "POST", "/api/put", &body.to_string())
                        .await
                        .status,
                    204
                );
                for _ in 0..2 {
                    let answer = http(addr, "GET", &q, "").await.json();
                    let mine = answer
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|g| g["tags"]["client"] == name.as_str())
                        .unwrap_or_else(|| panic!("client {client} point {i}: {answer}"));
                    assert_eq!(
                        mine["dps"][ts.to_string()],
                        json!(i),
                        "client {client} point {i}"
                    );
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(stats(&srv).await["tsd.query.cache.hits"] > 0);
    srv.stop().await;
}

/// With a retention, an answer reaching back to where the cutoff may move while it is kept
/// is computed each time (the cutoff moves with the clock, not with a change); one well
/// inside the kept range is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_near_the_retention_cutoff_are_not_kept() {
    let mut c = config(None);
    c.set("tsd.storage.retention", "1d");
    let srv = start_with("embedded", c).await;
    let now = hourglass_storage::now_ms() / 1000;
    let body = json!([
        {"metric": "m.r", "timestamp": now - 86_400 + 600, "value": 1, "tags": {"host": "h1"}},
        {"metric": "m.r", "timestamp": now - 600, "value": 2, "tags": {"host": "h1"}}
    ]);
    assert_eq!(
        http(srv.addr, "POST", "/api/put", &body.to_string())
            .await
            .status,
        204
    );
    let old = format!("/api/query?start={}&end={now}&m=sum:m.r", now - 86_400 + 60);
    let recent = format!("/api/query?start={}&end={now}&m=sum:m.r", now - 3600);
    for q in [&old, &old, &recent, &recent] {
        assert_eq!(http(srv.addr, "GET", q, "").await.status, 200);
    }
    assert_eq!(
        stats(&srv).await["tsd.query.cache.hits"],
        1,
        "the recent range only"
    );
    srv.stop().await;
}

/// Over Bigtable, which other TSDs may write, no answer is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_is_kept_over_a_shared_store() {
    let srv = start_with("bigtable", config(None)).await;
    let body = json!([{"metric": "m.a", "timestamp": BASE, "value": 1, "tags": {"host": "h1"}}]);
    http(srv.addr, "POST", "/api/put?sync", &body.to_string()).await;
    let q = format!("/api/query?start={BASE}&end={}&m=sum:m.a", BASE + 3600);
    for _ in 0..2 {
        assert_eq!(http(srv.addr, "GET", &q, "").await.status, 200);
    }
    let s = stats(&srv).await;
    assert!(!s.contains_key("tsd.query.cache.hits"), "{s:?}");
    srv.stop().await;
}
