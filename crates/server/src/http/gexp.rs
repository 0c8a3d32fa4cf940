//! `/api/query/gexp`: OpenTSDB's Graphite-style functions over `m`-style sub-queries
//! (`exp=scale(sum:sys.cpu.user{host=*},2)`, several `exp=` allowed, functions nestable),
//! answered in `/api/query`'s shape: one object per output series, in `exp=` order.
//!
//! The grammar is OpenTSDB 2.4's (`src/parser.jj`):
//!
//! ```text
//! EXPRESSION := NAME "(" PARAMETER ( "," PARAMETER )* ")"
//! PARAMETER  := EXPRESSION | METRIC | NAME
//! METRIC     := NAME ":" [NAME ":"] [NAME ":"] NAME [ "{" NAME "=" NAME ( "," NAME "=" NAME )* "}" ]
//! NAME       := ( letters | digits | * - _ # / $ @ | . ' ] [ )+      whitespace between tokens
//! ```
//!
//! A function's series parameters (sub-queries and functions) come first, its other
//! parameters after them. Where OpenTSDB 2.4.1 has bugs (timeShift unusable, `*Series`
//! pairing points by position, alias taking absolute values, `m=` parameters shifting the
//! results expressions read), this endpoint does what the functions are documented to do;
//! the README lists each difference.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::{RawQuery, State as Extract};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use hourglass_core::time::{Tz, parse_time_in, parse_timezone};
use hourglass_core::uid::{Uid, UidKind};
use hourglass_engine::Tsdb;
use hourglass_engine::num::Num;
use hourglass_engine::query::plan::{
    GroupResult, Outcome, StoredAnnotation, SubQuery, global_annotations, run,
};

use super::ApiError;
use super::error::{CountedText, json_text_response};
use super::query::{
    Echo, Flags, Serialized, Summary, annotations_json, parse_m, parse_tsuid_param, run_options,
    same_query,
};
use super::request::{blocking, url_params};
use crate::State;

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(msg)
}

/// An error found while applying a function: OpenTSDB answers these with the message as
/// both message and details.
fn refused(msg: impl Into<String>) -> ApiError {
    let msg = msg.into();
    bad(msg.clone()).with_details(msg)
}

// ---------------------------------------------------------------------------------------
// Functions

/// A function of the language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Func {
    Absolute,
    Alias,
    Scale,
    MovingAverage,
    HighestCurrent,
    HighestMax,
    TimeShift,
    Sum,
    Diff,
    Multiply,
    Divide,
}

impl Func {
    /// The function a name calls (case-sensitive, OpenTSDB's names and aliases).
    fn by_name(name: &str) -> Option<Func> {
        Some(match name {
            "absolute" => Func::Absolute,
            "alias" => Func::Alias,
            "scale" => Func::Scale,
            "movingAverage" => Func::MovingAverage,
            "highestCurrent" => Func::HighestCurrent,
            "highestMax" => Func::HighestMax,
            "timeShift" | "shift" => Func::TimeShift,
            "sumSeries" | "sum" => Func::Sum,
            "diffSeries" | "difference" => Func::Diff,
            "multiplySeries" | "multiply" => Func::Multiply,
            "divideSeries" | "divide" => Func::Divide,
            _ => return None,
        })
    }

    /// The name OpenTSDB writes for the function when it describes a tree.
    fn written(self) -> &'static str {
        match self {
            Func::Absolute => "absolute",
            Func::Alias => "alias",
            Func::Scale => "scale",
            Func::MovingAverage => "movingAverage",
            Func::HighestCurrent => "highestCurrent",
            Func::HighestMax => "highestMax",
            Func::TimeShift => "timeshift",
            Func::Sum => "sumSeries",
            Func::Diff => "diffSeries",
            Func::Multiply => "multiplySeries",
            Func::Divide => "divideSeries",
        }
    }
}

// ---------------------------------------------------------------------------------------
// Parsing

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Open,
    Close,
    Comma,
    Colon,
    LBrace,
    RBrace,
    Equals,
    /// `&&`: a token of OpenTSDB's grammar that no rule takes.
    AndAnd,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Name(n) => format!("'{n}'"),
            Tok::Open => "'('".into(),
            Tok::Close => "')'".into(),
            Tok::Comma => "','".into(),
            Tok::Colon => "':'".into(),
            Tok::LBrace => "'{'".into(),
            Tok::RBrace => "'}'".into(),
            Tok::Equals => "'='".into(),
            Tok::AndAnd => "'&&'".into(),
        }
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "*-_#/$@|.'][".contains(c)
}

/// A parameter of a function as written.
#[derive(Debug)]
enum Param {
    Call(Call),
    /// A sub-query: its index among the request's metric parameters.
    Metric(usize),
    Name(String),
}

/// A function call as written.
#[derive(Debug)]
struct Call {
    func: Func,
    params: Vec<Param>,
}

/// Why an expression could not be read.
#[derive(Debug)]
enum ParseFail {
    Syntax(String),
    UnknownFunction(String),
}

/// Reads one expression; tokens are read as the parser asks for them, so an unknown
/// function is reported before a bad character after it, as OpenTSDB reports it.
struct Parser<'a> {
    chars: Vec<char>,
    pos: usize,
    ahead: Vec<(Tok, usize)>,
    /// Every sub-query of the request so far, as `agg:[x:][y:]metric{k=v,...}`.
    metrics: &'a mut Vec<String>,
}

