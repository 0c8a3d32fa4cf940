//! Trees, rules, branches and leaves, and their JSON as OpenTSDB 2.4.1 writes it (RFC 0010).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};

use regex::Regex;
use serde_json::{Map, Value, json};

use crate::meta::json_string;
use crate::{Error, Result};

/// Qualifier of a tree's definition.
pub const TREE_QUALIFIER: &[u8] = b"tree";
/// Prefix of a rule's qualifier: `tree_rule:<level>:<order>`.
pub const RULE_PREFIX: &[u8] = b"tree_rule:";
/// Qualifier of a branch's definition.
pub const BRANCH_QUALIFIER: &[u8] = b"branch";
/// Prefix of a leaf's qualifier: `leaf:` + 4-byte display name hash.
pub const LEAF_PREFIX: &[u8] = b"leaf:";
/// Prefix of a collision's qualifier: `tree_collision:` + TSUID bytes.
pub const COLLISION_PREFIX: &[u8] = b"tree_collision:";
/// Prefix of a not-matched entry's qualifier: `tree_not_matched:` + TSUID bytes.
pub const NOT_MATCHED_PREFIX: &[u8] = b"tree_not_matched:";
/// Suffix of the collisions row (after the tree id).
pub const COLLISION_ROW_SUFFIX: u8 = 0x01;
/// Suffix of the not-matched row (after the tree id).
pub const NOT_MATCHED_ROW_SUFFIX: u8 = 0x02;

/// Java's `String.hashCode()`: over UTF-16 code units, wrapping 32-bit arithmetic. Branch ids
/// and leaf qualifiers are built from it.
pub fn java_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// Java's `compareToIgnoreCase`, used to order branches and leaves.
pub fn compare_ignore_case(a: &str, b: &str) -> Ordering {
    let fold = |c: char| -> char {
        let up = c.to_uppercase().next().unwrap_or(c);
        up.to_lowercase().next().unwrap_or(up)
    };
    a.chars().map(fold).cmp(b.chars().map(fold))
}

/// Checks a tree id: 1 to 65535 (`Invalid Tree ID`).
pub fn check_tree_id(id: i64) -> Result<u16> {
    u16::try_from(id)
        .ok()
        .filter(|i| *i >= 1)
        .ok_or_else(|| Error::invalid("Invalid Tree ID"))
}

/// A tree id on its 2 row key bytes.
pub fn tree_id_bytes(id: u16) -> [u8; 2] {
    id.to_be_bytes()
}

/// The qualifier of the rule at `level`, `order`.
pub fn rule_qualifier(level: i32, order: i32) -> Vec<u8> {
    let mut q = RULE_PREFIX.to_vec();
    q.extend_from_slice(format!("{level}:{order}").as_bytes());
    q
}

/// A rule's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleType {
    Metric,
    MetricCustom,
    Tagk,
    TagkCustom,
    TagvCustom,
}

impl RuleType {
    /// OpenTSDB's `stringToType`, any case.
    pub fn parse(text: &str) -> Result<RuleType> {
        if text.is_empty() {
            return Err(Error::invalid("Rule type was empty"));
        }
        match text.to_ascii_lowercase().as_str() {
            "metric" => Ok(RuleType::Metric),
            "metric_custom" => Ok(RuleType::MetricCustom),
            "tagk" => Ok(RuleType::Tagk),
            "tagk_custom" => Ok(RuleType::TagkCustom),
            "tagv_custom" => Ok(RuleType::TagvCustom),
            _ => Err(Error::invalid("Unrecognized rule type")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RuleType::Metric => "METRIC",
            RuleType::MetricCustom => "METRIC_CUSTOM",
            RuleType::Tagk => "TAGK",
            RuleType::TagkCustom => "TAGK_CUSTOM",
            RuleType::TagvCustom => "TAGV_CUSTOM",
        }
    }
}

/// One rule of a tree, at a level and an order within the level.
#[derive(Debug, Clone, Default)]
pub struct TreeRule {
    pub kind: Option<RuleType>,
    pub field: String,
    pub custom_field: String,
    pub regex: String,
    pub separator: String,
    pub description: String,
    pub notes: String,
    pub regex_group_idx: i32,
    pub display_format: String,
    pub level: i32,
    pub order: i32,
    pub tree_id: i32,
    compiled: Option<Regex>,
    separator_regex: Option<Regex>,
}

impl PartialEq for TreeRule {
    fn eq(&self, o: &Self) -> bool {
        self.kind == o.kind
            && self.field == o.field
            && self.custom_field == o.custom_field
            && self.regex == o.regex
            && self.separator == o.separator
            && self.description == o.description
            && self.notes == o.notes
            && self.regex_group_idx == o.regex_group_idx
            && self.display_format == o.display_format
            && self.level == o.level
            && self.order == o.order
            && self.tree_id == o.tree_id
    }
}

/// Compiles a Java pattern with Rust's `regex` (the common subset).
fn compile(pattern: &str, what: &str) -> Result<Option<Regex>> {
    if pattern.is_empty() {
        return Ok(None);
    }
    Regex::new(pattern)
        .map(Some)
        .map_err(|e| Error::invalid(format!("Unable to parse the '{what}' parameter: {e}")))
}

impl TreeRule {
    pub fn new(tree_id: i32) -> TreeRule {
        TreeRule {
            tree_id,
            ..TreeRule::default()
        }
    }

