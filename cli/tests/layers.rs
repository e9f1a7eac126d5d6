//! The CLI's layers, checked: imports go down. Every `crate::`, `super::`
//! and `self::` path in `cli/src` (comments and `#[cfg(test)]` items aside)
//! must name a module of a lower layer than the file's own, or its own
//! top-level module; and inside `cmd/` and `perf/` one command or one perf
//! tool never reaches for another (what they share lives in `common.rs`, or
//! `perf/common.rs`). A new import that goes up fails here, with the file,
//! the path and the two layers. (The CLI is a binary crate: this reads its
//! source files.)
//!
//! The layers, bottom to top (`main.rs` is above them all):

use std::collections::{BTreeMap, BTreeSet};
#[path = "../../tests/support/rust_source.rs"]
mod rust_source;

use rust_source::{code_of, rust_files};
use std::path::Path;

const LAYERS: &[(&str, &[&str])] = &[
    ("leaves", &["output", "logging"]),
    ("the command line", &["args"]),
    ("shared helpers and settings", &["common", "settings"]),
    ("perf tools", &["perf"]),
    ("commands", &["cmd"]),
];

/// Inside these top-level modules each file is its own unit: a file may use
/// its parent (`mod.rs`) and the shared files named here, never a sibling.
const UNITS: &[(&str, &[&str])] = &[("cmd", &[]), ("perf", &["common"])];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

fn ident_at(code: &str, at: usize) -> &str {
    let end = code[at..]
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(code.len(), |e| at + e);
    &code[at..end]
}

/// The members of the `{...}` group opening at `at` (just past the `{`),
/// each as its path, and the position past the closing `}`.
fn group_at(code: &str, at: usize) -> (Vec<Vec<String>>, usize) {
    let mut members = Vec::new();
    let mut i = at;
    loop {
        while code[i..].starts_with([' ', '\n', '\t', ',']) {
            i += 1;
        }
        if i >= code.len() || code[i..].starts_with('}') {
            return (members, (i + 1).min(code.len()));
        }
        let (path, next) = path_at(code, i);
        if !path.is_empty() {
            members.extend(path);
        }
        // Past whatever follows (`as x`, `*`): to the next comma or the end.
        let mut j = next.max(i + 1);
        while j < code.len() && !code[j..].starts_with([',', '}']) {
            j += 1;
        }
        i = j;
    }
}

/// The paths a `a::b::{c, d::e}` at `at` names (one per group member), and
/// the position after it.
fn path_at(code: &str, at: usize) -> (Vec<Vec<String>>, usize) {
    let mut segments = Vec::new();
    let mut i = at;
    loop {
        if code[i..].starts_with('{') {
            let (members, next) = group_at(code, i + 1);
            let paths = members
                .into_iter()
                .map(|m| segments.iter().cloned().chain(m).collect())
                .collect();
            return (paths, next);
        }
        let name = ident_at(code, i);
        if name.is_empty() {
            break;
        }
        segments.push(name.to_owned());
        i += name.len();
        if code[i..].starts_with("::") {
            i += 2;
        } else {
            break;
        }
    }
    if segments.is_empty() {
        (Vec::new(), i)
    } else {
        (vec![segments], i)
    }
}

/// Every module path, from the crate root, that a file's code names with
/// `crate::`, `super::` or `self::` (`own`: the file's module path),
/// including the members of `{...}` groups.
fn paths_named(code: &str, own: &[String]) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| rest.starts_with(p));
        let before = code[..at].chars().next_back();
        let fresh = before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'));
        if !(starts && fresh) {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let (paths, next) = path_at(code, at);
        for path in paths {
            let mut base: Vec<String> = Vec::new();
            let mut segs = path.into_iter().peekable();
            match segs.peek().map(String::as_str) {
                Some("crate") => {
                    segs.next();
                }
                Some("self") => {
                    segs.next();
                    base = own.to_vec();
                }
                _ => {
                    base = own.to_vec();
                    while segs.peek().map(String::as_str) == Some("super") {
                        segs.next();
                        base.pop();
                    }
                }
            }
            base.extend(segs);
            if !base.is_empty() {
                out.insert(base);
            }
        }
        at = next.max(at + 1);
    }
    out
}

/// A file's module path: `cmd/topics.rs` is `[cmd, topics]`, `cmd/mod.rs` `[cmd]`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs").to_owned();
        if stem != "mod" {
            parts.push(stem);
        }
    }
    parts
}

