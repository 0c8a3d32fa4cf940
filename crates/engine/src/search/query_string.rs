//! The query language of `/api/search/{tsmeta,tsmeta_summary,tsuids,uidmeta,annotation}`:
//! the common subset of Lucene's `query_string` (which OpenTSDB's Elasticsearch plugin hands
//! its `query` to), RFC 0007 "Search endpoints without a plugin".
//!
//! Accepted: `field:term`, `field:"a phrase"`, `*` and `?` wildcards, `field:/regex/`,
//! `field:[a TO b]` / `field:{a TO b}` ranges (`*` an open end), `field:(a OR b)` groups,
//! bare terms (any field), `AND`/`&&`, `OR`/`||`, `NOT`/`!`, `+`/`-` prefixes, parentheses,
//! `\` escapes; terms side by side are ORed (Lucene's default operator). An empty query, `*`
//! and `*:*` match everything. Anything else (boosts `^`, fuzzy and proximity `~`, a
//! dangling operator, an unclosed group, phrase, regex or range) is refused with the
//! character position (1-based) where reading stopped.
//!
//! Semantics: a sequence of clauses is a Lucene boolean query: every `+` (MUST) clause must
//! match, no `-`/`NOT` (MUST_NOT) clause may match, and, without MUST clauses, at least one
//! plain (SHOULD) clause must match; a sequence of only MUST_NOT clauses matches everything
//! else (as Elasticsearch's `query_string`). `a AND b` needs both, `a OR b` either.

use regex::Regex;

/// How many nested groups and prefixes a query may hold (deeper: refused, so evaluation's
/// recursion stays shallow whatever the client sends).
const MAX_DEPTH: usize = 64;

/// A parsed query.
#[derive(Debug, Clone)]
pub enum Node {
    /// Matches every document.
    All,
    /// One field (None: any field) against one pattern.
    Term {
        field: Option<String>,
        pattern: Pattern,
    },
    /// Every child matches.
    And(Vec<Node>),
    /// The child does not match.
    Not(Box<Node>),
    /// A boolean query: MUST clauses all match, MUST_NOT none, SHOULD at least one when
    /// there is no MUST clause and there is a SHOULD clause.
    Bool {
        must: Vec<Node>,
        should: Vec<Node>,
        must_not: Vec<Node>,
    },
}

/// What a term asks of a field's value.
#[derive(Debug, Clone)]
pub enum Pattern {
    /// A word or exact value (escapes removed).
    Word(String),
    /// A quoted phrase.
    Phrase(String),
    /// A glob with `*` and `?`.
    Wildcard(String),
    /// An anchored regular expression (`/.../`).
    Regex(Regex),
    /// A range; `None` an open end.
    Range {
        low: Option<String>,
        high: Option<String>,
        low_inclusive: bool,
        high_inclusive: bool,
    },
    /// `field:*`: the field has a value.
    Exists,
}

/// A refused query: why, and the 1-based character position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub position: usize,
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at position {}", self.message, self.position)
    }
}

impl Node {
    /// The fields the query names (for checking them against a search type).
    pub fn fields(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect_fields(&mut out);
        out
    }