    /// Sets the regex, compiling it (a pattern that does not compile is refused).
    pub fn set_regex(&mut self, regex: &str) -> Result<()> {
        self.compiled = compile(regex, "regex")?;
        self.regex = regex.to_string();
        Ok(())
    }

    /// Sets the separator, a regex as Java's `String.split` takes it.
    pub fn set_separator(&mut self, separator: &str) -> Result<()> {
        self.separator_regex = compile(separator, "separator")?;
        self.separator = separator.to_string();
        Ok(())
    }

    pub fn compiled_regex(&self) -> Option<&Regex> {
        self.compiled.as_ref()
    }

    pub fn separator_regex(&self) -> Option<&Regex> {
        self.separator_regex.as_ref()
    }

    /// OpenTSDB's `toString`: `[tree:level:order:TYPE]`.
    pub fn label(&self) -> String {
        format!(
            "[{}:{}:{}:{}]",
            self.tree_id,
            self.level,
            self.order,
            self.kind.map_or("null", RuleType::name)
        )
    }

    /// 2.4.1's `validateRule`, run before a rule is stored.
    pub fn validate(&self) -> Result<()> {
        let Some(kind) = self.kind else {
            return Err(Error::invalid("Missing rule type"));
        };
        match kind {
            RuleType::Metric => {}
            RuleType::MetricCustom | RuleType::TagkCustom | RuleType::TagvCustom => {
                if self.field.is_empty() {
                    return Err(Error::invalid(format!(
                        "Missing field name required for {} rule",
                        kind.name()
                    )));
                }
                if self.custom_field.is_empty() {
                    return Err(Error::invalid(format!(
                        "Missing custom field name required for {} rule",
                        kind.name()
                    )));
                }
            }
            RuleType::Tagk => {
                if self.field.is_empty() {
                    return Err(Error::invalid(format!(
                        "Missing field name required for {} rule",
                        kind.name()
                    )));
                }
            }
        }
        if self.regex_group_idx < 0 {
            return Err(Error::invalid(
                "Invalid regex group index. Cannot be less than 0",
            ));
        }
        Ok(())
    }

    /// The JSON Jackson writes for a rule, stored and answered alike.
    pub fn to_json(&self) -> Value {
        json!({
            "type": self.kind.map(RuleType::name),
            "field": self.field,
            "regex": self.regex,
            "separator": self.separator,
            "description": self.description,
            "notes": self.notes,
            "level": self.level,
            "order": self.order,
            "customField": self.custom_field,
            "regexGroupIdx": self.regex_group_idx,
            "displayFormat": self.display_format,
            "treeId": self.tree_id,
        })
    }

    pub fn storage_json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.to_json()).unwrap_or_default()
    }

    /// Reads a stored rule (unknown keys ignored; a pattern that no longer compiles is
    /// kept as text and matches nothing).
    pub fn from_storage(bytes: &[u8]) -> Result<TreeRule> {
        let obj = match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(o)) => o,
            _ => return Err(Error::Corrupt("Unable to parse stored tree rule".into())),
        };
        let mut rest = obj.clone();
        let regex = rest.remove("regex");
        let separator = rest.remove("separator");
        let mut rule = RuleUpdate::from_json(&rest)?.rule;
        let text = |v: Option<Value>| match v {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        rule.regex = text(regex);
        rule.compiled = compile(&rule.regex, "regex").ok().flatten();
        rule.separator = text(separator);
        rule.separator_regex = compile(&rule.separator, "separator").ok().flatten();
        Ok(rule)
    }
}