impl Parser<'_> {
    fn lex(&mut self) -> Result<Option<(Tok, usize)>, ParseFail> {
        while self.pos < self.chars.len()
            && matches!(self.chars[self.pos], ' ' | '\t' | '\n' | '\r')
        {
            self.pos += 1;
        }
        let Some(&c) = self.chars.get(self.pos) else {
            return Ok(None);
        };
        let at = self.pos;
        self.pos += 1;
        let tok = match c {
            '(' => Tok::Open,
            ')' => Tok::Close,
            ',' => Tok::Comma,
            ':' => Tok::Colon,
            '{' => Tok::LBrace,
            '}' => Tok::RBrace,
            '=' => Tok::Equals,
            '&' if self.chars.get(self.pos) == Some(&'&') => {
                self.pos += 1;
                Tok::AndAnd
            }
            c if is_name_char(c) => {
                while self.chars.get(self.pos).is_some_and(|&c| is_name_char(c)) {
                    self.pos += 1;
                }
                Tok::Name(self.chars[at..self.pos].iter().collect())
            }
            other => {
                return Err(ParseFail::Syntax(format!(
                    "unexpected character '{other}' at position {}",
                    at + 1
                )));
            }
        };
        Ok(Some((tok, at)))
    }

    /// The token `n` places ahead (0: the next one), if any.
    fn peek(&mut self, n: usize) -> Result<Option<&Tok>, ParseFail> {
        while self.ahead.len() <= n {
            match self.lex()? {
                Some(t) => self.ahead.push(t),
                None => return Ok(None),
            }
        }
        Ok(self.ahead.get(n).map(|(t, _)| t))
    }

    fn next(&mut self) -> Result<Option<(Tok, usize)>, ParseFail> {
        self.peek(0)?;
        Ok((!self.ahead.is_empty()).then(|| self.ahead.remove(0)))
    }

    fn unexpected(found: Option<(Tok, usize)>, wanted: &str) -> ParseFail {
        ParseFail::Syntax(match found {
            Some((t, at)) => format!(
                "expected {wanted} but found {} at position {}",
                t.describe(),
                at + 1
            ),
            None => format!("expected {wanted} but the expression ended"),
        })
    }

    fn expect(&mut self, want: &Tok) -> Result<(), ParseFail> {
        match self.next()? {
            Some((t, _)) if t == *want => Ok(()),
            other => Err(Self::unexpected(other, &want.describe())),
        }
    }

    fn name(&mut self) -> Result<String, ParseFail> {
        match self.next()? {
            Some((Tok::Name(n), _)) => Ok(n),
            other => Err(Self::unexpected(other, "a name")),
        }
    }

    fn expression(&mut self) -> Result<Call, ParseFail> {
        let name = self.name()?;
        let func = Func::by_name(&name).ok_or(ParseFail::UnknownFunction(name))?;
        self.expect(&Tok::Open)?;
        let mut params = vec![self.parameter()?];
        loop {
            match self.next()? {
                Some((Tok::Comma, _)) => params.push(self.parameter()?),
                Some((Tok::Close, _)) => return Ok(Call { func, params }),
                other => return Err(Self::unexpected(other, "',' or ')'")),
            }
        }
    }

    fn parameter(&mut self) -> Result<Param, ParseFail> {
        if !matches!(self.peek(0)?, Some(Tok::Name(_))) {
            let found = self.next()?;
            return Err(Self::unexpected(found, "a parameter"));
        }
        match self.peek(1)? {
            Some(Tok::Open) => Ok(Param::Call(self.expression()?)),
            Some(Tok::Colon) => Ok(Param::Metric(self.metric()?)),
            _ => Ok(Param::Name(self.name()?)),
        }
    }

    /// `agg:[x:][y:]metric[{k=v,...}]`, rebuilt without whitespace and noted.
    fn metric(&mut self) -> Result<usize, ParseFail> {
        let mut text = self.name()?;
        self.expect(&Tok::Colon)?;
        let mut parts = 1;
        loop {
            let part = self.name()?;
            text.push(':');
            text.push_str(&part);
            if parts < 3 && self.peek(0)? == Some(&Tok::Colon) {
                self.next()?;
                parts += 1;
                continue;
            }
            break;
        }
        if self.peek(0)? == Some(&Tok::LBrace) {
            self.next()?;
            let mut pairs = Vec::new();
            loop {
                let k = self.name()?;
                self.expect(&Tok::Equals)?;
                let v = self.name()?;
                pairs.push(format!("{k}={v}"));
                match self.next()? {
                    Some((Tok::Comma, _)) => {}
                    Some((Tok::RBrace, _)) => break,
                    other => return Err(Self::unexpected(other, "',' or '}'")),
                }
            }
            text.push('{');
            text.push_str(&pairs.join(","));
            text.push('}');
        }
        self.metrics.push(text);
        Ok(self.metrics.len() - 1)
    }
}

/// Reads one `exp=` value; its sub-queries are added to `metrics`.
fn parse_expression(text: &str, metrics: &mut Vec<String>) -> Result<Call, ApiError> {
    let mut p = Parser {
        chars: text.chars().collect(),
        pos: 0,
        ahead: Vec::new(),
        metrics,
    };
    let result = p.expression().and_then(|call| match p.next()? {
        None => Ok(call),
        Some((t, at)) => Err(ParseFail::Syntax(format!(
            "unexpected {} after the expression at position {}",
            t.describe(),
            at + 1
        ))),
    });
    result.map_err(|e| match e {
        ParseFail::Syntax(detail) => bad(format!("Failed to parse {text}")).with_details(detail),
        ParseFail::UnknownFunction(name) => {
            bad(format!("Function {name} has not been implemented")).with_details(
                "known functions: absolute, alias, diffSeries (difference), divideSeries \
                 (divide), highestCurrent, highestMax, movingAverage, multiplySeries \
                 (multiply), scale, sumSeries (sum), timeShift (shift)",
            )
        }
    })
}

