//! Tag value filters: literal_or, iliteral_or, not_literal_or, not_iliteral_or, wildcard,
//! iwildcard, regexp, not_key, and the legacy `tagk=value` forms (`*`, `a|b`, `web*`).

use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::Mutex;
use regex::{Regex, RegexBuilder};

use crate::{Error, Result};

/// Patterns of `regexp` filters kept compiled, at most this many.
const KEPT_PATTERNS: usize = 64;
/// A kept pattern's compiled size at most (its program and its lazy DFA's cache each; the
/// regex crate's defaults are 10 MiB and 2 MiB): the kept ones take at most some 64 MiB.
const KEPT_PATTERN_BYTES: usize = 512 * 1024;

/// `regexp` filters' patterns kept compiled between queries: building one took as long as
/// checking a thousand names against it (a query selecting 10 of 100,000 series through the
/// tag index spent a seventh of its instructions compiling `00001[0-9]`).
#[derive(Default)]
struct KeptPatterns(Mutex<HashMap<String, Regex>>);

impl KeptPatterns {
    /// The pattern compiled, or kept from before. One too large to keep within
    /// [`KEPT_PATTERN_BYTES`] is compiled each time with the crate's own limits.
    fn compile(&self, expression: &str) -> Result<Regex> {
        if let Some(re) = self.0.lock().get(expression) {
            return Ok(re.clone());
        }
        let small = RegexBuilder::new(expression)
            .size_limit(KEPT_PATTERN_BYTES)
            .dfa_size_limit(KEPT_PATTERN_BYTES)
            .build();
        let Ok(re) = small else {
            return Regex::new(expression).map_err(|e| Error::invalid(e.to_string()));
        };
        let mut kept = self.0.lock();
        if kept.len() >= KEPT_PATTERNS {
            kept.clear();
        }
        kept.insert(expression.to_string(), re.clone());
        Ok(re)
    }

    #[cfg(test)]
    fn holds(&self, expression: &str) -> bool {
        self.0.lock().contains_key(expression)
    }
}

/// [`KeptPatterns::compile`] with the process's patterns.
fn compiled(expression: &str) -> Result<Regex> {
    static KEPT: OnceLock<KeptPatterns> = OnceLock::new();
    KEPT.get_or_init(KeptPatterns::default).compile(expression)
}

#[derive(Debug, Clone)]
pub enum FilterKind {
    /// Any of the literals (lower-cased when case-insensitive); `negate` for the not_* types.
    Literals {
        values: Vec<String>,
        case_insensitive: bool,
        negate: bool,
    },
    /// A glob with `*`.
    Wildcard {
        pattern: String,
        case_insensitive: bool,
    },
    /// An unanchored regular expression.
    Regexp(Regex),
    /// The series has no such tag key at all (`not_key`, whose expression is empty).
    NotKey,
}

#[derive(Debug, Clone)]
pub struct TagFilter {
    pub tagk: String,
    pub kind: FilterKind,
    pub group_by: bool,
    /// The filter's type name and expression, as clients see them.
    pub type_name: String,
    pub expression: String,
}

/// The filter type names, as `/api/config/filters` lists them.
pub const TYPES: &[&str] = &[
    "regexp",
    "iwildcard",
    "not_key",
    "iliteral_or",
    "not_iliteral_or",
    "not_literal_or",
    "literal_or",
    "wildcard",
];

