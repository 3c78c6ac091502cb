//! Renders a crate's public API from its sources, so a change to it shows in a reviewed
//! snapshot.
//!
//! The sources are parsed with `syn` from `lib.rs`, following `mod` declarations (a
//! `#[cfg(test)]` module is skipped). Every `pub` item of every module is a candidate; the
//! public paths are found by walking `pub mod` and `pub use` from the crate root (globs and
//! re-exports of modules included), so an item moved between private modules and re-exported
//! at the same path renders the same. Each item is printed once, under its canonical path (its
//! deepest public path outside the prelude), with its other public paths listed below it; a type lists its derives, the public methods of its
//! inherent impls (with the setters `#[derive(Setters)]` writes, and the macros invoked in them)
//! and the traits it implements (impls are matched to a type by name, wherever in the crate
//! they are written). A re-export of another crate prints as a `pub use` line.
//!
//! The rendering is of tokens, not of rustdoc: signatures are printed as written (one space
//! normalised away around punctuation), without bodies, doc comments or private fields.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use quote::ToTokens;

/// A module path inside the crate (`[]` is the root).
type ModPath = Vec<String>;

/// One `pub` item defined in a module.
struct Def {
    name: String,
    /// The item's lines, the first one its signature.
    lines: Vec<String>,
    /// Whether impls written for a type of this name attach here.
    is_type: bool,
}

/// A leaf of a `use` tree.
pub(crate) struct UseLeaf {
    /// The name it brings in (`*` for a glob).
    pub(crate) name: String,
    /// The path it names (a glob's: the module).
    pub(crate) target: Vec<String>,
    pub(crate) glob: bool,
}

#[derive(Default)]
struct Module {
    public_children: Vec<String>,
    children: BTreeSet<String>,
    defs: Vec<usize>,
    uses: Vec<UseLeaf>,
    cfg: String,
}

/// An impl block, by the name of the type it is written for.
struct Impl {
    type_name: String,
    lines: Vec<String>,
}

#[derive(Default)]
struct Crate {
    name: String,
    modules: BTreeMap<ModPath, Module>,
    defs: Vec<Def>,
    impls: Vec<Impl>,
    /// Traits defined without `pub`: their impls are not part of the API.
    private_traits: HashSet<String>,
    /// The `pub` items each local `macro_rules!` defines: `(kind, name)`, the name `$` when it
    /// is the invocation's identifier.
    macros: HashMap<String, Vec<(String, String)>>,
}

/// What a path resolves to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Def(usize),
    Module(ModPath),
    External(String),
}

/// The public API of the crate whose `lib.rs` is `lib`, as text.
pub(crate) fn render(name: &str, lib: &Path) -> String {
    let mut krate = Crate {
        name: name.to_owned(),
        ..Crate::default()
    };
    krate.load_file(lib, Vec::new(), String::new());
    krate.render()
}

fn read(path: &Path) -> syn::File {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    syn::parse_file(&text).unwrap_or_else(|e| panic!("cannot parse {}: {e}", path.display()))
}

fn is_pub(vis: &syn::Visibility) -> bool {
    matches!(vis, syn::Visibility::Public(_))
}

fn has_attr(attrs: &[syn::Attribute], name: &str) -> bool {
    attrs.iter().any(|a| a.path().is_ident(name))
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && tokens(&a.meta).replace(' ', "").starts_with("cfg(test")
    })
}

/// The attributes that are part of an item's API: `cfg` (which features gate it),
/// `doc(hidden)`, `non_exhaustive`, `derive`, `must_use`.
fn api_attrs(attrs: &[syn::Attribute]) -> String {
    let mut out = String::new();
    for a in attrs {
        let keep = [
            "cfg",
            "non_exhaustive",
            "derive",
            "must_use",
            "macro_export",
        ]
        .iter()
        .any(|n| a.path().is_ident(n))
            || (a.path().is_ident("doc") && tokens(&a.meta).contains("hidden"));
        if keep {
            let _ = write!(out, "#[{}] ", tokens(&a.meta));
        }
    }
    out
}

/// Tokens printed with the spacing a person would write.
fn tokens(t: &impl ToTokens) -> String {
    normalize(&t.to_token_stream().to_string())
}

