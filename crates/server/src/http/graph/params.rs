//! `/q`'s parameters as OpenTSDB 2.4.1's graph handler reads them: `popParam` (the last
//! value, trimmed, decoded a second time by Java's `URLDecoder`, back-ticks refused), `wxh`
//! (`setPlotDimensions`) and the plot parameters (`setPlotParams`), each checked with 2.4.1's
//! patterns, read with `Matcher.find` (found anywhere in the value), and its words.

use std::sync::LazyLock;

use plotters::style::RGBColor;
use regex::Regex;

use crate::plot::{AxisRange, KeyPlace};

/// Largest image drawn, in pixels (OpenTSDB left this to gnuplot, up to 32767x32767; 16M
/// pixels is 48 MiB of RGB while drawing).
const MAX_PIXELS: u64 = 1 << 24;

/// The request's parameters, as decoded from the URL.
pub(super) struct GraphParams(pub(super) Vec<(String, String)>);

/// Java's `String.trim`: every character up to U+0020 off both ends.
fn java_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c <= ' ')
}

/// Java's `Integer.parseInt(s, radix)`: an optional sign then digits; the words of its
/// `NumberFormatException` (Java 8) when it fails.
fn java_parse_int(s: &str, radix: u32) -> Result<i32, String> {
    let fail = || format!("For input string: \"{s}\"");
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(fail());
    }
    i32::from_str_radix(s, radix).map_err(|_| fail())
}

/// Java's `URLDecoder.decode`, which OpenTSDB 2.4.1 applies to the plot parameters after the
/// query string's own decoding: `+` is a space, `%XY` a byte (runs of them read as UTF-8), and
/// its errors in its words.
fn java_url_decode(s: &str) -> Result<String, String> {
    const ILLEGAL: &str = "URLDecoder: Illegal hex characters in escape (%) pattern - ";
    let c: Vec<char> = s.chars().collect();
    let n = c.len();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < n {
        match c[i] {
            '+' => {
                out.push(' ');
                i += 1;
            }
            '%' => {
                let mut bytes = Vec::new();
                while i + 2 < n && c[i] == '%' {
                    let hex: String = c[i + 1..i + 3].iter().collect();
                    let v = java_parse_int(&hex, 16).map_err(|m| format!("{ILLEGAL}{m}"))?;
                    let byte = u8::try_from(v).map_err(|_| format!("{ILLEGAL}negative value"))?;
                    bytes.push(byte);
                    i += 3;
                }
                if i < n && c[i] == '%' {
                    return Err("URLDecoder: Incomplete trailing escape (%) pattern".into());
                }
                out.push_str(&String::from_utf8_lossy(&bytes));
            }
            ch => {
                out.push(ch);
                i += 1;
            }
        }
    }
    Ok(out)
}

impl GraphParams {
    pub(super) fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }

    /// The last value of a parameter, as sent (`getQueryStringParam`).
    pub(super) fn last(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A plot parameter as OpenTSDB's `popParam` reads it: the last value, trimmed, decoded
    /// once more, refused when it carries a back-tick (its gnuplot guard, kept so that
    /// requests refused there are refused here too).
    fn pop(&self, key: &str) -> Result<Option<String>, String> {
        let Some(v) = self.last(key) else {
            return Ok(None);
        };
        let given = java_url_decode(java_trim(v))?;
        if given.contains('`') || given.contains("%60") || given.contains("&#96;") {
            return Err(format!(
                "Parameter {key} contained a back-tick. That's a no-no."
            ));
        }
        Ok(Some(given))
    }
}

/// 2.4.1's `RANGE_VALIDATOR`, looked for anywhere in the value (ASCII digits, as Java's `\d`).
static RANGE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r#"\["?-?[0-9]+\.?([0-9]+)?([eE]-?[0-9]+)?"?:"?-?([0-9]+\.?[0-9]+?)?([eE]-?[0-9]+)?"?\]"#,
    )
    .ok()
});

