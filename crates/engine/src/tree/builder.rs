//! Running a series through a tree's rules, as 2.4.1's `TreeBuilder` does (RFC 0010).
//!
//! The walk is 2.4.1's recursion step for step, including its quirks (a level that matches
//! nothing collapses into its parent; a separator splits one value over several levels),
//! because stored trees must come out the same as a 2.4.1 TSD builds them. Branches built
//! during one walk live in an arena, so the recursion can move "the current branch" around
//! as the Java code moves its field.

use std::collections::{BTreeMap, HashSet};

use hourglass_core::uid::{UidKind, hex_upper};

use super::model::*;
use super::store;
use crate::meta::{TsMeta, UidMeta};
use crate::{Error, Result, Tsdb};

#[derive(Debug, Default)]
struct Node {
    name: String,
    children: Vec<usize>,
    leaves: Option<BTreeMap<i32, Leaf>>,
}

/// The result of one series' walk through a tree.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What each step did (the `/api/tree/test` messages).
    pub messages: Vec<String>,
    /// With `strictMatch`, the rules of the levels that failed (the series is not added).
    pub not_matched: Option<String>,
    /// The branch the series hangs from at the first level, with the branches below it
    /// (paths set from the root), or None when nothing is to be stored.
    pub chain: Option<Branch>,
    /// The root with what the walk added to it: the chain as its child (for testing), and
    /// any leaf of a single-level tree.
    pub root: Branch,
    /// Leaves that met another TSUID of the same name during the walk: (new, existing).
    pub collisions: Vec<(String, String)>,
}

/// Runs series through one tree.
#[derive(Debug)]
pub struct TreeBuilder {
    tree: Tree,
    max_level: i32,
    // The walk's state, as 2.4.1 keeps it.
    nodes: Vec<Node>,
    current: Option<usize>,
    splits: Option<Vec<String>>,
    rule_idx: i32,
    split_idx: usize,
    rule: Option<TreeRule>,
    not_matched: Option<String>,
    messages: Vec<String>,
    collisions: Vec<(String, String)>,
    tsuid: String,
    /// Branches stored by this builder (a definition is written once per builder).
    stored_branches: HashSet<Vec<u8>>,
    /// The tree's root once read or created by [`TreeBuilder::process_and_store`].
    stored_root: Option<Branch>,
}

const ROOT: usize = 0;

/// Java's `String.split(regex)`: pieces between matches, trailing empty pieces dropped (a
/// zero-width match at the start gives no leading empty piece).
fn java_split(re: &regex::Regex, value: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut last = 0;
    for m in re.find_iter(value) {
        if m.start() == m.end() && m.start() == 0 {
            continue;
        }
        pieces.push(value[last..m.start()].to_string());
        last = m.end();
    }
    pieces.push(value[last..].to_string());
    while pieces.last().is_some_and(String::is_empty) {
        pieces.pop();
    }
    pieces
}

impl TreeBuilder {
    pub fn new(tree: Tree) -> TreeBuilder {
        let max_level = tree.rules.keys().copied().max().unwrap_or(0);
        TreeBuilder {
            tree,
            max_level,
            nodes: Vec::new(),
            current: None,
            splits: None,
            rule_idx: 0,
            split_idx: 0,
            rule: None,
            not_matched: None,
            messages: Vec::new(),
            collisions: Vec::new(),
            tsuid: String::new(),
            stored_branches: HashSet::new(),
            stored_root: None,
        }
    }

    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    fn message(&mut self, m: String) {
        self.messages.push(m);
    }

    fn name(&self, node: Option<usize>) -> &str {
        node.and_then(|n| self.nodes.get(n))
            .map_or("", |n| n.name.as_str())
    }

    fn label(&self, node: usize) -> String {
        if node == ROOT {
            let root = Branch::root(self.tree.tree_id);
            format!(
                "ID: [{}] Name: [{}]",
                hex_upper(&root.id()),
                self.nodes[ROOT].name
            )
        } else {
            format!("Name: [{}]", self.nodes[node].name)
        }
    }