/// What `/api/config/filters` says of a filter type: (description, examples), OpenTSDB's
/// texts.
pub fn describe(type_name: &str) -> Option<(&'static str, String)> {
    const LITERAL: &str = "Accepts one or more exact values and matches if the series contains any of them. Multiple values can be included and must be separated by the | (pipe) character. The filter is case sensitive and will not allow characters that TSDB does not allow at write time.";
    const ILITERAL: &str = "Accepts one or more exact values and matches if the series contains any of them. Multiple values can be included and must be separated by the | (pipe) character. The filter is case insensitive and will not allow characters that TSDB does not allow at write time.";
    const NOT_LITERAL: &str = "Accepts one or more exact values and matches if the series does NOT contain any of them. Multiple values can be included and must be separated by the | (pipe) character. The filter is case sensitive and will not allow characters that TSDB does not allow at write time.";
    const NOT_ILITERAL: &str = "Accepts one or more exact values and matches if the series does NOT contain any of them. Multiple values can be included and must be separated by the | (pipe) character. The filter is case insensitive and will not allow characters that TSDB does not allow at write time.";
    const REGEXP: &str = "Provides full, POSIX compliant regular expression using the built in Java Pattern class. Note that an expression containing curly braces {} will not parse properly in URLs. If the pattern is not a valid regular expression then an exception will be raised.";
    const WILDCARD: &str = "Performs pre, post and in-fix glob matching of values. The globs are case sensitive and multiple wildcards can be used. The wildcard character is the * (asterisk). At least one wildcard must be present in the filter value. A wildcard by itself can be used as well to match on any value for the tag key.";
    const IWILDCARD: &str = "Performs pre, post and in-fix glob matching of values. The globs are case insensitive and multiple wildcards can be used. The wildcard character is the * (asterisk). Case insensitivity is achieved by dropping all values to lower case. At least one wildcard must be present in the filter value. A wildcard by itself can be used as well to match on any value for the tag key.";
    let literal_examples = |t: &str| {
        format!(
            "host={t}(web01),  host={t}(web01|web02|web03)  {{\"type\":\"{t}\",\"tagk\":\"host\",\"filter\":\"web01|web02|web03\",\"groupBy\":false}}"
        )
    };
    let wildcard_examples = |t: &str| {
        format!(
            "host={t}(web*),  host={t}(web*.tsdb.net)  {{\"type\":\"{t}\",\"tagk\":\"host\",\"filter\":\"web*.tsdb.net\",\"groupBy\":false}}"
        )
    };
    Some(match type_name {
        "not_key" => (
            "Skips any time series with the given tag key, regardless of the value. This can be useful for situations where a metric has inconsistent tag sets. NOTE: The filter value must be null or an empty string.",
            "host=not_key()  {\"type\":\"not_key\",\"tagk\":\"host\",\"filter\":\"\",\"groupBy\":false}".to_string(),
        ),
        "literal_or" => (LITERAL, literal_examples(type_name)),
        "iliteral_or" => (ILITERAL, literal_examples(type_name)),
        "not_literal_or" => (NOT_LITERAL, literal_examples(type_name)),
        "not_iliteral_or" => (NOT_ILITERAL, literal_examples(type_name)),
        "wildcard" => (WILDCARD, wildcard_examples(type_name)),
        "iwildcard" => (IWILDCARD, wildcard_examples(type_name)),
        "regexp" => (
            REGEXP,
            "host=regexp(.*)  {\"type\":\"regexp\",\"tagk\":\"host\",\"filter\":\".*\",\"groupBy\":false}".to_string(),
        ),
        _ => return None,
    })
}

impl TagFilter {
    /// A filter from its type name and expression.
    pub fn new(type_name: &str, tagk: &str, expression: &str, group_by: bool) -> Result<TagFilter> {
        if tagk.is_empty() {
            return Err(Error::invalid("Filter must have a tagk"));
        }
        if type_name.eq_ignore_ascii_case("not_key") {
            if !expression.is_empty() {
                return Err(Error::invalid(
                    "The filter must be empty for the not_key filter",
                ));
            }
            return Ok(TagFilter {
                tagk: tagk.to_string(),
                kind: FilterKind::NotKey,
                group_by,
                type_name: "not_key".to_string(),
                expression: String::new(),
            });
        }
        if expression.is_empty() {
            return Err(Error::invalid("Filter cannot be null or empty"));
        }
        let literals = |ci: bool| -> Result<Vec<String>> {
            if expression == "|" {
                return Err(Error::invalid("Filter must contain more than just a pipe"));
            }
            Ok(expression
                .split('|')
                .map(|v| if ci { v.to_lowercase() } else { v.to_string() })
                .collect())
        };
        let kind = match type_name.to_ascii_lowercase().as_str() {
            "literal_or" => FilterKind::Literals {
                values: literals(false)?,
                case_insensitive: false,
                negate: false,
            },
            "iliteral_or" => FilterKind::Literals {
                values: literals(true)?,
                case_insensitive: true,
                negate: false,
            },
            "not_literal_or" => FilterKind::Literals {
                values: literals(false)?,
                case_insensitive: false,
                negate: true,
            },
            "not_iliteral_or" => FilterKind::Literals {
                values: literals(true)?,
                case_insensitive: true,
                negate: true,
            },
            t @ ("wildcard" | "iwildcard") => {
                if !expression.contains('*') {
                    return Err(Error::invalid("Filter must contain an asterisk"));
                }
                let ci = t == "iwildcard";
                FilterKind::Wildcard {
                    pattern: if ci {
                        expression.to_lowercase()
                    } else {
                        expression.to_string()
                    },
                    case_insensitive: ci,
                }
            }
            "regexp" => FilterKind::Regexp(compiled(expression)?),
            "" => return Err(Error::invalid("The filter type cannot be null or empty")),
            other => {
                return Err(Error::invalid(format!(
                    "Could not find a tag value filter of the type: {other}"
                )));
            }
        };
        Ok(TagFilter {
            tagk: tagk.to_string(),
            kind,
            group_by,
            type_name: type_name.to_ascii_lowercase(),
            expression: expression.to_string(),
        })
    }

