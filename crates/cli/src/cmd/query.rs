//! `tsdb query [--url URL] START [END] AGG [rate [counter[,MAX[,RESET]]]] [downsample N FUNC]
//! METRIC [TAGK=TAGV...] [more queries]`: OpenTSDB's command-line query. `N` is in
//! milliseconds, as in OpenTSDB. Each point prints as `metric timestamp_ms value {tags}`,
//! integers as they are and doubles with six decimals. Without `--url` the data dir is read
//! directly; with it, a running TSD answers through `/api/query`.

use std::fmt::Write as _;
use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, bail};
use hourglass_core::time::Tz;
use hourglass_engine::num::Num;
use hourglass_engine::query::aggregator::{Aggregator, NAMES};
use hourglass_engine::query::downsample::{DownsampleSpec, FillPolicy};
use hourglass_engine::query::filter::TagFilter;
use hourglass_engine::query::plan::{RunOptions, SubQuery, run};
use hourglass_engine::query::rate::RateOptions;

use crate::open::StoreArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct QueryArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Ask a running TSD (e.g. http://localhost:4242) instead of reading the data dir.
    #[arg(long)]
    url: Option<String>,
    /// OpenTSDB's Gnuplot files: refused, there is no Gnuplot output (the TSD's `/q` and
    /// web UI draw graphs).
    #[arg(long, value_name = "BASEPATH")]
    graph: Option<String>,
    #[arg(
        required = true,
        num_args = 1..,
        allow_hyphen_values = true,
        help = "START [END] AGG [rate [counter[,MAX[,RESET]]]] [downsample N FUNC] METRIC [TAGK=TAGV...] ..."
    )]
    query: Vec<String>,
}

/// One command-line sub-query, with the `m=` text that asks a TSD the same thing.
#[derive(Debug)]
struct Parsed {
    sub: SubQuery,
    m_param: String,
}

fn usage() -> String {
    format!(
        "Usage: query [--url URL] START-DATE [END-DATE] <aggregator> [rate] [counter,max,reset] \
         [downsample N FUNC] <metric> [<tagk=tagv>] [...<tagk=tagv>] [...queries]\n\
         Supported values for FUNC: {}",
        NAMES.join(" ")
    )
}

fn parse(words: &[String], now_ms: i64, tz: Tz) -> anyhow::Result<(i64, i64, Vec<Parsed>)> {
    let (start, end, mut i) = super::parse_range(words, now_ms, tz)?;
    let mut out = Vec::new();
    while i < words.len() {
        let agg_name = &words[i];
        let aggregator = Aggregator::parse(agg_name)
            .map_err(|_| anyhow::anyhow!("No such aggregator: {agg_name}"))?;
        let mut m_param = agg_name.clone();
        i += 1;
        let mut rate = false;
        let mut rate_options = RateOptions::default();
        if words.get(i).is_some_and(|w| w == "rate") {
            rate = true;
            i += 1;
            match words.get(i).filter(|w| w.starts_with("counter")) {
                Some(spec) => {
                    rate_options = RateOptions::parse_token(&format!("rate{{{spec}}}"))?;
                    m_param.push_str(&format!(":rate{{{spec}}}"));
                    i += 1;
                }
                None => m_param.push_str(":rate"),
            }
        }
        let mut downsample = None;
        if words.get(i).is_some_and(|w| w == "downsample") {
            let interval: i64 = words
                .get(i + 1)
                .and_then(|n| n.parse().ok())
                .filter(|n| *n > 0)
                .context("downsample needs an interval in milliseconds")?;
            let func_name = words.get(i + 2).context("downsample needs a function")?;
            let function = Aggregator::parse(func_name)
                .map_err(|_| anyhow::anyhow!("No such aggregator: {func_name}"))?;
            if function == Aggregator::None {
                bail!("cannot use the NONE aggregator for downsampling");
            }
            downsample = Some(DownsampleSpec::fixed(interval, function, FillPolicy::None));
            m_param = format!("{m_param}:{interval}ms-{func_name}");
            i += 3;
        }
        let metric = words
            .get(i)
            .context("Not enough arguments, need a metric.")?;
        i += 1;
        let mut tags = Vec::new();
        while let Some(w) = words.get(i).filter(|w| w.contains('=') && !w.contains(' ')) {
            super::parse_tag(w, &mut tags)?;
            i += 1;
        }
        let mut filters = Vec::with_capacity(tags.len());
        let mut tag_text = Vec::with_capacity(tags.len());
        for (k, v) in &tags {
            filters.push(TagFilter::from_legacy(k, v, true)?);
            tag_text.push(format!("{k}={v}"));
        }
        // A word with a space is a per-query plot option in OpenTSDB; there are no plots here.
        while words.get(i).is_some_and(|w| w.contains(' ')) {
            i += 1;
        }
        m_param = format!("{m_param}:{metric}");
        if !tag_text.is_empty() {
            m_param = format!("{m_param}{{{}}}", tag_text.join(","));
        }
        let mut sub = SubQuery::new(aggregator, metric);
        sub.rate = rate;
        sub.rate_options = rate_options;
        sub.downsample = downsample;
        sub.filters = filters;
        out.push(Parsed { sub, m_param });
    }
    if out.is_empty() {
        bail!("Not enough arguments, need at least one query.");
    }
    Ok((start, end, out))
}

