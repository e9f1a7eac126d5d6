//! The client's layers, checked: facades over transports over the leaf.
//! Every `crate::` and `super::` path in the client's code (tests, comments
//! and doc links aside) must name a module of a lower layer than the file's
//! own, or its own module. So a leaf module (the transport-neutral types and
//! the pieces both transports share) imports no transport and no facade;
//! Flume's transport (`flume/`) and Kafka's (`kafka/`) never import each
//! other (one layer) nor a facade; a facade imports no other facade. Nothing
//! imports through the crate root's re-exports (`crate::Error`: use
//! `crate::error::Error`), so the root is in no cycle. A path that breaks
//! this fails here, with the file and the path.
//!
//! The layers, bottom to top (the crate docs' "Layout", client/src/lib.rs):

use std::collections::{BTreeMap, BTreeSet};
#[path = "../../tests/support/rust_source.rs"]
mod rust_source;

use rust_source::{code_of, rust_files};
use std::path::Path;

const LAYERS: &[(&str, &[&str])] = &[
    ("errors (leaf)", &["error"]),
    (
        "pieces both transports share (leaf)",
        &["clock", "tls", "join_failures"],
    ),
    ("transport-neutral types (leaf)", &["types"]),
    ("transports", &["flume", "kafka"]),
    (
        "facades",
        &["producer", "consumer", "group", "share", "admin"],
    ),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

fn ident_at(code: &str, at: usize) -> String {
    code[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The first name after each `prefix` in `code` (every name of a
/// `prefix{a, b::c}` group), with the text the path was written as.
fn names_after(code: &str, prefix: &str, out: &mut BTreeSet<(String, String)>) {
    let mut at = 0;
    while let Some(i) = code[at..].find(prefix) {
        let start = at + i + prefix.len();
        at = start;
        // Part of a longer name (`my_crate::`, `supercrate::`).
        let before = code[..start - prefix.len()].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if code[start..].starts_with('{') {
            let end = code[start..].find('}').map_or(code.len(), |e| start + e);
            for part in code[start + 1..end].split(',') {
                let part = part.trim();
                let name = ident_at(part, 0);
                if !name.is_empty() {
                    out.insert((name, format!("{prefix}{part}")));
                }
            }
            continue;
        }
        let name = ident_at(code, start);
        if !name.is_empty() {
            out.insert((name.clone(), format!("{prefix}{name}")));
        }
    }
}

/// Every top-level module a file's code names, with the path as written:
/// `crate::x::…` names `x`; `super::…` is resolved from the file's module
/// (`module`: `["kafka", "group"]` for `kafka/group.rs`, `["kafka"]` for
/// `kafka/mod.rs`), so `super::cluster` in `kafka/group.rs` names `kafka`
/// and `super::super::flume` names `flume`.
fn modules_named(code: &str, module: &[String]) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    names_after(code, "crate::", &mut out);
    let mut at = 0;
    while let Some(i) = code[at..].find("super::") {
        let start = at + i;
        at = start + "super::".len();
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut ups = 0;
        let mut p = start;
        while code[p..].starts_with("super::") {
            ups += 1;
            p += "super::".len();
        }
        at = p;
        let base = &module[..module.len().saturating_sub(ups)];
        let next = ident_at(code, p);
        let written = format!("{}{next}", &code[start..p]);
        match base.first() {
            // Still inside a top-level module: that module.
            Some(top) => {
                out.insert((top.clone(), written));
            }
            // Up to the root: the name after the `super::`s.
            None if !next.is_empty() => {
                out.insert((next, written));
            }
            None => {}
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
        let name = rel.to_string_lossy().replace('\\', "/");
        if name == "lib.rs" {
            continue;
        }
        let parts: Vec<String> = name
            .trim_end_matches(".rs")
            .split('/')
            .map(str::to_owned)
            .collect();
        let module = parts[0].clone();
        // The module a `super::` is written in: `kafka/group.rs` is
        // `kafka::group`, whose `super` is `kafka`; `kafka/mod.rs` is `kafka`,
        // whose `super` is the root.
        let mut module_path = parts.clone();
        if module_path.last().is_some_and(|l| l == "mod") {
            module_path.pop();
        }
        let Some(own) = layer_of(&module) else {
            wrong.push(format!(
                "{name}: module `{module}` is in no layer (add it to LAYERS in client/tests/layers.rs)"
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (used, path) in modules_named(&code_of(&text), &module_path) {
            if used == module {
                continue;
            }
            let Some(theirs) = layer_of(&used) else {
                wrong.push(format!(
                    "{name}: `{path}` goes through the crate root's re-exports (or names no \
                     module of a layer): import from the defining module instead \
                     (`crate::error::Error`, not `crate::Error`; `flume_rt`, not `crate::rt`)"
                ));
                continue;
            };
            seen.entry(module.clone()).or_default().insert(used.clone());
            if theirs >= own {
                let why = match (LAYERS[own].0, LAYERS[theirs].0) {
                    (_, "facades") if own < theirs => "a leaf or a transport imports a facade",
                    (_, "transports") if own < theirs => "a leaf module imports a transport",
                    ("transports", "transports") => {
                        "the transports never import each other (share through the leaf)"
                    }
                    ("facades", "facades") => {
                        "a facade imports another facade (share through the leaf)"
                    }
                    _ => "imports must go down",
                };
                wrong.push(format!(
                    "{name}: `{module}` ({}) uses `{path}` ({}): {why}",
                    LAYERS[own].0, LAYERS[theirs].0
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
    // The check saw the graph it is meant to judge.
    for (module, uses) in [
        ("producer", "flume"),
        ("producer", "kafka"),
        ("group", "types"),
        ("flume", "types"),
        ("kafka", "types"),
        ("types", "error"),
    ] {
        assert!(
            seen.get(module).is_some_and(|u| u.contains(uses)),
            "`{module}` should use `{uses}`: {seen:?}"
        );
    }
}

#[test]
fn the_checker_finds_upward_imports() {
    let code = code_of(
        "use crate::group::GroupConsumer; // crate::admin in a comment\n\
         /// A doc link to [`crate::share::ShareConsumer`].\n\
         #[cfg(test)]\nmod tests {\n    use crate::producer::Producer;\n}\n\
         fn f() { crate::{types, flume::conn}::x(); }\n\
         use super::cluster::Cluster;\nuse super::super::flume::conn::Client;\n\
         use crate::Error;\nuse my_crate::kafka::X;\n",
    );
    let named: BTreeSet<String> = modules_named(&code, &["kafka".to_owned(), "group".to_owned()])
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    for m in ["group", "types", "flume", "kafka", "Error"] {
        assert!(named.contains(m), "{m} in {named:?}");
    }
    for m in ["admin", "share", "producer", "cluster"] {
        assert!(
            !named.contains(m),
            "comments, doc links, test modules and siblings are not imports of {m}: {named:?}"
        );
    }
    assert_eq!(named.len(), 5, "{named:?}");
}