fn normalize(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '\'';
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let prev = out.chars().last().unwrap_or(' ');
            let next = chars.get(i + 1).copied().unwrap_or(' ');
            let next2 = chars.get(i + 2).copied().unwrap_or(' ');
            let drop = matches!(next, ',' | ';' | ')' | ']' | '.' | '?')
                || matches!(prev, '(' | '[' | '&' | '!' | '#')
                || (next == ':' && next2 == ':')
                || (prev == ':' && out.ends_with("::"))
                || (next == ':' && prev != ':' && next2 != ':')
                || (next == '<' && word(prev))
                || (prev == '<' && !out.ends_with("<<"))
                || (next == '>' && prev != '-' && prev != '=')
                || (next == '(' && (word(prev) || (prev == '>' && !out.ends_with("->"))))
                || (next == '[' && word(prev) && !last_word_is_lifetime(&out))
                || (prev == '\'' && word(next));
            let keyword_before = ["dyn", "mut", "as", "where", "in"]
                .iter()
                .any(|k| out.ends_with(k) && !out[..out.len() - k.len()].ends_with(word));
            if drop && !(keyword_before && matches!(next, '(' | '<' | '[')) {
                continue;
            }
        }
        out.push(c);
    }
    out.replace("& mut", "&mut")
        .replace("& '", "&'")
        .replace(",)", ")")
        .replace(",>", ">")
        .replace(", }", " }")
}

fn last_word_is_lifetime(out: &str) -> bool {
    out.rsplit([' ', '&', '<', '('])
        .next()
        .is_some_and(|w| w.starts_with('\''))
}

fn generics(g: &syn::Generics) -> String {
    if g.params.is_empty() {
        String::new()
    } else {
        format!("<{}>", tokens(&g.params))
    }
}

fn where_clause(g: &syn::Generics) -> String {
    g.where_clause
        .as_ref()
        .map(|w| format!(" {}", tokens(w)))
        .unwrap_or_default()
}

fn fields(f: &syn::Fields, only_pub: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut hidden = false;
    for field in f.iter() {
        if only_pub && !is_pub(&field.vis) {
            hidden = true;
            continue;
        }
        let vis = if is_pub(&field.vis) { "pub " } else { "" };
        let ty = tokens(&field.ty);
        out.push(match &field.ident {
            Some(name) => format!("{}{vis}{name}: {ty}", api_attrs(&field.attrs)),
            None => format!("{}{vis}{ty}", api_attrs(&field.attrs)),
        });
    }
    if hidden {
        out.push("..".to_owned());
    }
    out
}

fn sig(s: &syn::Signature) -> String {
    tokens(s)
}

impl Crate {
    fn load_file(&mut self, file: &Path, module: ModPath, cfg: String) {
        let ast = read(file);
        let dir = child_dir(file);
        self.load_items(&ast.items, &dir, module, cfg);
    }

    fn load_items(&mut self, items: &[syn::Item], dir: &Path, module: ModPath, cfg: String) {
        self.modules.entry(module.clone()).or_default().cfg = cfg;
        for item in items {
            self.load_item(item, dir, &module);
        }
    }

    fn add_def(&mut self, module: &ModPath, name: String, lines: Vec<String>, is_type: bool) {
        let id = self.defs.len();
        self.defs.push(Def {
            name,
            lines,
            is_type,
        });
        self.modules
            .entry(module.clone())
            .or_default()
            .defs
            .push(id);
    }