    fn rule_label(&self) -> String {
        self.rule.as_ref().map_or_else(String::new, TreeRule::label)
    }

    /// Walks a series through the rules, storing nothing. `root` is the tree's root as
    /// stored (or a fresh `ROOT`).
    pub fn run(&mut self, meta: &TsMeta, root: &Branch) -> Result<Outcome> {
        if meta.tsuid.is_empty() {
            return Err(Error::invalid("Missing TSUID"));
        }
        self.nodes = vec![Node {
            name: root.display_name.clone(),
            ..Node::default()
        }];
        self.current = None;
        self.splits = None;
        self.rule_idx = 0;
        self.split_idx = 0;
        self.rule = None;
        self.not_matched = None;
        self.messages = Vec::new();
        self.collisions = Vec::new();
        self.tsuid = meta.tsuid.clone();
        if !self.tree.rules.is_empty() {
            self.process_ruleset(meta, ROOT, 1)?;
        }
        let mut root_out = root.clone();
        root_out.branches = None;
        root_out.leaves = self.nodes[ROOT].leaves.take();
        let rejected = self.not_matched.is_some() && self.tree.strict_match;
        let mut chain = None;
        if rejected {
            self.message(format!(
                "TSUID failed to match one or more rule levels, will not add: {}",
                meta.tsuid
            ));
        } else if let Some(top) = self.current {
            let mut b = self.materialize(top);
            set_paths(&mut b, root_out.full_path());
            root_out.add_child(b.clone());
            chain = Some(b);
        }
        Ok(Outcome {
            messages: std::mem::take(&mut self.messages),
            not_matched: if rejected {
                self.not_matched.clone()
            } else {
                None
            },
            chain,
            root: root_out,
            collisions: std::mem::take(&mut self.collisions),
        })
    }

    fn materialize(&mut self, node: usize) -> Branch {
        let mut b = Branch::new(self.tree.tree_id);
        b.display_name = self.nodes[node].name.clone();
        b.leaves = self.nodes[node].leaves.take();
        let children = std::mem::take(&mut self.nodes[node].children);
        for c in children {
            let child = self.materialize(c);
            b.add_child(child);
        }
        b
    }

    fn new_node(&mut self) -> usize {
        self.nodes.push(Node::default());
        self.nodes.len() - 1
    }

    fn rule_level(&mut self) -> Option<BTreeMap<i32, TreeRule>> {
        while self.rule_idx <= self.max_level {
            if let Some(level) = self.tree.rules.get(&self.rule_idx) {
                return Some(level.clone());
            }
            self.rule_idx += 1;
        }
        None
    }