    /// The legacy `tagk=value` form: `type(expr)`, `*` and other globs (case-insensitive),
    /// else literals (`a|b`).
    pub fn from_legacy(tagk: &str, value: &str, group_by: bool) -> Result<TagFilter> {
        if let Some(open) = value.find('(') {
            let Some(expr) = value[open + 1..].strip_suffix(')') else {
                return Err(Error::invalid(format!(
                    "Filter must end with a ')': {value}"
                )));
            };
            return TagFilter::new(&value[..open], tagk, expr, group_by);
        }
        if value.contains('*') {
            let mut f = TagFilter::new("wildcard", tagk, value, group_by)?;
            f.kind = FilterKind::Wildcard {
                pattern: value.to_lowercase(),
                case_insensitive: true,
            };
            return Ok(f);
        }
        TagFilter::new("literal_or", tagk, value, group_by)
    }

    /// Whether a series whose value for `tagk` is `value` (`None`: no such tag) passes.
    pub fn matches(&self, value: Option<&str>) -> bool {
        let Some(v) = value else {
            return matches!(
                self.kind,
                FilterKind::Literals { negate: true, .. } | FilterKind::NotKey
            );
        };
        match &self.kind {
            FilterKind::Literals {
                values,
                case_insensitive,
                negate,
            } => {
                let hit = if *case_insensitive {
                    let lv = v.to_lowercase();
                    values.contains(&lv)
                } else {
                    values.iter().any(|x| x == v)
                };
                hit != *negate
            }
            FilterKind::Wildcard {
                pattern,
                case_insensitive,
            } => {
                if *case_insensitive {
                    glob(pattern, &v.to_lowercase())
                } else {
                    glob(pattern, v)
                }
            }
            FilterKind::Regexp(re) => re.is_match(v),
            FilterKind::NotKey => false,
        }
    }

    /// Bytes naming what this filter passes (its kind, case and negation, and its values,
    /// pattern or expression), for keeping what a set of filters found between queries.
    pub(crate) fn identity(&self, out: &mut Vec<u8>) {
        match &self.kind {
            FilterKind::Literals {
                values,
                case_insensitive,
                negate,
            } => {
                out.extend([b'L', u8::from(*case_insensitive), u8::from(*negate)]);
                for v in values {
                    out.extend_from_slice(v.as_bytes());
                    out.push(0);
                }
            }
            FilterKind::Wildcard {
                pattern,
                case_insensitive,
            } => {
                out.extend([b'W', u8::from(*case_insensitive)]);
                out.extend_from_slice(pattern.as_bytes());
            }
            FilterKind::Regexp(re) => {
                out.push(b'R');
                out.extend_from_slice(re.as_str().as_bytes());
            }
            FilterKind::NotKey => out.push(b'N'),
        }
        // Ends the filter (a value or pattern holds no 0xFF byte: they are UTF-8).
        out.push(0xFF);
    }