    fn load_item(&mut self, item: &syn::Item, dir: &Path, module: &ModPath) {
        use syn::Item;
        match item {
            Item::Mod(m) => {
                if is_test_only(&m.attrs) {
                    return;
                }
                let name = m.ident.to_string();
                let mut child = module.clone();
                child.push(name.clone());
                let entry = self.modules.entry(module.clone()).or_default();
                entry.children.insert(name.clone());
                if is_pub(&m.vis) {
                    entry.public_children.push(name.clone());
                }
                let cfg = api_attrs(&m.attrs);
                match &m.content {
                    Some((_, items)) => self.load_items(items, &dir.join(&name), child, cfg),
                    None => {
                        let flat = dir.join(format!("{name}.rs"));
                        let nested = dir.join(&name).join("mod.rs");
                        let path = if flat.exists() { flat } else { nested };
                        self.load_file(&path, child, cfg);
                    }
                }
            }
            Item::Use(u) if is_pub(&u.vis) => {
                let mut leaves = Vec::new();
                use_leaves(&u.tree, Vec::new(), &mut leaves);
                let entry = self.modules.entry(module.clone()).or_default();
                entry.uses.extend(leaves);
            }
            Item::Fn(f) if is_pub(&f.vis) && !is_test_only(&f.attrs) => {
                let line = format!("{}pub {}", api_attrs(&f.attrs), sig(&f.sig));
                self.add_def(module, f.sig.ident.to_string(), vec![line], false);
            }
            Item::Struct(s) if is_pub(&s.vis) => {
                let head = item_head(
                    &s.attrs,
                    "struct",
                    &s.ident,
                    &s.generics,
                    &where_clause(&s.generics),
                );
                let mut lines = vec![head];
                match &s.fields {
                    syn::Fields::Unit => {}
                    syn::Fields::Unnamed(_) => {
                        lines[0] += &format!("({})", fields(&s.fields, true).join(", "));
                    }
                    syn::Fields::Named(_) => {
                        lines.extend(
                            fields(&s.fields, true)
                                .into_iter()
                                .map(|f| format!("    {f}")),
                        );
                    }
                }
                self.add_def(module, s.ident.to_string(), lines, true);
                self.impls.extend(derived_setters(s));
            }
            Item::Enum(e) if is_pub(&e.vis) => {
                let where_ = where_clause(&e.generics);
                let mut lines = vec![item_head(&e.attrs, "enum", &e.ident, &e.generics, &where_)];
                for v in &e.variants {
                    let body = match &v.fields {
                        syn::Fields::Unit => String::new(),
                        syn::Fields::Unnamed(_) => {
                            format!("({})", fields(&v.fields, false).join(", "))
                        }
                        syn::Fields::Named(_) => {
                            format!(" {{ {} }}", fields(&v.fields, false).join(", "))
                        }
                    };
                    lines.push(format!("    {}{}{body}", api_attrs(&v.attrs), v.ident));
                }
                self.add_def(module, e.ident.to_string(), lines, true);
            }
            Item::Trait(t) => {
                if !is_pub(&t.vis) {
                    self.private_traits.insert(t.ident.to_string());
                    return;
                }
                let supertraits = if t.supertraits.is_empty() {
                    String::new()
                } else {
                    format!(": {}", tokens(&t.supertraits))
                };
                let keyword = if t.unsafety.is_some() {
                    "unsafe trait"
                } else {
                    "trait"
                };
                let rest = format!("{supertraits}{}", where_clause(&t.generics));
                let mut lines = vec![item_head(&t.attrs, keyword, &t.ident, &t.generics, &rest)];
                for ti in &t.items {
                    let line = match ti {
                        syn::TraitItem::Fn(f) => format!(
                            "{}{}{}",
                            api_attrs(&f.attrs),
                            sig(&f.sig),
                            if f.default.is_some() { " { .. }" } else { ";" }
                        ),
                        syn::TraitItem::Type(ty) => {
                            let mut ty = ty.clone();
                            ty.attrs.retain(|a| !a.path().is_ident("doc"));
                            tokens(&ty)
                        }
                        syn::TraitItem::Const(c) => {
                            let mut c = c.clone();
                            c.attrs.retain(|a| !a.path().is_ident("doc"));
                            c.default = None;
                            tokens(&c)
                        }
                        other => tokens(other),
                    };
                    lines.push(format!("    {line}"));
                }
                self.add_def(module, t.ident.to_string(), lines, true);
            }
            Item::Type(t) if is_pub(&t.vis) => {
                let rest = format!(" = {}", tokens(&t.ty));
                let line = item_head(&t.attrs, "type", &t.ident, &t.generics, &rest);
                self.add_def(module, t.ident.to_string(), vec![line], true);
            }
            Item::Const(syn::ItemConst {
                attrs,
                vis,
                ident,
                ty,
                ..
            })
            | Item::Static(syn::ItemStatic {
                attrs,
                vis,
                ident,
                ty,
                ..
            }) if is_pub(vis) => {
                let keyword = if matches!(item, Item::Const(_)) {
                    "const"
                } else {
                    "static"
                };
                let line = format!("{}pub {keyword} {ident}: {}", api_attrs(attrs), tokens(ty));
                self.add_def(module, ident.to_string(), vec![line], false);
            }
            Item::Macro(m) => self.load_macro(m, module),
            Item::Impl(i) if !is_test_only(&i.attrs) => self.load_impl(i),
            _ => {}
        }
    }

