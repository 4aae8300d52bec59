//! A check of the workspace's module graphs (issue 22): for every crate
//! under `crates/`, each source file is a module, and each path it names
//! through `crate::`, `super::`, `self::` or a child module's name is an
//! edge to the file holding the module named. No crate's files may import
//! each other in a cycle of more than [`MAX_CYCLE`] files; the unit test
//! below runs the check over the workspace as part of `cargo test`. A
//! second test holds `hale-core`'s `Node` to at most 15 fields (its state
//! lives in sub-states that own their fields).

use proc_macro2::{Delimiter, TokenStream, TokenTree};
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
            for target in references(path, text, &index) {
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

/// Every module-relative path that module `module`'s text names, made
/// absolute. The text is read as Rust tokens (comments and literals are
/// never paths); paths inside macro invocations count too. Inline modules
/// (`mod tests { ... }`) are followed, so that their `super::` means the
/// file's module.
fn references(module: &ModPath, text: &str, files: &BTreeMap<ModPath, usize>) -> Vec<ModPath> {
    let tokens: TokenStream = text.parse().expect("a source file is made of Rust tokens");
    let mut out = Vec::new();
    walk(
        &tokens.into_iter().collect::<Vec<_>>(),
        module,
        files,
        &mut out,
    );
    out
}

fn walk(t: &[TokenTree], here: &ModPath, files: &BTreeMap<ModPath, usize>, out: &mut Vec<ModPath>) {
    let mut i = 0;
    while i < t.len() {
        let word = match &t[i] {
            TokenTree::Group(group) => {
                let mut inner = here.clone();
                if i >= 2 && ident(&t[i - 2]).as_deref() == Some("mod") {
                    inner.extend(ident(&t[i - 1]));
                }
                let tokens: Vec<TokenTree> = group.stream().into_iter().collect();
                walk(&tokens, &inner, files, out);
                i += 1;
                continue;
            }
            TokenTree::Ident(word) => word.to_string(),
            _ => {
                i += 1;
                continue;
            }
        };
        // The middle of a path already read, or a macro's `$crate`.
        let after = |k: usize, c: char| i >= k && punct(&t[i - k]) == Some(c);
        if (after(1, ':') && after(2, ':')) || after(1, '$') || !sep_at(t, i + 1) {
            i += 1;
            continue;
        }
        let (base, from) = match word.as_str() {
            "crate" => (Vec::new(), i + 3),
            "self" => (here.clone(), i + 3),
            "super" => (here[..here.len().saturating_sub(1)].to_vec(), i + 3),
            // A child module named bare: the path's first segment.
            _ if files.contains_key(&[here.as_slice(), std::slice::from_ref(&word)].concat()) => {
                (here.clone(), i)
            }
            _ => {
                i += 1;
                continue;
            }
        };
        i = tree(t, from, base, out);
    }
}

/// The identifier a token is, if it is one.
fn ident(t: &TokenTree) -> Option<String> {
    matches!(t, TokenTree::Ident(_)).then(|| t.to_string())
}

/// The character a token is, if it is punctuation.
fn punct(t: &TokenTree) -> Option<char> {
    match t {
        TokenTree::Punct(p) => Some(p.as_char()),
        _ => None,
    }
}

/// Whether a path separator `::` starts at `i`.
fn sep_at(t: &[TokenTree], i: usize) -> bool {
    t.get(i).and_then(punct) == Some(':') && t.get(i + 1).and_then(punct) == Some(':')
}

/// Reads a use tree (or plain path) at `i` below `base` into `out`: where
/// it ends.
fn tree(t: &[TokenTree], mut i: usize, mut path: ModPath, out: &mut Vec<ModPath>) -> usize {
    loop {
        match t.get(i) {
            Some(TokenTree::Group(group)) if group.delimiter() == Delimiter::Brace => {
                let inner: Vec<TokenTree> = group.stream().into_iter().collect();
                for item in inner.split(|t| punct(t) == Some(',')) {
                    if !item.is_empty() {
                        tree(item, 0, path.clone(), out);
                    }
                }
                return i + 1;
            }
            Some(TokenTree::Ident(word)) => match word.to_string().as_str() {
                "self" => {}
                "super" => {
                    path.pop();
                }
                word => path.push(word.to_string()),
            },
            _ => {
                out.push(path);
                return i;
            }
        }
        if !sep_at(t, i + 1) {
            out.push(path);
            return i + 1;
        }
        i += 3;
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

    /// The fields of `struct NAME` in `text`: each an identifier followed by
    /// a lone `:`, after the struct's start, a comma, an attribute or a
    /// visibility.
    fn fields_of(text: &str, name: &str) -> Vec<String> {
        let t: Vec<TokenTree> = text
            .parse::<TokenStream>()
            .expect("Rust tokens")
            .into_iter()
            .collect();
        let at = (1..t.len())
            .find(|&i| {
                ident(&t[i - 1]).as_deref() == Some("struct")
                    && ident(&t[i]).as_deref() == Some(name)
            })
            .expect("the struct is defined");
        let body = t[at..]
            .iter()
            .find_map(|t| match t {
                TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => Some(g.stream()),
                _ => None,
            })
            .expect("the struct has named fields");
        let b: Vec<TokenTree> = body.into_iter().collect();
        (0..b.len().saturating_sub(1))
            .filter(|&i| {
                let starts = i == 0
                    || punct(&b[i - 1]) == Some(',')
                    || ident(&b[i - 1]).as_deref() == Some("pub")
                    || matches!(&b[i - 1], TokenTree::Group(g) if g.delimiter() != Delimiter::Brace);
                starts && ident(&b[i]).is_some() && punct(&b[i + 1]) == Some(':') && !sep_at(&b, i + 1)
            })
            .map(|i| b[i].to_string())
            .collect()
    }

    #[test]
    fn the_node_composes_at_most_fifteen_fields() {
        let node = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hale-core/src/node.rs");
        let fields = fields_of(
            &std::fs::read_to_string(node).expect("node.rs reads"),
            "Node",
        );
        assert!(fields.len() >= 10, "found the fields: {fields:?}");
        assert!(
            fields.len() <= 15,
            "Node has {} fields (at most 15: compose sub-states): {fields:?}",
            fields.len()
        );
    }

    #[test]
    fn fields_are_counted_past_attributes_visibility_and_paths_in_types() {
        let text = "struct Node<I> { #[doc = \"a, b: c\"] pub(crate) a: std::vec::Vec<I>, b: (u8, u8), pub c: u8 } struct Other { d: u8 }";
        assert_eq!(fields_of(text, "Node"), ["a", "b", "c"]);
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
