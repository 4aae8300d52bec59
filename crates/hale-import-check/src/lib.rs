//! A check of the workspace's module graphs (issues 22 and 42): for every
//! crate under `crates/`, each source file is a module, and each path it
//! names through `crate::`, `super::`, `self::` or a child module's name is
//! an edge to the file holding the module named.
//!
//! It fails on:
//!
//! * **Files tied together.** Files that import each other, directly or
//!   around a circle, form one strongly connected component; the check
//!   counts the files of each component, not only a circle's length (a hub
//!   importing eight files that each import it back ties nine files, with
//!   no circle longer than two). In the crates of [`STRICT`] (`hale-core`)
//!   no two files may be tied: the module graph is a DAG. In the others at
//!   most [`MAX_CYCLE`] files may be tied together.
//! * **Fields reached from afar.** A module whose `pub(crate)` fields are
//!   reached (`x.field`) from more than [`MAX_FIELD_REACH`] other files
//!   that name the module (import edges to it), in the crates of
//!   [`FIELD_CRATES`]: such a struct is a bag of state that every file
//!   edits; give it methods (or make its behaviour its own).
//!
//! The unit tests below run the check over the workspace as part of
//! `cargo test`, feed it small synthetic crates that break each rule (and
//! must fail), and hold `hale-core`'s `Node` to private fields only.

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The most files one crate may tie together in an import cycle (outside
/// [`STRICT`]).
pub const MAX_CYCLE: usize = 3;

/// Crates whose files may not import each other in any cycle, of any length.
pub const STRICT: &[&str] = &["hale-core"];

/// The most other files that may reach a module's `pub(crate)` fields (in
/// [`FIELD_CRATES`]). Three: what `hale-core` reaches after issue 42, whose
/// widest reach is the member table's record `Rec` (from `node::rules`,
/// `table::tests` and `table::watched`); `Node` and `Shared` have no
/// `pub(crate)` field at all. A file counts when it names one of the
/// module's structs with such fields and reads or writes (`x.name`) a field
/// of that name: without types, a field of another struct with the same
/// name counts too, and a file that reaches the fields of a struct it never
/// names is not seen.
pub const MAX_FIELD_REACH: usize = 3;

/// Crates held to [`MAX_FIELD_REACH`].
pub const FIELD_CRATES: &[&str] = &["hale-core"];

/// Crates whose breach of a rule is known and owned elsewhere, with why:
/// the check fails when one of them passes (remove it).
pub const KNOWN: &[(&str, &str)] = &[];

/// Every breach of the rules in the crates under `crates` (one line each,
/// as `crate: ...`), but for the crates in [`KNOWN`].
pub fn failures(crates: &Path) -> Vec<String> {
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
        let found = graph.breaches(rules_for(name));
        match (found.is_empty(), known) {
            (false, false) => failures.extend(found.into_iter().map(|f| format!("{name}: {f}"))),
            (true, true) => failures.push(format!("{name}: passes now, remove it from KNOWN")),
            _ => {}
        }
    }
    failures
}

/// What a crate is held to.
#[derive(Debug, Clone, Copy)]
struct Rules {
    /// No two files tied in an import cycle (else: no circle of more than
    /// [`MAX_CYCLE`] files).
    strict: bool,
    /// Most other files reaching a module's `pub(crate)` fields, if checked.
    field_reach: Option<usize>,
}

/// The rules for the crate named `name`.
fn rules_for(name: &str) -> Rules {
    Rules {
        strict: STRICT.contains(&name),
        field_reach: FIELD_CRATES.contains(&name).then_some(MAX_FIELD_REACH),
    }
}

/// A module path, `[]` for the crate root.
type ModPath = Vec<String>;