    /// Whether this is a `not_key` filter: passed only by series without the tag key.
    pub fn is_not_key(&self) -> bool {
        matches!(self.kind, FilterKind::NotKey)
    }

    /// The single exact literal of a case-sensitive literal_or (pushable into the row scan).
    pub fn exact_literals(&self) -> Option<&[String]> {
        match &self.kind {
            FilterKind::Literals {
                values,
                case_insensitive: false,
                negate: false,
            } => Some(values),
            _ => None,
        }
    }
}

/// Whether a series whose value for one tag key is `value` passes that key's filters:
/// case-sensitive literal_or filters ORed together, every other filter ANDed (as the query
/// scan groups them).
pub fn key_passes(filters: &[&TagFilter], value: &str) -> bool {
    let mut any_literal = false;
    let mut literal_hit = false;
    for f in filters {
        if f.exact_literals().is_some() {
            any_literal = true;
            literal_hit |= f.matches(Some(value));
        } else if !f.matches(Some(value)) {
            return false;
        }
    }
    !any_literal || literal_hit
}

/// ASCII characters that some other character lower-cases to (or to a string starting
/// with them): the Kelvin sign to `k`, `İ` to `i` and a combining dot. A case-insensitive
/// prefix holding one cannot be turned into a set of byte prefixes.
fn has_foreign_case_forms(c: char) -> bool {
    static FOREIGN: std::sync::OnceLock<[bool; 128]> = std::sync::OnceLock::new();
    let table = FOREIGN.get_or_init(|| {
        let mut t = [false; 128];
        for other in (0x80u32..=0x10FFFF).filter_map(char::from_u32) {
            if let Some(first) = other.to_lowercase().next()
                && first.is_ascii()
            {
                t[first as usize] = true;
            }
        }
        t
    });
    !c.is_ascii() || table[c as usize]
}

/// Most byte prefixes a case-insensitive prefix expands to.
const MAX_CASE_PREFIXES: usize = 16;

/// The ASCII prefixes whose lower-cased form is (a prefix of) `lower`'s leading characters,
/// cut where the expansion would pass [`MAX_CASE_PREFIXES`] or meets a character other
/// characters case-fold to. Empty: no usable prefix.
fn case_prefixes(lower: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    for c in lower.chars() {
        if has_foreign_case_forms(c) {
            break;
        }
        let upper = c.to_ascii_uppercase();
        let forms: &[char] = if upper != c { &[c, upper] } else { &[c] };
        if out.len() * forms.len() > MAX_CASE_PREFIXES {
            break;
        }
        out = out
            .iter()
            .flat_map(|p| {
                forms.iter().map(move |f| {
                    let mut p = p.clone();
                    p.push(*f);
                    p
                })
            })
            .collect();
    }
    if out.iter().all(String::is_empty) {
        return Vec::new();
    }
    out
}

/// The leading ASCII characters of `s`.
fn ascii_head(s: &str) -> &str {
    let end = s.find(|c: char| !c.is_ascii()).unwrap_or(s.len());
    &s[..end]
}

/// The literal an unanchored regular expression's matches all start with, when it opens
/// with `^` followed by plain ASCII characters (no alternation anywhere); `None` otherwise.
fn regex_prefix(expression: &str) -> Option<String> {
    if expression.contains('|') {
        return None;
    }
    let rest = expression.strip_prefix('^')?;
    let mut out = String::new();
    for c in rest.chars() {
        if matches!(
            c,
            '\\' | '.' | '+' | '*' | '?' | '(' | ')' | '[' | ']' | '{' | '}' | '^' | '$' | '#'
        ) || !c.is_ascii()
            || c.is_ascii_whitespace()
        {
            if matches!(c, '*' | '?' | '{') {
                out.pop(); // the character before may be absent
            }
            break;
        }
        out.push(c);
    }
    (!out.is_empty()).then_some(out)
}

