//! A check of the workspace's module graphs (issue 22): for every crate
//! under `crates/`, each source file is a module, and each path it names
//! through `crate::`, `super::`, `self::` or a child module's name is an
//! edge to the file holding the module named. No crate's files may import
//! each other in a cycle of more than [`MAX_CYCLE`] files; the unit test
//! below runs the check over the workspace as part of `cargo test`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest import cycle a crate's modules may form.
pub const MAX_CYCLE: usize = 3;

/// Crates whose long cycle is known and owned elsewhere, with why: the
/// check fails when one of them has no long cycle any more (remove it).
pub const KNOWN: &[(&str, &str)] = &[];

/// The import cycles of more than [`MAX_CYCLE`] files in the crates under
/// `crates` (one per crate at most, as `crate: a -> b -> ... -> a`), but
/// for the crates in [`KNOWN`].
pub fn long_cycles(crates: &Path) -> Vec<String> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(crates)
        .expect("crates/ lists")
        .map(|e| e.expect("a directory entry").path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let mut failures = Vec::new();
    for src in dirs {
        let name = src
            .parent()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let known = KNOWN.iter().any(|(k, _)| *k == name);
        let graph = Graph::of(&src);
        if std::env::var_os("HALE_IMPORT_GRAPH").is_some() {
            graph.dump(&src);
        }
        match (graph.long_cycle(), known) {
            (Some(cycle), false) => failures.push(format!("{name}: {}", cycle.join(" -> "))),
            (None, true) => failures.push(format!(
                "{name}: no long cycle any more, remove it from KNOWN"
            )),
            _ => {}
        }
    }
    failures
}

/// A module path, `[]` for the crate root.
type ModPath = Vec<String>;

struct Graph {
    names: Vec<String>,
    edges: Vec<BTreeSet<usize>>,
}

impl Graph {
    fn of(src: &Path) -> Graph {
        let mut files = BTreeMap::new();
        collect(src, &[], &mut files);
        Graph::from_files(files)
    }

    fn from_files(files: BTreeMap<ModPath, String>) -> Graph {
        let index: BTreeMap<ModPath, usize> = files
            .keys()
            .enumerate()
            .map(|(i, p)| (p.clone(), i))
            .collect();
        let names = files
            .keys()
            .map(|p| {
                if p.is_empty() {
                    "<root>".to_string()
                } else {
                    p.join("::")
                }
            })
            .collect();
        let mut edges = vec![BTreeSet::new(); files.len()];
        for (path, text) in &files {
            let from = index[path];
            for target in references(path, &strip(text), &index) {
                if let Some(to) = resolve(&target, &index) {
                    if to != from {
                        edges[from].insert(to);
                    }
                }
            }
        }
        Graph { names, edges }
    }

    /// Prints the components of more than one file, and their edges.
    fn dump(&self, src: &Path) {
        for component in self.components().into_iter().filter(|c| c.len() > 1) {
            println!(
                "{}: a cycle through {} files",
                src.display(),
                component.len()
            );
            for &v in &component {
                let to: Vec<&str> = self.edges[v]
                    .iter()
                    .filter(|w| component.contains(w))
                    .map(|&w| self.names[w].as_str())
                    .collect();
                println!("  {} -> {}", self.names[v], to.join(", "));
            }
        }
    }

    /// A simple cycle of more than `MAX_CYCLE` files, if any.
    fn long_cycle(&self) -> Option<Vec<String>> {
        for component in self.components() {
            if component.len() <= MAX_CYCLE {
                continue;
            }
            let set: BTreeSet<usize> = component.iter().copied().collect();
            for &start in &component {
                let mut path = vec![start];
                if self.search(start, &set, &mut path) {
                    let mut names: Vec<String> =
                        path.iter().map(|&i| self.names[i].clone()).collect();
                    names.push(self.names[start].clone());
                    return Some(names);
                }
            }
        }
        None
    }