// ---------------------------------------------------------------------------------------
// Checking the parameters: what each function does, ready to run

/// A moving average's window.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Window {
    Points(u64),
    Millis(i64),
}

/// How the `*Series` functions combine values.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Combine {
    Sum,
    Diff,
    Multiply,
    Divide,
}

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Absolute,
    Alias(String),
    Scale(f64),
    MovingAverage(Window),
    Highest { n: usize, by_max: bool },
    TimeShift(i64),
    Combine(Combine),
}

#[derive(Debug)]
enum Input {
    Plan(Box<Plan>),
    Leaf(usize),
}

/// A checked function call.
#[derive(Debug)]
struct Plan {
    op: Op,
    /// The series parameters, in order (timeShift keeps its first only).
    inputs: Vec<Input>,
}

/// A tree as OpenTSDB describes it in errors: sub-expressions, then the metric names.
fn describe(call: &Call, metrics: &[String]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut words: Vec<&str> = Vec::new();
    for p in &call.params {
        match p {
            Param::Call(c) => parts.push(describe(c, metrics)),
            Param::Metric(i) => {
                let text = &metrics[*i];
                // OpenTSDB drops `{...}` (first to last brace), then keeps what follows the
                // last ':'.
                let cleaned = match (text.find('{'), text.rfind('}')) {
                    (Some(a), Some(b)) if a < b => format!("{}{}", &text[..a], &text[b + 1..]),
                    _ => text.clone(),
                };
                let name = cleaned.rsplit(':').next().unwrap_or_default().to_string();
                names.push(name);
            }
            Param::Name(n) => words.push(n),
        }
    }
    if !names.is_empty() {
        parts.push(names.join(","));
    }
    let inner = parts.join(",");
    if call.func == Func::Alias && !words.is_empty() {
        format!("alias({inner},{})", words.join(","))
    } else {
        format!("{}({inner})", call.func.written())
    }
}

/// A count of the form OpenTSDB reads with `Integer.parseInt` (digits only, at most
/// 2147483647).
fn java_int(digits: &str) -> Option<i64> {
    digits.parse::<i32>().ok().map(i64::from)
}

/// `'<int><unit>'` of movingAverage, in ms.
fn moving_window(param: &str) -> Result<i64, ApiError> {
    let inner = &param[1..];
    let digits: String = inner.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() {
        return Err(refused(format!("Invalid moving window parameter: {param}")));
    }
    let time = java_int(&digits)
        .ok_or_else(|| refused(format!("Unable to parse moving window parameter: {param}")))?;
    let rest = &inner[digits.len()..];
    let unit = rest.strip_suffix('\'').unwrap_or(rest);
    let ms: i64 = match unit {
        "day" | "d" => 86_400_000,
        "hr" | "hour" | "h" => 3_600_000,
        "min" | "m" => 60_000,
        "sec" | "s" => 1_000,
        _ => {
            return Err(refused(format!(
                "Unknown time unit={unit} in window={param}"
            )));
        }
    };
    Ok(time.saturating_mul(ms))
}

/// `'<int><unit>'` of timeShift, in ms: OpenTSDB's units (`sec`, `min`, `hr`, `day(s)`,
/// `week(s)`) and movingAverage's (`s`, `m`, `h`, `hour`, `d`), plus `w`.
fn shift_amount(param: &str) -> Result<i64, ApiError> {
    if param.len() < 2 || !param.starts_with('\'') || !param.ends_with('\'') {
        if param == "'" {
            return Err(refused(format!("Invalid Parameter: {param}")));
        }
        return Err(refused("Invalid timeshift parameter: eg '10min'"));
    }
    let inner = &param[1..param.len() - 1];
    let digits: String = inner.chars().take_while(char::is_ascii_digit).collect();
    let time = (!digits.is_empty())
        .then(|| java_int(&digits))
        .flatten()
        .ok_or_else(|| refused(format!("Invalid Parameter: {param}")))?;
    let unit = inner[digits.len()..].trim();
    let ms: i64 = match unit {
        "sec" | "s" => 1_000,
        "min" | "m" => 60_000,
        "hr" | "hour" | "h" => 3_600_000,
        "day" | "days" | "d" => 86_400_000,
        "week" | "weeks" | "w" => 7 * 86_400_000,
        _ => return Err(refused(format!("unknown time unit={unit}"))),
    };
    let shift = time.saturating_mul(ms);
    if shift <= 0 {
        return Err(refused("timeshift <= 0"));
    }
    Ok(shift)
}