/// The fields a request gives for a rule, and which count as changes (2.4.1's setters mark a
/// field changed when it differs from its default).
#[derive(Debug, Clone, Default)]
pub struct RuleUpdate {
    pub rule: TreeRule,
    pub changed: HashSet<&'static str>,
}

fn json_int(obj: &Map<String, Value>, key: &str) -> Result<Option<i64>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .filter(|v| i32::try_from(*v).is_ok())
            .map(Some)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "Unable to parse the given JSON: field '{key}' must be an integer"
                ))
            }),
        Some(Value::String(s)) => {
            s.trim()
                .parse::<i32>()
                .map(|v| Some(i64::from(v)))
                .map_err(|_| {
                    Error::invalid(format!(
                        "Unable to parse the given JSON: field '{key}' must be an integer"
                    ))
                })
        }
        Some(_) => Err(Error::invalid(format!(
            "Unable to parse the given JSON: field '{key}' must be an integer"
        ))),
    }
}

impl RuleUpdate {
    /// Applies one field by its JSON name (the query-string names map to these).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let r = &mut self.rule;
        let int = |what: &str| {
            value
                .trim()
                .parse::<i32>()
                .map_err(|_| Error::invalid(format!("Unable to parse the '{what}' parameter")))
        };
        match key {
            "type" => {
                let kind = RuleType::parse(value).map_err(|e| {
                    Error::invalid(format!("Unable to parse the 'type' parameter: {e}"))
                })?;
                r.kind = Some(kind);
                self.changed.insert("type");
            }
            "field" => {
                r.field = value.to_string();
                if !value.is_empty() {
                    self.changed.insert("field");
                }
            }
            "customField" => {
                r.custom_field = value.to_string();
                if !value.is_empty() {
                    self.changed.insert("custom_field");
                }
            }
            "regex" => {
                r.set_regex(value)?;
                if !value.is_empty() {
                    self.changed.insert("regex");
                }
            }
            "separator" => {
                r.set_separator(value)?;
                if !value.is_empty() {
                    self.changed.insert("separator");
                }
            }
            "description" => {
                r.description = value.to_string();
                if !value.is_empty() {
                    self.changed.insert("description");
                }
            }
            "notes" => {
                r.notes = value.to_string();
                if !value.is_empty() {
                    self.changed.insert("notes");
                }
            }
            "displayFormat" => {
                r.display_format = value.to_string();
                if !value.is_empty() {
                    self.changed.insert("display_format");
                }
            }
            "regexGroupIdx" => {
                r.regex_group_idx = int("regex_group_idx")?;
                if r.regex_group_idx != 0 {
                    self.changed.insert("regex_group_idx");
                }
            }
            "level" => {
                let v = int("level")?;
                if v < 0 {
                    return Err(Error::invalid("Negative levels are not allowed"));
                }
                r.level = v;
                if v != 0 {
                    self.changed.insert("level");
                }
            }
            "order" => {
                let v = int("order")?;
                if v < 0 {
                    return Err(Error::invalid("Negative orders are not allowed"));
                }
                r.order = v;
                if v != 0 {
                    self.changed.insert("order");
                }
            }
            "treeId" => {
                r.tree_id = value
                    .trim()
                    .parse::<i32>()
                    .map_err(|_| Error::invalid("Unable to parse 'tree' value"))?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A rule from a JSON object (unknown keys ignored, as Jackson is told to).
    pub fn from_json(obj: &Map<String, Value>) -> Result<RuleUpdate> {
        let mut u = RuleUpdate::default();
        for key in [
            "type",
            "field",
            "customField",
            "regex",
            "separator",
            "description",
            "notes",
            "displayFormat",
        ] {
            if let Some(v) = json_string(obj, key)? {
                u.set(key, &v)?;
            }
        }
        for key in ["regexGroupIdx", "level", "order", "treeId"] {
            if let Some(v) = json_int(obj, key)? {
                u.set(key, &v.to_string())?;
            }
        }
        Ok(u)
    }

    /// 2.4.1's `copyChanges` onto the stored rule: the changed fields that differ (all
    /// with `overwrite`). Returns whether anything changed.
    pub fn apply(&self, stored: &mut TreeRule, overwrite: bool) -> bool {
        let r = &self.rule;
        let mut changed = false;
        let take =
            |name: &str, differs: bool| overwrite || (self.changed.contains(name) && differs);
        if take("type", stored.kind != r.kind) {
            stored.kind = r.kind;
            changed = true;
        }
        if take("field", stored.field != r.field) {
            stored.field.clone_from(&r.field);
            changed = true;
        }
        if take("custom_field", stored.custom_field != r.custom_field) {
            stored.custom_field.clone_from(&r.custom_field);
            changed = true;
        }
        if take("regex", stored.regex != r.regex) {
            if stored.regex != r.regex {
                changed = true;
            }
            stored.regex.clone_from(&r.regex);
            stored.compiled.clone_from(&r.compiled);
        }
        if take("separator", stored.separator != r.separator) {
            stored.separator.clone_from(&r.separator);
            stored.separator_regex.clone_from(&r.separator_regex);
            changed = true;
        }
        if take("description", stored.description != r.description) {
            stored.description.clone_from(&r.description);
            changed = true;
        }
        if take("notes", stored.notes != r.notes) {
            stored.notes.clone_from(&r.notes);
            changed = true;
        }
        if take(
            "regex_group_idx",
            stored.regex_group_idx != r.regex_group_idx,
        ) {
            stored.regex_group_idx = r.regex_group_idx;
            changed = true;
        }
        if take("display_format", stored.display_format != r.display_format) {
            stored.display_format.clone_from(&r.display_format);
            changed = true;
        }
        changed
    }
}

/// A tree's definition and rules.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tree {
    pub tree_id: u16,
    pub name: String,
    pub description: String,
    pub notes: String,
    pub strict_match: bool,
    pub enabled: bool,
    pub store_failures: bool,
    /// Seconds since the epoch.
    pub created: i64,
    /// level → order → rule.
    pub rules: BTreeMap<i32, BTreeMap<i32, TreeRule>>,
}

impl Tree {
    pub fn add_rule(&mut self, rule: TreeRule) {
        self.rules
            .entry(rule.level)
            .or_default()
            .insert(rule.order, rule);
    }

