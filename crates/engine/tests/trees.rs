//! Trees (RFC 0010), ported from OpenTSDB 2.4.1's `TestTree`, `TestTreeRule`,
//! `TestTreeBuilder`, `TestBranch` and `TestLeaf`: the same series through the same rules
//! give the same rows, qualifiers and bytes, on every backend.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use std::collections::BTreeMap;

use hourglass_core::schema::TREE_FAMILY;
use hourglass_core::uid::{UidKind, hex_upper, parse_hex};
use hourglass_engine::Tsdb;
use hourglass_engine::meta::{MetaFields, TsMeta, UidMeta};
use hourglass_engine::tree::*;
use hourglass_storage::{ReadOptions, Row, ScanRequest};

fn uid(kind: UidKind, id: u8, name: &str) -> UidMeta {
    UidMeta {
        kind,
        uid: format!("{id:02X}"),
        name: name.into(),
        fields: MetaFields::default(),
    }
}

/// 2.4.1's test series: `sys.cpu.0{host=web-01.lga.mysite.com,type=user}`, TSUID 0102030405.
fn test_meta() -> TsMeta {
    TsMeta {
        tsuid: "0102030405".into(),
        metric: uid(UidKind::Metric, 1, "sys.cpu.0"),
        tags: vec![
            uid(UidKind::TagKey, 2, "host"),
            uid(UidKind::TagValue, 3, "web-01.lga.mysite.com"),
            uid(UidKind::TagKey, 4, "type"),
            uid(UidKind::TagValue, 5, "user"),
        ],
        fields: MetaFields::default(),
        last_received: 0,
        total_datapoints: 0,
    }
}

fn rule(level: i32, order: i32, kind: RuleType) -> TreeRule {
    let mut r = TreeRule::new(1);
    r.kind = Some(kind);
    r.level = level;
    r.order = order;
    r
}

/// 2.4.1's `TestTree.buildTestTree` and `buildTestRuleSet`.
fn test_tree() -> Tree {
    let mut tree = Tree {
        tree_id: 1,
        name: "Test Tree".into(),
        description: "My Description".into(),
        notes: "Details".into(),
        enabled: true,
        created: 1_356_998_400,
        ..Tree::default()
    };
    let dc = r"^.*\.([a-zA-Z]{3,4})[0-9]{0,1}\..*\..*$";
    let service = r"^([a-zA-Z]+)(\-|[0-9])*.*\..*$";
    for (level, order, field, regex) in [
        (0, 0, "fqdn", dc),
        (0, 1, "host", dc),
        (1, 0, "fqdn", service),
        (1, 1, "host", service),
        (2, 0, "fqdn", ""),
        (2, 1, "host", ""),
    ] {
        let mut r = rule(level, order, RuleType::Tagk);
        r.field = field.into();
        r.set_regex(regex).unwrap();
        tree.add_rule(r);
    }
    let mut r = rule(3, 0, RuleType::Metric);
    r.set_separator(r"\.").unwrap();
    tree.add_rule(r);
    let mut r = rule(4, 0, RuleType::Tagk);
    r.field = "type".into();
    tree.add_rule(r);
    let mut r = rule(4, 1, RuleType::Tagk);
    r.field = "method".into();
    tree.add_rule(r);
    tree
}