/// What is wrong with `file` (module `own`) naming `used`, if anything.
fn judge(name: &str, own: &[String], used: &[String]) -> Option<String> {
    let (mine, theirs) = (own.first()?, used.first()?);
    let shown = used.join("::");
    if mine != theirs {
        let a = layer_of(mine)?;
        let Some(b) = layer_of(theirs) else {
            return None; // an item of the root (main.rs), or not a module
        };
        return (b >= a).then(|| {
            format!(
                "{name}: `{mine}` ({}) uses `crate::{shown}` ({}): imports must go down",
                LAYERS[a].0, LAYERS[b].0
            )
        });
    }
    let (_, shared) = UNITS.iter().find(|(m, _)| m == mine)?;
    // A file of the folder (not its mod.rs) naming a sibling.
    let (Some(me), Some(sibling)) = (own.get(1), used.get(1)) else {
        return None;
    };
    let shared_file = shared.contains(&me.as_str());
    if me == sibling || (!shared_file && shared.contains(&sibling.as_str())) {
        return None;
    }
    Some(if shared_file {
        format!("{name}: the shared `{mine}::{me}` uses `crate::{shown}`: it must not reach up into a {mine} file")
    } else {
        format!(
            "{name}: `{mine}::{me}` uses `crate::{shown}`: one {mine} file never imports another (move what they share to {})",
            if shared.is_empty() {
                "common.rs".to_owned()
            } else {
                format!("{mine}/{}.rs", shared.join(", "))
            }
        )
    })
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
        let name = rel.to_string_lossy().into_owned();
        if name == "main.rs" {
            continue;
        }
        let own = module_of(rel);
        let Some(top) = own.first() else { continue };
        if layer_of(top).is_none() {
            wrong.push(format!(
                "{name}: module `{top}` is in no layer (add it to LAYERS)"
            ));
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read a source file");
        for used in paths_named(&code_of(&text), &own) {
            seen.entry(own.join("::"))
                .or_default()
                .insert(used.join("::"));
            if let Some(w) = judge(&name, &own, &used) {
                wrong.push(w);
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
    // The check saw the graph it is meant to judge.
    let uses = |module: &str, prefix: &str| {
        seen.get(module)
            .is_some_and(|u| u.iter().any(|p| p.starts_with(prefix)))
    };
    assert!(uses("cmd::topics", "args::"), "{seen:?}");
    assert!(uses("cmd::broker", "settings"), "{seen:?}");
    assert!(uses("common", "args::client"), "{seen:?}");
    assert!(uses("perf::produce", "perf::common"), "{seen:?}");
}

#[test]
fn the_checker_finds_upward_imports() {
    let own = |p: &str| p.split("::").map(str::to_owned).collect::<Vec<_>>();
    let code = code_of(
        "use crate::args::{client::BrokerAddr, Cli}; // crate::cmd in a comment\n\
         #[cfg(test)]\nmod tests {\n    use crate::cmd::run;\n}\n\
         use super::super::common::describe;\nfn f() { super::groups::g(); self::x::y(); }\n",
    );
    let named = paths_named(&code, &own("cmd::topics"));
    let has = |p: &str| named.contains(&own(p));
    assert!(
        has("args::client::BrokerAddr") && has("args::Cli"),
        "{named:?}"
    );
    assert!(has("common::describe"), "{named:?}");
    assert!(
        has("cmd::groups::g") && has("cmd::topics::x::y"),
        "{named:?}"
    );
    assert!(
        !named.iter().any(|p| p.ends_with(&["run".to_owned()])),
        "comments and test modules are not code: {named:?}"
    );
    let judged = |file: &str, module: &str, used: &str| judge(file, &own(module), &own(used));
    assert!(judged("cmd/topics.rs", "cmd::topics", "cmd::groups::g").is_some());
    assert!(judged("cmd/topics.rs", "cmd::topics", "args::topics::T").is_none());
    assert!(judged("cmd/mod.rs", "cmd", "cmd::topics::run").is_none());
    assert!(judged("args/topics.rs", "args::topics", "cmd::topics").is_some());
    assert!(judged("common.rs", "common", "perf::common::x").is_some());
    assert!(judged("output.rs", "output", "settings::Effective").is_some());
    assert!(judged("perf/e2e.rs", "perf::e2e", "cmd::perf::run").is_some());
    assert!(judged("perf/e2e.rs", "perf::e2e", "perf::produce::Spread").is_some());
    assert!(judged("perf/e2e.rs", "perf::e2e", "perf::common::percentile").is_none());
    assert!(judged("perf/common.rs", "perf::common", "perf::e2e::x").is_some());
    assert!(judged("settings.rs", "settings", "args::Cli").is_none());
}