    pub fn rule(&self, level: i32, order: i32) -> Option<&TreeRule> {
        self.rules.get(&level).and_then(|l| l.get(&order))
    }

    /// The stored definition (no id, no rules: those are the row key and other columns).
    pub fn storage_json(&self) -> Vec<u8> {
        let v = json!({
            "name": self.name,
            "description": self.description,
            "notes": self.notes,
            "strictMatch": self.strict_match,
            "created": self.created,
            "enabled": self.enabled,
            "storeFailures": self.store_failures,
        });
        serde_json::to_vec(&v).unwrap_or_default()
    }

    /// Reads a stored definition into `self` (the id comes from the row key).
    pub fn read_storage(&mut self, bytes: &[u8]) -> Result<()> {
        let obj = match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(o)) => o,
            _ => return Err(Error::Corrupt("Unable to parse stored tree".into())),
        };
        let s = |k: &str| json_string(&obj, k).map(Option::unwrap_or_default);
        self.name = s("name")?;
        self.description = s("description")?;
        self.notes = s("notes")?;
        let b = |k: &str| obj.get(k).and_then(Value::as_bool).unwrap_or(false);
        self.strict_match = b("strictMatch");
        self.enabled = b("enabled");
        self.store_failures = b("storeFailures");
        self.created = obj.get("created").and_then(Value::as_i64).unwrap_or(0);
        Ok(())
    }

    /// The API's JSON: the definition, its id and its rules by level and order.
    pub fn to_json(&self) -> Value {
        let rules: Map<String, Value> = self
            .rules
            .iter()
            .map(|(level, orders)| {
                let o: Map<String, Value> = orders
                    .iter()
                    .map(|(order, r)| (order.to_string(), r.to_json()))
                    .collect();
                (level.to_string(), Value::Object(o))
            })
            .collect();
        json!({
            "name": self.name,
            "description": self.description,
            "notes": self.notes,
            "rules": if self.rules.is_empty() { Value::Null } else { Value::Object(rules) },
            "created": self.created,
            "treeId": self.tree_id,
            "strictMatch": self.strict_match,
            "storeFailures": self.store_failures,
            "enabled": self.enabled,
        })
    }
}

/// The fields a request gives for a tree, and which count as changes.
#[derive(Debug, Clone, Default)]
pub struct TreeUpdate {
    /// 0 when not given (a new tree).
    pub tree_id: i64,
    pub tree: Tree,
    pub changed: HashSet<&'static str>,
}

