//! Reading a crate's Rust sources for the architecture tests
//! (`broker/tests/layers.rs`, `client/tests/layers.rs`, `cli/tests/layers.rs`,
//! `tests/imports.rs`, each including this file with `#[path]`): the files,
//! their code without comments and test modules, their module paths.

#![allow(dead_code)] // each test uses its part

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, appended to `out`.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's code without comments and without `#[cfg(test)]` items (a test
/// module may reach anything).
pub fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<usize> = None;
    let mut depth = 0usize;
    let mut pending_test = false;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let trimmed = code.trim();
        if skip_depth.is_none() && trimmed.starts_with("#[cfg(test)]") {
            pending_test = true;
            continue;
        }
        let opens = code.matches('{').count();
        let closes = code.matches('}').count();
        if pending_test && skip_depth.is_none() {
            if trimmed.is_empty() || trimmed.starts_with("#[") {
                continue;
            }
            pending_test = false;
            if opens > closes {
                skip_depth = Some(depth);
                depth += opens - closes;
            }
            continue;
        }
        depth = (depth + opens).saturating_sub(closes);
        if let Some(d) = skip_depth {
            if depth <= d {
                skip_depth = None;
            }
            continue;
        }
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The module path of a file under its crate's source root: `a/b.rs` and
/// `a/b/mod.rs` are `a::b`; `lib.rs` and `main.rs` the root (empty).
pub fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}