/// A crate's files: their import edges, the `pub(crate)` fields each
/// declares and the fields each reaches.
struct Graph {
    names: Vec<String>,
    edges: Vec<BTreeSet<usize>>,
    /// The structs of each file that have `pub(crate)` fields, with the
    /// names of those fields.
    fields: Vec<BTreeMap<String, BTreeSet<String>>>,
    /// The identifiers each file names.
    idents: Vec<BTreeSet<String>>,
    /// The names each file reads or writes as fields (`x.name`, not a call).
    reached: Vec<BTreeSet<String>>,
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
        let mut fields = Vec::with_capacity(files.len());
        let mut reached = Vec::with_capacity(files.len());
        let mut idents = Vec::with_capacity(files.len());
        for (path, text) in &files {
            let from = index[path];
            for target in references(path, text, &index) {
                if let Some(to) = resolve(&target, &index) {
                    if to != from {
                        edges[from].insert(to);
                    }
                }
            }
            let tokens: Vec<TokenTree> = text
                .parse::<TokenStream>()
                .expect("a source file is made of Rust tokens")
                .into_iter()
                .collect();
            let (mut declared, mut used, mut named) =
                (BTreeMap::new(), BTreeSet::new(), BTreeSet::new());
            crate_fields(&tokens, &mut declared);
            field_uses(&tokens, &mut used, &mut named);
            fields.push(declared);
            reached.push(used);
            idents.push(named);
        }
        Graph {
            names,
            edges,
            fields,
            idents,
            reached,
        }
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
        for (m, files) in self.field_reach() {
            println!(
                "{}: pub(crate) fields of {m} reached from {files:?}",
                src.display()
            );
        }
    }

    /// What breaks `rules`, one line each.
    fn breaches(&self, rules: Rules) -> Vec<String> {
        let mut out = Vec::new();
        for component in self.components() {
            if rules.strict && component.len() > 1 {
                let files: Vec<&str> = component.iter().map(|&i| self.names[i].as_str()).collect();
                out.push(format!(
                    "{} files tied in import cycles (none may be): {} (a cycle: {})",
                    component.len(),
                    files.join(", "),
                    self.cycle_in(&component, 1).join(" -> ")
                ));
            } else if !rules.strict && component.len() > MAX_CYCLE {
                let cycle = self.cycle_in(&component, MAX_CYCLE + 1);
                if cycle.len() > MAX_CYCLE + 1 {
                    out.push(format!(
                        "an import cycle of more than {MAX_CYCLE} files: {}",
                        cycle.join(" -> ")
                    ));
                }
            }
        }
        if let Some(max) = rules.field_reach {
            for (m, files) in self.field_reach() {
                if files.len() > max {
                    out.push(format!(
                        "pub(crate) fields of {m} reached from {} files (at most {max}): {}",
                        files.len(),
                        files.join(", ")
                    ));
                }
            }
        }
        out
    }

    /// For each file declaring structs with `pub(crate)` fields, the other
    /// files that name one of those structs and reach one of its
    /// `pub(crate)` fields by name (without types, a name is all there is:
    /// a field of another struct with the same name counts too).
    fn field_reach(&self) -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        for (m, declared) in self.fields.iter().enumerate() {
            let files: Vec<String> = (0..self.names.len())
                .filter(|&f| {
                    f != m
                        && declared.iter().any(|(s, fields)| {
                            self.idents[f].contains(s) && !self.reached[f].is_disjoint(fields)
                        })
                })
                .map(|f| self.names[f].clone())
                .collect();
            if !files.is_empty() {
                out.push((self.names[m].clone(), files));
            }
        }
        out
    }

    /// A circle of at least `min` files inside the component, by name,
    /// back to its first file; or just a file, if there is none.
    fn cycle_in(&self, component: &[usize], min: usize) -> Vec<String> {
        let set: BTreeSet<usize> = component.iter().copied().collect();
        for &start in component {
            let mut path = vec![start];
            if self.search(start, &set, min, &mut path) {
                path.push(start);
                return path.iter().map(|&i| self.names[i].clone()).collect();
            }
        }
        vec![self.names[component[0]].clone()]
    }

    /// Depth-first over simple paths from `path[0]` inside `set`, through
    /// nodes after it, back to it with at least `min` nodes (each cycle is
    /// found from its lowest node).
    fn search(
        &self,
        start: usize,
        set: &BTreeSet<usize>,
        min: usize,
        path: &mut Vec<usize>,
    ) -> bool {
        let at = *path.last().expect("a path starts somewhere");
        for &next in &self.edges[at] {
            if next == start && path.len() >= min {
                return true;
            }
            if next > start && set.contains(&next) && !path.contains(&next) {
                path.push(next);
                if self.search(start, set, min, path) {
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

/// The structs in `t` (inline modules included) with `pub(crate)` named
/// fields, with the names of those fields.
fn crate_fields(t: &[TokenTree], out: &mut BTreeMap<String, BTreeSet<String>>) {
    for (i, tok) in t.iter().enumerate() {
        let TokenTree::Group(g) = tok else { continue };
        let inner: Vec<TokenTree> = g.stream().into_iter().collect();
        // The braces right after `struct Name` (and its generics).
        let name = (g.delimiter() == Delimiter::Brace)
            .then(|| struct_before(t, i))
            .flatten();
        if let Some(name) = name {
            for k in 2..inner.len().saturating_sub(1) {
                let vis = ident(&inner[k - 2]).as_deref() == Some("pub")
                    && matches!(&inner[k - 1], TokenTree::Group(v)
                        if v.delimiter() == Delimiter::Parenthesis && v.stream().to_string() == "crate");
                if vis
                    && ident(&inner[k]).is_some()
                    && punct(&inner[k + 1]) == Some(':')
                    && !sep_at(&inner, k + 1)
                {
                    out.entry(name.clone())
                        .or_default()
                        .insert(inner[k].to_string());
                }
            }
        }
        crate_fields(&inner, out);
    }
}

/// The struct whose body `t[i]` is, if it is one: back to `struct Name`,
/// no item boundary on the way.
fn struct_before(t: &[TokenTree], i: usize) -> Option<String> {
    for k in (0..i).rev() {
        match &t[k] {
            TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => return None,
            TokenTree::Punct(p) if p.as_char() == ';' => return None,
            TokenTree::Ident(w) => match w.to_string().as_str() {
                "struct" => return t.get(k + 1).and_then(ident),
                "fn" | "impl" | "enum" | "trait" | "mod" | "union" => return None,
                _ => {}
            },
            _ => {}
        }
    }
    None
}

/// The names `t` uses as fields (`.name` not followed by a call, a path or
/// a macro's `!`, nor part of a range `..name`) into `out`, and every
/// identifier it names into `named`.
fn field_uses(t: &[TokenTree], out: &mut BTreeSet<String>, named: &mut BTreeSet<String>) {
    for (i, tok) in t.iter().enumerate() {
        if let TokenTree::Group(g) = tok {
            field_uses(&g.stream().into_iter().collect::<Vec<_>>(), out, named);
            continue;
        }
        let Some(name) = ident(tok) else { continue };
        named.insert(name.clone());
        let dot = i >= 1 && punct(&t[i - 1]) == Some('.');
        let range = i >= 2 && punct(&t[i - 2]) == Some('.');
        let call = matches!(t.get(i + 1), Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis)
            || sep_at(t, i + 1)
            || t.get(i + 1).and_then(punct) == Some('!');
        if dot && !range && !call {
            out.insert(name);
        }
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
    fn the_workspace_keeps_the_module_graph_rules() {
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        assert!(
            crates.join("hale-agent/src/lib.rs").is_file(),
            "found the crates"
        );
        let failures = failures(&crates);
        assert!(
            failures.is_empty(),
            "the module graphs break the rules:\n{}",
            failures.join("\n")
        );
    }

    /// A synthetic crate: the root declares every module; `files` are
    /// (module, text).
    fn synthetic(files: &[(&str, &str)]) -> Graph {
        let mut all = BTreeMap::from([(
            vec![],
            files
                .iter()
                .map(|(m, _)| format!("mod {m};"))
                .collect::<String>(),
        )]);
        for (m, text) in files {
            all.insert(vec![m.to_string()], text.to_string());
        }
        Graph::from_files(all)
    }

    const STRICT_RULES: Rules = Rules {
        strict: true,
        field_reach: Some(MAX_FIELD_REACH),
    };

    const LAX_RULES: Rules = Rules {
        strict: false,
        field_reach: None,
    };

    #[test]
    fn two_files_importing_each_other_fail_a_strict_crate() {
        let graph = synthetic(&[
            ("a", "use crate::b::B; pub(crate) struct A; fn f(_: B) {}"),
            ("b", "use super::a::A; pub(crate) struct B; fn g(_: A) {}"),
            ("c", "use crate::a::A;"),
        ]);
        let found = graph.breaches(STRICT_RULES);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("2 files tied"), "{found:?}");
        assert!(found[0].contains("a -> b -> a"), "{found:?}");
        // Three files may be tied in another crate.
        assert!(graph.breaches(LAX_RULES).is_empty());
        // Without the back edge, the strict crate passes.
        let dag = synthetic(&[
            ("a", "use crate::b::B; fn f(_: B) {}"),
            ("b", "pub(crate) struct B;"),
        ]);
        assert!(dag.breaches(STRICT_RULES).is_empty());
    }

    #[test]
    fn a_hub_with_short_cycles_ties_many_files() {
        // Every cycle has two files, but five are tied together.
        let graph = synthetic(&[
            ("hub", "use crate::{p::P, q::Q, r::R, s::S};"),
            ("p", "use crate::hub::Hub;"),
            ("q", "use crate::hub::Hub;"),
            ("r", "use crate::hub::Hub;"),
            ("s", "use crate::hub::Hub;"),
        ]);
        let found = graph.breaches(STRICT_RULES);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("5 files tied"), "{found:?}");
        // No circle of more than two files: another crate may do this.
        assert!(graph.breaches(LAX_RULES).is_empty());
    }

    #[test]
    fn pub_crate_fields_reached_from_too_many_files_fail() {
        let user = "use crate::s::S; fn f(s: &mut S) { s.count += 1; }";
        let mut files = vec![(
            "s",
            "pub(crate) struct S { pub(crate) count: u32, other: u8 } impl S { fn n(&self) -> u8 { self.other } }",
        )];
        let names = ["u1", "u2", "u3", "u4"];
        for n in &names[..MAX_FIELD_REACH] {
            files.push((n, user));
        }
        assert!(
            synthetic(&files).breaches(STRICT_RULES).is_empty(),
            "at the limit"
        );
        files.push((names[MAX_FIELD_REACH], user));
        let found = synthetic(&files).breaches(STRICT_RULES);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains(&format!(
                "fields of s reached from {} files",
                MAX_FIELD_REACH + 1
            )),
            "{found:?}"
        );
        // Method calls, ranges and private fields are not field reaches.
        let calm = "use crate::s::S; fn f(s: &S) -> u8 { let _ = 0..count; s.count(); s.other }";
        let mut files = vec![(
            "s",
            "pub(crate) struct S { pub(crate) count: u32, other: u8 }",
        )];
        for n in names {
            files.push((n, calm));
        }
        assert!(synthetic(&files).breaches(STRICT_RULES).is_empty());
    }

    /// The tokens of `struct NAME`'s braced body in `text`.
    fn struct_body(text: &str, name: &str) -> Vec<TokenTree> {
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
        t[at..]
            .iter()
            .find_map(|t| match t {
                TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => Some(g.stream()),
                _ => None,
            })
            .expect("the struct has named fields")
            .into_iter()
            .collect()
    }

    /// The fields of `struct NAME` in `text`: each an identifier followed by
    /// a lone `:`, after the struct's start, a comma, an attribute or a
    /// visibility.
    fn fields_of(text: &str, name: &str) -> Vec<String> {
        let b = struct_body(text, name);
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
    fn the_node_has_only_private_fields() {
        let node = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hale-core/src/node.rs");
        let text = std::fs::read_to_string(node).expect("node.rs reads");
        let fields = fields_of(&text, "Node");
        assert!(fields.len() >= 5, "found the fields: {fields:?}");
        let tokens: Vec<TokenTree> = text
            .parse::<TokenStream>()
            .expect("Rust tokens")
            .into_iter()
            .collect();
        let mut shared = BTreeMap::new();
        crate_fields(&tokens, &mut shared);
        let public: Vec<&String> = shared.get("Node").into_iter().flatten().collect();
        assert!(
            public.is_empty(),
            "Node's fields are its own (private): {public:?} are pub(crate)"
        );
        assert!(
            !text.contains("pub struct Node") || !fields_of_are_public(&text),
            "Node's fields are private"
        );
    }

    /// Whether any field of `Node` in `text` is `pub`.
    fn fields_of_are_public(text: &str) -> bool {
        struct_body(text, "Node")
            .iter()
            .any(|t| ident(t).as_deref() == Some("pub"))
    }

    #[test]
    fn a_struct_with_a_pub_crate_field_is_seen() {
        let tokens: Vec<TokenTree> =
            "pub struct Node<I> { pub(crate) a: u8, b: u8 } fn f() { let x = S { a: 1 }; }"
                .parse::<TokenStream>()
                .expect("tokens")
                .into_iter()
                .collect();
        let mut shared = BTreeMap::new();
        crate_fields(&tokens, &mut shared);
        assert_eq!(
            shared,
            BTreeMap::from([("Node".to_string(), BTreeSet::from(["a".to_string()]))])
        );
        assert!(fields_of_are_public("struct Node { pub a: u8 }"));
        assert!(!fields_of_are_public("struct Node { a: u8 }"));
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
        let found = graph.breaches(LAX_RULES);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains(": a -> b -> c -> d -> a"), "{found:?}");
    }
}
