//! Reading and writing trees in the tree table, as 2.4.1's `Tree`, `TreeRule`, `Branch` and
//! `Leaf` do (RFC 0010).

use std::collections::BTreeMap;

use hourglass_core::rowkey::decode_tsuid;
use hourglass_core::schema::TREE_FAMILY;
use hourglass_core::uid::{UidKind, hex_upper, parse_hex};
use hourglass_storage::{Check, Mutation, ReadOptions, Row, ScanRequest, prefix_end};

use super::model::*;
use crate::{Error, Result, Tsdb};

fn table(tsdb: &Tsdb) -> &str {
    &tsdb.settings().schema.tree_table
}

fn get_row(tsdb: &Tsdb, key: &[u8]) -> Result<Option<Row>> {
    Ok(tsdb
        .store()
        .get(table(tsdb), key, &ReadOptions::family(TREE_FAMILY))?)
}

/// A byte-wise regex matching exactly `bytes`.
fn literal(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\x{b:02x}")).collect()
}

fn scan(tsdb: &Tsdb, start: Vec<u8>, end: Option<Vec<u8>>, regex: String) -> Result<Vec<Row>> {
    let request = ScanRequest {
        key_regex: Some(regex),
        read: ReadOptions::family(TREE_FAMILY),
        ..ScanRequest::range(start, end)
    };
    let mut rows = Vec::new();
    for row in tsdb.store().scan(table(tsdb), &request)? {
        rows.push(row?);
    }
    Ok(rows)
}

/// Builds a tree from its row (definition and rules); None without a definition.
fn tree_of_row(row: &Row) -> Result<Option<Tree>> {
    let Some(id) = row.key.get(..2) else {
        return Ok(None);
    };
    let mut tree = Tree {
        tree_id: u16::from_be_bytes([id[0], id[1]]),
        ..Tree::default()
    };
    let mut has_definition = false;
    for cell in &row.cells {
        if cell.family != TREE_FAMILY {
            continue;
        }
        if cell.qualifier == TREE_QUALIFIER {
            tree.read_storage(&cell.value)?;
            has_definition = true;
        } else if cell.qualifier.len() > RULE_PREFIX.len()
            && cell.qualifier.starts_with(RULE_PREFIX)
        {
            match TreeRule::from_storage(&cell.value) {
                Ok(rule) => tree.add_rule(rule),
                Err(e) => {
                    tracing::warn!(tree = tree.tree_id, error = %e, "skipping damaged tree rule")
                }
            }
        }
    }
    Ok(has_definition.then_some(tree))
}

/// One tree with its rules, or None.
pub fn fetch_tree(tsdb: &Tsdb, tree_id: u16) -> Result<Option<Tree>> {
    match get_row(tsdb, &tree_id_bytes(tree_id))? {
        Some(row) => tree_of_row(&row),
        None => Ok(None),
    }
}

/// Every tree (rows whose key is a 2-byte tree id), by id.
pub fn fetch_all_trees(tsdb: &Tsdb) -> Result<Vec<Tree>> {
    let rows = scan(
        tsdb,
        vec![0, 0],
        Some(vec![0xFF, 0xFF]),
        "(?s)^.{2}$".to_string(),
    )?;
    let mut trees = Vec::new();
    for row in rows {
        if row.key.len() == 2
            && let Some(tree) = tree_of_row(&row)?
        {
            trees.push(tree);
        }
    }
    Ok(trees)
}

/// Compare-and-set of one cell against its previous bytes (None: absent).
fn cas(
    tsdb: &Tsdb,
    key: &[u8],
    qualifier: &[u8],
    expected: Option<Vec<u8>>,
    value: Vec<u8>,
) -> Result<bool> {
    let check = Check {
        family: TREE_FAMILY.to_string(),
        qualifier: qualifier.to_vec(),
        expected,
    };
    Ok(tsdb.store().check_and_mutate(
        table(tsdb),
        key,
        &check,
        &[Mutation::set(TREE_FAMILY, qualifier.to_vec(), value)],
    )?)
}

/// 2.4.1's `storeTree`: merges the update into the stored definition (replaces it with
/// `overwrite`), or stores it when there is none. Nothing given: `NotModified`.
pub fn store_tree(tsdb: &Tsdb, tree_id: u16, update: &TreeUpdate, overwrite: bool) -> Result<()> {
    if update.changed.is_empty() {
        return Err(Error::NotModified("No changes detected in the tree".into()));
    }
    let key = tree_id_bytes(tree_id);
    let stored =
        get_row(tsdb, &key)?.and_then(|r| r.value(TREE_FAMILY, TREE_QUALIFIER).map(<[u8]>::to_vec));
    let mut tree = Tree {
        tree_id,
        ..Tree::default()
    };
    match &stored {
        Some(bytes) => {
            tree.read_storage(bytes)?;
            update.apply(&mut tree, overwrite);
        }
        None => {
            tree = update.tree.clone();
            tree.tree_id = tree_id;
        }
    }
    if !cas(tsdb, &key, TREE_QUALIFIER, stored, tree.storage_json())? {
        return Err(Error::Internal(format!(
            "Unable to save changes to tree: {tree_id}"
        )));
    }
    Ok(())
}