    fn collect_fields<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Node::All => {}
            Node::Term { field, .. } => {
                if let Some(f) = field {
                    out.push(f);
                }
            }
            Node::And(c) => c.iter().for_each(|n| n.collect_fields(out)),
            Node::Not(n) => n.collect_fields(out),
            Node::Bool {
                must,
                should,
                must_not,
            } => {
                for n in must.iter().chain(should).chain(must_not) {
                    n.collect_fields(out);
                }
            }
        }
    }

    /// Exact (`Word`, `Phrase`) terms on `fields` that every match must satisfy, as
    /// (field, value).
    pub fn required_words<'a>(&'a self, fields: &[&str], out: &mut Vec<(&'a str, &'a str)>) {
        let mut terms = Vec::new();
        self.required_terms(fields, &mut terms);
        out.extend(terms.into_iter().filter_map(|(f, p)| match p {
            Pattern::Word(w) | Pattern::Phrase(w) => Some((f, w.as_str())),
            _ => None,
        }));
    }

    /// Terms on `fields` that every match must satisfy, as (field, pattern).
    pub fn required_terms<'a>(&'a self, fields: &[&str], out: &mut Vec<(&'a str, &'a Pattern)>) {
        match self {
            Node::Term {
                field: Some(f),
                pattern,
            } if fields.contains(&f.as_str()) => out.push((f, pattern)),
            Node::And(c) => c.iter().for_each(|n| n.required_terms(fields, out)),
            Node::Bool { must, should, .. } => {
                must.iter().for_each(|n| n.required_terms(fields, out));
                if must.is_empty() && should.len() == 1 {
                    should[0].required_terms(fields, out);
                }
            }
            _ => {}
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    LParen,
    RParen,
    And,
    Or,
    Not,
    Plus,
    Minus,
    /// A field name and its colon.
    Field(String),
    Word {
        text: String,
        wild: bool,
    },
    Phrase(String),
    Regex(String),
    Range {
        low: String,
        high: String,
        low_inclusive: bool,
        high_inclusive: bool,
    },
}

/// Characters that end a bare term.
fn is_special(c: char) -> bool {
    matches!(
        c,
        '(' | ')' | ':' | '"' | '[' | ']' | '{' | '}' | '^' | '~' | '/'
    ) || c.is_whitespace()
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
}

impl Lexer {
    fn err(&self, at: usize, message: impl Into<String>) -> ParseError {
        ParseError {
            position: at + 1,
            message: message.into(),
        }
    }

    fn tokens(mut self) -> Result<Vec<(usize, Tok)>, ParseError> {
        let mut out = Vec::new();
        while self.at < self.chars.len() {
            let c = self.chars[self.at];
            let start = self.at;
            if c.is_whitespace() {
                self.at += 1;
                continue;
            }
            let two: String = self.chars[self.at..(self.at + 2).min(self.chars.len())]
                .iter()
                .collect();
            let tok = match c {
                '(' => {
                    self.at += 1;
                    Tok::LParen
                }
                ')' => {
                    self.at += 1;
                    Tok::RParen
                }
                '+' => {
                    self.at += 1;
                    Tok::Plus
                }
                '-' => {
                    self.at += 1;
                    Tok::Minus
                }
                '!' => {
                    self.at += 1;
                    Tok::Not
                }
                _ if two == "&&" => {
                    self.at += 2;
                    Tok::And
                }
                _ if two == "||" => {
                    self.at += 2;
                    Tok::Or
                }
                '"' => Tok::Phrase(self.quoted('"', "phrase")?),
                '/' => Tok::Regex(self.quoted('/', "regular expression")?),
                '[' | '{' => self.range()?,
                '^' => return Err(self.err(start, "Boosts (^) are not supported")),
                '~' => {
                    return Err(
                        self.err(start, "Fuzzy and proximity queries (~) are not supported")
                    );
                }
                ':' | ']' | '}' => return Err(self.err(start, format!("Unexpected '{c}'"))),
                _ => self.word()?,
            };
            out.push((start, tok));
        }
        Ok(out)
    }

    /// A bare term: a field name when a `:` follows.
    fn word(&mut self) -> Result<Tok, ParseError> {
        let mut text = String::new();
        let mut wild = false;
        while self.at < self.chars.len() {
            let c = self.chars[self.at];
            if c == '\\' {
                let Some(&next) = self.chars.get(self.at + 1) else {
                    return Err(self.err(self.at, "Escape (\\) at the end of the query"));
                };
                // An escaped wildcard is a plain character: keep the escape for the glob.
                if next == '*' || next == '?' || next == '\\' {
                    text.push('\\');
                }
                text.push(next);
                self.at += 2;
                continue;
            }
            if is_special(c) {
                break;
            }
            if c == '*' || c == '?' {
                wild = true;
            }
            text.push(c);
            self.at += 1;
        }
        if self.chars.get(self.at) == Some(&':') {
            self.at += 1;
            let name = unescape_glob(&text);
            return Ok(Tok::Field(name));
        }
        Ok(match text.as_str() {
            "AND" => Tok::And,
            "OR" => Tok::Or,
            "NOT" => Tok::Not,
            _ => Tok::Word { text, wild },
        })
    }

    /// A quoted phrase or `/regex/` (escapes: `\` + the closing character).
    fn quoted(&mut self, close: char, what: &str) -> Result<String, ParseError> {
        let open = self.at;
        self.at += 1;
        let mut text = String::new();
        while self.at < self.chars.len() {
            let c = self.chars[self.at];
            if c == '\\' && self.chars.get(self.at + 1).is_some() {
                let next = self.chars[self.at + 1];
                if next == close || close == '"' {
                    text.push(next);
                } else {
                    text.push('\\');
                    text.push(next);
                }
                self.at += 2;
                continue;
            }
            if c == close {
                self.at += 1;
                if self.chars.get(self.at) == Some(&'~') {
                    return Err(self.err(self.at, "Proximity queries (~) are not supported"));
                }
                return Ok(text);
            }
            text.push(c);
            self.at += 1;
        }
        Err(self.err(open, format!("Unclosed {what}")))
    }

    /// `[low TO high]`, `{low TO high}` or a mix.
    fn range(&mut self) -> Result<Tok, ParseError> {
        let open = self.at;
        let low_inclusive = self.chars[self.at] == '[';
        self.at += 1;
        let mut parts: Vec<String> = Vec::new();
        let mut current = String::new();
        loop {
            let Some(&c) = self.chars.get(self.at) else {
                return Err(self.err(open, "Unclosed range"));
            };
            self.at += 1;
            match c {
                ']' | '}' => {
                    if !current.is_empty() {
                        parts.push(std::mem::take(&mut current));
                    }
                    let high_inclusive = c == ']';
                    let [low, to, high] = <[String; 3]>::try_from(parts)
                        .map_err(|_| self.err(open, "A range must read [low TO high]"))?;
                    if to != "TO" {
                        return Err(self.err(open, "A range must read [low TO high]"));
                    }
                    return Ok(Tok::Range {
                        low,
                        high,
                        low_inclusive,
                        high_inclusive,
                    });
                }
                '"' => {
                    self.at -= 1;
                    current.push_str(&self.quoted('"', "phrase")?);
                }
                '\\' => {
                    let Some(&next) = self.chars.get(self.at) else {
                        return Err(self.err(self.at - 1, "Escape (\\) at the end of the query"));
                    };
                    current.push(next);
                    self.at += 1;
                }
                c if c.is_whitespace() => {
                    if !current.is_empty() {
                        parts.push(std::mem::take(&mut current));
                    }
                }
                '[' | '{' => return Err(self.err(self.at - 1, format!("Unexpected '{c}'"))),
                c => current.push(c),
            }
        }
    }
}

/// A glob's text with `\*`, `\?` and `\\` turned back into plain characters (for words
/// that are not globs).
fn unescape_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

struct Parser {
    toks: Vec<(usize, Tok)>,
    at: usize,
    /// Characters in the query (for errors at its end).
    len: usize,
}

/// Parses a query. Whitespace only, `*` or `*:*`: [`Node::All`].
pub fn parse(query: &str) -> Result<Node, ParseError> {
    let trimmed = query.trim();
    if trimmed.is_empty() || trimmed == "*" || trimmed == "*:*" {
        return Ok(Node::All);
    }
    let chars: Vec<char> = query.chars().collect();
    let len = chars.len();
    let toks = Lexer { chars, at: 0 }.tokens()?;
    let mut p = Parser { toks, at: 0, len };
    let node = p.sequence(None, 0)?;
    if let Some((pos, tok)) = p.toks.get(p.at) {
        return Err(ParseError {
            position: pos + 1,
            message: format!("Unexpected {}", describe(tok)),
        });
    }
    Ok(node)
}

fn describe(tok: &Tok) -> &'static str {
    match tok {
        Tok::LParen => "'('",
        Tok::RParen => "')'",
        Tok::And => "AND",
        Tok::Or => "OR",
        Tok::Not => "NOT",
        Tok::Plus => "'+'",
        Tok::Minus => "'-'",
        Tok::Field(_) => "field",
        Tok::Word { .. } => "term",
        Tok::Phrase(_) => "phrase",
        Tok::Regex(_) => "regular expression",
        Tok::Range { .. } => "range",
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Occur {
    Must,
    Should,
    MustNot,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at).map(|(_, t)| t)
    }

    fn err_here(&self, message: impl Into<String>) -> ParseError {
        let position = self.toks.get(self.at).map_or(self.len, |(p, _)| *p) + 1;
        ParseError {
            position,
            message: message.into(),
        }
    }

    /// Clauses up to `)` or the end, joined by OR, AND or nothing (OR).
    fn sequence(&mut self, field: Option<&str>, depth: usize) -> Result<Node, ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.err_here("Query nested too deeply"));
        }
        let mut clauses: Vec<(Occur, Node)> = Vec::new();
        loop {
            match self.peek() {
                None | Some(Tok::RParen) => break,
                Some(Tok::Or) => {
                    if clauses.is_empty() {
                        return Err(self.err_here("Missing term before OR"));
                    }
                    self.at += 1;
                    if matches!(self.peek(), None | Some(Tok::RParen | Tok::Or | Tok::And)) {
                        return Err(self.err_here("Missing term after OR"));
                    }
                    continue;
                }
                Some(Tok::And) => return Err(self.err_here("Missing term before AND")),
                _ => {}
            }
            let clause = self.conjunction(field, depth)?;
            clauses.push(clause);
        }
        if clauses.is_empty() {
            return Err(self.err_here("Missing term"));
        }
        if clauses.len() == 1 && clauses[0].0 == Occur::Should {
            return Ok(clauses.pop().map_or(Node::All, |(_, n)| n));
        }
        let (mut must, mut should, mut must_not) = (Vec::new(), Vec::new(), Vec::new());
        for (occur, node) in clauses {
            match occur {
                Occur::Must => must.push(node),
                Occur::Should => should.push(node),
                Occur::MustNot => must_not.push(node),
            }
        }
        Ok(Node::Bool {
            must,
            should,
            must_not,
        })
    }

    /// `unary (AND unary)*`; a single unary keeps its `+`/`-` as the clause's occurrence.
    fn conjunction(
        &mut self,
        field: Option<&str>,
        depth: usize,
    ) -> Result<(Occur, Node), ParseError> {
        let first = self.unary(field, depth)?;
        if self.peek() != Some(&Tok::And) {
            return Ok(first);
        }
        let mut all = vec![as_node(first)];
        while self.peek() == Some(&Tok::And) {
            self.at += 1;
            if matches!(self.peek(), None | Some(Tok::RParen | Tok::Or | Tok::And)) {
                return Err(self.err_here("Missing term after AND"));
            }
            all.push(as_node(self.unary(field, depth)?));
        }
        Ok((Occur::Should, Node::And(all)))
    }

    fn unary(&mut self, field: Option<&str>, depth: usize) -> Result<(Occur, Node), ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.err_here("Query nested too deeply"));
        }
        let occur = match self.peek() {
            Some(Tok::Plus) => Occur::Must,
            Some(Tok::Minus | Tok::Not) => Occur::MustNot,
            _ => return Ok((Occur::Should, self.primary(field, depth)?)),
        };
        self.at += 1;
        if matches!(
            self.peek(),
            None | Some(Tok::RParen | Tok::Or | Tok::And | Tok::Plus | Tok::Minus)
        ) {
            return Err(self.err_here("Missing term after an operator"));
        }
        let (inner_occur, inner) = self.unary(field, depth + 1)?;
        let inner = as_node((inner_occur, inner));
        Ok((occur, inner))
    }

    fn primary(&mut self, field: Option<&str>, depth: usize) -> Result<Node, ParseError> {
        let Some((pos, tok)) = self.toks.get(self.at).cloned() else {
            return Err(self.err_here("Missing term"));
        };
        self.at += 1;
        match tok {
            Tok::LParen => {
                let node = self.sequence(field, depth + 1)?;
                if self.peek() != Some(&Tok::RParen) {
                    return Err(ParseError {
                        position: pos + 1,
                        message: "Unclosed '('".into(),
                    });
                }
                self.at += 1;
                Ok(node)
            }
            Tok::Field(name) => {
                if field.is_some() {
                    return Err(ParseError {
                        position: pos + 1,
                        message: "A field inside a field group".into(),
                    });
                }
                match self.peek() {
                    Some(
                        Tok::LParen
                        | Tok::Word { .. }
                        | Tok::Phrase(_)
                        | Tok::Regex(_)
                        | Tok::Range { .. },
                    ) => self.primary(Some(&name), depth + 1),
                    _ => Err(self.err_here(format!("Missing value after '{name}:'"))),
                }
            }
            Tok::Word { text, wild } => {
                let pattern = if text == "*" {
                    if field.is_none() {
                        return Ok(Node::All);
                    }
                    Pattern::Exists
                } else if wild {
                    Pattern::Wildcard(text)
                } else {
                    Pattern::Word(unescape_glob(&text))
                };
                Ok(term(field, pattern))
            }
            Tok::Phrase(text) => Ok(term(field, Pattern::Phrase(text))),
            Tok::Regex(text) => match Regex::new(&format!("^(?:{text})$")) {
                Ok(re) => Ok(term(field, Pattern::Regex(re))),
                Err(e) => Err(ParseError {
                    position: pos + 1,
                    message: format!("Bad regular expression: {e}"),
                }),
            },
            Tok::Range {
                low,
                high,
                low_inclusive,
                high_inclusive,
            } => {
                if field.is_none() {
                    return Err(ParseError {
                        position: pos + 1,
                        message: "A range needs a field".into(),
                    });
                }
                let open = |s: String| (s != "*").then_some(s);
                Ok(term(
                    field,
                    Pattern::Range {
                        low: open(low),
                        high: open(high),
                        low_inclusive,
                        high_inclusive,
                    },
                ))
            }
            other => Err(ParseError {
                position: pos + 1,
                message: format!("Unexpected {}", describe(&other)),
            }),
        }
    }
}

