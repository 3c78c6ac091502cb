//! The layering of the runtime's folders: every module names only modules of its own folder
//! or of a folder below it, so no two folders import each other.
//!
//! | layer (bottom first) | what it holds |
//! | --- | --- |
//! | `src/*.rs` | the message model, the provider SPI, config, errors, events, metrics |
//! | `telemetry/` | the spans of the stages, the checkpoint's trace context, OpenTelemetry export |
//! | `kernel/` | `Kernel`, `Bot` and `Ctx` (their state), routes, queues, the journals' state |
//! | `outbound/` | sends and edits: hooks, pacing, parts, ledger, the durable outbox |
//! | `durable/` | the durable inbound path: journaling, replay, the sweeper, the options |
//! | `flow/` | flows: the executor, checkpoints, a step's commit |
//! | `schedule/` | the durable scheduler: jobs, tasks, the runner |
//! | `bot/` | the `Bot` facade: builder, lifecycle, inbound pipeline, dispatcher |
//! | `operating/` | the operator surface: `/metrics`, the HTTP endpoint, the `botmesh` CLI |
//! | `testing/` | test helpers over the whole bot |
//!
//! A layer calls up only through what it is given (a function pointer, a `dyn Any` slot), never
//! by a path. Paths are read with `syn` (`use` trees and every path in code, comments and
//! `#[cfg(test)]` items left out); a path through a crate-root re-export (`crate::Bot`) counts
//! as a path to the folder it re-exports from.
//!
//! Inside a folder, [`module_graph`] gives which of its modules each names; `tests/architecture.rs`
//! checks that `flow/`'s has no circle.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use syn::visit::Visit;

use super::public_api::{UseLeaf, use_leaves};

/// The folders, bottom first; `""` is the crate root's files.
pub(crate) const LAYERS: &[&str] = &[
    "",
    "telemetry",
    "kernel",
    "outbound",
    "durable",
    "flow",
    "schedule",
    "bot",
    "operating",
    "testing",
];

/// One path from one file to a folder it may not name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Violation {
    pub(crate) file: String,
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) path: String,
}

/// Every folder-to-folder path of the crate at `src` that goes up or sideways.
pub(crate) fn violations(src: &Path) -> Vec<Violation> {
    let reexports = root_reexports(&src.join("lib.rs"));
    let mut out = BTreeSet::new();
    for (file, rel) in library_files(src) {
        if rel == "lib.rs" {
            continue;
        }
        let module = module_path(&rel);
        let from = if rel.contains('/') {
            module[0].clone()
        } else {
            String::new()
        };
        let Some(from_layer) = LAYERS.iter().position(|l| *l == from) else {
            panic!("{rel}: folder `{from}` is in no layer; add it to LAYERS");
        };
        let named = named_folders(&file, &module, &reexports).unwrap_or_else(|e| panic!("{e}"));
        for (to, path) in named {
            if to == from {
                continue;
            }
            let to_layer = LAYERS.iter().position(|l| *l == to).unwrap_or(usize::MAX);
            if to_layer >= from_layer {
                out.insert(Violation {
                    file: rel.clone(),
                    from: from.clone(),
                    to,
                    path: path.join("::"),
                });
            }
        }
    }
    out.into_iter().collect()
}

/// The folder-level graph: which folders each folder names.
pub(crate) fn graph(src: &Path) -> Vec<(String, String)> {
    let reexports = root_reexports(&src.join("lib.rs"));
    let mut edges = BTreeSet::new();
    for (file, rel) in library_files(src) {
        if !rel.contains('/') {
            continue;
        }
        let module = module_path(&rel);
        let Ok(named) = named_folders(&file, &module, &reexports) else {
            continue;
        };
        for (to, _) in named {
            if to != module[0] && !to.is_empty() {
                edges.insert((module[0].clone(), to));
            }
        }
    }
    edges.into_iter().collect()
}

/// The module-level graph inside one folder (`src/<folder>/`): which of its modules each of
/// its modules names (`crate::<folder>::x`, `super::x`, or `x::` in `mod.rs`), a name the
/// folder's `mod.rs` re-exports counting as its source module; `mod` is `mod.rs` itself.
pub(crate) fn module_graph(src: &Path, folder: &str) -> Vec<(String, String)> {
    let dir = src.join(folder);
    let files: Vec<_> = rust_files(&dir)
        .into_iter()
        .filter(|f| f.parent() == Some(dir.as_path()))
        .collect();
    let name_of = |f: &Path| {
        f.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let modules: BTreeSet<String> = files.iter().map(|f| name_of(f)).collect();
    let reexports = root_reexports(&dir.join("mod.rs"));
    let mut edges = BTreeSet::new();
    for file in &files {
        let from = name_of(file);
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let ast = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("cannot parse {}: {e}", file.display()));
        let mut paths = Paths::default();
        paths.visit_file(&ast);
        for path in paths.found {
            let name = match path.first().map(String::as_str) {
                Some("crate") if path.get(1).is_some_and(|s| s == folder) => path.get(2),
                Some("super") if from != "mod" => path.get(1),
                Some("self") if from == "mod" => path.get(1),
                Some(first) if from == "mod" && modules.contains(first) => path.first(),
                _ => None,
            };
            let Some(name) = name else { continue };
            let to = if modules.contains(name) {
                name.clone()
            } else if let Some(source) = reexports.get(name).filter(|s| modules.contains(*s)) {
                source.clone()
            } else {
                "mod".to_owned()
            };
            if to != from {
                edges.insert((from.clone(), to));
            }
        }
    }
    edges.into_iter().collect()
}