/// 2.4.1's `createNewTree`: the next id after the highest stored one.
pub fn create_tree(tsdb: &Tsdb, update: &TreeUpdate, now_secs: i64) -> Result<u16> {
    if update.tree.name.is_empty() {
        return Err(Error::invalid("Tree was missing the name"));
    }
    let max = fetch_all_trees(tsdb)?
        .iter()
        .map(|t| t.tree_id)
        .max()
        .unwrap_or(0);
    let id = max
        .checked_add(1)
        .ok_or_else(|| Error::Internal("Exhausted all Tree IDs".into()))?;
    let mut fresh = update.clone();
    fresh.tree.created = now_secs;
    store_tree(tsdb, id, &fresh, true)?;
    Ok(id)
}

/// 2.4.1's `deleteTree`: branches, leaves, collisions and not-matched entries of a tree, and
/// with `definition` its definition and rules.
pub fn delete_tree(tsdb: &Tsdb, tree_id: u16, definition: bool) -> Result<usize> {
    let start = tree_id_bytes(tree_id).to_vec();
    let end = prefix_end(&start);
    let request = ScanRequest {
        read: ReadOptions::family(TREE_FAMILY),
        ..ScanRequest::range(start, end)
    };
    // Only the doomed qualifiers are kept from the scan, then deleted row by row.
    let mut doomed: Vec<(Vec<u8>, Vec<Mutation>)> = Vec::new();
    for row in tsdb.store().scan(table(tsdb), &request)? {
        let row = row?;
        let mutations: Vec<Mutation> = row
            .cells
            .iter()
            .filter(|c| c.family == TREE_FAMILY)
            .filter(|c| {
                let q = c.qualifier.as_slice();
                let prefixed = |p: &[u8]| q.len() > p.len() && q.starts_with(p);
                (definition && q == TREE_QUALIFIER)
                    || q == BRANCH_QUALIFIER
                    || prefixed(LEAF_PREFIX)
                    || prefixed(COLLISION_PREFIX)
                    || prefixed(NOT_MATCHED_PREFIX)
                    || (definition && prefixed(RULE_PREFIX))
            })
            .map(|c| Mutation::delete(TREE_FAMILY, c.qualifier.clone()))
            .collect();
        if !mutations.is_empty() {
            doomed.push((row.key, mutations));
        }
    }
    let mut deleted = 0;
    for (key, mutations) in doomed {
        deleted += mutations.len();
        tsdb.store().mutate_row(table(tsdb), &key, &mutations)?;
    }
    Ok(deleted)
}

/// One stored rule, or None.
pub fn fetch_rule(tsdb: &Tsdb, tree_id: u16, level: i32, order: i32) -> Result<Option<TreeRule>> {
    let q = rule_qualifier(level, order);
    match get_row(tsdb, &tree_id_bytes(tree_id))?
        .and_then(|r| r.value(TREE_FAMILY, &q).map(<[u8]>::to_vec))
    {
        Some(bytes) => TreeRule::from_storage(&bytes).map(Some),
        None => Ok(None),
    }
}

/// 2.4.1's `syncToStorage` of a rule: merged into the stored one (replacing it with
/// `overwrite`), or stored when there is none; validated before it is written.
pub fn store_rule(tsdb: &Tsdb, update: &RuleUpdate, overwrite: bool) -> Result<TreeRule> {
    let tree_id = check_tree_id(i64::from(update.rule.tree_id))?;
    if update.changed.is_empty() {
        return Err(Error::NotModified("No changes detected in the rule".into()));
    }
    let (level, order) = (update.rule.level, update.rule.order);
    let key = tree_id_bytes(tree_id);
    let q = rule_qualifier(level, order);
    let stored = get_row(tsdb, &key)?.and_then(|r| r.value(TREE_FAMILY, &q).map(<[u8]>::to_vec));
    let rule = match &stored {
        None => update.rule.clone(),
        Some(bytes) => {
            let mut rule = TreeRule::from_storage(bytes)?;
            if !update.apply(&mut rule, overwrite) {
                return Err(Error::NotModified("No changes detected in the rule".into()));
            }
            rule
        }
    };
    rule.validate()?;
    if !cas(tsdb, &key, &q, stored, rule.storage_json())? {
        return Err(Error::Internal(format!(
            "Unable to save rule {} to storage",
            rule.label()
        )));
    }
    Ok(rule)
}