    /// A `macro_rules!` definition (exported, or remembered for its invocations), or an
    /// invocation of a local one: the items it defines are listed by name, with the
    /// identifiers it was invoked with.
    fn load_macro(&mut self, m: &syn::ItemMacro, module: &ModPath) {
        let Some(macro_name) = m.mac.path.get_ident().map(ToString::to_string) else {
            return;
        };
        if macro_name == "macro_rules" {
            let Some(name) = &m.ident else { return };
            if has_attr(&m.attrs, "macro_export") {
                self.add_def(
                    &Vec::new(),
                    name.to_string(),
                    vec![format!("macro_rules! {name}")],
                    false,
                );
            }
            let body: Vec<String> = flat_tokens(m.mac.tokens.clone());
            let mut items = Vec::new();
            for w in body.windows(4) {
                let kind = w[1].as_str();
                if w[0] == "pub" && matches!(kind, "struct" | "enum" | "trait" | "type") {
                    let item_name = if w[2] == "$" {
                        "$".to_owned()
                    } else {
                        w[2].clone()
                    };
                    items.push((kind.to_owned(), item_name));
                }
            }
            self.macros.insert(name.to_string(), items);
            return;
        }
        let Some(items) = self.macros.get(&macro_name).cloned() else {
            return;
        };
        let idents = invocation_idents(m.mac.tokens.clone());
        for (kind, name) in items {
            if name == "$" {
                for name in &idents {
                    let line = format!("pub {kind} {name} (defined by {macro_name}!)");
                    self.add_def(module, name.clone(), vec![line], true);
                }
            } else {
                let line = format!(
                    "pub {kind} {name} (defined by {macro_name}!: {})",
                    idents.join(", ")
                );
                self.add_def(module, name, vec![line], true);
            }
        }
    }

    fn load_impl(&mut self, i: &syn::ItemImpl) {
        let syn::Type::Path(p) = &*i.self_ty else {
            return;
        };
        let Some(last) = p.path.segments.last() else {
            return;
        };
        let type_name = last.ident.to_string();
        let head = format!(
            "{}impl{} {}{}",
            if i.unsafety.is_some() { "unsafe " } else { "" },
            generics(&i.generics),
            match &i.trait_ {
                Some((path, _)) => format!("{} for {}", tokens(path), tokens(&i.self_ty)),
                None => tokens(&i.self_ty),
            },
            where_clause(&i.generics)
        );
        let mut lines = Vec::new();
        if let Some((path, _)) = &i.trait_ {
            let trait_name = path
                .segments
                .last()
                .map(|s| s.ident.to_string())
                .unwrap_or_default();
            if self.private_traits.contains(&trait_name) {
                return;
            }
            lines.push(head);
        } else {
            for item in &i.items {
                match item {
                    syn::ImplItem::Fn(f) if is_pub(&f.vis) => {
                        lines.push(format!(
                            "{head}: {}pub {}",
                            api_attrs(&f.attrs),
                            sig(&f.sig)
                        ));
                    }
                    syn::ImplItem::Const(c) if is_pub(&c.vis) => {
                        lines.push(format!("{head}: pub const {}: {}", c.ident, tokens(&c.ty)));
                    }
                    // A macro that writes methods (`from_env_fn!(…)`): as invoked.
                    syn::ImplItem::Macro(m) => {
                        // The arguments as written (a doc string keeps its spaces).
                        let args = m.mac.tokens.to_string().replace(" ,", ",");
                        lines.push(format!("{head}: {}!({args})", tokens(&m.mac.path)));
                    }
                    _ => {}
                }
            }
        }
        if !lines.is_empty() {
            self.impls.push(Impl { type_name, lines });
        }
    }

