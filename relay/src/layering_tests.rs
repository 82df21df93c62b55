//! Pins the layering the crate docs describe: reads every source file of
//! the library, collects which top-level module names which (`crate::x`,
//! `super::x` up to the crate root, and the root's re-exports such as
//! `crate::RelayConfig`), and requires the arrows to point one way (no
//! cycle among top-level modules) and the house rules to hold: the serve
//! loop never names the HTTP side, nothing names `demo`, `metrics` names
//! neither `live` nor `http`, and `live` does not name `http`.
//!
//! Only the library's own code counts: comments are skipped (a doc link is
//! navigation, not an import), and so is test code (`#[cfg(test)]` modules,
//! inline or in files of their own), which may drive the crate from any
//! height. Code is read as text, which is enough for the paths this crate
//! writes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One arrow: `from` names `to` at `file:line`.
#[derive(Clone, Debug)]
struct Arrow {
    from: String,
    to: String,
    file: String,
    line: usize,
    text: String,
}

impl std::fmt::Display for Arrow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} -> {} at relay/src/{}:{}: {}",
            self.from,
            self.to,
            self.file,
            self.line,
            self.text.trim()
        )
    }
}

/// Files that are not library modules: the binary's, and this test (its
/// strings name the modules it forbids).
const SKIPPED: [&str; 4] = ["main.rs", "main_logs.rs", "lib.rs", "layering_tests.rs"];

/// Modules the test leaves out of the graph: shared test scaffolding.
const SCAFFOLDING: [&str; 1] = ["test_support"];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, as paths relative to `src`.
fn rust_files(src: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs")
                && let Ok(rel) = p.strip_prefix(src)
            {
                out.push(rel.to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// The module path of a file: `serve/mod.rs` is `[serve]`,
/// `serve/notes.rs` is `[serve, notes]`, `metrics.rs` is `[metrics]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs").to_owned();
        if stem != "mod" {
            parts.push(stem);
        }
    }
    parts
}

/// The crate root's modules and re-exports (`pub use config::{RelayConfig, ..}`):
/// a name under `crate::` and the top-level module it belongs to.
fn root_names(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    let code: String = lib
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    for stmt in code.split(';') {
        let stmt = stmt.trim();
        let stmt = stmt.rsplit('\n').next().unwrap_or(stmt).trim();
        if let Some(m) = stmt
            .strip_prefix("pub mod ")
            .or_else(|| stmt.strip_prefix("mod "))
        {
            names.insert(m.trim().to_owned(), m.trim().to_owned());
        } else if let Some(rest) = stmt.strip_prefix("pub use ") {
            let (module, items) = rest.split_once("::").unwrap_or((rest, ""));
            for item in items.trim_matches(|c| c == '{' || c == '}').split(',') {
                let item = item.trim();
                let name = item.rsplit(" as ").next().unwrap_or(item).trim();
                if !name.is_empty() {
                    names.insert(name.to_owned(), module.trim().to_owned());
                }
            }
        }
    }
    names
}

/// The code of `text` with comments blanked (line numbers kept): `//`
/// line comments, and the rest of a line after ` //` outside a string.
fn code_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with("//") {
                return String::new();
            }
            let mut in_str = false;
            let mut prev = ' ';
            for (i, c) in l.char_indices() {
                if c == '"' && prev != '\\' {
                    in_str = !in_str;
                }
                if !in_str && c == '/' && prev == '/' {
                    return l[..i - 1].to_owned();
                }
                prev = c;
            }
            l.to_owned()
        })
        .collect()
}

/// Blanks the lines of `#[cfg(test)]` inline modules (`mod tests { .. }`,
/// by brace depth outside string and char literals) and returns the names
/// of test-only modules declared here (`#[cfg(test)] mod name;`).
fn strip_tests(lines: &mut [String]) -> BTreeSet<String> {
    let mut test_files = BTreeSet::new();
    let mut pending = false;
    let mut depth: Option<i64> = None;
    for line in lines.iter_mut() {
        let t = line.trim().to_owned();
        if let Some(d) = depth.as_mut() {
            let mut in_str = false;
            let mut prev = ' ';
            for c in t.chars() {
                match c {
                    '"' if prev != '\\' => in_str = !in_str,
                    '{' if !in_str && prev != '\'' => *d += 1,
                    '}' if !in_str && prev != '\'' => *d -= 1,
                    _ => {}
                }
                prev = c;
            }
            line.clear();
            if *d <= 0 {
                depth = None;
            }
            continue;
        }
        if t == "#[cfg(test)]" {
            pending = true;
            continue;
        }
        if pending && t.starts_with("#[") {
            continue;
        }
        if pending {
            let decl = t
                .strip_prefix("pub(crate) ")
                .or_else(|| t.strip_prefix("pub "))
                .unwrap_or(&t);
            if let Some(name) = decl.strip_prefix("mod ") {
                if let Some(name) = name.strip_suffix(';') {
                    test_files.insert(name.trim().to_owned());
                } else if name.trim_end().ends_with('{') {
                    depth = Some(1);
                    line.clear();
                }
            }
        }
        pending = false;
    }
    test_files
}