    /// 2.4.1's `processRuleset`, one level (or one split piece) per call.
    fn process_ruleset(&mut self, meta: &TsMeta, parent: usize, depth: i32) -> Result<bool> {
        if self.rule_idx > self.max_level {
            return Ok(true);
        }
        let previous = self.current;
        let cur = self.new_node();
        self.current = Some(cur);
        let Some(level) = self.rule_level() else {
            return Ok(true);
        };
        for rule in level.into_values() {
            let kind = rule.kind;
            self.rule = Some(rule);
            self.message(format!("Processing rule: {}", self.rule_label()));
            match kind {
                Some(RuleType::Metric) => self.parse_metric(meta)?,
                Some(RuleType::Tagk) => self.parse_tagk(meta)?,
                Some(RuleType::MetricCustom) => self.parse_metric_custom(meta)?,
                Some(RuleType::TagkCustom) => self.parse_uid_custom(meta, UidKind::TagKey)?,
                Some(RuleType::TagvCustom) => self.parse_uid_custom(meta, UidKind::TagValue)?,
                None => {
                    return Err(Error::invalid(format!(
                        "Unkown rule type: null in rule {}",
                        self.rule_label()
                    )));
                }
            }
            if !self.nodes[cur].name.is_empty() {
                break;
            }
        }
        if self.nodes[cur].name.is_empty() {
            let label = self.rule_label();
            match &mut self.not_matched {
                None => self.not_matched = Some(label),
                Some(m) => {
                    m.push(' ');
                    m.push_str(&label);
                }
            }
        }
        match &self.splits {
            Some(s) if self.split_idx >= s.len() => {
                self.splits = None;
                self.split_idx = 0;
                self.rule_idx += 1;
            }
            Some(_) => {}
            None => self.rule_idx += 1,
        }
        let depth = depth + 1;
        let complete = self.process_ruleset(meta, cur, depth)?;
        if complete {
            let Some(c) = self.current.filter(|c| !self.nodes[*c].name.is_empty()) else {
                self.current = previous;
                return Ok(true);
            };
            if self.nodes[parent].name.is_empty() {
                self.message(format!(
                    "Depth [{depth}] Parent branch was empty, rolling back"
                ));
                return Ok(true);
            }
            let leaf = Leaf::new(&self.nodes[c].name, &self.tsuid);
            let text = format!("name: {} tsuid: {}", leaf.display_name, leaf.tsuid);
            let leaves = self.nodes[parent].leaves.get_or_insert_with(BTreeMap::new);
            let hash = java_hash(&leaf.display_name);
            match leaves.get(&hash) {
                Some(existing) if existing.tsuid != leaf.tsuid => {
                    let existing = existing.tsuid.clone();
                    self.collisions.push((leaf.tsuid.clone(), existing));
                }
                Some(_) => {}
                None => {
                    leaves.insert(hash, leaf);
                }
            }
            let parent_label = self.label(parent);
            self.message(format!(
                "Depth [{depth}] Adding leaf [{text}] to parent branch [{parent_label}]"
            ));
            self.current = previous;
            return Ok(false);
        }
        let current_name = self.name(self.current).to_string();
        if self.name(previous).is_empty() && !current_name.is_empty() {
            if depth > 2 {
                let label = self.current.map(|c| self.label(c)).unwrap_or_default();
                self.message(format!(
                    "Depth [{depth}] Skipping a non-matched branch, returning: {label}"
                ));
            }
            return Ok(false);
        }
        if current_name.is_empty() {
            self.message(format!("Depth [{depth}] Branch was empty"));
            self.current = previous;
            return Ok(false);
        }
        if current_name == self.name(previous) {
            self.message(format!("Depth [{depth}] Current was the same as previous"));
            return Ok(false);
        }
        if let Some(c) = self.current {
            let exists = self.nodes[parent]
                .children
                .iter()
                .any(|x| compare_ignore_case(&self.nodes[*x].name, &current_name).is_eq());
            if !exists {
                self.nodes[parent].children.push(c);
            }
            let (cl, pl) = (self.label(c), self.label(parent));
            self.message(format!(
                "Depth [{depth}] Adding branch: {cl} to parent: {pl}"
            ));
        }
        self.current = previous;
        Ok(false)
    }

    fn parse_metric(&mut self, meta: &TsMeta) -> Result<()> {
        if meta.metric.name.is_empty() {
            return Err(Error::invalid("Timeseries metric name was null or empty"));
        }
        let metric = meta.metric.name.clone();
        self.process_value(&metric)
    }

    fn rule_field(&self) -> (String, String) {
        self.rule.as_ref().map_or_else(Default::default, |r| {
            (r.field.clone(), r.custom_field.clone())
        })
    }

    fn parse_tagk(&mut self, meta: &TsMeta) -> Result<()> {
        if meta.tags.is_empty() {
            return Err(Error::invalid("Tags for the timeseries meta were null"));
        }
        let (field, _) = self.rule_field();
        let mut found = false;
        let mut value = String::new();
        for uid in &meta.tags {
            if uid.kind == UidKind::TagKey && uid.name == field {
                found = true;
            } else if uid.kind == UidKind::TagValue && found {
                value.clone_from(&uid.name);
                break;
            }
        }
        let label = self.rule_label();
        if !found || value.is_empty() {
            self.message(format!("No match on tagk [{field}] for rule: {label}"));
            return Ok(());
        }
        self.message(format!("Matched tagk [{field}] for rule: {label}"));
        self.process_value(&value)
    }