    /// Resolves `path` as written in `module`.
    fn resolve(&self, module: &ModPath, path: &[String], depth: usize) -> Option<Target> {
        if depth > 16 || path.is_empty() {
            return None;
        }
        let (mut at, rest): (ModPath, &[String]) = match path[0].as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (module.clone(), &path[1..]),
            "super" => (
                module[..module.len().saturating_sub(1)].to_vec(),
                &path[1..],
            ),
            first
                if self
                    .modules
                    .get(module)
                    .is_some_and(|m| m.children.contains(first)) =>
            {
                (module.clone(), path)
            }
            first if self.lookup(module, first, depth).is_some() && path.len() > 1 => {
                match self.lookup(module, first, depth) {
                    Some(Target::Module(m)) => (m, &path[1..]),
                    _ => return Some(Target::External(path.join("::"))),
                }
            }
            _ => return Some(Target::External(path.join("::"))),
        };
        if rest.is_empty() {
            return Some(Target::Module(at));
        }
        for (i, seg) in rest.iter().enumerate() {
            let last = i + 1 == rest.len();
            if last {
                return self.lookup(&at, seg, depth + 1);
            }
            match self.lookup(&at, seg, depth + 1) {
                Some(Target::Module(m)) => at = m,
                Some(Target::External(e)) => {
                    return Some(Target::External(format!(
                        "{e}::{}",
                        rest[i + 1..].join("::")
                    )));
                }
                _ => return None,
            }
        }
        None
    }

    /// A name in a module: a child module, an item, or a re-export.
    fn lookup(&self, module: &ModPath, name: &str, depth: usize) -> Option<Target> {
        let m = self.modules.get(module)?;
        if m.children.contains(name) {
            let mut child = module.clone();
            child.push(name.to_owned());
            return Some(Target::Module(child));
        }
        if let Some(&id) = m.defs.iter().find(|&&id| self.defs[id].name == name) {
            return Some(Target::Def(id));
        }
        for u in &m.uses {
            if !u.glob && u.name == name {
                return self.resolve(module, &u.target, depth + 1);
            }
        }
        for u in m.uses.iter().filter(|u| u.glob) {
            if let Some(Target::Module(g)) = self.resolve(module, &u.target, depth + 1) {
                if let Some(t) = self.lookup(&g, name, depth + 1) {
                    return Some(t);
                }
            }
        }
        None
    }

    /// Every public path of the crate, with what it names.
    fn public_paths(&self) -> BTreeMap<String, Target> {
        let mut out = BTreeMap::new();
        let mut seen = HashSet::new();
        self.walk(&Vec::new(), self.name.clone(), &mut out, &mut seen);
        out
    }

    fn walk(
        &self,
        module: &ModPath,
        at: String,
        out: &mut BTreeMap<String, Target>,
        seen: &mut HashSet<(ModPath, String)>,
    ) {
        if !seen.insert((module.clone(), at.clone())) {
            return;
        }
        let Some(m) = self.walk_items(module, &at, out, seen) else {
            return;
        };
        for u in &m.uses {
            let target = self.resolve(module, &u.target, 0);
            if u.glob {
                match target {
                    Some(Target::Module(g)) => {
                        // A glob brings the module's items and its own names, not its globs.
                        let Some(gm) = self.walk_items(&g, &at, out, seen) else {
                            continue;
                        };
                        for u in gm.uses.iter().filter(|u| !u.glob) {
                            if let Some(t) = self.resolve(&g, &u.target, 0) {
                                out.insert(format!("{at}::{}", u.name), t);
                            }
                        }
                    }
                    Some(Target::External(e)) => {
                        out.insert(format!("{at}::*"), Target::External(format!("{e}::*")));
                    }
                    _ => {}
                }
                continue;
            }
            let mut path = format!("{at}::{}", u.name);
            if out.contains_key(&path) {
                // The same name in another namespace (a macro beside a module).
                path += " (macro namespace)";
            }
            match target {
                Some(Target::Module(g)) => {
                    out.insert(path.clone(), Target::Module(g.clone()));
                    self.walk(&g, path, out, seen);
                }
                Some(t) => {
                    out.insert(path, t);
                }
                None => {
                    out.insert(
                        path,
                        Target::External(format!("unresolved {}", u.target.join("::"))),
                    );
                }
            }
        }
    }

    /// The definitions and the public child modules of `module` (walked), under `at`; the
    /// module, for its `use`s.
    fn walk_items(
        &self,
        module: &ModPath,
        at: &str,
        out: &mut BTreeMap<String, Target>,
        seen: &mut HashSet<(ModPath, String)>,
    ) -> Option<&Module> {
        let m = self.modules.get(module)?;
        for &id in &m.defs {
            out.insert(format!("{at}::{}", self.defs[id].name), Target::Def(id));
        }
        for child in &m.public_children {
            let mut c = module.clone();
            c.push(child.clone());
            let path = format!("{at}::{child}");
            out.insert(path.clone(), Target::Module(c.clone()));
            self.walk(&c, path, out, seen);
        }
        Some(m)
    }

    fn render(&self) -> String {
        let paths = self.public_paths();
        // Every public path of each target; the canonical one first.
        let mut by_target: BTreeMap<Target, Vec<String>> = BTreeMap::new();
        for (path, target) in &paths {
            by_target
                .entry(target.clone())
                .or_default()
                .push(path.clone());
        }
        let mut entries: BTreeMap<String, (Target, Vec<String>)> = BTreeMap::new();
        for (target, mut all) in by_target {
            // The deepest public path outside the prelude (its home module, e.g.
            // `botmesh::bot::Bot` rather than the root's `botmesh::Bot`), whichever private
            // module defines it, and outside the `__` names generated code imports.
            all.sort_by_key(|p| {
                (
                    p.contains("::prelude::") || p.contains("::__"),
                    std::cmp::Reverse(p.matches("::").count()),
                    p.clone(),
                )
            });
            let canonical = all[0].clone();
            all.retain(|p| *p != canonical);
            entries.insert(canonical, (target, all));
        }
        let mut impls: HashMap<&str, Vec<&String>> = HashMap::new();
        for i in &self.impls {
            impls.entry(&i.type_name).or_default().extend(&i.lines);
        }
        let mut out = String::new();
        for (path, (target, aliases)) in entries {
            match &target {
                Target::Module(m) => {
                    let cfg = &self.modules[m].cfg;
                    let _ = writeln!(out, "{cfg}pub mod {path}");
                }
                Target::External(e) => {
                    let _ = writeln!(out, "pub use {path} = {e}");
                }
                Target::Def(id) => {
                    let def = &self.defs[*id];
                    let _ = writeln!(out, "{path}: {}", def.lines[0]);
                    for l in &def.lines[1..] {
                        let _ = writeln!(out, "{l}");
                    }
                    if def.is_type {
                        let mut lines: Vec<&String> =
                            impls.get(def.name.as_str()).cloned().unwrap_or_default();
                        lines.sort();
                        lines.dedup();
                        for l in lines {
                            let _ = writeln!(out, "    {l}");
                        }
                    }
                }
            }
            for a in aliases {
                let _ = writeln!(out, "    also at {a}");
            }
        }
        out
    }
}