/// Java's `String.format("%f", f)` of a finite double: its shortest round-trip digits
/// (those of `Double.toString`) rounded half up to six decimals, so `0.1234565` is
/// `0.123457` (the binary value, 0.12345649999..., would round down).
fn java_fixed6(f: f64) -> String {
    // `{:e}` writes the shortest round-trip digits: `1.234565e-1`, `5e0`.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i64 = exponent.parse().unwrap_or(0);
    let digits: Vec<u8> = mantissa
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect();
    // The value is 0.d1d2d3... x 10^(exponent + 1): `point` digits before the decimal point;
    // `kept` digits (from d1) reach the sixth decimal.
    let point = exponent + 1;
    let kept = point + 6;
    let mut fixed: Vec<u8> = (0..kept.max(0))
        .map(|i| {
            usize::try_from(i)
                .ok()
                .and_then(|i| digits.get(i))
                .copied()
                .unwrap_or(0)
        })
        .collect();
    let next = usize::try_from(kept)
        .ok()
        .and_then(|k| digits.get(k))
        .copied()
        .unwrap_or(0);
    if kept >= 0 && next >= 5 {
        // Round half up, carrying leftwards; a carry out of the first digit adds one.
        let mut i = fixed.len();
        loop {
            if i == 0 {
                fixed.insert(0, 1);
                break;
            }
            i -= 1;
            if fixed[i] == 9 {
                fixed[i] = 0;
            } else {
                fixed[i] += 1;
                break;
            }
        }
    }
    // Six decimals, at least one integer digit.
    while fixed.len() < 7 {
        fixed.insert(0, 0);
    }
    let split = fixed.len() - 6;
    let text = |d: &[u8]| d.iter().map(|d| char::from(b'0' + d)).collect::<String>();
    let sign = if f.is_sign_negative() { "-" } else { "" };
    format!("{sign}{}.{}", text(&fixed[..split]), text(&fixed[split..]))
}

/// `metric timestamp value {k=v, ...}` as OpenTSDB's CLI prints a point.
fn line(metric: &str, t_ms: i64, v: Num, tags: &[(String, String)]) -> String {
    let mut s = format!("{metric} {t_ms} ");
    match v {
        Num::Int(i) => {
            let _ = write!(s, "{i}");
        }
        Num::Float(f) if f.is_nan() => s.push_str("NaN"),
        // Java's `%f` of an infinity.
        Num::Float(f) if f.is_infinite() => {
            s.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" })
        }
        Num::Float(f) => s.push_str(&java_fixed6(f)),
    }
    s.push_str(" {");
    for (i, (k, v)) in tags.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let _ = write!(s, "{k}={v}");
    }
    s.push('}');
    s
}

fn remote(url: &str, start: i64, end: i64, queries: &[Parsed]) -> anyhow::Result<Vec<String>> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = agent
        .get(format!("{}/api/query", url.trim_end_matches('/')))
        .query("start", start.to_string())
        .query("end", end.to_string())
        .query("ms", "true")
        .query("arrays", "true");
    for q in queries {
        request = request.query("m", &q.m_param);
    }
    if let Some(authorization) = crate::remote::authorization()? {
        request = request.header("Authorization", &authorization);
    }
    let mut resp = request
        .call()
        .with_context(|| format!("cannot reach {url}"))?;
    crate::remote::check_status(resp.status().as_u16(), url)?;
    let body: serde_json::Value = resp.body_mut().read_json()?;
    if let Some(msg) = body["error"]["message"].as_str() {
        bail!("{msg}");
    }
    let mut lines = Vec::new();
    for group in body.as_array().into_iter().flatten() {
        let metric = group["metric"].as_str().unwrap_or_default();
        let mut tags: Vec<(String, String)> = group["tags"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        tags.sort();
        for p in group["dps"].as_array().into_iter().flatten() {
            let t = p[0].as_i64().unwrap_or_default();
            let v = match &p[1] {
                serde_json::Value::Number(n) if n.is_i64() => Num::Int(n.as_i64().unwrap_or(0)),
                serde_json::Value::Number(n) => Num::Float(n.as_f64().unwrap_or(f64::NAN)),
                _ => Num::Float(f64::NAN),
            };
            lines.push(line(metric, t, v, &tags));
        }
    }
    Ok(lines)
}

