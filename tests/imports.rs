//! The repository's imports form no cycle: in every crate (broker, SDK,
//! protocol, runtime seam, CLI, Python bindings), the graph whose nodes are
//! source files and whose edges are the paths one file names in another
//! (`crate::a::b`, `super::x`, `self::y`, `use` groups included; comments and
//! `#[cfg(test)]` items aside) has no cycle. A module declaring its children
//! (`mod x;`) and naming them by relative paths is nesting, not an import.
//!
//! A failure names each cycle's files and, for every edge in it, the path
//! that makes it, so the fix (move the shared item down into a leaf) is
//! plain. The layers inside each crate are checked by its own `layers.rs`.

#[path = "support/rust_source.rs"]
mod rust_source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rust_source::{code_of, module_of, rust_files};

/// The crates' source roots, from the repository root.
const CRATES: &[&str] = &[
    "broker/src",
    "client/src",
    "client/protocol/src",
    "client/rt/src",
    "cli/src",
    "python/src",
];

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses a path tail after `::` at `s`: segments, and `{...}` groups
/// (nested), into every full path it names.
fn parse_tail(s: &[char], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        while s.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        if s.get(i) == Some(&'{') {
            i += 1;
            loop {
                while s.get(i).is_some_and(|c| c.is_whitespace() || *c == ',') {
                    i += 1;
                }
                match s.get(i) {
                    None => return i,
                    Some('}') => return i + 1,
                    _ => {}
                }
                let before = i;
                i = parse_tail(s, i, path.clone(), out);
                if i == before {
                    i += 1;
                }
            }
        }
        let start = i;
        while s.get(i).copied().is_some_and(is_ident) {
            i += 1;
        }
        if i == start {
            out.push(path);
            return i;
        }
        let seg: String = s[start..i].iter().collect();
        if seg != "self" {
            path.push(seg);
        }
        if s.get(i) == Some(&':') && s.get(i + 1) == Some(&':') {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

/// Every path `code` names through `crate::`, `super::` or `self::`, from
/// the file of module `module`, as a full module path.
fn named_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let s: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let boundary = i == 0 || !is_ident(s[i - 1]) && s[i - 1] != ':';
        let rest = |w: &str| s[i..].iter().take(w.len()).copied().eq(w.chars());
        let base = if !boundary {
            None
        } else if rest("crate::") {
            Some((Vec::new(), 7))
        } else if rest("super::") {
            let mut base = module.to_vec();
            base.pop();
            let mut j = i + 7;
            // `super::super::`
            while s[j..].iter().take(7).copied().eq("super::".chars()) {
                base.pop();
                j += 7;
            }
            Some((base, j - i))
        } else if rest("self::") {
            Some((module.to_vec(), 6))
        } else {
            None
        };
        match base {
            Some((base, skip)) => {
                let mut found = Vec::new();
                i = parse_tail(&s, i + skip, base, &mut found);
                out.extend(found);
            }
            None => i += 1,
        }
    }
    out
}

/// The import graph of one crate: file → files it names (with an example path).
fn graph(src: &Path) -> BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|f| {
            (
                module_of(f.strip_prefix(src).expect("under src")),
                f.clone(),
            )
        })
        .collect();
    let mut g: BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>> = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).expect("read a source file");
        let edges = g.entry(module.clone()).or_default();
        for path in named_paths(&code_of(&text), module) {
            // The longest prefix that is a file of this crate.
            let target = (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains_key(p));
            if let Some(t) = target {
                if &t != module {
                    edges
                        .entry(t)
                        .or_insert_with(|| format!("crate::{}", path.join("::")));
                }
            }
        }
    }
    g
}

/// The strongly connected components with more than one file (Tarjan).
fn cycles(g: &BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>) -> Vec<Vec<Vec<String>>> {
    struct T<'a> {
        g: &'a BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>,
        index: BTreeMap<&'a [String], usize>,
        low: BTreeMap<&'a [String], usize>,
        stack: Vec<&'a [String]>,
        on: BTreeSet<&'a [String]>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a [String]) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(edges) = t.g.get(v) {
            for w in edges.keys() {
                let w: &[String] = w;
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_vec());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_slice()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn name(m: &[String]) -> String {
    if m.is_empty() {
        "<root>".into()
    } else {
        m.join("/")
    }
}

#[test]
fn no_crate_of_the_repository_has_an_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut report = String::new();
    for krate in CRATES {
        let src = root.join(krate);
        if !src.is_dir() {
            continue;
        }
        let g = graph(&src);
        for comp in cycles(&g) {
            report.push_str(&format!(
                "{krate}: {} files import each other:\n",
                comp.len()
            ));
            let members: BTreeSet<&Vec<String>> = comp.iter().collect();
            for from in &comp {
                for (to, via) in &g[from] {
                    if members.contains(to) {
                        report.push_str(&format!("  {} -> {} ({via})\n", name(from), name(to)));
                    }
                }
            }
        }
    }
    assert!(report.is_empty(), "import cycles:\n{report}");
}

#[test]
fn the_checker_sees_groups_super_paths_and_ignores_comments_and_tests() {
    let module = vec!["a".to_string(), "b".to_string()];
    let code = code_of(
        "use crate::x::{y::{self, Z}, w};\n\
         use super::c::D; // crate::commented\n\
         fn f() { crate::q::r(); }\n\
         #[cfg(test)]\nmod tests {\n    use crate::hidden::H;\n}\n",
    );
    let paths: BTreeSet<String> = named_paths(&code, &module)
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    let want: BTreeSet<String> = ["x::y", "x::y::Z", "x::w", "a::c::D", "q::r"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(paths, want);

    let mut g: BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>> = BTreeMap::new();
    let (a, b, c) = (
        vec!["a".to_string()],
        vec!["b".to_string()],
        vec!["c".to_string()],
    );
    g.entry(a.clone())
        .or_default()
        .insert(b.clone(), "crate::b".into());
    g.entry(b.clone())
        .or_default()
        .insert(a.clone(), "crate::a".into());
    g.entry(c.clone())
        .or_default()
        .insert(a.clone(), "crate::a".into());
    assert_eq!(cycles(&g), vec![vec![a, b]]);
}