/// What a `#[setters(…)]` attribute of `derive_setters` says, on a struct or on a field.
#[derive(Default)]
struct SetterOptions {
    generate: Option<bool>,
    skip: bool,
    into: Option<bool>,
    strip_option: Option<bool>,
    rename: Option<String>,
    /// The types of `generate_delegates(ty = "…", field = "…")`.
    delegates: Vec<String>,
}

fn setter_options(attrs: &[syn::Attribute]) -> SetterOptions {
    let mut o = SetterOptions::default();
    for a in attrs.iter().filter(|a| a.path().is_ident("setters")) {
        a.parse_nested_meta(|m| {
            let flag = |m: &syn::meta::ParseNestedMeta<'_>| -> syn::Result<bool> {
                if m.input.peek(syn::Token![=]) {
                    Ok(m.value()?.parse::<syn::LitBool>()?.value)
                } else {
                    Ok(true)
                }
            };
            let key = m.path.get_ident().map(ToString::to_string);
            match key.as_deref().unwrap_or_default() {
                "generate" => o.generate = Some(flag(&m)?),
                "skip" => o.skip = flag(&m)?,
                "into" => o.into = Some(flag(&m)?),
                "strip_option" => o.strip_option = Some(flag(&m)?),
                "rename" => o.rename = Some(m.value()?.parse::<syn::LitStr>()?.value()),
                "generate_delegates" => m.parse_nested_meta(|d| {
                    let value = d.value()?.parse::<syn::LitStr>()?.value();
                    if d.path.is_ident("ty") {
                        o.delegates.push(value);
                    }
                    Ok(())
                })?,
                other => {
                    return Err(m.error(format!("setters({other}) is not rendered here yet")));
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("#[setters]: {e}"));
    }
    o
}

/// The setters `#[derive(Setters)]` (`derive_setters`) writes for `s`, as inherent impl lines
/// of `s` and of each `generate_delegates` type: one per field it generates a setter for.
fn derived_setters(s: &syn::ItemStruct) -> Vec<Impl> {
    let derives = s
        .attrs
        .iter()
        .any(|a| a.path().is_ident("derive") && tokens(&a.meta).contains("Setters"));
    if !derives {
        return Vec::new();
    }
    let outer = setter_options(&s.attrs);
    let mut setters = Vec::new();
    for field in &s.fields {
        let Some(ident) = &field.ident else { continue };
        let o = setter_options(&field.attrs);
        if o.skip || !(o.generate == Some(true) || outer.generate != Some(false)) {
            continue;
        }
        let mut ty = tokens(&field.ty);
        if o.strip_option.or(outer.strip_option).unwrap_or(false) {
            if let Some(inner) = ty.strip_prefix("Option<").and_then(|t| t.strip_suffix('>')) {
                ty = inner.to_owned();
            }
        }
        if o.into.or(outer.into).unwrap_or(false) {
            ty = format!("impl Into<{ty}>");
        }
        let name = o.rename.unwrap_or_else(|| ident.to_string());
        setters.push(format!(
            "#[must_use] pub fn {name}(mut self, value: {ty}) -> Self"
        ));
    }
    let own = format!("{}{}", s.ident, generics(&s.generics));
    let delegates = outer
        .delegates
        .iter()
        .map(|ty| ty.rsplit("::").next().unwrap_or(ty).to_owned());
    std::iter::once(own)
        .chain(delegates)
        .map(|ty| Impl {
            type_name: ty.split('<').next().unwrap_or(&ty).to_owned(),
            lines: setters.iter().map(|l| format!("impl {ty}: {l}")).collect(),
        })
        .filter(|i| !i.lines.is_empty())
        .collect()
}

/// Where `mod x;` declared in `file` looks for `x.rs` / `x/mod.rs`.
fn child_dir(file: &Path) -> PathBuf {
    let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("lib" | "mod" | "main") => dir,
        Some(stem) => dir.join(stem),
        None => dir,
    }
}

/// The leaves of a `use` tree below `prefix` (`a::{self}` names `a`).
pub(crate) fn use_leaves(tree: &syn::UseTree, prefix: Vec<String>, out: &mut Vec<UseLeaf>) {
    match tree {
        syn::UseTree::Path(p) => {
            let mut next = prefix;
            next.push(p.ident.to_string());
            use_leaves(&p.tree, next, out);
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            let mut target = prefix;
            if name != "self" {
                target.push(name.clone());
            }
            let name = if name == "self" {
                target.last().cloned().unwrap_or_default()
            } else {
                name
            };
            out.push(UseLeaf {
                name,
                target,
                glob: false,
            });
        }
        syn::UseTree::Rename(r) => {
            let mut target = prefix;
            if r.ident != "self" {
                target.push(r.ident.to_string());
            }
            out.push(UseLeaf {
                name: r.rename.to_string(),
                target,
                glob: false,
            });
        }
        syn::UseTree::Glob(_) => out.push(UseLeaf {
            name: "*".to_owned(),
            target: prefix,
            glob: true,
        }),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(t, prefix.clone(), out);
            }
        }
    }
}