/// A circle of the graph `edges`, if there is one (its nodes in order, the first repeated at
/// the end).
pub(crate) fn circle(edges: &[(String, String)]) -> Option<Vec<String>> {
    fn visit<'a>(
        node: &'a str,
        edges: &'a [(String, String)],
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| *n == node) {
            let mut found: Vec<String> = path[at..].iter().map(|s| (*s).to_owned()).collect();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node);
        for (_, to) in edges.iter().filter(|(from, _)| from == node) {
            if let Some(found) = visit(to, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    edges
        .iter()
        .find_map(|(from, _)| visit(from, edges, &mut Vec::new(), &mut done))
}

/// The folder a crate-root name belongs to: a folder itself, the folder a root re-export comes
/// from, `prelude` for the facade, or `""` for a root file (`message`, `config`, …).
/// The library's source files below `src` (not `bin/`: the binaries are crates of their own
/// that name the library as `botmesh::`), each with its path relative to `src`.
fn library_files(src: &Path) -> Vec<(std::path::PathBuf, String)> {
    rust_files(src)
        .into_iter()
        .map(|file| {
            let rel = file
                .strip_prefix(src)
                .map(|p| p.to_string_lossy().replace('\\', "/"))
                .unwrap_or_default();
            (file, rel)
        })
        .filter(|(_, rel)| !rel.starts_with("bin/"))
        .collect()
}

/// The crate paths `file` (the module `module`) names, each with the folder it leads to, or
/// why the file could not be read.
fn named_folders(
    file: &Path,
    module: &[String],
    reexports: &HashMap<String, String>,
) -> Result<Vec<(String, Vec<String>)>, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let ast =
        syn::parse_file(&text).map_err(|e| format!("cannot parse {}: {e}", file.display()))?;
    let mut paths = Paths::default();
    paths.visit_file(&ast);
    Ok(paths
        .found
        .into_iter()
        .filter_map(|path| {
            let top = top_module(module, &path)?;
            Some((folder_of(&top, reexports), path))
        })
        .collect())
}

fn folder_of(top: &str, reexports: &HashMap<String, String>) -> String {
    // A folder's name first: `flow` is also the `#[flow]` macro re-exported at the root.
    if LAYERS.contains(&top) {
        return top.to_owned();
    }
    let source = reexports.get(top).map(String::as_str).unwrap_or(top);
    if top == "prelude" {
        "prelude".to_owned()
    } else if LAYERS.contains(&source) {
        source.to_owned()
    } else {
        String::new()
    }
}

fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
    out
}

/// `kernel/journals.rs` → `[kernel, journals]`; `bot/mod.rs` → `[bot]`.
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The crate-root module a path written in `module` names, if it names one by `crate::` or
/// `super::`.
fn top_module(module: &[String], path: &[String]) -> Option<String> {
    match path.first()?.as_str() {
        "crate" => path.get(1).cloned(),
        "super" => {
            let mut at = module.to_vec();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                at.pop();
                rest = &rest[1..];
            }
            at.first().cloned().or_else(|| rest.first().cloned())
        }
        _ => None,
    }
}

/// The names `lib.rs` imports or re-exports at the crate root, with the module they come from.
fn root_reexports(lib: &Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(lib).unwrap_or_default();
    let Ok(ast) = syn::parse_file(&text) else {
        return HashMap::new();
    };
    let mut out = HashMap::new();
    for item in &ast.items {
        if let syn::Item::Use(u) = item {
            let mut leaves = Vec::new();
            use_leaves(&u.tree, Vec::new(), &mut leaves);
            for UseLeaf {
                name, mut target, ..
            } in leaves.into_iter().filter(|l| !l.glob)
            {
                if target.first().is_some_and(|s| s == "crate") {
                    target.remove(0);
                }
                if let Some(first) = target.first() {
                    out.insert(name, first.clone());
                }
            }
        }
    }
    out
}

/// Every path of a file: `use` trees (each leaf with its prefix) and paths in code.
#[derive(Default)]
struct Paths {
    found: Vec<Vec<String>>,
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta
                .require_list()
                .is_ok_and(|l| l.tokens.to_string().trim() == "test")
    })
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test_only(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&u.tree, Vec::new(), &mut leaves);
        // A glob's target is its prefix alone.
        self.found.extend(leaves.into_iter().map(|l| l.target));
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        macro_paths(m.tokens.clone(), &mut self.found);
        syn::visit::visit_macro(self, m);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.found
            .push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, p);
    }
}

/// `crate::x` and `super::x` inside a macro's tokens (`matches!`, `format!` arguments, …).
fn macro_paths(tokens: proc_macro2::TokenStream, out: &mut Vec<Vec<String>>) {
    let flat: Vec<proc_macro2::TokenTree> = tokens.into_iter().collect();
    for (i, tt) in flat.iter().enumerate() {
        match tt {
            proc_macro2::TokenTree::Group(g) => macro_paths(g.stream(), out),
            proc_macro2::TokenTree::Ident(id) if id == "crate" || id == "super" => {
                let mut path = vec![id.to_string()];
                let mut j = i + 1;
                while let (
                    Some(proc_macro2::TokenTree::Punct(a)),
                    Some(proc_macro2::TokenTree::Punct(b)),
                    Some(proc_macro2::TokenTree::Ident(next)),
                ) = (flat.get(j), flat.get(j + 1), flat.get(j + 2))
                {
                    if a.as_char() != ':' || b.as_char() != ':' {
                        break;
                    }
                    path.push(next.to_string());
                    j += 3;
                }
                out.push(path);
            }
            _ => {}
        }
    }
}