/// The function's own parameters, checked as OpenTSDB checks them (messages included).
fn op_of(call: &Call, series: usize, words: &[&str]) -> Result<Op, ApiError> {
    let first = words.first().copied();
    Ok(match call.func {
        Func::Absolute => Op::Absolute,
        Func::Alias => {
            if words.is_empty() {
                return Err(refused("Missing the alias"));
            }
            Op::Alias(words.join(","))
        }
        Func::Scale => {
            let factor = first.ok_or_else(|| refused("Missing scaling factor"))?;
            if !factor
                .chars()
                .all(|c| c == '-' || c == '.' || c.is_ascii_digit())
            {
                return Err(refused(format!("Unparseable scale factor value: {factor}")));
            }
            let f: f64 = factor
                .parse()
                .map_err(|_| refused("Invalid parameter, must be an integer or floating point"))?;
            Op::Scale(f)
        }
        Func::MovingAverage => {
            let p = first
                .map(str::trim)
                .ok_or_else(|| refused("Missing moving average window size"))?;
            let window = if !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()) {
                let n =
                    java_int(p).ok_or_else(|| refused("Invalid parameter, must be an integer"))?;
                Window::Points(n as u64)
            } else if p.starts_with('\'') && p.ends_with('\'') {
                Window::Millis(moving_window(p)?)
            } else {
                return Err(refused(format!("Unparseable window size: {p}")));
            };
            if matches!(window, Window::Points(0) | Window::Millis(..=0)) {
                return Err(refused(
                    "Moving average window must be an integer greater than zero",
                ));
            }
            Op::MovingAverage(window)
        }
        Func::HighestCurrent | Func::HighestMax => {
            let p =
                first.ok_or_else(|| refused("Missing top n value (number of series to return)"))?;
            if !p.chars().all(|c| c.is_ascii_digit()) || p.is_empty() {
                return Err(refused(format!("Unparseable top n value: {p}")));
            }
            let n = java_int(p).ok_or_else(|| refused("Invalid parameter, must be an integer"))?;
            if n < 1 {
                return Err(refused(format!(
                    "Top n value must be greater than zero: {n}"
                )));
            }
            Op::Highest {
                n: n as usize,
                by_max: call.func == Func::HighestMax,
            }
        }
        Func::TimeShift => {
            let p = first
                .map(str::trim)
                .ok_or_else(|| refused("Need amount of timeshift to perform timeshift"))?;
            Op::TimeShift(shift_amount(p)?)
        }
        Func::Sum | Func::Diff | Func::Multiply | Func::Divide => {
            if !(2..=26).contains(&series) {
                return Err(refused(format!(
                    "Must have 2 to 26 series, got {series} instead"
                )));
            }
            Op::Combine(match call.func {
                Func::Sum => Combine::Sum,
                Func::Diff => Combine::Diff,
                Func::Multiply => Combine::Multiply,
                _ => Combine::Divide,
            })
        }
    })
}

/// Checks a call as OpenTSDB evaluates it: series parameters first (each sub-expression
/// checked in turn), then the function's own parameters.
fn plan_of(call: &Call, metrics: &[String]) -> Result<Plan, ApiError> {
    let series = call
        .params
        .iter()
        .filter(|p| !matches!(p, Param::Name(_)))
        .count();
    let mut inputs = Vec::with_capacity(series);
    for p in &call.params[..series] {
        match p {
            Param::Call(c) => inputs.push(Input::Plan(Box::new(plan_of(c, metrics)?))),
            Param::Metric(i) => inputs.push(Input::Leaf(*i)),
            Param::Name(_) => {
                return Err(refused(format!(
                    "Unknown parameter type: null in tree: {}",
                    describe(call, metrics)
                ))
                .with_details(
                    "a function's series (sub-queries and functions) must come before its \
                     other parameters",
                ));
            }
        }
    }
    let words: Vec<&str> = call
        .params
        .iter()
        .filter_map(|p| match p {
            Param::Name(n) => Some(n.as_str()),
            _ => None,
        })
        .collect();
    // Without series a function answers nothing, whatever its parameters.
    if series == 0 {
        return Ok(Plan {
            op: Op::Absolute,
            inputs,
        });
    }
    let op = op_of(call, series, &words)?;
    if matches!(op, Op::TimeShift(_)) {
        inputs.truncate(1);
    }
    Ok(Plan { op, inputs })
}