impl TreeUpdate {
    /// Applies one field by its name as 2.4.1 reads it (any case; booleans true only for
    /// `true`, any case).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let t = &mut self.tree;
        let truth = value.eq_ignore_ascii_case("true");
        match key.to_ascii_lowercase().as_str() {
            "treeid" => {
                self.tree_id = value
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| Error::invalid("Unable to parse 'tree' value"))?;
            }
            "name" => {
                t.name = value.to_string();
                if !value.is_empty() {
                    self.changed.insert("name");
                }
            }
            "description" => {
                t.description = value.to_string();
                if !value.is_empty() {
                    self.changed.insert("description");
                }
            }
            "notes" => {
                t.notes = value.to_string();
                if !value.is_empty() {
                    self.changed.insert("notes");
                }
            }
            "enabled" => {
                t.enabled = truth;
                self.changed.insert("enabled");
            }
            "strictmatch" | "strict_match" => {
                t.strict_match = truth;
                self.changed.insert("strict_match");
            }
            "storefailures" | "store_failures" => {
                t.store_failures = truth;
                self.changed.insert("store_failures");
            }
            _ => {}
        }
        Ok(())
    }

    /// A tree from a JSON object, each value taken as text (as 2.4.1 reads a map of strings).
    pub fn from_json(obj: &Map<String, Value>) -> Result<TreeUpdate> {
        let mut u = TreeUpdate::default();
        for key in obj.keys() {
            if let Some(v) = json_string(obj, key)? {
                u.set(key, &v)?;
            }
        }
        Ok(u)
    }

    /// 2.4.1's `copyChanges` onto the stored tree.
    pub fn apply(&self, stored: &mut Tree, overwrite: bool) {
        let t = &self.tree;
        let take = |name: &str| overwrite || self.changed.contains(name);
        if take("name") {
            stored.name.clone_from(&t.name);
        }
        if take("description") {
            stored.description.clone_from(&t.description);
        }
        if take("notes") {
            stored.notes.clone_from(&t.notes);
        }
        if take("strict_match") {
            stored.strict_match = t.strict_match;
        }
        if take("enabled") {
            stored.enabled = t.enabled;
        }
        if take("store_failures") {
            stored.store_failures = t.store_failures;
        }
    }
}

/// A leaf: a series under a branch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leaf {
    pub display_name: String,
    pub tsuid: String,
    /// Resolved when a branch is read for the API.
    pub metric: String,
    pub tags: Option<BTreeMap<String, String>>,
}

impl Leaf {
    pub fn new(display_name: &str, tsuid: &str) -> Leaf {
        Leaf {
            display_name: display_name.to_string(),
            tsuid: tsuid.to_string(),
            ..Leaf::default()
        }
    }

    /// `leaf:` + the display name's hash.
    pub fn qualifier(&self) -> Vec<u8> {
        leaf_qualifier(&self.display_name)
    }

    pub fn storage_json(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({"displayName": self.display_name, "tsuid": self.tsuid}))
            .unwrap_or_default()
    }

    pub fn from_storage(bytes: &[u8]) -> Option<Leaf> {
        let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(bytes) else {
            return None;
        };
        let s = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Some(Leaf::new(&s("displayName"), &s("tsuid")))
    }

    pub fn to_json(&self) -> Value {
        json!({
            "metric": self.metric,
            "tags": self.tags,
            "tsuid": self.tsuid,
            "displayName": self.display_name,
        })
    }
}

/// The qualifier of a leaf named `display_name`.
pub fn leaf_qualifier(display_name: &str) -> Vec<u8> {
    let mut q = LEAF_PREFIX.to_vec();
    q.extend_from_slice(&java_hash(display_name).to_be_bytes());
    q
}

/// A branch: a node of the tree, its path from the root, child branches and leaves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Branch {
    pub tree_id: u16,
    pub display_name: String,
    /// Depth → display name of each branch above, from the root (depth 0).
    pub path: BTreeMap<i32, String>,
    /// By display name hash (a second leaf of the same name is a collision).
    pub leaves: Option<BTreeMap<i32, Leaf>>,
    /// Sorted by display name, case-insensitive; no two equal ignoring case.
    pub branches: Option<Vec<Branch>>,
}

impl Branch {
    pub fn new(tree_id: u16) -> Branch {
        Branch {
            tree_id,
            ..Branch::default()
        }
    }

    /// A tree's root branch, `ROOT` at depth 0.
    pub fn root(tree_id: u16) -> Branch {
        let mut b = Branch::new(tree_id);
        b.display_name = "ROOT".into();
        b.path.insert(0, "ROOT".into());
        b
    }