fn rows(db: &Tsdb) -> Vec<Row> {
    let schema = &db.settings().schema;
    let request = ScanRequest {
        read: ReadOptions::family(TREE_FAMILY),
        ..Default::default()
    };
    db.store()
        .scan(&schema.tree_table, &request)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

fn columns(db: &Tsdb, hex: &str) -> usize {
    let key = parse_hex(hex).unwrap();
    rows(db)
        .into_iter()
        .find(|r| r.key == key)
        .map_or(0, |r| r.cells.len())
}

/// Stores the tree's definition and root, as the 2.4.1 tests start from.
fn store_tree_and_root(db: &Tsdb, tree: &Tree) {
    let mut u = TreeUpdate {
        tree: tree.clone(),
        ..TreeUpdate::default()
    };
    u.changed.insert("name");
    store_tree(db, tree.tree_id, &u, true).unwrap();
    load_or_init_root(db, tree.tree_id).unwrap();
}

fn process(db: &Tsdb, tree: Tree, meta: &TsMeta) -> Outcome {
    TreeBuilder::new(tree).process_and_store(db, meta).unwrap()
}

#[test]
fn java_hashes_give_2_4_1_branch_ids_and_leaf_qualifiers() {
    assert_eq!(java_hash("sys"), 0x0001_BECD);
    assert_eq!(java_hash("cpu"), 0x0001_81A8);
    assert_eq!(java_hash("0"), 0x30);
    assert_eq!(java_hash(""), 0);
    // Wrapping arithmetic over UTF-16 units, as Java's int.
    assert_eq!(java_hash("web-01.lga.mysite.com"), 0x247F_7202);
    assert_eq!(java_hash("é"), 0xE9);
    let mut b = Branch::new(1);
    b.path.insert(0, "ROOT".into());
    b.path.insert(1, "sys".into());
    b.display_name = "cpu".into();
    assert_eq!(hex_upper(&b.id()), "00010001BECD000181A8");
    assert_eq!(Branch::root(1).id(), vec![0, 1]);
    assert_eq!(
        leaf_qualifier("user"),
        [b"leaf:".as_slice(), &java_hash("user").to_be_bytes()].concat()
    );
    assert_eq!(rule_qualifier(1, 2), b"tree_rule:1:2".to_vec());
}

#[test]
fn stored_json_is_what_jackson_writes() {
    let tree = test_tree();
    assert_eq!(
        String::from_utf8(tree.storage_json()).unwrap(),
        r#"{"name":"Test Tree","description":"My Description","notes":"Details","strictMatch":false,"created":1356998400,"enabled":true,"storeFailures":false}"#
    );
    let r = tree.rule(3, 0).unwrap();
    assert_eq!(
        String::from_utf8(r.storage_json()).unwrap(),
        r#"{"type":"METRIC","field":"","regex":"","separator":"\\.","description":"","notes":"","level":3,"order":0,"customField":"","regexGroupIdx":0,"displayFormat":"","treeId":1}"#
    );
    assert_eq!(
        String::from_utf8(Branch::root(1).storage_json()).unwrap(),
        r#"{"path":{"0":"ROOT"},"displayName":"ROOT"}"#
    );
    // TestLeaf's stored value.
    assert_eq!(
        String::from_utf8(Leaf::new("0", "000001000001000001").storage_json()).unwrap(),
        r#"{"displayName":"0","tsuid":"000001000001000001"}"#
    );
    // Read back: a rule from 2.4.1's TestTreeRule JSON (unknown keys ignored).
    let json = br#"{"type":"METRIC","field":"host","regex":"^[a-z]$","separator":".","description":"My Description","notes":"Got Notes?","display_format":"POP {ovalue}","level":1,"order":2,"customField":"","regexGroupIdx":1,"treeId":42,"UnknownKey":"UnknownVal"}"#;
    let r = TreeRule::from_storage(json).unwrap();
    assert_eq!(r.kind, Some(RuleType::Metric));
    assert_eq!(
        (r.level, r.order, r.tree_id, r.regex_group_idx),
        (1, 2, 42, 1)
    );
    assert_eq!(r.regex, "^[a-z]$");
    assert!(r.compiled_regex().is_some());
    assert_eq!(r.display_format, "");
}

#[test]
fn rule_validation_uses_2_4_1_words() {
    let mut r = TreeRule::new(1);
    assert_eq!(r.validate().unwrap_err().to_string(), "Missing rule type");
    r.kind = Some(RuleType::Tagk);
    assert_eq!(
        r.validate().unwrap_err().to_string(),
        "Missing field name required for TAGK rule"
    );
    r.kind = Some(RuleType::TagvCustom);
    r.field = "host".into();
    assert_eq!(
        r.validate().unwrap_err().to_string(),
        "Missing custom field name required for TAGV_CUSTOM rule"
    );
    r.custom_field = "owner".into();
    r.regex_group_idx = -1;
    assert_eq!(
        r.validate().unwrap_err().to_string(),
        "Invalid regex group index. Cannot be less than 0"
    );
    assert_eq!(
        RuleType::parse("NotAType").unwrap_err().to_string(),
        "Unrecognized rule type"
    );
    assert_eq!(
        RuleType::parse("tagv_Custom").unwrap(),
        RuleType::TagvCustom
    );
    assert!(TreeRule::new(1).set_regex("^(ok$").is_err());
}

/// The chain of branch ids below the root, and the leaves of its last branch.
fn chain_ids(outcome: &Outcome) -> (Vec<String>, Vec<String>) {
    let mut ids = Vec::new();
    let mut leaves = Vec::new();
    let mut next = outcome.chain.as_ref();
    while let Some(b) = next {
        ids.push(hex_upper(&b.id()));
        if let Some(l) = &b.leaves {
            leaves = l.values().map(|l| l.display_name.clone()).collect();
        }
        next = b.branches.as_ref().and_then(|c| c.first());
    }
    (ids, leaves)
}

#[test]
fn defaults_build_2_4_1_rows() {
    for (name, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        let tree = test_tree();
        store_tree_and_root(&db, &tree);
        let out = process(&db, tree, &test_meta());
        let (ids, leaves) = chain_ids(&out);
        assert_eq!(
            ids.last().unwrap(),
            "00010001A2460001CB54247F72020001BECD000181A800000030",
            "{name}"
        );
        assert_eq!(leaves, vec!["user".to_string()], "{name}");
        // Root, lga, web, web-01.lga.mysite.com, sys, cpu, 0.
        assert_eq!(rows(&db).len(), 7, "{name}");
        let last = "00010001A2460001CB54247F72020001BECD000181A800000030";
        assert_eq!(columns(&db, last), 2, "{name}");
        let branch = fetch_branch_only(&db, &parse_hex(last).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(branch.display_name, "0", "{name}");
        let stored = db
            .store()
            .get(
                &db.settings().schema.tree_table,
                &parse_hex(last).unwrap(),
                &ReadOptions::family(TREE_FAMILY),
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            stored.value(TREE_FAMILY, &leaf_qualifier("user")).unwrap(),
            br#"{"displayName":"user","tsuid":"0102030405"}"#,
            "{name}"
        );
        assert_eq!(
            stored.value(TREE_FAMILY, b"branch").unwrap(),
            br#"{"path":{"0":"ROOT","1":"lga","2":"web","3":"web-01.lga.mysite.com","4":"sys","5":"cpu","6":"0"},"displayName":"0"}"#,
            "{name}"
        );
    }
}

#[test]
fn a_missing_root_is_created() {
    for (name, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        process(&db, test_tree(), &test_meta());
        assert_eq!(rows(&db).len(), 7, "{name}");
        assert_eq!(columns(&db, "0001"), 1, "{name}");
    }
}

#[test]
fn unmatched_levels_collapse() {
    // Middle levels that match nothing (TestTreeBuilder's MiddleNonMatchedRules).
    for (name, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        let mut tree = test_tree();
        for (level, order, kind, custom) in [
            (0, 0, RuleType::TagvCustom, "owner"),
            (0, 1, RuleType::TagvCustom, "dept"),
            (1, 0, RuleType::TagkCustom, "owner"),
            (1, 1, RuleType::TagkCustom, "dept"),
        ] {
            let mut r = rule(level, order, kind);
            r.field = "host".into();
            r.custom_field = custom.into();
            tree.add_rule(r);
        }
        store_tree_and_root(&db, &tree);
        process(&db, tree, &test_meta());
        assert_eq!(rows(&db).len(), 5, "{name}");
        assert_eq!(
            columns(&db, "0001247F72020001BECD000181A800000030"),
            2,
            "{name}"
        );
    }
    // Trailing levels that match nothing (EndNonMatchedRules).
    for (name, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        let mut tree = test_tree();
        for (level, order, kind, custom) in [
            (5, 0, RuleType::TagvCustom, "owner"),
            (5, 1, RuleType::TagvCustom, "dept"),
            (6, 0, RuleType::TagkCustom, "owner"),
            (6, 1, RuleType::TagkCustom, "dept"),
        ] {
            let mut r = rule(level, order, kind);
            r.field = "host".into();
            r.custom_field = custom.into();
            tree.add_rule(r);
        }
        store_tree_and_root(&db, &tree);
        process(&db, tree, &test_meta());
        assert_eq!(rows(&db).len(), 7, "{name}");
        assert_eq!(
            columns(&db, "00010001A2460001CB54247F72020001BECD000181A800000030"),
            2,
            "{name}"
        );
    }
}

#[test]
fn a_missing_tag_value_skips_its_levels() {
    // OddNumTags: host's value missing.
    let mut meta = test_meta();
    meta.tags.remove(1);
    let db = common::open(
        std::sync::Arc::new(hourglass_storage::memory::MemoryStore::new()),
        common::auto_create(),
    );
    let tree = test_tree();
    store_tree_and_root(&db, &tree);
    process(&db, tree, &meta);
    assert_eq!(rows(&db).len(), 5);
    assert_eq!(columns(&db, "00010036EBCB0001BECD000181A800000030"), 2);
}

#[test]
fn strict_match_refuses_a_series_failing_a_level_and_records_it() {
    for (name, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        let mut tree = test_tree();
        tree.strict_match = true;
        tree.store_failures = true;
        store_tree_and_root(&db, &tree);
        // A host without a datacenter: no branch stored, the failure recorded.
        let mut meta = test_meta();
        meta.tags[1].name = "foobar".into();
        let out = process(&db, tree.clone(), &meta);
        assert_eq!(
            out.not_matched.as_deref(),
            Some("[1:0:1:TAGK] [1:1:1:TAGK]"),
            "{name}"
        );
        assert!(
            out.messages
                .last()
                .unwrap()
                .starts_with("TSUID failed to match one or more rule levels"),
            "{name}"
        );
        // The root row, and the not-matched row (tree id + 0x02).
        let keys: Vec<String> = rows(&db).iter().map(|r| hex_upper(&r.key)).collect();
        assert_eq!(keys, vec!["0001", "000102"], "{name}");
        let entries = fetch_failures(&db, 1, false, None).unwrap();
        assert_eq!(
            entries,
            BTreeMap::from([(
                "0102030405".to_string(),
                "[1:0:1:TAGK] [1:1:1:TAGK]".to_string()
            )]),
            "{name}"
        );
        let stored = db
            .store()
            .get(
                &db.settings().schema.tree_table,
                &[0, 1, 2],
                &ReadOptions::family(TREE_FAMILY),
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            stored.cells[0].qualifier,
            [b"tree_not_matched:".as_slice(), &[1, 2, 3, 4, 5]].concat(),
            "{name}"
        );
        // A series matching every level is stored as without strict matching.
        process(&db, tree, &test_meta());
        assert_eq!(rows(&db).len(), 8, "{name}");
    }
}

#[test]
fn separators_and_regex_groups_as_2_4_1() {
    let db = |tree: &Tree| {
        let db = common::open(
            std::sync::Arc::new(hourglass_storage::memory::MemoryStore::new()),
            common::auto_create(),
        );
        store_tree_and_root(&db, tree);
        db
    };
    // No separator: the metric is one branch.
    let mut tree = test_tree();
    tree.rules
        .get_mut(&3)
        .unwrap()
        .get_mut(&0)
        .unwrap()
        .set_separator("")
        .unwrap();
    let d = db(&tree);
    process(&d, tree, &test_meta());
    assert_eq!(rows(&d).len(), 5);
    assert_eq!(columns(&d, "00010001A2460001CB54247F7202CBBF5B09"), 2);
    // "." as a regex matches every character: the split is empty.
    let mut tree = test_tree();
    tree.rules
        .get_mut(&3)
        .unwrap()
        .get_mut(&0)
        .unwrap()
        .set_separator(".")
        .unwrap();
    let d = db(&tree);
    let out = process(&d, tree, &test_meta());
    assert_eq!(rows(&d).len(), 4);
    assert_eq!(columns(&d, "00010001A2460001CB54247F7202"), 2);
    assert!(
        out.messages.iter().any(|m| m
            .starts_with("Separator did not match, created an empty list on rule: [1:3:0:METRIC]")),
        "{:?}",
        out.messages
    );
    // A regex group index out of bounds: the level falls through.
    let mut tree = test_tree();
    tree.rules
        .get_mut(&1)
        .unwrap()
        .get_mut(&1)
        .unwrap()
        .regex_group_idx = 42;
    let d = db(&tree);
    let out = process(&d, tree, &test_meta());
    assert_eq!(rows(&d).len(), 6);
    assert_eq!(
        columns(&d, "00010001A246247F72020001BECD000181A800000030"),
        2
    );
    assert!(out.messages.contains(
        &"Regex group index [42] for rule [1:1:1:TAGK] was out of bounds [2]".to_string()
    ));
}

#[test]
fn custom_field_rules_of_each_kind() {
    let custom = BTreeMap::from([
        ("owner".to_string(), "John Doe".to_string()),
        ("dc".to_string(), "lga".to_string()),
    ]);
    for kind in [
        RuleType::MetricCustom,
        RuleType::TagkCustom,
        RuleType::TagvCustom,
    ] {
        for (value, expected) in [
            (
                "John Doe",
                "0001AE805CA50001CB54247F72020001BECD000181A800000030",
            ),
            // An empty custom value matches nothing: the level's next rule decides.
            ("", "00010001A2460001CB54247F72020001BECD000181A800000030"),
        ] {
            let mut meta = test_meta();
            let mut c = custom.clone();
            c.insert("owner".into(), value.into());
            let mut r = rule(0, 0, kind);
            r.custom_field = "owner".into();
            match kind {
                RuleType::MetricCustom => meta.metric.fields.custom = Some(c),
                RuleType::TagkCustom => {
                    meta.tags[0].fields.custom = Some(c);
                    r.field = "host".into();
                }
                _ => {
                    meta.tags[1].fields.custom = Some(c);
                    r.field = "web-01.lga.mysite.com".into();
                }
            }
            let mut tree = test_tree();
            tree.add_rule(r);
            let d = common::open(
                std::sync::Arc::new(hourglass_storage::memory::MemoryStore::new()),
                common::auto_create(),
            );
            store_tree_and_root(&d, &tree);
            process(&d, tree, &meta);
            assert_eq!(rows(&d).len(), 7, "{kind:?} {value:?}");
            assert_eq!(columns(&d, expected), 2, "{kind:?} {value:?}");
        }
    }
}

#[test]
fn display_formats_substitute_every_placeholder() {
    let mut tree = Tree {
        tree_id: 1,
        name: "f".into(),
        ..Tree::default()
    };
    let mut r = rule(0, 0, RuleType::Tagk);
    r.field = "host".into();
    r.set_regex(r"^([a-z]+)-").unwrap();
    r.display_format = "{tag_name}: {value} of {ovalue}".into();
    tree.add_rule(r);
    let mut r = rule(1, 0, RuleType::Metric);
    r.display_format = "{tsuid} {tag_name}".into();
    tree.add_rule(r);
    let out = TreeBuilder::new(tree)
        .run(&test_meta(), &Branch::root(1))
        .unwrap();
    let top = out.chain.unwrap();
    assert_eq!(top.display_name, "host: web of web-01.lga.mysite.com");
    let leaves = top.leaves.unwrap();
    let leaf = leaves.values().next().unwrap();
    assert_eq!(leaf.display_name, "0102030405 ");
    assert!(out.messages.contains(
        &"Display rule [1:1:0:METRIC] was of the wrong type to match on {tag_name}".to_string()
    ));
}

#[test]
fn a_second_series_on_a_taken_leaf_is_a_collision() {
    for (name, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        let mut tree = test_tree();
        tree.store_failures = true;
        store_tree_and_root(&db, &tree);
        process(&db, tree.clone(), &test_meta());
        let mut other = test_meta();
        other.tsuid = "0102030406".into();
        process(&db, tree.clone(), &other);
        let collisions = fetch_failures(&db, 1, true, None).unwrap();
        assert_eq!(
            collisions,
            BTreeMap::from([("0102030406".to_string(), "0102030405".to_string())]),
            "{name}"
        );
        // Asked for by TSUID: only those.
        assert!(
            fetch_failures(&db, 1, true, Some(&["0102030405".to_string()]))
                .unwrap()
                .is_empty(),
            "{name}"
        );
        // The same series again is no collision.
        process(&db, tree, &test_meta());
        assert_eq!(
            fetch_failures(&db, 1, true, None).unwrap().len(),
            1,
            "{name}"
        );
        // Purged: branches, leaves and collisions gone, the definition kept.
        assert!(tree_purge(&db, 1, false).unwrap() > 0, "{name}");
        let left: Vec<String> = rows(&db)
            .iter()
            .filter(|r| !r.cells.is_empty())
            .map(|r| hex_upper(&r.key))
            .collect();
        assert_eq!(left, vec!["0001"], "{name}");
        assert!(fetch_tree(&db, 1).unwrap().is_some(), "{name}");
        tree_purge(&db, 1, true).unwrap();
        assert!(fetch_tree(&db, 1).unwrap().is_none(), "{name}");
    }
}

#[test]
fn metasync_runs_the_series_it_creates_meta_for_through_the_trees() {
    use hourglass_core::value::Value;
    use hourglass_engine::IncomingPoint;
    for (name, store) in common::backends() {
        let mut settings = common::auto_create();
        settings.meta.tree_processing = true;
        let db = common::open(store, settings);
        let mut tree = Tree {
            tree_id: 1,
            name: "hosts".into(),
            enabled: true,
            ..Tree::default()
        };
        let mut r = rule(0, 0, RuleType::Tagk);
        r.field = "host".into();
        tree.add_rule(r);
        tree.add_rule(rule(1, 0, RuleType::Metric));
        let mut u = TreeUpdate {
            tree: tree.clone(),
            ..TreeUpdate::default()
        };
        u.changed.insert("name");
        store_tree(&db, 1, &u, true).unwrap();
        for (k, r) in tree.rules.values().flat_map(|l| l.values()).enumerate() {
            let mut ru = RuleUpdate {
                rule: r.clone(),
                ..RuleUpdate::default()
            };
            ru.changed.insert("type");
            store_rule(&db, &ru, true).unwrap_or_else(|e| panic!("{name} rule {k}: {e}"));
        }
        let out = db.add_points(&[IncomingPoint {
            metric: "sys.cpu.user",
            timestamp: 1_356_998_400,
            value: Value::Int(1),
            tags: &[("host", "web01")],
            line_tags: None,
        }]);
        assert!(out.errors.is_empty(), "{name}");
        db.flush().unwrap();
        assert!(
            fetch_branch(&db, &[0, 1], false).unwrap().is_none(),
            "{name}"
        );
        let report = hourglass_engine::meta::meta_sync(&db).unwrap();
        assert_eq!(report.ts_meta_created, 1, "{name}");
        assert!(
            report
                .lines
                .contains(&"Processed [1] new time series through the trees".to_string()),
            "{name}"
        );
        let root = fetch_branch(&db, &[0, 1], true).unwrap().unwrap();
        let hosts: Vec<&str> = root
            .branches
            .as_ref()
            .unwrap()
            .iter()
            .map(|b| b.display_name.as_str())
            .collect();
        assert_eq!(hosts, vec!["web01"], "{name}");
        let web01 = fetch_branch(&db, &root.branches.as_ref().unwrap()[0].id(), true)
            .unwrap()
            .unwrap();
        let leaf = web01.leaves.as_ref().unwrap().values().next().unwrap();
        assert_eq!(leaf.display_name, "sys.cpu.user", "{name}");
        assert_eq!(leaf.metric, "sys.cpu.user", "{name}");
        assert_eq!(
            leaf.tags,
            Some(BTreeMap::from([("host".to_string(), "web01".to_string())])),
            "{name}"
        );
    }
}