/// ASCII literals every match of a regular expression contains: the runs of plain
/// characters outside groups and classes (a character made optional by `*`, `?` or `{` left
/// out). `None` for expressions this cannot read safely: alternation, flags (`(?`, which may
/// fold case beyond ASCII), nested classes; reading stops at an escape.
fn regex_literals(expression: &str) -> Option<Vec<String>> {
    if expression.contains('|') || expression.contains("(?") {
        return None;
    }
    let mut runs = Vec::new();
    let mut run = String::new();
    let mut depth = 0usize;
    let mut chars = expression.chars().peekable();
    let end_run = |run: &mut String, runs: &mut Vec<String>| {
        if !run.is_empty() {
            runs.push(std::mem::take(run));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => break,
            '(' => {
                end_run(&mut run, &mut runs);
                depth += 1;
            }
            ')' => {
                end_run(&mut run, &mut runs);
                depth = depth.checked_sub(1)?;
            }
            '[' => {
                end_run(&mut run, &mut runs);
                // A class: skip it (its first `]`, after an optional `^`, is a member).
                if chars.peek() == Some(&'^') {
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    chars.next();
                }
                loop {
                    match chars.next()? {
                        ']' => break,
                        '[' | '\\' => return Some(runs),
                        _ => {}
                    }
                }
            }
            '*' | '?' | '{' => {
                run.pop(); // the character before may be absent
                end_run(&mut run, &mut runs);
                if c == '{' {
                    for d in chars.by_ref() {
                        if d == '}' {
                            break;
                        }
                    }
                }
            }
            '+' | '.' | '^' | '$' => end_run(&mut run, &mut runs),
            c if depth == 0 && c.is_ascii() => run.push(c),
            _ => end_run(&mut run, &mut runs),
        }
    }
    end_run(&mut run, &mut runs);
    Some(runs)
}

impl TagFilter {
    /// Name prefixes every value passing this filter starts with (one of them), as plain
    /// ASCII text (so the same bytes whichever encoding the name is stored in); `None` when
    /// the filter bounds no prefix. Case-sensitive literals are left to their UIDs.
    pub fn value_prefixes(&self) -> Option<Vec<String>> {
        let found = match &self.kind {
            FilterKind::Literals {
                values,
                case_insensitive: true,
                negate: false,
            } => {
                let mut all = Vec::new();
                for v in values {
                    let p = case_prefixes(v);
                    if p.is_empty() {
                        return None;
                    }
                    all.extend(p);
                }
                all
            }
            FilterKind::Literals { .. } | FilterKind::NotKey => return None,
            FilterKind::Wildcard {
                pattern,
                case_insensitive,
            } => {
                // Only a glob ending in `*` and not starting with one requires its head.
                if pattern.starts_with('*') || !pattern.ends_with('*') {
                    return None;
                }
                let head = ascii_head(pattern.split('*').next().unwrap_or_default());
                if *case_insensitive {
                    case_prefixes(head)
                } else {
                    vec![head.to_string()]
                }
            }
            FilterKind::Regexp(_) => vec![regex_prefix(&self.expression)?],
        };
        let mut found: Vec<String> = found.into_iter().filter(|p| !p.is_empty()).collect();
        found.sort();
        found.dedup();
        (!found.is_empty()).then_some(found)
    }

    /// Trigrams (of lower-cased names, as the index keeps them) every value passing this
    /// filter has: those of the ASCII literals a regular expression requires, and those of
    /// the ASCII parts of a glob (OpenTSDB's glob finds every part in the value, the
    /// lower-cased value for `iwildcard`; an ASCII part's lower-cased bytes are then in the
    /// lower-cased name). `None` when it requires none of 3 bytes or more.
    pub fn value_trigrams(&self) -> Option<Vec<[u8; 3]>> {
        let literals: Vec<String> = match &self.kind {
            FilterKind::Regexp(_) => regex_literals(&self.expression)?,
            FilterKind::Wildcard { pattern, .. } => pattern
                .split('*')
                .filter(|part| part.is_ascii())
                .map(str::to_string)
                .collect(),
            FilterKind::Literals { .. } | FilterKind::NotKey => return None,
        };
        let mut out: Vec<[u8; 3]> = literals
            .iter()
            .flat_map(|lit| crate::index::trigrams(lit))
            .collect();
        out.sort_unstable();
        out.dedup();
        (!out.is_empty()).then_some(out)
    }
}