    /// The path with this branch's own name at its end (2.4.1's `compileBranchId` adds it).
    pub fn full_path(&self) -> BTreeMap<i32, String> {
        let mut path = self.path.clone();
        match path.last_key_value() {
            None => {
                path.insert(0, self.display_name.clone());
            }
            Some((depth, name)) if *name != self.display_name => {
                let d = depth + 1;
                path.insert(d, self.display_name.clone());
            }
            Some(_) => {}
        }
        path
    }

    /// Tree id, then the hash of each name on the path below the root.
    pub fn id(&self) -> Vec<u8> {
        let mut id = tree_id_bytes(self.tree_id).to_vec();
        for (depth, name) in self.full_path() {
            if depth != 0 {
                id.extend_from_slice(&java_hash(&name).to_be_bytes());
            }
        }
        id
    }

    /// Adds a child unless one of the same name (ignoring case) is there.
    pub fn add_child(&mut self, child: Branch) -> bool {
        let list = self.branches.get_or_insert_with(Vec::new);
        match list.binary_search_by(|b| compare_ignore_case(&b.display_name, &child.display_name)) {
            Ok(_) => false,
            Err(at) => {
                list.insert(at, child);
                true
            }
        }
    }

    /// Adds a leaf; a leaf of the same name with another TSUID is a collision, returned as
    /// the existing TSUID.
    pub fn add_leaf(&mut self, leaf: Leaf) -> std::result::Result<bool, String> {
        let leaves = self.leaves.get_or_insert_with(BTreeMap::new);
        let hash = java_hash(&leaf.display_name);
        match leaves.get(&hash) {
            Some(existing) if existing.tsuid != leaf.tsuid => Err(existing.tsuid.clone()),
            Some(_) => Ok(false),
            None => {
                leaves.insert(hash, leaf);
                Ok(true)
            }
        }
    }

    pub fn storage_json(&self) -> Vec<u8> {
        let path: Map<String, Value> = self
            .full_path()
            .into_iter()
            .map(|(d, n)| (d.to_string(), Value::String(n)))
            .collect();
        serde_json::to_vec(&json!({"path": path, "displayName": self.display_name}))
            .unwrap_or_default()
    }

    /// Reads a stored branch definition (path and display name).
    pub fn from_storage(tree_id: u16, bytes: &[u8]) -> Option<Branch> {
        let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(bytes) else {
            return None;
        };
        let mut b = Branch::new(tree_id);
        b.display_name = o
            .get("displayName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if let Some(Value::Object(p)) = o.get("path") {
            for (k, v) in p {
                if let (Ok(d), Some(n)) = (k.parse::<i32>(), v.as_str()) {
                    b.path.insert(d, n.to_string());
                }
            }
        }
        Some(b)
    }

    /// The leaves sorted as 2.4.1's `TreeSet` returns them (case-insensitive by name, one of
    /// each name ignoring case).
    pub fn sorted_leaves(&self) -> Option<Vec<&Leaf>> {
        let leaves = self.leaves.as_ref()?;
        let mut v: Vec<&Leaf> = leaves.values().collect();
        v.sort_by(|a, b| compare_ignore_case(&a.display_name, &b.display_name));
        v.dedup_by(|a, b| compare_ignore_case(&a.display_name, &b.display_name).is_eq());
        Some(v)
    }

    /// The API's JSON (children recursively).
    pub fn to_json(&self) -> Value {
        let path = self.full_path();
        let path_json: Map<String, Value> = path
            .iter()
            .map(|(d, n)| (d.to_string(), Value::String(n.clone())))
            .collect();
        json!({
            "leaves": self.sorted_leaves().map(|l| l.iter().map(|l| l.to_json()).collect::<Vec<_>>()),
            "branches": self.branches.as_ref().map(|b| b.iter().map(Branch::to_json).collect::<Vec<_>>()),
            "path": path_json,
            "treeId": self.tree_id,
            "displayName": self.display_name,
            "branchId": hourglass_core::uid::hex_upper(&self.id()),
            "depth": path.last_key_value().map_or(0, |(d, _)| *d),
        })
    }
}

/// Parses a branch id from hex (2.4.1's `stringToId`).
pub fn parse_branch_id(text: &str) -> Result<Vec<u8>> {
    if text.is_empty() {
        return Err(Error::invalid("Branch ID was empty"));
    }
    if text.len() < 4 {
        return Err(Error::invalid("Branch ID was too short"));
    }
    hourglass_core::uid::parse_hex(text)
        .map_err(|_| Error::invalid(format!("contains illegal character for hexBinary: {text}")))
}