    /// Depth-first over simple paths from `path[0]` inside `set`, through
    /// nodes after it (each cycle is found from its lowest node).
    fn search(&self, start: usize, set: &BTreeSet<usize>, path: &mut Vec<usize>) -> bool {
        let at = *path.last().expect("a path starts somewhere");
        for &next in &self.edges[at] {
            if next == start && path.len() > MAX_CYCLE {
                return true;
            }
            if next > start && set.contains(&next) && !path.contains(&next) {
                path.push(next);
                if self.search(start, set, path) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }

    /// Strongly connected components (Tarjan).
    fn components(&self) -> Vec<Vec<usize>> {
        struct State<'a> {
            edges: &'a [BTreeSet<usize>],
            index: Vec<Option<usize>>,
            low: Vec<usize>,
            on_stack: Vec<bool>,
            stack: Vec<usize>,
            next: usize,
            out: Vec<Vec<usize>>,
        }
        fn visit(s: &mut State<'_>, v: usize) {
            s.index[v] = Some(s.next);
            s.low[v] = s.next;
            s.next += 1;
            s.stack.push(v);
            s.on_stack[v] = true;
            for &w in s.edges[v].clone().iter() {
                match s.index[w] {
                    None => {
                        visit(s, w);
                        s.low[v] = s.low[v].min(s.low[w]);
                    }
                    Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(s.low[v]) == s.index[v] {
                let mut component = Vec::new();
                while let Some(w) = s.stack.pop() {
                    s.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                component.sort_unstable();
                s.out.push(component);
            }
        }
        let n = self.edges.len();
        let mut s = State {
            edges: &self.edges,
            index: vec![None; n],
            low: vec![0; n],
            on_stack: vec![false; n],
            stack: Vec::new(),
            next: 0,
            out: Vec::new(),
        };
        for v in 0..n {
            if s.index[v].is_none() {
                visit(&mut s, v);
            }
        }
        s.out
    }
}

/// Every `.rs` file under `dir`, by module path (`lib.rs`/`main.rs` the
/// root, `x/mod.rs` and `x.rs` module `x`). Binaries under `bin/` are
/// crates of their own and left out.
fn collect(dir: &Path, prefix: &[String], out: &mut BTreeMap<ModPath, String>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("a source directory lists")
        .map(|e| e.expect("an entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if path.is_dir() {
            if prefix.is_empty() && name == "bin" {
                continue;
            }
            let mut p = prefix.to_vec();
            p.push(name);
            collect(&path, &p, out);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let mut p = prefix.to_vec();
            let root = prefix.is_empty() && (stem == "lib" || stem == "main");
            if !root && stem != "mod" {
                p.push(stem.to_string());
            }
            let text = std::fs::read_to_string(&path).expect("a source file reads");
            out.insert(p, text);
        }
    }
}

/// The text without comments, string and char literals (blanked).
fn strip(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&b, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let end = if next == Some('\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == '\'')
                    .map(|p| i + 2 + p)
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    out.push_str("' '");
                    i = e + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every module-relative path the (stripped) text of module `module` names,
/// made absolute. Inline modules (`mod tests { ... }`) are followed, so that
/// their `super::` means the file's module.
fn references(module: &ModPath, text: &str, files: &BTreeMap<ModPath, usize>) -> Vec<ModPath> {
    let b: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    // The inline modules open at each brace depth.
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let mut pending_mod: Option<String> = None;
    while i < b.len() {
        let c = b[i];
        if c == '{' {
            depth += 1;
            if let Some(name) = pending_mod.take() {
                inline.push((depth, name));
            }
            i += 1;
            continue;
        }
        if c == '}' {
            if inline.last().is_some_and(|(d, _)| *d == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
            i += 1;
            continue;
        }
        if c == ';' {
            pending_mod = None;
        }
        if !is_ident(c) || ident_before(&b, i) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && is_ident(b[i]) {
            i += 1;
        }
        let word: String = b[start..i].iter().collect();
        if start > 0 && b[start - 1] == '$' {
            continue;
        }
        if word == "mod" {
            let mut j = i;
            while j < b.len() && b[j].is_whitespace() {
                j += 1;
            }
            let s = j;
            while j < b.len() && is_ident(b[j]) {
                j += 1;
            }
            pending_mod = Some(b[s..j].iter().collect());
            i = j;
            continue;
        }
        // Preceded by `::`: the middle of a path already read.
        let mut k = start;
        while k > 0 && b[k - 1].is_whitespace() {
            k -= 1;
        }
        if k >= 2 && b[k - 1] == ':' && b[k - 2] == ':' {
            continue;
        }
        let mut here = module.clone();
        here.extend(inline.iter().map(|(_, n)| n.clone()));
        let base: Option<ModPath> = match word.as_str() {
            "crate" => Some(Vec::new()),
            "self" => Some(here.clone()),
            "super" => {
                let mut p = here.clone();
                p.pop();
                Some(p)
            }
            _ => {
                let mut child = here.clone();
                child.push(word.clone());
                (files.contains_key(&child) && at_path_sep(&b, i)).then(|| {
                    i = start;
                    here.clone()
                })
            }
        };
        let Some(base) = base else { continue };
        if word != "crate" && word != "self" && word != "super" {
            // A child module named bare: read it as the path's first segment.
            let (paths, end) = tree(&b, i, base);
            out.extend(paths);
            i = end;
            continue;
        }
        if !at_path_sep(&b, i) {
            continue;
        }
        let (paths, end) = tree(&b, skip_sep(&b, i), base);
        out.extend(paths);
        i = end;
    }
    out
}

fn at_path_sep(b: &[char], i: usize) -> bool {
    let mut j = i;
    while j < b.len() && b[j].is_whitespace() {
        j += 1;
    }
    b.get(j) == Some(&':') && b.get(j + 1) == Some(&':')
}

fn skip_sep(b: &[char], i: usize) -> usize {
    let mut j = i;
    while j < b.len() && b[j].is_whitespace() {
        j += 1;
    }
    j + 2
}

fn skip_ws(b: &[char], mut j: usize) -> usize {
    while j < b.len() && b[j].is_whitespace() {
        j += 1;
    }
    j
}

/// Reads a use tree (or plain path) at `i` below `base`: its full paths and
/// where it ends.
fn tree(b: &[char], i: usize, base: ModPath) -> (Vec<ModPath>, usize) {
    let mut path = base;
    let mut j = skip_ws(b, i);
    loop {
        if b.get(j) == Some(&'{') {
            let mut out = Vec::new();
            j += 1;
            loop {
                j = skip_ws(b, j);
                match b.get(j) {
                    None => return (out, j),
                    Some('}') => return (out, j + 1),
                    Some(',') => j += 1,
                    Some(_) => {
                        let (paths, end) = tree(b, j, path.clone());
                        out.extend(paths);
                        j = if end == j { j + 1 } else { end };
                    }
                }
            }
        }
        let s = j;
        while j < b.len() && is_ident(b[j]) {
            j += 1;
        }
        if s == j {
            return (vec![path], j);
        }
        let word: String = b[s..j].iter().collect();
        match word.as_str() {
            "self" => {}
            "super" => {
                path.pop();
            }
            _ => path.push(word),
        }
        if at_path_sep(b, j) {
            j = skip_sep(b, j);
        } else {
            return (vec![path], j);
        }
    }
}

/// The file holding the longest prefix of `path` that is a module.
fn resolve(path: &ModPath, files: &BTreeMap<ModPath, usize>) -> Option<usize> {
    (0..=path.len())
        .rev()
        .find_map(|n| files.get(&path[..n]).copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_crate_has_an_import_cycle_of_more_than_three_files() {
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        assert!(
            crates.join("hale-agent/src/lib.rs").is_file(),
            "found the crates"
        );
        let failures = long_cycles(&crates);
        assert!(
            failures.is_empty(),
            "import cycles of more than {MAX_CYCLE} files:\n{}",
            failures.join("\n")
        );
    }

    #[test]
    fn the_checker_finds_paths_in_use_trees_and_inline_modules() {
        let files = BTreeMap::from([
            (vec![], "mod a; mod b; mod c; mod d;".to_string()),
            (vec!["a".to_string()], "use crate::{b::X, c};".to_string()),
            (
                vec!["b".to_string()],
                "fn f() { crate::c::g() }".to_string(),
            ),
            (
                vec!["c".to_string()],
                "mod tests { use super::super::d::Y; }".to_string(),
            ),
            (
                vec!["d".to_string()],
                "// crate::x\nuse super::a::{self};".to_string(),
            ),
        ]);
        let graph = Graph::from_files(files);
        let cycle = graph.long_cycle().expect("a -> b -> c -> d -> a");
        assert_eq!(cycle.len(), 5, "{cycle:?}");
    }
}