/// OpenTSDB's glob: a leading `*` means "ends with the last part", a trailing one "starts with
/// the first part"; every part must be found searching from the summed lengths of the parts
/// before it (so infix-only globs are loose, as in OpenTSDB).
fn glob(pattern: &str, value: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return true; // `*` alone
    }
    let has_postfix = pattern.starts_with('*');
    let has_prefix = pattern.ends_with('*');
    if has_prefix && !has_postfix && !value.starts_with(parts[0]) {
        return false;
    }
    if has_postfix && !has_prefix && !value.ends_with(parts[parts.len() - 1]) {
        return false;
    }
    let mut idx = 0usize;
    for part in &parts {
        let from = idx.min(value.len());
        if !value.is_char_boundary(from) || !value[from..].contains(part) {
            return false;
        }
        idx += part.len();
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Patterns are kept compiled between filters, at most [`KEPT_PATTERNS`], except those
    /// too large to keep; a bad one fails in the crate's words.
    #[test]
    fn regexp_patterns_are_kept_compiled_within_bounds() {
        let kept = KeptPatterns::default();
        let re = kept.compile("^web0[1-3]$").unwrap();
        assert!(kept.holds("^web0[1-3]$"));
        assert!(re.is_match("web02") && !re.is_match("web04"));
        // Hundreds of thousands of states: compiled with the crate's limits, not kept.
        let large = r"\w{50}\d{50}[a-z]{50}";
        let re = kept.compile(large).unwrap();
        assert!(!kept.holds(large) && !re.is_match("web"));
        let unclosed = String::from("web(");
        let bad = kept.compile(&unclosed).unwrap_err();
        assert_eq!(
            bad.to_string(),
            Regex::new(&unclosed).unwrap_err().to_string()
        );
        for i in 0..KEPT_PATTERNS {
            kept.compile(&format!("^w{i}$")).unwrap();
        }
        assert!(kept.0.lock().len() <= KEPT_PATTERNS);
        // Through a filter.
        let f = TagFilter::new("regexp", "host", "^web0[1-3]$", false).unwrap();
        assert!(f.matches(Some("web02")) && !f.matches(Some("web04")));
    }

    #[test]
    fn every_type_matches_as_opentsdb() {
        let f = |t: &str, e: &str| TagFilter::new(t, "host", e, false).unwrap();
        assert!(f("literal_or", "web01|web02").matches(Some("web02")));
        assert!(!f("literal_or", "web01").matches(Some("WEB01")));
        assert!(f("iliteral_or", "WEB01").matches(Some("web01")));
        assert!(f("not_literal_or", "web01").matches(Some("web02")));
        assert!(
            f("not_literal_or", "web01").matches(None),
            "missing tag passes not_* here; the scan requires the tag"
        );
        assert!(!f("not_iliteral_or", "web01").matches(Some("WEB01")));
        assert!(f("wildcard", "web*").matches(Some("web01")));
        assert!(!f("wildcard", "web*").matches(Some("WEB01")));
        assert!(f("iwildcard", "WEB*").matches(Some("web01")));
        assert!(f("wildcard", "*01").matches(Some("web01")));
        assert!(
            f("wildcard", "a*b").matches(Some("xxbxxa")),
            "infix globs are loose, as in OpenTSDB"
        );
        assert!(f("wildcard", "*").matches(Some("anything")));
        assert!(f("regexp", "eb.1").matches(Some("web01")), "unanchored");
        assert!(!f("literal_or", "a").matches(None));
        let not_key = TagFilter::new("not_key", "host", "", false).unwrap();
        assert!(not_key.matches(None));
        assert!(!not_key.matches(Some("web01")));
        assert!(!key_passes(&[&not_key], "web01"));
        assert_eq!(
            TagFilter::from_legacy("host", "not_key()", false)
                .unwrap()
                .type_name,
            "not_key"
        );
        assert_eq!(
            TagFilter::new("not_key", "host", "x", false)
                .unwrap_err()
                .to_string(),
            "The filter must be empty for the not_key filter"
        );
    }

    #[test]
    fn index_prefixes_and_trigrams_are_required_by_the_filter() {
        let f = |t: &str, e: &str| TagFilter::new(t, "host", e, false).unwrap();
        let p = |t: &str, e: &str| f(t, e).value_prefixes();
        assert_eq!(p("wildcard", "web*"), Some(vec!["web".to_string()]));
        assert_eq!(
            p("wildcard", "web*01"),
            None,
            "OpenTSDB checks no head then"
        );
        assert_eq!(p("wildcard", "*01*"), None);
        assert_eq!(
            p("iwildcard", "WE*"),
            Some(vec!["WE".into(), "We".into(), "wE".into(), "we".into()])
        );
        assert_eq!(
            p("iwildcard", "k*"),
            None,
            "the Kelvin sign lower-cases to k"
        );
        assert_eq!(p("iliteral_or", "ix"), None, "İ lower-cases to i and a dot");
        assert_eq!(p("regexp", "^web0?1"), Some(vec!["web".to_string()]));
        assert_eq!(p("regexp", "^web|^x"), None);
        assert_eq!(p("regexp", "web"), None, "unanchored");
        assert_eq!(p("not_literal_or", "web"), None);
        let t = |e: &str| f("regexp", e).value_trigrams();
        assert_eq!(t("00001[0-9]"), Some(vec![*b"000", *b"001"]));
        assert_eq!(t("ab(cde)?f"), None, "no required run of 3");
        assert_eq!(
            t("xWEb*"),
            Some(vec![*b"xwe"]),
            "the optional b is left out"
        );
        assert_eq!(
            t("abc\\d+xyz"),
            Some(vec![*b"abc"]),
            "reading stops at an escape"
        );
        assert_eq!(t("(?i)abc"), None);
        assert_eq!(t("abc|xyz"), None);
        let g = |ty: &str, e: &str| f(ty, e).value_trigrams();
        assert_eq!(g("wildcard", "*0001*"), Some(vec![*b"000", *b"001"]));
        assert_eq!(g("wildcard", "*Web*x1Y"), Some(vec![*b"web", *b"x1y"]));
        assert_eq!(g("iwildcard", "*WEB"), Some(vec![*b"web"]));
        assert_eq!(g("wildcard", "*ab*cd*"), None, "no part of 3 bytes");
        assert_eq!(g("wildcard", "*é01*"), None, "non-ASCII parts left out");
        for (ty, e) in [("wildcard", "*0001*"), ("iwildcard", "*WEB*1")] {
            let want = g(ty, e).unwrap();
            for name in ["h00012", "x0001", "web01", "WEB1", "aWeBb1", "w0001eb"] {
                let have = crate::index::trigrams(name);
                assert!(
                    !f(ty, e).matches(Some(name)) || want.iter().all(|w| have.contains(w)),
                    "{ty} {e} {name}"
                );
            }
        }
        for name in ["x00001y", "000019", "h00001[0-9]"] {
            let want = t("00001[0-9]").unwrap();
            let have = crate::index::trigrams(name);
            assert!(
                !f("regexp", "00001[0-9]").matches(Some(name))
                    || want.iter().all(|w| have.contains(w)),
                "{name}"
            );
        }
    }

    #[test]
    fn legacy_forms_and_errors() {
        let l = |v: &str| TagFilter::from_legacy("host", v, true).unwrap();
        assert_eq!(l("*").type_name, "wildcard");
        assert!(
            l("Web*").matches(Some("web01")),
            "legacy globs are case-insensitive"
        );
        assert_eq!(l("a|b").type_name, "literal_or");
        assert_eq!(l("regexp(web.*)").type_name, "regexp");
        assert_eq!(l("a|b").exact_literals().map(<[String]>::len), Some(2));
        let err = |t: &str, e: &str| TagFilter::new(t, "host", e, false).unwrap_err().to_string();
        assert_eq!(
            err("literal_or", "|"),
            "Filter must contain more than just a pipe"
        );
        assert_eq!(err("wildcard", "web"), "Filter must contain an asterisk");
        assert_eq!(
            err("bogus", "x"),
            "Could not find a tag value filter of the type: bogus"
        );
        assert_eq!(err("literal_or", ""), "Filter cannot be null or empty");
        assert!(TagFilter::new("regexp", "host", "(", false).is_err());
    }
}