pub(crate) fn run_query(args: &QueryArgs) -> anyhow::Result<ExitCode> {
    // Stored duplicates are answered with the newest value (a TSD asked with --url answers
    // by its own config).
    let mut refused = Vec::new();
    if args.url.is_none() {
        refused.push(crate::open::OTSDB_TIMESTAMP);
    }
    let config = args.store.config_refusing(&refused)?;
    let tz = config.timezone()?;
    if args.graph.is_some() {
        bail!(
            "--graph writes Gnuplot files, which this version of Hourglass does not provide: \
             drop it for one line per point, or draw graphs with the TSD's /q or web UI"
        );
    }
    let now_ms = chrono::Utc::now().timestamp_millis();
    let (start, end, queries) = match parse(&args.query, now_ms, tz) {
        Ok(q) => q,
        Err(e) => {
            eprintln!("{e}\n{}", usage());
            return Ok(ExitCode::from(2));
        }
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if let Some(url) = &args.url {
        for l in remote(url, start, end, &queries)? {
            writeln!(out, "{l}")?;
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let db = args.store.open_tsdb(args.store.settings_from(&config)?)?;
    for q in &queries {
        let outcome = run(&db, start, end, &q.sub, &RunOptions::default())?;
        for g in &outcome.groups {
            let tags: Vec<(String, String)> =
                g.tags.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            for (t, v) in &g.dps {
                writeln!(out, "{}", line(&g.metric, *t, *v, &tags))?;
            }
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn parses_opentsdb_cli_queries() {
        let (start, end, qs) = parse(
            &words("1356998400 1357002000 sum rate counter,1000,5 downsample 60000 avg sys.cpu host=* dc=lga max other"),
            0,
            Tz::UTC,
        )
        .unwrap();
        assert_eq!((start, end), (1356998400000, 1357002000000));
        assert_eq!(qs.len(), 2);
        let q = &qs[0].sub;
        assert!(q.rate && q.rate_options.counter);
        assert_eq!(q.rate_options.counter_max, 1000);
        assert_eq!(q.rate_options.reset_value, 5);
        assert_eq!(q.downsample.unwrap().interval_ms, 60_000, "N is in ms");
        assert_eq!(q.filters.len(), 2);
        assert_eq!(
            qs[0].m_param,
            "sum:rate{counter,1000,5}:60000ms-avg:sys.cpu{host=*,dc=lga}"
        );
        assert_eq!(qs[1].sub.metric, "other");
        assert_eq!(qs[1].m_param, "max:other");
        assert!(parse(&words("1h-ago sum"), 0, Tz::UTC).is_err());
        assert_eq!(
            parse(&words("1h-ago bogus m"), 10_000_000, Tz::UTC)
                .unwrap_err()
                .to_string(),
            "No such aggregator: bogus"
        );
    }

    #[test]
    fn doubles_print_as_javas_percent_f() {
        for (f, java) in [
            (0.0, "0.000000"),
            (-0.0, "-0.000000"),
            (1.0, "1.000000"),
            (42.5, "42.500000"),
            (0.1234565, "0.123457"),
            (0.1234564, "0.123456"),
            (0.0000005, "0.000001"),
            (0.00000049, "0.000000"),
            (1e-10, "0.000000"),
            (9.9999995, "10.000000"),
            (999999.9999995, "1000000.000000"),
            (-2.5e-7, "-0.000000"),
            (-1.0000005, "-1.000001"),
            (1e20, "100000000000000000000.000000"),
            (123456789.123, "123456789.123000"),
            (
                f64::MAX,
                &format!("17976931348623157{}.000000", "0".repeat(292)),
            ),
        ] {
            assert_eq!(java_fixed6(f), java, "{f:e}");
        }
    }

    #[test]
    fn lines_look_like_opentsdb() {
        let tags = vec![
            ("dc".to_string(), "lga".to_string()),
            ("host".to_string(), "a".to_string()),
        ];
        assert_eq!(
            line("m", 1356998400000, Num::Int(42), &tags),
            "m 1356998400000 42 {dc=lga, host=a}"
        );
        assert_eq!(line("m", 1, Num::Float(42.5), &[]), "m 1 42.500000 {}");
        assert_eq!(
            line("m", 1, Num::Float(f64::INFINITY), &[]),
            "m 1 Infinity {}"
        );
        assert_eq!(line("m", 1, Num::Float(0.1234565), &[]), "m 1 0.123457 {}");
        assert_eq!(
            line("m", 1, Num::Float(f64::NEG_INFINITY), &[]),
            "m 1 -Infinity {}"
        );
    }
}