    fn custom_value(&mut self, uid: &UidMeta) -> Result<()> {
        let (_, custom_field) = self.rule_field();
        let label = self.rule_label();
        match uid
            .fields
            .custom
            .as_ref()
            .and_then(|c| c.get(&custom_field))
        {
            Some(v) => {
                let v = v.clone();
                self.process_value(&v)?;
                self.message(format!(
                    "Matched custom tag [{custom_field}] for rule: {label}"
                ));
            }
            None => self.message(format!(
                "No match on custom tag [{custom_field}] for rule: {label}"
            )),
        }
        Ok(())
    }

    fn parse_metric_custom(&mut self, meta: &TsMeta) -> Result<()> {
        self.custom_value(&meta.metric)
    }

    fn parse_uid_custom(&mut self, meta: &TsMeta, kind: UidKind) -> Result<()> {
        if meta.tags.is_empty() {
            return Err(Error::invalid("Timeseries meta data was missing tags"));
        }
        let (field, _) = self.rule_field();
        let label = self.rule_label();
        let word = if kind == UidKind::TagKey {
            "tagk"
        } else {
            "tagv"
        };
        let Some(uid) = meta.tags.iter().find(|t| t.kind == kind && t.name == field) else {
            self.message(format!("No match on {word} [{field}] for rule: {label}"));
            return Ok(());
        };
        self.message(format!("Matched {word} [{field}] for rule: {label}"));
        self.custom_value(uid)
    }

    fn process_value(&mut self, value: &str) -> Result<()> {
        let Some(rule) = self.rule.clone() else {
            return Ok(());
        };
        if !rule.regex.is_empty() {
            let Some(re) = rule.compiled_regex() else {
                self.message(format!(
                    "Regex for rule {} does not compile, no match",
                    rule.label()
                ));
                return Ok(());
            };
            return self.process_regex(&rule, re, value);
        }
        if rule.separator.is_empty() {
            self.set_current_name(value, value);
            return Ok(());
        }
        let Some(sep) = rule.separator_regex() else {
            self.message(format!(
                "Separator for rule {} does not compile, no match",
                rule.label()
            ));
            return Ok(());
        };
        self.process_split(&rule, sep, value)
    }

    fn process_split(&mut self, rule: &TreeRule, sep: &regex::Regex, value: &str) -> Result<()> {
        match &self.splits {
            None => {
                if value.is_empty() {
                    return Err(Error::invalid(format!(
                        "Value was empty for rule: {}",
                        rule.label()
                    )));
                }
                let splits = java_split(sep, value);
                if splits.is_empty() {
                    self.message(format!(
                        "Separator did not match, created an empty list on rule: {}",
                        rule.label()
                    ));
                    self.splits = Some(splits);
                    self.split_idx = 1;
                    return Ok(());
                }
                let first = splits[0].clone();
                self.splits = Some(splits);
                self.split_idx = 1;
                self.set_current_name(value, &first);
            }
            Some(splits) => {
                let piece = splits.get(self.split_idx).cloned().unwrap_or_default();
                self.split_idx += 1;
                self.set_current_name(value, &piece);
            }
        }
        Ok(())
    }

    fn process_regex(&mut self, rule: &TreeRule, re: &regex::Regex, value: &str) -> Result<()> {
        let Some(caps) = re.captures(value) else {
            return Ok(());
        };
        let groups = re.captures_len() - 1;
        let idx = usize::try_from(rule.regex_group_idx).unwrap_or(0);
        if groups > idx {
            match caps
                .get(idx + 1)
                .map(|m| m.as_str())
                .filter(|s| !s.is_empty())
            {
                Some(extracted) => {
                    let extracted = extracted.to_string();
                    self.set_current_name(value, &extracted);
                }
                None => self.message(format!(
                    "Extracted value for rule {} was null or empty",
                    rule.label()
                )),
            }
        } else {
            self.message(format!(
                "Regex group index [{}] for rule {} was out of bounds [{groups}]",
                rule.regex_group_idx,
                rule.label()
            ));
        }
        Ok(())
    }

