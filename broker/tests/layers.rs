//! The broker's layers, checked: data flows down. Every `crate::` path in the
//! broker's code (tests, comments and doc links aside) must name a module of
//! a lower layer than the file's own, or its own module. A new import that
//! goes up (storage reaching for the engine, the engine for a front end)
//! fails here, with the file, the path and the two layers.
//!
//! The layers, bottom to top (docs/internals.md, docs/architecture.md):

use std::collections::{BTreeMap, BTreeSet};
#[path = "../../tests/support/rust_source.rs"]
mod rust_source;

use rust_source::{code_of, rust_files};
use std::path::Path;

const LAYERS: &[(&str, &[&str])] = &[
    ("the clock", &["clock"]),
    ("leaves", &["budget", "metrics"]),
    ("storage", &["storage"]),
    ("errors", &["error"]),
    ("security", &["security"]),
    ("settings and domain types", &["config", "domain"]),
    ("partitions", &["partition"]),
    ("coordinator", &["coordinator"]),
    ("engine", &["engine"]),
    ("network", &["net"]),
    ("front ends", &["flume", "kafka", "http"]),
    ("server", &["server"]),
    (
        "embedded mode (serves in-process connections with the server's loop)",
        &["embedded"],
    ),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

/// Every top-level module a file's code names with `crate::`, including
/// those inside `use crate::{...}` groups.
fn modules_named(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(i) = code[at..].find("crate::") {
        let start = at + i + "crate::".len();
        at = start;
        if bytes.get(start) == Some(&b'{') {
            let end = code[start..].find('}').map_or(code.len(), |e| start + e);
            for part in code[start + 1..end].split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
            continue;
        }
        let name: String = code[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

#[test]
fn every_module_imports_only_from_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let name = rel.to_string_lossy();
        if name == "lib.rs" || name.ends_with("tests.rs") {
            continue;
        }
        let module = rel
            .components()
            .next()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_owned()
            })
            .expect("a path");
        let Some(own) = layer_of(&module) else {
            wrong.push(format!(
                "{name}: module `{module}` is in no layer (add it to LAYERS)"
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read a source file");
        for used in modules_named(&code_of(&text)) {
            if used == module || used == "now_ms" {
                continue;
            }
            let Some(theirs) = layer_of(&used) else {
                continue; // a root re-export (`crate::BrokerError`)
            };
            seen.entry(module.clone()).or_default().insert(used.clone());
            if theirs >= own {
                wrong.push(format!(
                    "{name}: `{module}` ({}) uses `crate::{used}` ({}): imports must go down",
                    LAYERS[own].0, LAYERS[theirs].0
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
    // The check saw the graph it is meant to judge.
    assert!(seen.get("engine").is_some_and(|u| u.contains("storage")));
    assert!(seen.get("flume").is_some_and(|u| u.contains("engine")));
}

#[test]
fn the_checker_finds_upward_imports() {
    let code = code_of(
        "use crate::engine::Engine; // crate::server in a comment\n\
         #[cfg(test)]\nmod tests {\n    use crate::server::Broker;\n}\n\
         fn f() { crate::{budget, net}::x(); }\n",
    );
    let named = modules_named(&code);
    assert!(named.contains("engine") && named.contains("budget") && named.contains("net"));
    assert!(
        !named.contains("server"),
        "comments and test modules are not code: {named:?}"
    );
}

/// The front ends' folders: they speak to the engine (and the domain types,
/// settings and security it shares), never to what lies under it.
const FRONT_END_DIRS: &[&str] = &["kafka", "flume", "http"];

/// The modules under the engine a front end must not name.
const UNDER_THE_ENGINE: &[&str] = &["coordinator", "storage"];

/// Where a file's code names a module of [`UNDER_THE_ENGINE`]: as a
/// `crate::` path (also inside `use crate::{...}`) or as a segment of any
/// path (`super::storage::X`, `storage::Y`). A word in a string or an
/// identifier that only contains it (`find_coordinator`) does not count.
fn under_the_engine_named(code: &str) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = modules_named(code)
        .into_iter()
        .filter(|m| UNDER_THE_ENGINE.contains(&m.as_str()))
        .collect();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    for name in UNDER_THE_ENGINE {
        let mut at = 0;
        while let Some(i) = code[at..].find(name) {
            let start = at + i;
            let end = start + name.len();
            at = end;
            let before = code[..start].chars().next_back();
            let after = code[end..].chars().next();
            if before.is_some_and(is_ident) || after.is_some_and(is_ident) {
                continue;
            }
            if code[..start].ends_with("::") || code[end..].starts_with("::") {
                out.insert((*name).to_owned());
            }
        }
    }
    out
}

#[test]
fn front_ends_name_neither_coordinator_nor_storage() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for dir in FRONT_END_DIRS {
        let mut files = Vec::new();
        rust_files(&src.join(dir), &mut files);
        files.sort();
        for file in &files {
            let rel = file.strip_prefix(&src).expect("under src");
            let name = rel.to_string_lossy();
            if name.ends_with("tests.rs") {
                continue;
            }
            checked += 1;
            let text = std::fs::read_to_string(file).expect("read a source file");
            for used in under_the_engine_named(&code_of(&text)) {
                wrong.push(format!(
                    "{name}: names `{used}`: a front end goes through the engine \
                     (re-export what it needs from `crate::engine` or `crate::domain`)"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "front ends reach under the engine:\n{}",
        wrong.join("\n")
    );
    assert!(
        checked > 50,
        "the check saw the front ends ({checked} files)"
    );
}

#[test]
fn the_front_end_check_finds_coordinator_and_storage() {
    let named = |code: &str| under_the_engine_named(&code_of(code));
    assert!(named("use crate::coordinator::txn::TxnState;\n").contains("coordinator"));
    assert!(named("use crate::{engine::Engine, storage};\n").contains("storage"));
    assert!(named("fn f() { x(super::super::storage::MAX); }\n").contains("storage"));
    assert!(named("use storage::ReadAs;\n").contains("storage"));
    for fine in [
        "mod find_coordinator;\nfn f() { find_coordinator::handle(); }\n",
        "use kafka_protocol::messages::find_coordinator_response::Coordinator;\n",
        "fn f() { g(\"after a storage failure\", r.coordinator_keys); }\n",
        "// crate::storage in a comment\n",
        "#[cfg(test)]\nmod tests {\n    use crate::storage::Log;\n}\n",
    ] {
        assert!(named(fine).is_empty(), "{fine:?}: {:?}", named(fine));
    }
}

/// The engine's services, as `Engine` hands them out (`engine.records()`, ...).
const SERVICES: &[&str] = &["records", "groups", "shares", "transactions", "admin"];

/// API files that answer for more than one service by what they are, and why.
/// Every other API file talks to one service (looking topics up in
/// `records`, the bottom service, besides).
const SPANNING_APIS: &[(&str, &str)] = &[
    (
        "flume/apis/list_groups.rs",
        "lists classic and share groups",
    ),
    (
        "kafka/apis/list_groups.rs",
        "lists classic, consumer-protocol and share groups",
    ),
    ("kafka/apis/delete_groups.rs", "deletes a group of any kind"),
    (
        "kafka/apis/describe_configs.rs",
        "describes topics' and share groups' configs",
    ),
    (
        "kafka/apis/alter_configs.rs",
        "alters topics' and share groups' configs",
    ),
    (
        "kafka/apis/offset_fetch.rs",
        "require_stable asks the transactions for offsets not committed yet",
    ),
];

/// The services a file's code calls (`.records()`, `.groups()`, ...).
fn services_called(code: &str) -> BTreeSet<&'static str> {
    SERVICES
        .iter()
        .filter(|s| code.contains(&format!(".{s}()")))
        .copied()
        .collect()
}

#[test]
fn each_api_file_talks_to_one_service() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for dir in ["flume/apis", "kafka/apis"] {
        let mut files = Vec::new();
        rust_files(&src.join(dir), &mut files);
        files.sort();
        for file in &files {
            let name = file
                .strip_prefix(&src)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(file).expect("read a source file");
            let mut called = services_called(&code_of(&text));
            if called.len() > 1 {
                called.remove("records");
            }
            checked += 1;
            if called.len() > 1 && !SPANNING_APIS.iter().any(|(f, _)| *f == name) {
                wrong.push(format!("{name}: talks to {called:?}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "API files that talk to more than one service (split the work into the \
         service, or list the file in SPANNING_APIS with why):\n{}",
        wrong.join("\n")
    );
    assert!(checked > 60, "the check saw the API files ({checked})");
    for (file, _) in SPANNING_APIS {
        assert!(
            src.join(file).is_file(),
            "SPANNING_APIS names {file}, which is gone"
        );
    }
}

#[test]
fn the_service_check_finds_the_services_called() {
    let code = "fn f(cx: &Cx) { cx.engine.groups().join(); cx.engine.records().topic(\"t\"); }";
    assert_eq!(services_called(code), BTreeSet::from(["groups", "records"]));
    assert!(services_called("fn f() { admin(); }").is_empty());
}