/// Sets the time shift of each sub-query the plan reads (the sum of the timeShifts above
/// it) and marks it used.
fn place_leaves(plan: &Plan, shift: i64, leaves: &mut [Leaf]) {
    let shift = match plan.op {
        Op::TimeShift(s) => shift.saturating_add(s),
        _ => shift,
    };
    for input in &plan.inputs {
        match input {
            Input::Plan(p) => place_leaves(p, shift, leaves),
            Input::Leaf(i) => {
                leaves[*i].shift = shift;
                leaves[*i].used = true;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Running

/// A sub-query of an expression.
#[derive(Debug)]
struct Leaf {
    query: SubQuery,
    /// Read `[start - shift, end - shift]`; the points are moved forward by `shift`.
    shift: i64,
    used: bool,
    /// Its run among the request's distinct (sub-query, shift) runs.
    run: usize,
}

/// A series as the functions pass it along.
#[derive(Debug, Clone)]
struct Series {
    metric: String,
    /// The metric's UID, when `metric` is one (an alias is not): the `*Series` functions
    /// name their result after the lowest UID they combined, as OpenTSDB does.
    metric_uid: Option<Uid>,
    tags: BTreeMap<String, String>,
    /// The tags the `*Series` functions match series on: `tags`, or an aliased series'
    /// tags before the alias.
    join_tags: BTreeMap<String, String>,
    aggregate_tags: Vec<String>,
    tsuids: Vec<String>,
    annotations: Vec<StoredAnnotation>,
    dps: Vec<(i64, Num)>,
    /// The sub-query it comes from (its `query`, `stats` and null fill are written).
    leaf: usize,
}

/// UIDs of names, looked up once each.
pub(crate) struct Uids<'a> {
    tsdb: &'a Tsdb,
    cache: HashMap<(UidKind, String), Option<Uid>>,
}

impl<'a> Uids<'a> {
    pub(crate) fn new(tsdb: &'a Tsdb) -> Self {
        Uids {
            tsdb,
            cache: HashMap::new(),
        }
    }

    pub(crate) fn get(&mut self, kind: UidKind, name: &str) -> Option<Uid> {
        if let Some(u) = self.cache.get(&(kind, name.to_string())) {
            return *u;
        }
        let uid = self.tsdb.uids().get_id(kind, name).ok();
        self.cache.insert((kind, name.to_string()), uid);
        uid
    }
}

fn eval(plan: &Plan, leaves: &mut [Option<Vec<Series>>], uids: &mut Uids<'_>) -> Vec<Series> {
    let inputs: Vec<Vec<Series>> = plan
        .inputs
        .iter()
        .map(|input| match input {
            Input::Plan(p) => eval(p, leaves, uids),
            Input::Leaf(i) => leaves[*i].take().unwrap_or_default(),
        })
        .collect();
    if inputs.is_empty() {
        return Vec::new();
    }
    match &plan.op {
        Op::Absolute => pooled(inputs, |s| {
            for (_, v) in &mut s.dps {
                *v = match *v {
                    Num::Int(i) => Num::Int(i.wrapping_abs()),
                    Num::Float(f) => Num::Float(f.abs()),
                };
            }
        }),
        Op::Scale(f) => {
            let f = *f;
            let integral = f == f.floor() && f.is_finite();
            pooled(inputs, |s| {
                for (_, v) in &mut s.dps {
                    *v = match *v {
                        Num::Int(i) if integral => Num::Int((f as i64).wrapping_mul(i)),
                        other => Num::Float(f * other.as_f64()),
                    };
                }
            })
        }
        Op::Alias(template) => pooled(inputs, |s| {
            let mut name = template.clone();
            if name.contains('@') {
                // Longest tag keys first, so `@hostname` is not read as `@host` + "name".
                let mut tags: Vec<(&String, &String)> = s.tags.iter().collect();
                tags.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
                for (k, v) in tags {
                    name = name.replace(&format!("@{k}"), v);
                }
            }
            s.metric = name;
            s.metric_uid = None;
            s.tags.clear();
            s.aggregate_tags.clear();
        }),
        Op::MovingAverage(window) => pooled(inputs, |s| {
            s.dps = moving_average(&s.dps, *window);
        }),
        Op::Highest { n, by_max } => highest(inputs, *n, *by_max),
        Op::TimeShift(shift) => pooled(inputs, |s| {
            for (t, _) in &mut s.dps {
                *t = t.saturating_add(*shift);
            }
        }),
        Op::Combine(how) => combine(inputs, *how, uids),
    }
}

/// Every series of every series parameter, each changed by `f`.
fn pooled(inputs: Vec<Vec<Series>>, mut f: impl FnMut(&mut Series)) -> Vec<Series> {
    let mut out: Vec<Series> = inputs.into_iter().flatten().collect();
    out.iter_mut().for_each(&mut f);
    out
}

/// OpenTSDB's moving average at each point (as doubles, walking back from the point):
/// of the last N non-NaN points, 0 until there are N; or of the points less than the
/// window's time before it, 0 while no point is that old (and at the series' first point).
fn moving_average(dps: &[(i64, Num)], window: Window) -> Vec<(i64, Num)> {
    let vals: Vec<(i64, f64)> = dps.iter().map(|&(t, v)| (t, v.as_f64())).collect();
    let mut out = Vec::with_capacity(vals.len());
    for (i, &(t, _)) in vals.iter().enumerate() {
        let (mut sum, mut count, mut met) = (0.0f64, 0u64, false);
        match window {
            Window::Points(n) => {
                for &(_, v) in vals[..=i].iter().rev() {
                    if !v.is_nan() {
                        sum += v;
                        count += 1;
                    }
                    if count >= n {
                        met = true;
                        break;
                    }
                }
            }
            Window::Millis(w) => {
                if i > 0 {
                    for &(ts, v) in vals[..=i].iter().rev() {
                        if t - ts >= w {
                            met = true;
                            break;
                        }
                        if !v.is_nan() {
                            sum += v;
                            count += 1;
                        }
                    }
                }
            }
        }
        let avg = if met && count > 0 {
            sum / count as f64
        } else {
            0.0
        };
        out.push((t, Num::Float(avg)));
    }
    out
}

/// The `n` series with the highest maximum (or latest value), highest first; series
/// without a (non-NaN) value rank last, ties keep their order. highestCurrent leaves out
/// series without points.
fn highest(inputs: Vec<Vec<Series>>, n: usize, by_max: bool) -> Vec<Series> {
    let mut all: Vec<Series> = inputs.into_iter().flatten().collect();
    if !by_max {
        all.retain(|s| !s.dps.is_empty());
    }
    let score = |s: &Series| -> Option<f64> {
        let mut values = s
            .dps
            .iter()
            .map(|(_, v)| v.as_f64())
            .filter(|v| !v.is_nan());
        if by_max {
            values.reduce(f64::max)
        } else {
            values.next_back()
        }
    };
    let mut ranked: Vec<(Option<f64>, Series)> = all.into_iter().map(|s| (score(&s), s)).collect();
    ranked.sort_by(|(a, _), (b, _)| match (a, b) {
        (Some(a), Some(b)) => b.total_cmp(a),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    ranked.into_iter().take(n).map(|(_, s)| s).collect()
}

/// The `*Series` functions: series of the parameters with the same tags are combined
/// point by point (`a + b + ...`, `a - b - ...`, ...) at every time any of them has a
/// point; a parameter without that series or without a point at that time counts as 0, as
/// does a NaN; a division by 0 gives NaN. Results come in the order of their tags' UIDs.
fn combine(inputs: Vec<Vec<Series>>, how: Combine, uids: &mut Uids<'_>) -> Vec<Series> {
    type Key = Vec<(Option<Uid>, String, Option<Uid>, String)>;
    let width = inputs.len();
    let mut groups: BTreeMap<Key, Vec<Option<Series>>> = BTreeMap::new();
    for (j, list) in inputs.into_iter().enumerate() {
        for s in list {
            let mut key: Key = s
                .join_tags
                .iter()
                .map(|(k, v)| {
                    (
                        uids.get(UidKind::TagKey, k),
                        k.clone(),
                        uids.get(UidKind::TagValue, v),
                        v.clone(),
                    )
                })
                .collect();
            key.sort();
            // Two series of one parameter with the same tags: the later one is used, as
            // in OpenTSDB.
            groups.entry(key).or_insert_with(|| vec![None; width])[j] = Some(s);
        }
    }
    let mut out = Vec::with_capacity(groups.len());
    for members in groups.into_values() {
        let present: Vec<&Series> = members.iter().flatten().collect();
        let Some(first) = present.first() else {
            continue;
        };
        let mut times: Vec<i64> = present
            .iter()
            .flat_map(|s| s.dps.iter().map(|(t, _)| *t))
            .collect();
        times.sort_unstable();
        times.dedup();
        let mut cursors = vec![0usize; width];
        let mut dps = Vec::with_capacity(times.len());
        for &t in &times {
            let mut acc = 0.0;
            for (j, member) in members.iter().enumerate() {
                let mut v = 0.0;
                if let Some(s) = member {
                    let c = &mut cursors[j];
                    while *c < s.dps.len() && s.dps[*c].0 < t {
                        *c += 1;
                    }
                    if let Some(&(pt, pv)) = s.dps.get(*c)
                        && pt == t
                    {
                        let f = pv.as_f64();
                        if !f.is_nan() {
                            v = f;
                        }
                    }
                }
                acc = if j == 0 {
                    v
                } else {
                    match how {
                        Combine::Sum => acc + v,
                        Combine::Diff => acc - v,
                        Combine::Multiply => acc * v,
                        Combine::Divide if v == 0.0 => f64::NAN,
                        Combine::Divide => acc / v,
                    }
                };
            }
            dps.push((t, Num::Float(acc)));
        }
        let named = present
            .iter()
            .filter_map(|s| s.metric_uid.map(|u| (u, &s.metric)))
            .min_by_key(|(u, _)| *u);
        let (metric, metric_uid) = match named {
            Some((u, m)) => (m.clone(), Some(u)),
            None => (first.metric.clone(), None),
        };
        let mut aggregate: Vec<(Option<Uid>, String)> = Vec::new();
        for s in &present {
            for k in &s.aggregate_tags {
                if !aggregate.iter().any(|(_, n)| n == k) {
                    aggregate.push((uids.get(UidKind::TagKey, k), k.clone()));
                }
            }
        }
        aggregate.sort();
        out.push(Series {
            metric,
            metric_uid,
            tags: first.join_tags.clone(),
            join_tags: first.join_tags.clone(),
            aggregate_tags: aggregate.into_iter().map(|(_, k)| k).collect(),
            tsuids: Vec::new(),
            annotations: Vec::new(),
            dps,
            leaf: first.leaf,
        });
    }
    out
}

// ---------------------------------------------------------------------------------------
// The endpoint

pub(crate) async fn handle(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
) -> Result<Response, ApiError> {
    match method {
        Method::GET => {}
        Method::DELETE if !state.settings.allow_delete => {
            return Err(bad("Bad request")
                .with_details("Deleting data is not enabled (tsd.http.query.allow_delete=false)"));
        }
        other => return Err(ApiError::method_not_allowed(&other)),
    }
    let params = url_params(raw.as_deref());
    // A repeated parameter's last value, as OpenTSDB's `getQueryStringParam` reads it (an
    // empty last `start=` is a missing start, an empty last `end=` is now).
    let last = |k: &str| {
        params
            .iter()
            .rev()
            .find(|(p, _)| p == k)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    };
    let all = |k: &'static str| {
        params
            .iter()
            .filter(move |(p, _)| p == k)
            .map(|(_, v)| v.as_str())
    };
    let flags = Flags::from_url(&params);
    let start_text = last("start").ok_or_else(|| bad("Missing parameter <code>start</code>"))?;
    // OpenTSDB's order: tsuid= and m= sub-queries (checked; expressions never output
    // them), the expressions, then the expressions' sub-queries.
    let mut plain = 0;
    for v in all("tsuid") {
        parse_tsuid_param(v)?;
        plain += 1;
    }
    for v in all("m") {
        parse_m(v)?;
        plain += 1;
    }
    let mut metrics = Vec::new();
    let calls = all("exp")
        .map(|e| parse_expression(e, &mut metrics))
        .collect::<Result<Vec<_>, _>>()?;
    let mut leaves = metrics
        .iter()
        .map(|m| {
            Ok(Leaf {
                query: parse_m(m)?,
                shift: 0,
                used: false,
                run: 0,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    if plain == 0 && leaves.is_empty() {
        return Err(bad("Missing sub queries"));
    }
    // `tz` reads the dates and places calendar buckets; without it, dates are read in the
    // TSD's zone and buckets placed in UTC, as OpenTSDB does.
    let given = match last("tz") {
        Some(name) => Some(parse_timezone(name).map_err(|e| bad(e.to_string()))?),
        None => None,
    };
    let (tz, dates) = (
        given.unwrap_or(Tz::UTC),
        given.unwrap_or(state.settings.timezone),
    );
    let now_ms = hourglass_storage::now_ms();
    let start = parse_time_in(start_text, now_ms, dates).map_err(|e| bad(e.to_string()))?;
    let end = match last("end") {
        Some(e) => parse_time_in(e, now_ms, dates).map_err(|e| bad(e.to_string()))?,
        None => now_ms,
    };
    if end <= start {
        return Err(bad(format!(
            "End time [{end}] must be greater than the start time [{start}]"
        )));
    }
    for leaf in &mut leaves {
        if let Some(ds) = leaf.query.downsample {
            leaf.query.downsample = Some(ds.in_zone(tz, false).map_err(ApiError::from)?);
        }
    }
    let plans = calls
        .iter()
        .map(|c| plan_of(c, &metrics))
        .collect::<Result<Vec<_>, _>>()?;
    for plan in &plans {
        place_leaves(plan, 0, &mut leaves);
    }
    // Each distinct (sub-query, shift) runs once; every parameter gets its own copy.
    let mut runs: Vec<usize> = Vec::new();
    for i in 0..leaves.len() {
        if !leaves[i].used {
            continue;
        }
        let found = runs.iter().position(|&r| {
            leaves[r].shift == leaves[i].shift && same_query(&leaves[r].query, &leaves[i].query)
        });
        leaves[i].run = found.unwrap_or_else(|| {
            runs.push(i);
            runs.len() - 1
        });
    }
    let started = std::time::Instant::now();
    let options: Vec<_> = runs
        .iter()
        .map(|&r| run_options(&state, &leaves[r].query, &flags, started))
        .collect();
    let body = blocking(&state.tsdb, move |tsdb| {
        let global = if flags.global_annotations && !flags.no_annotations {
            let list = global_annotations(tsdb, start, end).map_err(ApiError::from)?;
            (!list.is_empty()).then(|| annotations_json(&list))
        } else {
            None
        };
        let mut summary = Summary::default();
        let mut outcomes: Vec<Outcome> = Vec::with_capacity(runs.len());
        for (k, &r) in runs.iter().enumerate() {
            let leaf = &leaves[r];
            let (from, to) = (
                start.saturating_sub(leaf.shift),
                end.saturating_sub(leaf.shift),
            );
            let outcome = if to < 0 {
                Outcome::default()
            } else {
                run(tsdb, from.max(0), to, &leaf.query, &options[k]).map_err(ApiError::from)?
            };
            summary.add_run(&outcome);
            outcomes.push(outcome);
        }
        let mut uids = Uids::new(tsdb);
        let mut inputs: Vec<Option<Vec<Series>>> = leaves
            .iter()
            .enumerate()
            .map(|(i, leaf)| {
                leaf.used.then(|| {
                    outcomes[leaf.run]
                        .groups
                        .iter()
                        .map(|g| Series {
                            metric: g.metric.clone(),
                            metric_uid: uids.get(UidKind::Metric, &g.metric),
                            tags: g.tags.clone(),
                            join_tags: g.tags.clone(),
                            aggregate_tags: g.aggregate_tags.clone(),
                            tsuids: g.tsuids.clone(),
                            annotations: g.annotations.clone(),
                            dps: g.dps.clone(),
                            leaf: i,
                        })
                        .collect()
                })
            })
            .collect();
        let ser = Serialized {
            tsdb,
            flags: &flags,
            global,
        };
        let mut out = Vec::with_capacity(4096);
        // The answer's text counts against the query memory budget until it is sent.
        let mut counted = CountedText::new(tsdb);
        out.push(b'[');
        let mut first = true;
        for plan in &plans {
            for s in eval(plan, &mut inputs, &mut uids) {
                let leaf = &leaves[s.leaf];
                let group = GroupResult {
                    metric: s.metric,
                    tags: s.tags,
                    aggregate_tags: s.aggregate_tags,
                    tsuids: s.tsuids,
                    annotations: s.annotations,
                    dps: s
                        .dps
                        .into_iter()
                        .filter(|(t, _)| (start..=end).contains(t))
                        .collect(),
                };
                if !first {
                    out.push(b',');
                }
                first = false;
                summary.add_emitted(group.dps.len());
                ser.group(
                    &mut out,
                    &leaf.query,
                    &Echo::of(&leaf.query),
                    leaf.run,
                    &outcomes[leaf.run],
                    &group,
                );
                counted.grew(&out);
            }
        }
        if flags.show_summary {
            summary.write(&mut out, first, started);
        }
        out.push(b']');
        Ok((out, counted))
    })
    .await?;
    let (body, counted) = body;
    Ok(json_text_response(
        StatusCode::OK,
        counted.into_body(body.into()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(text: &str) -> Result<(Call, Vec<String>), ApiError> {
        let mut metrics = Vec::new();
        let call = parse_expression(text, &mut metrics)?;
        Ok((call, metrics))
    }

    #[test]
    fn expressions_parse_as_opentsdb_reads_them() {
        let (call, metrics) =
            parse(" scale ( sum : 1m-avg : rate : sys.cpu { host = * , dc=lga|sjc } , 2 ) ")
                .unwrap();
        assert_eq!(call.func, Func::Scale);
        assert_eq!(metrics, ["sum:1m-avg:rate:sys.cpu{host=*,dc=lga|sjc}"]);
        assert!(matches!(call.params[1], Param::Name(ref n) if n == "2"));
        let (call, metrics) =
            parse("sumSeries(sum:a,alias(max:b{host=web01},'x@host'),sum:c)").unwrap();
        assert_eq!(metrics, ["sum:a", "max:b{host=web01}", "sum:c"]);
        assert!(matches!(call.params[1], Param::Call(ref c) if c.func == Func::Alias));
        let err = |t: &str| parse(t).unwrap_err().message;
        assert_eq!(err("sum:m"), "Failed to parse sum:m");
        assert_eq!(err("foo(sum:m)"), "Function foo has not been implemented");
        assert_eq!(
            err("scale(foo(+))"),
            "Function foo has not been implemented"
        );
        assert_eq!(err("scale(sum:m,2)x"), "Failed to parse scale(sum:m,2)x");
        assert_eq!(err("scale(sum:m,,2)"), "Failed to parse scale(sum:m,,2)");
        assert_eq!(err("scale(sum:m+1)"), "Failed to parse scale(sum:m+1)");
        assert_eq!(err("scale(a:b:c:d:e)"), "Failed to parse scale(a:b:c:d:e)");
        assert_eq!(err("scale(sum:m{})"), "Failed to parse scale(sum:m{})");
        assert_eq!(err(""), "Failed to parse ");
        assert_eq!(
            parse("scale(sum:m&&2)").unwrap_err().details.as_deref(),
            Some("expected ',' or ')' but found '&&' at position 12")
        );
    }

    #[test]
    fn trees_are_described_as_opentsdb_describes_them() {
        let (call, metrics) = parse("alias(10,sum:a{host=*},scale(max:1m-avg:b,2),x,y)").unwrap();
        assert_eq!(describe(&call, &metrics), "alias(scale(b),a,10,x,y)");
        let e = plan_of(&call, &metrics).unwrap_err();
        assert_eq!(
            e.message,
            "Unknown parameter type: null in tree: alias(scale(b),a,10,x,y)"
        );
        let (call, metrics) = parse("shift(sum:a,'1day')").unwrap();
        assert_eq!(describe(&call, &metrics), "timeshift(a)");
    }

    #[test]
    fn windows_and_shifts_read_as_documented() {
        assert_eq!(moving_window("'1min'").unwrap(), 60_000);
        assert_eq!(moving_window("'2h'").unwrap(), 7_200_000);
        assert_eq!(
            moving_window("'1w'").unwrap_err().message,
            "Unknown time unit=w in window='1w'"
        );
        assert_eq!(
            moving_window("'min'").unwrap_err().message,
            "Invalid moving window parameter: 'min'"
        );
        assert_eq!(shift_amount("'1day'").unwrap(), 86_400_000);
        assert_eq!(shift_amount("'2weeks'").unwrap(), 14 * 86_400_000);
        assert_eq!(shift_amount("'90sec'").unwrap(), 90_000);
        assert_eq!(
            shift_amount("'1fortnight'").unwrap_err().message,
            "unknown time unit=fortnight"
        );
        assert_eq!(
            shift_amount("'0min'").unwrap_err().message,
            "timeshift <= 0"
        );
        assert_eq!(
            shift_amount("1day").unwrap_err().message,
            "Invalid timeshift parameter: eg '10min'"
        );
        assert_eq!(
            shift_amount("'").unwrap_err().message,
            "Invalid Parameter: '"
        );
        assert_eq!(
            shift_amount("'x'").unwrap_err().message,
            "Invalid Parameter: 'x'"
        );
    }

    #[test]
    fn moving_averages_match_opentsdb_examples() {
        let dps: Vec<(i64, Num)> = (1..=5).map(|i| (i * 60_000, Num::Int(i))).collect();
        let run = |w| -> Vec<f64> {
            moving_average(&dps, w)
                .into_iter()
                .map(|(_, v)| v.as_f64())
                .collect()
        };
        assert_eq!(run(Window::Points(1)), [1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(run(Window::Points(2)), [0.0, 1.5, 2.5, 3.5, 4.5]);
        assert_eq!(run(Window::Points(5)), [0.0, 0.0, 0.0, 0.0, 3.0]);
        assert_eq!(run(Window::Points(6)), [0.0; 5]);
        assert_eq!(run(Window::Millis(60_000)), [0.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(run(Window::Millis(120_000)), [0.0, 0.0, 2.5, 3.5, 4.5]);
        assert_eq!(run(Window::Millis(240_000)), [0.0, 0.0, 0.0, 0.0, 3.5]);
        assert_eq!(run(Window::Millis(300_000)), [0.0; 5]);
    }

    proptest! {
        /// Whatever a client puts in `exp=`, reading and checking it answers.
        #[test]
        fn expressions_never_panic(e in "[a-zA-Z0-9:{}=|,*().'@&+ \\-]{0,40}") {
            let mut metrics = Vec::new();
            if let Ok(call) = parse_expression(&e, &mut metrics) {
                let _ = plan_of(&call, &metrics);
            }
        }
    }
}