    fn set_current_name(&mut self, original: &str, extracted: &str) {
        let Some(cur) = self.current else { return };
        let Some(rule) = self.rule.clone() else {
            return;
        };
        if rule.display_format.is_empty() {
            self.nodes[cur].name = extracted.to_string();
            return;
        }
        let mut format = rule.display_format.replace("{ovalue}", original);
        format = format.replace("{value}", extracted);
        format = format.replace("{tsuid}", &self.tsuid);
        if format.contains("{tag_name}") {
            let name = match rule.kind {
                Some(RuleType::Tagk) => rule.field.clone(),
                Some(RuleType::MetricCustom | RuleType::TagkCustom | RuleType::TagvCustom) => {
                    rule.custom_field.clone()
                }
                _ => {
                    self.message(format!(
                        "Display rule {} was of the wrong type to match on {{tag_name}}",
                        rule.label()
                    ));
                    String::new()
                }
            };
            format = format.replace("{tag_name}", &name);
        }
        self.nodes[cur].name = format;
    }

    /// Walks a series and stores the result: its branches and leaf, and (when the tree
    /// stores failures) collisions and not-matched entries. Returns the walk's outcome.
    pub fn process_and_store(&mut self, tsdb: &Tsdb, meta: &TsMeta) -> Result<Outcome> {
        let tree_id = self.tree.tree_id;
        let root = match &self.stored_root {
            Some(r) => r.clone(),
            None => {
                let r = load_or_init_root(tsdb, tree_id)?;
                self.stored_root = Some(r.clone());
                r
            }
        };
        let outcome = self.run(meta, &root)?;
        if let Some(message) = &outcome.not_matched {
            if self.tree.store_failures {
                store::store_failures(
                    tsdb,
                    tree_id,
                    false,
                    &[(meta.tsuid.clone(), message.clone())],
                )?;
            }
            return Ok(outcome);
        }
        let mut collisions = outcome.collisions.clone();
        let mut next = outcome.chain.as_ref();
        while let Some(b) = next {
            let id = b.id();
            if b.leaves.is_some() || !self.stored_branches.contains(&id) {
                collisions.extend(store::store_branch(tsdb, b, true)?);
                self.stored_branches.insert(id);
            }
            next = b.branches.as_ref().and_then(|c| c.first());
        }
        if self.tree.store_failures {
            store::store_failures(tsdb, tree_id, true, &collisions)?;
        }
        Ok(outcome)
    }
}

/// Sets each branch's path to its parent's full path.
fn set_paths(b: &mut Branch, parent_path: BTreeMap<i32, String>) {
    b.path = parent_path;
    let own = b.full_path();
    if let Some(children) = &mut b.branches {
        for c in children {
            set_paths(c, own.clone());
        }
    }
}

/// The tree's stored root, or a new `ROOT` stored now.
pub fn load_or_init_root(tsdb: &Tsdb, tree_id: u16) -> Result<Branch> {
    if let Some(root) = store::fetch_branch_only(tsdb, &tree_id_bytes(tree_id))? {
        return Ok(root);
    }
    let root = Branch::root(tree_id);
    store::store_branch(tsdb, &root, false)?;
    Ok(root)
}

/// The tree's stored root for a test walk, or a new `ROOT` (not stored).
pub fn root_for_test(tsdb: &Tsdb, tree_id: u16) -> Result<Branch> {
    Ok(store::fetch_branch_only(tsdb, &tree_id_bytes(tree_id))?
        .unwrap_or_else(|| Branch::root(tree_id)))
}