/// `[min:max]` read exactly: either end optional, numbers optionally quoted.
fn exact_range(s: &str) -> Option<AxisRange> {
    let inner = s.strip_prefix('[')?.strip_suffix(']')?;
    let (lo, hi) = inner.split_once(':')?;
    let end = |t: &str| -> Option<Option<f64>> {
        let t = t.strip_prefix('"').unwrap_or(t);
        let t = t.strip_suffix('"').unwrap_or(t);
        if t.is_empty() {
            return Some(None);
        }
        let numeric = t
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'.' | b'e' | b'E'));
        match t.parse::<f64>() {
            Ok(v) if numeric && v.is_finite() => Some(Some(v)),
            _ => None,
        }
    };
    Some(AxisRange {
        min: end(lo)?,
        max: end(hi)?,
    })
}

/// `yrange`, `y2range`: accepted when 2.4.1's pattern is found in the value (the range drawn
/// is the part it found), and also when the whole value is a plain `[min:max]` the pattern
/// misses (`[0:5]`: it wants two digits in a maximum; `[:5]`: a minimum).
fn parse_range(what: &str, s: &str) -> Result<AxisRange, String> {
    if let Some(r) = exact_range(s) {
        return Ok(r);
    }
    RANGE
        .as_ref()
        .and_then(|re| re.find(s))
        .and_then(|m| exact_range(m.as_str()))
        .ok_or_else(|| format!("'{what}' was invalid. Must be in the format [min:max]."))
}

/// `xRRGGBB` found anywhere in the value (2.4.1's `COLOR_VALIDATOR`, read with `find`).
fn parse_color(what: &str, s: &str) -> Result<RGBColor, String> {
    let b = s.as_bytes();
    (0..b.len())
        .find_map(|i| {
            let hex = b.get(i + 1..i + 7)?;
            (matches!(b[i], b'x' | b'X') && hex.iter().all(u8::is_ascii_hexdigit)).then(|| {
                let byte = |j: usize| {
                    let pair = [hex[j], hex[j + 1]];
                    std::str::from_utf8(&pair)
                        .ok()
                        .and_then(|p| u8::from_str_radix(p, 16).ok())
                        .unwrap_or(0)
                };
                RGBColor(byte(0), byte(2), byte(4))
            })
        })
        .ok_or_else(|| format!("'{what}' was invalid. Must be a hex value e.g. 'xFFFFFF'"))
}

/// Java's `Short.parseShort`, in its words.
fn java_parse_short(t: &str) -> Result<i32, String> {
    let v = java_parse_int(t, 10)?;
    if (-32_768..=32_767).contains(&v) {
        Ok(v)
    } else {
        Err(format!("Value out of range. Value:\"{t}\" Radix:10"))
    }
}

/// `wxh`, as 2.4.1 checks it: trimmed and decoded once more, `^\d+x\d+$`, at least 7
/// characters, the `x` looked for from the fourth character on, each side a Java `short` of
/// at least 100. Beyond 2.4.1, at most [`MAX_PIXELS`].
pub(super) fn parse_size(given: &str) -> Result<(u32, u32), String> {
    let wxh = java_url_decode(java_trim(given))?;
    // Java's `$` also matches before a line terminator that ends the text.
    let body = wxh
        .strip_suffix("\r\n")
        .or_else(|| wxh.strip_suffix(['\n', '\r']))
        .unwrap_or(&wxh);
    let well_formed = body.split_once('x').is_some_and(|(w, h)| {
        !w.is_empty()
            && !h.is_empty()
            && w.bytes().all(|b| b.is_ascii_digit())
            && h.bytes().all(|b| b.is_ascii_digit())
    });
    if !well_formed {
        return Err("'wxh' was invalid. Must satisfy the pattern ^\\d+x\\d+$".into());
    }
    if wxh.len() < 7 {
        return Err(format!("Parameter wxh too short: {wxh}"));
    }
    let x = wxh
        .get(3..)
        .and_then(|rest| rest.find('x'))
        .map(|i| i + 3)
        .ok_or_else(|| format!("Invalid wxh parameter: {wxh}"))?;
    let parse = |t: &str| java_parse_short(t).map_err(|m| format!("Can't parse wxh '{wxh}': {m}"));
    let (width, height) = (parse(&wxh[..x])?, parse(&wxh[x + 1..])?);
    let (Ok(width), Ok(height)) = (u32::try_from(width), u32::try_from(height)) else {
        return Err(format!("Invalid wxh parameter: {wxh}"));
    };
    if width < 100 || height < 100 {
        let what = if width < 100 { "width" } else { "height" };
        return Err(format!(
            "Invalid wxh parameter: {wxh}, {what} smaller than 100 in {width}x{height}"
        ));
    }
    if u64::from(width) * u64::from(height) > MAX_PIXELS {
        return Err(format!(
            "Invalid wxh parameter: {wxh}, larger than {MAX_PIXELS} pixels"
        ));
    }
    Ok((width, height))
}