/// The first identifiers of the items of a `{a, b::c, d as e}` group that
/// starts at `rest` (just after its `{`), and how many bytes it spans.
fn group_heads(rest: &str) -> (Vec<String>, usize) {
    let mut depth = 1;
    let mut heads = Vec::new();
    let mut item_start = true;
    for (i, c) in rest.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return (heads, i + 1);
                }
            }
            ',' if depth == 1 => item_start = true,
            c if item_start && depth == 1 && (c.is_alphanumeric() || c == '_') => {
                let word: String = rest[i..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                heads.push(word);
                item_start = false;
            }
            _ => {}
        }
    }
    (heads, rest.len())
}

/// The identifier at the start of `rest`, or the heads of a group there.
fn heads_at(rest: &str) -> Vec<String> {
    if let Some(group) = rest.strip_prefix('{') {
        return group_heads(group).0;
    }
    let word: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    if word.is_empty() {
        Vec::new()
    } else {
        vec![word]
    }
}

/// Every arrow out of the library code of one file (its test modules
/// blanked; their names, if in files of their own, go to `test_files`):
/// `crate::x` and `super::` chains that reach the crate root, resolved to
/// top-level modules through `root`.
fn arrows_of(
    rel: &Path,
    text: &str,
    root: &BTreeMap<String, String>,
    test_files: &mut BTreeSet<PathBuf>,
) -> Vec<Arrow> {
    let path = module_path(rel);
    let Some(top) = path.first().cloned() else {
        return Vec::new();
    };
    let file = rel.to_string_lossy().replace('\\', "/");
    let mut lines = code_lines(text);
    let dir = match rel.file_name().and_then(|f| f.to_str()) {
        Some("mod.rs") => rel.parent().map(Path::to_path_buf).unwrap_or_default(),
        _ => rel.with_extension(""),
    };
    for name in strip_tests(&mut lines) {
        test_files.insert(dir.join(format!("{name}.rs")));
        test_files.insert(dir.join(name).join("mod.rs"));
    }
    // The code as one text, and where each line starts in it: a `use
    // crate::{..}` group may span lines.
    let code = lines.join("\n");
    let starts: Vec<usize> = lines
        .iter()
        .scan(0, |at, l| {
            let start = *at;
            *at += l.len() + 1;
            Some(start)
        })
        .collect();
    let mut arrows = Vec::new();
    let mut push = |to: String, n: usize, line: &str| {
        if to != top {
            arrows.push(Arrow {
                from: top.clone(),
                to,
                file: file.clone(),
                line: n + 1,
                text: line.to_owned(),
            });
        }
    };
    for (n, line) in lines.iter().enumerate() {
        let mut from = 0;
        while let Some(at) = line[from..].find("crate::") {
            let start = from + at;
            from = start + "crate::".len();
            // `lockstep_relay::crate::` never occurs; skip `$crate::` and words ending in `crate`.
            if line[..start]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$')
            {
                continue;
            }
            for head in heads_at(&code[starts[n] + from..]) {
                if let Some(m) = root.get(&head) {
                    push(m.clone(), n, line);
                }
            }
        }
        let mut from = 0;
        while let Some(at) = line[from..].find("super::") {
            let start = from + at;
            if line[..start]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
            {
                from = start + "super::".len();
                continue;
            }
            let mut k = 0;
            let mut end = start;
            while line[end..].starts_with("super::") {
                k += 1;
                end += "super::".len();
            }
            from = end;
            if k < path.len() {
                continue; // within the same top-level module
            }
            for head in heads_at(&code[starts[n] + end..]) {
                if let Some(m) = root.get(&head) {
                    push(m.clone(), n, line);
                }
            }
        }
    }
    arrows
}