/// Every token of a macro body, flattened (idents, punctuation, `$`).
fn flat_tokens(ts: proc_macro2::TokenStream) -> Vec<String> {
    let mut out = Vec::new();
    for tt in ts {
        match tt {
            proc_macro2::TokenTree::Group(g) => out.extend(flat_tokens(g.stream())),
            other => out.push(other.to_string()),
        }
    }
    out
}

/// The identifiers an invocation passes at its top level (attributes such as doc comments
/// left out).
fn invocation_idents(ts: proc_macro2::TokenStream) -> Vec<String> {
    let mut out = Vec::new();
    let mut after_hash = false;
    for tt in ts {
        let hash = matches!(&tt, proc_macro2::TokenTree::Punct(p) if p.as_char() == '#');
        match tt {
            proc_macro2::TokenTree::Ident(i) => out.push(i.to_string()),
            proc_macro2::TokenTree::Group(g) if !after_hash => {
                out.extend(invocation_idents(g.stream()));
            }
            _ => {}
        }
        after_hash = hash;
    }
    out
}

/// The first line of a public item: `{attrs}pub {keyword} {ident}{generics}{rest}`.
fn item_head(
    attrs: &[syn::Attribute],
    keyword: &str,
    ident: &syn::Ident,
    g: &syn::Generics,
    rest: &str,
) -> String {
    format!(
        "{}pub {keyword} {ident}{}{rest}",
        api_attrs(attrs),
        generics(g)
    )
}