/// 2.4.1's `LABEL_VALIDATOR`, `[a-zA-z0-9 \-_]`, read with `find`: a label needs one such
/// character (`A-z` takes in `[ \ ] ^ _` and the back-tick).
fn parse_label(what: &str, s: &str) -> Result<String, String> {
    if s.chars()
        .any(|c| c.is_ascii_alphanumeric() || " -_[\\]^`".contains(c))
    {
        Ok(s.to_string())
    } else {
        Err(format!(
            "'{what}' was invalid. Must satisfy the pattern [a-zA-z0-9 \\-_]"
        ))
    }
}

/// A gnuplot time or number format (`yformat`, `y2format`, `xformat`): 2.4.1's
/// `FORMAT_VALIDATOR` wants `%` and a letter somewhere. Checked, not applied.
fn check_format(what: &str, s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    if b.windows(2)
        .any(|w| w[0] == b'%' && w[1].is_ascii_alphabetic())
    {
        Ok(())
    } else {
        Err(format!(
            "'{what}' was invalid. Must satisfy the pattern (%[a-zA-Z])+[:\\/]?\\s?"
        ))
    }
}

/// 2.4.1's `SMOOTH_VALIDATOR`: one of gnuplot's smoothing words somewhere in the value.
const SMOOTH: [&str; 13] = [
    "unique",
    "frequency",
    "fnormal",
    "cumulative",
    "cnormal",
    "bins",
    "csplines",
    "acsplines",
    "mcsplines",
    "bezier",
    "sbezier",
    "unwrap",
    "zsort",
];

/// The plot options of a request, in OpenTSDB's order of checks.
#[derive(Debug, Default)]
pub(super) struct PlotOptions {
    pub(super) yrange: AxisRange,
    pub(super) y2range: AxisRange,
    pub(super) ylabel: Option<String>,
    pub(super) y2label: Option<String>,
    pub(super) ylog: bool,
    pub(super) y2log: bool,
    pub(super) key: Option<KeyPlace>,
    pub(super) title: Option<String>,
    pub(super) background: Option<RGBColor>,
    pub(super) foreground: Option<RGBColor>,
    pub(super) points_only: bool,
}