pub fn delete_rule(tsdb: &Tsdb, tree_id: u16, level: i32, order: i32) -> Result<()> {
    tsdb.store().mutate_row(
        table(tsdb),
        &tree_id_bytes(tree_id),
        &[Mutation::delete(TREE_FAMILY, rule_qualifier(level, order))],
    )?;
    Ok(())
}

pub fn delete_all_rules(tsdb: &Tsdb, tree_id: u16) -> Result<()> {
    let key = tree_id_bytes(tree_id);
    let Some(row) = get_row(tsdb, &key)? else {
        return Ok(());
    };
    let mutations: Vec<Mutation> = row
        .cells
        .iter()
        .filter(|c| c.qualifier.len() > RULE_PREFIX.len() && c.qualifier.starts_with(RULE_PREFIX))
        .map(|c| Mutation::delete(TREE_FAMILY, c.qualifier.clone()))
        .collect();
    if !mutations.is_empty() {
        tsdb.store().mutate_row(table(tsdb), &key, &mutations)?;
    }
    Ok(())
}

/// A branch's definition alone (no children, no leaves), or None.
pub fn fetch_branch_only(tsdb: &Tsdb, branch_id: &[u8]) -> Result<Option<Branch>> {
    if branch_id.len() < 2 {
        return Err(Error::invalid("Row key was less than 2 in length"));
    }
    let tree_id = u16::from_be_bytes([branch_id[0], branch_id[1]]);
    Ok(get_row(tsdb, branch_id)?
        .and_then(|r| r.value(TREE_FAMILY, BRANCH_QUALIFIER).map(<[u8]>::to_vec))
        .and_then(|b| Branch::from_storage(tree_id, &b)))
}

/// 2.4.1's `fetchBranch`: the branch, its child branches (definitions only) and its leaves,
/// with their metric and tag names when `load_names` (a leaf naming a UID that no longer
/// exists is left out). None when the branch is not stored.
pub fn fetch_branch(tsdb: &Tsdb, branch_id: &[u8], load_names: bool) -> Result<Option<Branch>> {
    if branch_id.len() < 2 {
        return Err(Error::invalid("Row key was less than 2 in length"));
    }
    let tree_id = u16::from_be_bytes([branch_id[0], branch_id[1]]);
    let end = prefix_end(&tree_id_bytes(tree_id));
    let regex = format!("(?s)^{}(?:.{{4}})?$", literal(branch_id));
    let rows = scan(tsdb, branch_id.to_vec(), end, regex)?;
    let mut branch: Option<Branch> = None;
    let mut children = Vec::new();
    let mut leaves = Vec::new();
    for row in rows {
        let own = row.key == branch_id;
        if !own && row.key.len() != branch_id.len() + 4 {
            continue;
        }
        for cell in &row.cells {
            if cell.qualifier == BRANCH_QUALIFIER {
                if let Some(b) = Branch::from_storage(tree_id, &cell.value) {
                    if own {
                        branch = Some(b);
                    } else {
                        children.push(b);
                    }
                }
            } else if own && cell.qualifier.starts_with(LEAF_PREFIX) {
                match Leaf::from_storage(&cell.value) {
                    Some(l) if !l.tsuid.is_empty() => leaves.push(l),
                    _ => {}
                }
            }
        }
    }
    let Some(mut branch) = branch else {
        return Ok(None);
    };
    for child in children {
        branch.add_child(child);
    }
    for mut leaf in leaves {
        if load_names {
            match leaf_names(tsdb, &leaf.tsuid) {
                Ok((metric, tags)) => {
                    leaf.metric = metric;
                    leaf.tags = Some(tags);
                }
                Err(e) => {
                    tracing::warn!(tsuid = %leaf.tsuid, error = %e, "leaf left out of its branch");
                    continue;
                }
            }
        }
        let leaves = branch.leaves.get_or_insert_with(BTreeMap::new);
        leaves.insert(java_hash(&leaf.display_name), leaf);
    }
    Ok(Some(branch))
}

/// The metric name and tag names of a TSUID.
fn leaf_names(tsdb: &Tsdb, tsuid: &str) -> Result<(String, BTreeMap<String, String>)> {
    let bytes = parse_hex(tsuid)?;
    let series = decode_tsuid(&tsdb.settings().schema, &bytes)?;
    let uids = tsdb.uids();
    let metric = uids.get_name(UidKind::Metric, series.metric)?;
    let mut tags = BTreeMap::new();
    for (k, v) in &series.tags {
        tags.insert(
            uids.get_name(UidKind::TagKey, *k)?,
            uids.get_name(UidKind::TagValue, *v)?,
        );
    }
    Ok((metric, tags))
}