/// Every arrow between top-level modules of the library.
fn arrows() -> Vec<Arrow> {
    let src = src_dir();
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default();
    let root = root_names(&lib);
    assert!(
        root.contains_key("serve") && root.contains_key("RelayConfig"),
        "could not read the crate root's modules from relay/src/lib.rs"
    );
    let mut all = Vec::new();
    let mut test_files = BTreeSet::new();
    for rel in rust_files(&src) {
        if rel.components().count() == 1 && SKIPPED.contains(&rel.to_string_lossy().as_ref()) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(src.join(&rel)) else {
            continue;
        };
        all.push((rel.clone(), arrows_of(&rel, &text, &root, &mut test_files)));
    }
    all.into_iter()
        .filter(|(rel, _)| !test_files.contains(rel))
        .flat_map(|(_, arrows)| arrows)
        .filter(|a| {
            !SCAFFOLDING.contains(&a.from.as_str()) && !SCAFFOLDING.contains(&a.to.as_str())
        })
        .collect()
}

/// A cycle in the graph, as the arrows that make it, if there is one.
fn find_cycle(arrows: &[Arrow]) -> Option<Vec<Arrow>> {
    let mut first: BTreeMap<(&str, &str), &Arrow> = BTreeMap::new();
    for a in arrows {
        first.entry((a.from.as_str(), a.to.as_str())).or_insert(a);
    }
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in first.keys() {
        next.entry(from).or_default().insert(to);
    }
    // Depth-first search with the path on a stack; grey = on the path.
    fn visit<'a>(
        node: &'a str,
        next: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        done: &mut BTreeSet<&'a str>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(i) = path.iter().position(|n| *n == node) {
            let mut cycle = path[i..].to_vec();
            cycle.push(node);
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node);
        for to in next.get(node).into_iter().flatten() {
            if let Some(c) = visit(to, next, done, path) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    for node in next.keys() {
        if let Some(cycle) = visit(node, &next, &mut done, &mut Vec::new()) {
            return Some(
                cycle
                    .windows(2)
                    .filter_map(|w| first.get(&(w[0], w[1])).map(|a| (*a).clone()))
                    .collect(),
            );
        }
    }
    None
}

#[test]
fn the_relays_top_level_modules_import_one_way() {
    let arrows = arrows();
    assert!(
        arrows.iter().any(|a| a.from == "serve" && a.to == "router"),
        "the scan found no arrow serve -> router: it reads nothing"
    );
    if let Some(cycle) = find_cycle(&arrows) {
        let lines: Vec<String> = cycle.iter().map(ToString::to_string).collect();
        panic!(
            "the relay's modules import in a circle (see the layering in relay/src/lib.rs):\n  {}",
            lines.join("\n  ")
        );
    }
}

#[test]
fn the_house_rules_of_the_relays_layering_hold() {
    let forbidden: [(&str, &str, &str); 5] = [
        (
            "serve",
            "http",
            "the serve loop never imports the HTTP side",
        ),
        ("*", "demo", "nothing imports demo: it sits on top"),
        (
            "metrics",
            "live",
            "metrics are counters, below the live view",
        ),
        (
            "metrics",
            "http",
            "metrics are counters, below the HTTP server",
        ),
        (
            "live",
            "http",
            "the live view is mounted by the HTTP server, not the reverse",
        ),
    ];
    let broken: Vec<String> = arrows()
        .iter()
        .filter_map(|a| {
            forbidden
                .iter()
                .find(|(from, to, _)| (*from == "*" || *from == a.from) && *to == a.to)
                .map(|(_, _, why)| format!("{why}: {a}"))
        })
        .collect();
    assert!(
        broken.is_empty(),
        "the relay's layering is broken:\n  {}",
        broken.join("\n  ")
    );
}

/// The scanner itself: groups over lines, `super` up to the root, comments
/// and test modules (inline or in files of their own) left out.
#[test]
fn the_scan_resolves_groups_supers_and_root_re_exports() {
    let root = root_names(
        "pub mod serve;\nmod http;\npub mod metrics;\npub use config::{InvalidSetting, RelayConfig};\npub mod config;\n",
    );
    let text = "use crate::{\n    RelayConfig,\n    metrics::Metric,\n};\nuse super::super::http::bind;\n// crate::demo in a comment\n#[cfg(test)]\nmod tests {\n    use crate::demo::run;\n    fn f() { if true { let _ = '}'; } }\n}\nuse crate::config::X;\n#[cfg(test)]\n#[allow(dead_code)]\nmod more_tests;\n";
    let mut tests = BTreeSet::new();
    let got: Vec<(String, usize)> = arrows_of(Path::new("serve/notes.rs"), text, &root, &mut tests)
        .into_iter()
        .map(|a| (a.to, a.line))
        .collect();
    assert_eq!(
        got,
        vec![
            ("config".to_owned(), 1),
            ("metrics".to_owned(), 1),
            ("http".to_owned(), 5),
            ("config".to_owned(), 12)
        ]
    );
    assert!(
        tests.contains(Path::new("serve/notes/more_tests.rs")),
        "{tests:?}"
    );
}