/// 2.4.1's `setPlotParams`: each parameter popped (decoded, back-ticks refused) and checked
/// in its order.
pub(super) fn plot_options(p: &GraphParams) -> Result<PlotOptions, String> {
    let mut o = PlotOptions {
        key: Some(KeyPlace::TopRight),
        ..PlotOptions::default()
    };
    if let Some(v) = p.pop("yrange")? {
        o.yrange = parse_range("yrange", &v)?;
    }
    if let Some(v) = p.pop("y2range")? {
        o.y2range = parse_range("y2range", &v)?;
    }
    if let Some(v) = p.pop("ylabel")? {
        o.ylabel = Some(parse_label("ylabel", &v)?);
    }
    if let Some(v) = p.pop("y2label")? {
        o.y2label = Some(parse_label("y2label", &v)?);
    }
    for what in ["yformat", "y2format", "xformat"] {
        if let Some(v) = p.pop(what)? {
            check_format(what, &v)?;
        }
    }
    o.ylog = p.pop("ylog")?.is_some();
    o.y2log = p.pop("y2log")?.is_some();
    if let Some(v) = p.pop("key")? {
        // 2.4.1's KEY_VALIDATOR, `(out|left|top|center|right|horiz|box|bottom)?\s?`, is all
        // optional and read with find(): every value passes (gnuplot's own words, such as
        // `out right top box`). Placement is read from `left` and `bottom`.
        let left = v.contains("left");
        o.key = Some(match (v.contains("bottom"), left) {
            (true, true) => KeyPlace::BottomLeft,
            (true, false) => KeyPlace::BottomRight,
            (false, true) => KeyPlace::TopLeft,
            (false, false) => KeyPlace::TopRight,
        });
    }
    if let Some(v) = p.pop("title")? {
        o.title = Some(parse_label("title", &v)?);
    }
    if let Some(v) = p.pop("bgcolor")? {
        o.background = Some(parse_color("bgcolor", &v)?);
    }
    if let Some(v) = p.pop("fgcolor")? {
        o.foreground = Some(parse_color("fgcolor", &v)?);
    }
    if let Some(v) = p.pop("smooth")?
        && !SMOOTH.iter().any(|w| v.contains(w))
    {
        return Err(format!(
            "'smooth' was invalid. Must satisfy the pattern {}",
            SMOOTH.join("|")
        ));
    }
    if let Some(v) = p.pop("style")? {
        if !["linespoint", "points", "circles", "dots"]
            .iter()
            .any(|w| v.contains(w))
        {
            return Err(
                "'style' was invalid. Must satisfy the pattern (linespoint|points|circles|dots)"
                    .into(),
            );
        }
        o.points_only = !v.contains("linespoint");
    }
    if p.pop("nokey")?.is_some() {
        o.key = None;
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::request::url_params;

    fn params(q: &str) -> GraphParams {
        GraphParams(url_params(Some(q)))
    }

    #[test]
    fn sizes_are_checked_as_opentsdb_2_4_1_checks_them() {
        assert_eq!(parse_size("640x480"), Ok((640, 480)));
        assert_eq!(parse_size(" 640x480 "), Ok((640, 480)));
        assert_eq!(parse_size("640%78480"), Ok((640, 480)), "decoded once more");
        assert_eq!(
            parse_size("5000x50").unwrap_err(),
            "Invalid wxh parameter: 5000x50, height smaller than 100 in 5000x50"
        );
        // The `x` is looked for from the fourth character on.
        assert_eq!(
            parse_size("50x5000").unwrap_err(),
            "Invalid wxh parameter: 50x5000"
        );
        assert_eq!(
            parse_size("1x1").unwrap_err(),
            "Parameter wxh too short: 1x1"
        );
        assert_eq!(
            parse_size("640by480").unwrap_err(),
            "'wxh' was invalid. Must satisfy the pattern ^\\d+x\\d+$"
        );
        assert_eq!(
            parse_size("40000x100").unwrap_err(),
            "Can't parse wxh '40000x100': Value out of range. Value:\"40000\" Radix:10"
        );
        assert_eq!(
            parse_size("3000000000x100").unwrap_err(),
            "Can't parse wxh '3000000000x100': For input string: \"3000000000\""
        );
        assert_eq!(
            parse_size("640x480%zz").unwrap_err(),
            "URLDecoder: Illegal hex characters in escape (%) pattern - For input string: \"zz\""
        );
        assert!(parse_size("30000x30000").unwrap_err().contains("pixels"));
    }

    #[test]
    fn urls_are_decoded_again_as_javas_url_decoder_does() {
        assert_eq!(java_url_decode("a+b%20c%C3%A9"), Ok("a b cé".to_string()));
        assert_eq!(
            java_url_decode("100%").unwrap_err(),
            "URLDecoder: Incomplete trailing escape (%) pattern"
        );
        assert_eq!(
            java_url_decode("%4").unwrap_err(),
            "URLDecoder: Incomplete trailing escape (%) pattern"
        );
        assert_eq!(
            java_url_decode("%-1").unwrap_err(),
            "URLDecoder: Illegal hex characters in escape (%) pattern - negative value"
        );
        assert_eq!(java_url_decode("%+9"), Ok("\t".to_string()));
    }

    #[test]
    fn plot_parameters_are_validated_with_opentsdb_2_4_1_messages() {
        let err = |q: &str| plot_options(&params(q)).unwrap_err();
        assert_eq!(
            err("yrange=0:10"),
            "'yrange' was invalid. Must be in the format [min:max]."
        );
        assert_eq!(
            err("title=%2560id%2560"),
            "Parameter title contained a back-tick. That's a no-no."
        );
        assert_eq!(
            err("bgcolor=red"),
            "'bgcolor' was invalid. Must be a hex value e.g. 'xFFFFFF'"
        );
        assert_eq!(
            err("style=bars"),
            "'style' was invalid. Must satisfy the pattern (linespoint|points|circles|dots)"
        );
        assert_eq!(
            err("ylabel="),
            "'ylabel' was invalid. Must satisfy the pattern [a-zA-z0-9 \\-_]"
        );
        assert_eq!(
            err("ylabel=%21%21"),
            "'ylabel' was invalid. Must satisfy the pattern [a-zA-z0-9 \\-_]"
        );
        assert_eq!(
            err("ylabel=%25%25"),
            "URLDecoder: Incomplete trailing escape (%) pattern"
        );
        assert_eq!(
            err("yformat=%2525.2f"),
            "'yformat' was invalid. Must satisfy the pattern (%[a-zA-Z])+[:\\/]?\\s?"
        );
        assert!(
            err("smooth=spline")
                .starts_with("'smooth' was invalid. Must satisfy the pattern unique|")
        );
        // What 2.4.1's patterns find anywhere passes.
        let o = plot_options(&params(
            "yrange=[0:100]&y2range=[:5e3]&ylog&title=CPU (%2525)&ylabel=bytes/s&key=left\
             &bgcolor=0x102030&style=points&smooth=xbezier&yformat=%2525.1f%2525%2525 %2525c",
        ))
        .expect("valid");
        assert_eq!(
            o.yrange,
            AxisRange {
                min: Some(0.0),
                max: Some(100.0)
            }
        );
        assert_eq!(
            o.y2range,
            AxisRange {
                min: None,
                max: Some(5000.0)
            }
        );
        assert!(o.ylog && !o.y2log && o.points_only);
        assert_eq!(o.title.as_deref(), Some("CPU (%)"));
        assert_eq!(o.ylabel.as_deref(), Some("bytes/s"));
        assert_eq!(o.key, Some(KeyPlace::TopLeft));
        assert_eq!(o.background, Some(RGBColor(0x10, 0x20, 0x30)));
        assert_eq!(
            plot_options(&params("yrange=x[1:20]y"))
                .expect("found")
                .yrange,
            AxisRange {
                min: Some(1.0),
                max: Some(20.0)
            }
        );
        assert_eq!(
            plot_options(&params("key=out right top box"))
                .expect("valid")
                .key,
            Some(KeyPlace::TopRight)
        );
        assert_eq!(
            plot_options(&params("key=bottom left")).expect("valid").key,
            Some(KeyPlace::BottomLeft)
        );
        assert_eq!(
            plot_options(&params("key=top&nokey")).expect("valid").key,
            None
        );
        assert!(
            !plot_options(&params("style=linespoints"))
                .expect("valid")
                .points_only
        );
    }

    #[test]
    fn the_range_pattern_is_2_4_1s() {
        let re = RANGE.as_ref().expect("the pattern compiles");
        for ok in ["[0:10]", "[-1.5:20e3]", "[\"1\":\"10\"]", "[0:]", "[1e5:]"] {
            assert!(re.is_match(ok), "{ok}");
        }
        for refused in ["[0:5]", "[0:2e3]", "[:5]", "[+1:10]", "[ 0:10]", "[.5:10]"] {
            assert!(!re.is_match(refused), "{refused}");
        }
    }

    proptest::proptest! {
        #[test]
        fn no_parameter_text_panics(v in "\\PC{0,24}", w in "[0-9x%+ a-f\\n-]{0,16}") {
            let _ = java_url_decode(&v);
            let _ = parse_size(&v);
            let _ = parse_size(&w);
            let _ = parse_range("yrange", &v);
            let _ = parse_color("bgcolor", &v);
            for key in ["yrange", "ylabel", "title", "bgcolor", "smooth", "style", "yformat", "key"] {
                let _ = plot_options(&GraphParams(vec![(key.to_string(), v.clone())]));
            }
        }
    }
}