/// Stores a branch definition unless stored (2.4.1 writes it with a compare-and-set against
/// an absent cell), then its leaves. Returns the collisions: (new TSUID, existing TSUID).
pub fn store_branch(
    tsdb: &Tsdb,
    branch: &Branch,
    store_leaves: bool,
) -> Result<Vec<(String, String)>> {
    let id = branch.id();
    cas(tsdb, &id, BRANCH_QUALIFIER, None, branch.storage_json())?;
    let mut collisions = Vec::new();
    if store_leaves && let Some(leaves) = &branch.leaves {
        for leaf in leaves.values() {
            if let Some(existing) = store_leaf(tsdb, &id, leaf)? {
                collisions.push((leaf.tsuid.clone(), existing));
            }
        }
    }
    Ok(collisions)
}

/// Stores a leaf unless its column is taken; a column holding another TSUID is a collision
/// (its TSUID returned).
fn store_leaf(tsdb: &Tsdb, branch_id: &[u8], leaf: &Leaf) -> Result<Option<String>> {
    let q = leaf.qualifier();
    if cas(tsdb, branch_id, &q, None, leaf.storage_json())? {
        return Ok(None);
    }
    let existing = get_row(tsdb, branch_id)?
        .and_then(|r| r.value(TREE_FAMILY, &q).and_then(Leaf::from_storage));
    match existing {
        Some(e) if e.tsuid != leaf.tsuid => Ok(Some(e.tsuid)),
        _ => Ok(None),
    }
}

fn failure_row(tree_id: u16, suffix: u8) -> Vec<u8> {
    let mut key = tree_id_bytes(tree_id).to_vec();
    key.push(suffix);
    key
}

/// Writes collisions or not-matched entries: TSUID (hex) → value.
pub fn store_failures(
    tsdb: &Tsdb,
    tree_id: u16,
    collisions: bool,
    entries: &[(String, String)],
) -> Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let (suffix, prefix) = if collisions {
        (COLLISION_ROW_SUFFIX, COLLISION_PREFIX)
    } else {
        (NOT_MATCHED_ROW_SUFFIX, NOT_MATCHED_PREFIX)
    };
    let mut mutations = Vec::with_capacity(entries.len());
    for (tsuid, value) in entries {
        let mut q = prefix.to_vec();
        q.extend_from_slice(&parse_hex(tsuid)?);
        mutations.push(Mutation::set(TREE_FAMILY, q, latin1(value)));
    }
    tsdb.store()
        .mutate_row(table(tsdb), &failure_row(tree_id, suffix), &mutations)?;
    Ok(())
}

/// Text as ISO-8859-1 bytes (2.4.1's charset for these values); others become `?`.
fn latin1(s: &str) -> Vec<u8> {
    s.chars()
        .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
        .collect()
}

/// 2.4.1's `fetchCollisions` / `fetchNotMatched`: TSUID → value, all or those asked for.
pub fn fetch_failures(
    tsdb: &Tsdb,
    tree_id: u16,
    collisions: bool,
    tsuids: Option<&[String]>,
) -> Result<BTreeMap<String, String>> {
    let (suffix, prefix) = if collisions {
        (COLLISION_ROW_SUFFIX, COLLISION_PREFIX)
    } else {
        (NOT_MATCHED_ROW_SUFFIX, NOT_MATCHED_PREFIX)
    };
    let wanted: Option<Vec<Vec<u8>>> = match tsuids.filter(|t| !t.is_empty()) {
        Some(list) => Some(
            list.iter()
                .map(|t| {
                    let mut q = prefix.to_vec();
                    q.extend_from_slice(&parse_hex(t)?);
                    Ok(q)
                })
                .collect::<Result<_>>()?,
        ),
        None => None,
    };
    let mut out = BTreeMap::new();
    let Some(row) = get_row(tsdb, &failure_row(tree_id, suffix))? else {
        return Ok(out);
    };
    for cell in &row.cells {
        let q = &cell.qualifier;
        if q.len() <= prefix.len() || !q.starts_with(prefix) {
            continue;
        }
        if wanted.as_ref().is_some_and(|w| !w.contains(q)) {
            continue;
        }
        let text: String = cell.value.iter().map(|b| char::from(*b)).collect();
        out.insert(hex_upper(&q[prefix.len()..]), text);
    }
    Ok(out)
}