fn term(field: Option<&str>, pattern: Pattern) -> Node {
    Node::Term {
        field: field.map(str::to_string),
        pattern,
    }
}

fn as_node((occur, node): (Occur, Node)) -> Node {
    match occur {
        Occur::MustNot => Node::Not(Box::new(node)),
        _ => node,
    }
}

/// How a field's values are matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// Names, UIDs, types and times: the whole value, case-sensitive (globs and regexes on
    /// the whole value; ranges compare numbers when both sides are integers).
    Keyword,
    /// Free text (descriptions, notes, custom values): words, case-insensitive; a regex or
    /// glob matches the whole value or one word.
    Text,
}

/// The words of a text: runs of letters, digits, `_` and inner `.`, lower-cased.
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .map(|w| w.trim_matches('.'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Glob match of `*` (any run) and `?` (one character), `\` escaping either.
pub fn glob_matches(glob: &str, text: &str) -> bool {
    #[derive(Clone, Copy, PartialEq)]
    enum G {
        Star,
        One,
        Lit(char),
    }
    let mut pattern = Vec::new();
    let mut chars = glob.chars();
    while let Some(c) = chars.next() {
        pattern.push(match c {
            '*' => G::Star,
            '?' => G::One,
            '\\' => G::Lit(chars.next().unwrap_or('\\')),
            c => G::Lit(c),
        });
    }
    let text: Vec<char> = text.chars().collect();
    // Iterative matcher with one backtrack point (linear-ish, no recursion).
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(G::Star) => {
                star = Some((p, t));
                p += 1;
            }
            Some(G::One) => {
                p += 1;
                t += 1;
            }
            Some(G::Lit(c)) if *c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|g| *g == G::Star)
}

fn in_range(value: &str, low: Option<&str>, high: Option<&str>, li: bool, hi: bool) -> bool {
    let numbers = |a: &str, b: &str| Some((a.parse::<i64>().ok()?, b.parse::<i64>().ok()?));
    let cmp = |a: &str, b: &str| match numbers(a, b) {
        Some((x, y)) => x.cmp(&y),
        None => a.cmp(b),
    };
    let above = low.is_none_or(|l| match cmp(value, l) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Equal => li,
        std::cmp::Ordering::Less => false,
    });
    let below = high.is_none_or(|h| match cmp(value, h) {
        std::cmp::Ordering::Less => true,
        std::cmp::Ordering::Equal => hi,
        std::cmp::Ordering::Greater => false,
    });
    above && below
}

/// Whether one value of a field matches a pattern.
pub fn value_matches(pattern: &Pattern, kind: FieldKind, value: &str) -> bool {
    match (pattern, kind) {
        (Pattern::Exists, _) => !value.is_empty(),
        (
            Pattern::Range {
                low,
                high,
                low_inclusive,
                high_inclusive,
            },
            _,
        ) => in_range(
            value,
            low.as_deref(),
            high.as_deref(),
            *low_inclusive,
            *high_inclusive,
        ),
        (Pattern::Word(w) | Pattern::Phrase(w), FieldKind::Keyword) => value == w,
        (Pattern::Wildcard(g), FieldKind::Keyword) => glob_matches(g, value),
        (Pattern::Regex(re), FieldKind::Keyword) => re.is_match(value),
        (Pattern::Word(w) | Pattern::Phrase(w), FieldKind::Text) => {
            if value.to_lowercase() == w.to_lowercase() {
                return true;
            }
            let want = words(w);
            if want.is_empty() {
                return false;
            }
            let have = words(value);
            have.windows(want.len()).any(|win| win == want.as_slice())
        }
        (Pattern::Wildcard(g), FieldKind::Text) => {
            let g = g.to_lowercase();
            glob_matches(&g, &value.to_lowercase())
                || words(value).iter().any(|w| glob_matches(&g, w))
        }
        (Pattern::Regex(re), FieldKind::Text) => {
            re.is_match(value) || words(value).iter().any(|w| re.is_match(w))
        }
    }
}

/// A document a query is evaluated on: its values per field, read on demand.
pub trait Document {
    /// The values of `field` (empty: the field is absent) and how they match.
    fn field(&mut self, field: &str) -> crate::Result<(FieldKind, Vec<String>)>;
    /// Every value of every field, for bare terms.
    fn all_fields(&mut self) -> crate::Result<Vec<(FieldKind, String)>>;
}

/// Evaluates `node` on `doc`.
pub fn matches(node: &Node, doc: &mut dyn Document) -> crate::Result<bool> {
    Ok(match node {
        Node::All => true,
        Node::Term { field, pattern } => match field {
            Some(f) => {
                let (kind, values) = doc.field(f)?;
                values.iter().any(|v| value_matches(pattern, kind, v))
            }
            None => doc
                .all_fields()?
                .iter()
                .any(|(kind, v)| value_matches(pattern, *kind, v)),
        },
        Node::And(children) => {
            for c in children {
                if !matches(c, doc)? {
                    return Ok(false);
                }
            }
            true
        }
        Node::Not(c) => !matches(c, doc)?,
        Node::Bool {
            must,
            should,
            must_not,
        } => {
            for c in must {
                if !matches(c, doc)? {
                    return Ok(false);
                }
            }
            for c in must_not {
                if matches(c, doc)? {
                    return Ok(false);
                }
            }
            if must.is_empty() && !should.is_empty() {
                for c in should {
                    if matches(c, doc)? {
                        return Ok(true);
                    }
                }
                return Ok(false);
            }
            true
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// A document of fixed fields: keyword `metric`, `tags.host`, text `description`.
    struct Fixed(BTreeMap<&'static str, (FieldKind, Vec<String>)>);

    impl Document for Fixed {
        fn field(&mut self, field: &str) -> crate::Result<(FieldKind, Vec<String>)> {
            Ok(self
                .0
                .get(field)
                .cloned()
                .unwrap_or((FieldKind::Keyword, Vec::new())))
        }

        fn all_fields(&mut self) -> crate::Result<Vec<(FieldKind, String)>> {
            Ok(self
                .0
                .values()
                .flat_map(|(k, vs)| vs.iter().map(move |v| (*k, v.clone())))
                .collect())
        }
    }

    fn doc(metric: &str, host: &str, description: &str) -> Fixed {
        let mut m = BTreeMap::new();
        m.insert("metric", (FieldKind::Keyword, vec![metric.to_string()]));
        m.insert("tags.host", (FieldKind::Keyword, vec![host.to_string()]));
        m.insert(
            "description",
            (FieldKind::Text, vec![description.to_string()]),
        );
        Fixed(m)
    }

    fn hits(q: &str, d: &mut Fixed) -> bool {
        matches(&parse(q).unwrap(), d).unwrap()
    }

    #[test]
    fn everything_queries() {
        for q in ["", "  ", "*", "*:*"] {
            assert!(matches!(parse(q).unwrap(), Node::All), "{q}");
        }
    }

    #[test]
    fn terms_fields_and_operators() {
        let mut d = doc("sys.cpu.user", "web-01", "Web server CPU, rack 7.");
        assert!(hits("metric:sys.cpu.user", &mut d));
        assert!(!hits("metric:sys.cpu", &mut d), "keywords match whole");
        assert!(
            !hits("metric:SYS.CPU.USER", &mut d),
            "keywords are case-sensitive"
        );
        assert!(hits("metric:sys.*", &mut d));
        assert!(hits("metric:sys.cpu.use?", &mut d));
        assert!(!hits("metric:sys.cpu.us?", &mut d));
        assert!(hits("metric:/sys\\.cpu\\..*/", &mut d));
        assert!(!hits("metric:/cpu/", &mut d), "regexes are anchored");
        assert!(hits("tags.host:web\\-01", &mut d));
        assert!(hits("tags.host:web-01", &mut d));
        assert!(hits("description:server", &mut d), "text matches words");
        assert!(
            hits("description:SERVER", &mut d),
            "text is case-insensitive"
        );
        assert!(hits("description:\"web server\"", &mut d));
        assert!(!hits("description:\"server web\"", &mut d));
        assert!(hits("description:7", &mut d), "a trailing dot ends a word");
        assert!(hits("description:ser*", &mut d));
        assert!(hits("server", &mut d), "bare terms search every field");
        assert!(hits("web-01", &mut d));
        assert!(!hits("nothing", &mut d));
        assert!(hits("description:*", &mut d));
        assert!(!hits("notes:*", &mut d));
        assert!(hits("metric:x OR tags.host:web-01", &mut d));
        assert!(hits("metric:x tags.host:web-01", &mut d), "default OR");
        assert!(!hits("metric:x AND tags.host:web-01", &mut d));
        assert!(!hits("metric:x && tags.host:web-01", &mut d));
        assert!(hits("metric:x || tags.host:web-01", &mut d));
        assert!(!hits("+metric:x tags.host:web-01", &mut d));
        assert!(
            hits("+tags.host:web-01 metric:x", &mut d),
            "SHOULD is optional beside MUST"
        );
        assert!(!hits("tags.host:web-01 -metric:sys.cpu.user", &mut d));
        assert!(!hits("-metric:sys.cpu.user", &mut d));
        assert!(hits("-metric:x", &mut d), "only negatives: everything else");
        assert!(hits("NOT metric:x", &mut d));
        assert!(hits("!metric:x", &mut d));
        assert!(hits("metric:sys.cpu.user AND NOT tags.host:x", &mut d));
        assert!(!hits(
            "metric:sys.cpu.user AND NOT tags.host:web-01",
            &mut d
        ));
        assert!(hits(
            "(metric:x OR metric:sys.cpu.user) AND description:cpu",
            &mut d
        ));
        assert!(hits("tags.host:(a OR web-01)", &mut d));
        assert!(!hits("tags.host:(a OR b)", &mut d));
        assert!(hits("metric:[sys.a TO sys.d]", &mut d));
        assert!(!hits("metric:{sys.cpu.user TO *}", &mut d));
        assert!(hits("metric:[sys.cpu.user TO *]", &mut d));
    }

    #[test]
    fn ranges_compare_numbers() {
        let mut m = BTreeMap::new();
        m.insert("startTime", (FieldKind::Keyword, vec!["900".to_string()]));
        let mut d = Fixed(m);
        assert!(hits("startTime:[100 TO 1000]", &mut d));
        assert!(!hits("startTime:[1000 TO *]", &mut d));
        assert!(hits("startTime:[* TO 900]", &mut d));
        assert!(!hits("startTime:[* TO 900}", &mut d));
    }

    #[test]
    fn refused_queries_name_their_position() {
        for (q, position, words) in [
            ("metric:(", 9, "Missing term"),
            ("tags.host:\"web", 11, "Unclosed phrase"),
            ("a AND", 6, "Missing term after AND"),
            ("OR b", 1, "Missing term before OR"),
            ("AND b", 1, "Missing term before AND"),
            ("a OR", 5, "Missing term after OR"),
            ("metric:x^2", 9, "Boosts (^) are not supported"),
            (
                "web~2",
                4,
                "Fuzzy and proximity queries (~) are not supported",
            ),
            ("\"a b\"~2", 6, "Proximity queries (~) are not supported"),
            ("(a", 1, "Unclosed '('"),
            ("a)", 2, "Unexpected ')'"),
            (":x", 1, "Unexpected ':'"),
            ("metric:", 8, "Missing value after 'metric:'"),
            ("metric:/a", 8, "Unclosed regular expression"),
            ("metric:[a TO", 8, "Unclosed range"),
            ("metric:[a b]", 8, "A range must read [low TO high]"),
            ("[a TO b]", 1, "A range needs a field"),
            ("a:b:c", 3, "Missing value after 'a:'"),
            ("a:(b:c)", 4, "A field inside a field group"),
            ("-", 2, "Missing term after an operator"),
            ("a\\", 2, "Escape (\\) at the end of the query"),
        ] {
            let e = parse(q).expect_err(q);
            assert_eq!((e.position, e.message.as_str()), (position, words), "{q}");
        }
        let e = parse("metric:/a(/").unwrap_err();
        assert!(e.message.starts_with("Bad regular expression"), "{e}");
        assert_eq!(e.to_string(), format!("{} at position 8", e.message));
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let q = "(".repeat(10_000) + "a" + &")".repeat(10_000);
        assert_eq!(parse(&q).unwrap_err().message, "Query nested too deeply");
        let q = "!".repeat(10_000) + "a";
        assert_eq!(parse(&q).unwrap_err().message, "Query nested too deeply");
        assert!(parse(&("-".repeat(10_000) + "a")).is_err());
        let q = "NOT ".repeat(10_000) + "a";
        assert_eq!(parse(&q).unwrap_err().message, "Query nested too deeply");
    }

    #[test]
    fn required_words_are_what_every_match_needs() {
        let q = parse("+metric:m tags.host:a AND tags.dc:b").unwrap();
        let mut out = Vec::new();
        q.required_words(&["metric", "tags.host"], &mut out);
        assert_eq!(out, vec![("metric", "m")]);
        let q = parse("metric:m AND (tags.host:a OR tags.host:b)").unwrap();
        let mut out = Vec::new();
        q.required_words(&["metric", "tags.host"], &mut out);
        assert_eq!(out, vec![("metric", "m")]);
        let q = parse("metric:m").unwrap();
        let mut out = Vec::new();
        q.required_words(&["metric"], &mut out);
        assert_eq!(out, vec![("metric", "m")]);
        let q = parse("NOT metric:m").unwrap();
        let mut out = Vec::new();
        q.required_words(&["metric"], &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn globs() {
        assert!(glob_matches("a*c", "abbbc"));
        assert!(glob_matches("*", ""));
        assert!(glob_matches("a?c", "abc"));
        assert!(!glob_matches("a?c", "ac"));
        assert!(glob_matches("a\\*", "a*"));
        assert!(!glob_matches("a\\*", "ab"));
        assert!(glob_matches("*b*b*", "abab"));
        assert!(!glob_matches("*b*b*", "ab"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// No input makes the parser or an evaluation panic.
        #[test]
        fn any_string_parses_or_is_refused(q in prop_oneof!["\\PC{0,40}", any::<String>()]) {
            if let Ok(node) = parse(&q) {
                let mut d = doc("sys.cpu", "web01", "some text");
                let _ = matches(&node, &mut d);
            }
        }

        /// The same, from the query language's own characters.
        #[test]
        fn query_characters_parse_or_are_refused(
            q in proptest::collection::vec(
                prop_oneof![
                    Just("("), Just(")"), Just(":"), Just("\""), Just("/"), Just("["),
                    Just("]"), Just("{"), Just("}"), Just("*"), Just("?"), Just("\\"),
                    Just("+"), Just("-"), Just("!"), Just("AND"), Just("OR"), Just("NOT"),
                    Just("&&"), Just("||"), Just(" "), Just("TO"), Just("metric"),
                    Just("web"), Just("^"), Just("~"), Just("é"),
                ],
                0..24,
            )
        ) {
            let q: String = q.concat();
            match parse(&q) {
                Ok(node) => {
                    let mut d = doc("metric", "web", "web TO");
                    let _ = matches(&node, &mut d);
                }
                Err(e) => prop_assert!(e.position >= 1 && e.position <= q.chars().count() + 1),
            }
        }

        /// A conjunction of exact terms matches exactly when each term does.
        #[test]
        fn and_of_terms_is_each_term(
            metric in "[a-z]{1,3}", host in "[a-z]{1,3}",
            want_metric in "[a-z]{1,3}", want_host in "[a-z]{1,3}",
        ) {
            let mut d = doc(&metric, &host, "");
            let q = format!("metric:{want_metric} AND tags.host:{want_host}");
            prop_assert_eq!(hits(&q, &mut d), metric == want_metric && host == want_host);
            let q = format!("metric:{want_metric} OR tags.host:{want_host}");
            prop_assert_eq!(hits(&q, &mut d), metric == want_metric || host == want_host);
            let q = format!("metric:{want_metric} -tags.host:{want_host}");
            prop_assert_eq!(hits(&q, &mut d), metric == want_metric && host != want_host);
        }
    }
}
