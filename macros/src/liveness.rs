//! Liveness: which locals live across each suspension point of a lowered flow.
//!
//! A local is live across suspension `k` when it is in scope at `k` (a parameter, or a `let`
//! / pattern binding on the path from the function body down to the marker) and used free in
//! the resume code of `k` (`lower::resume_stmts`); a later suspension `j` met in that code
//! uses what lives across `j` and what its own prompt uses, so the sets are computed to a
//! fixed point. Free names are found with scopes (`let`, closures, match arms, `if let`,
//! loops) and inside macro calls (identifiers and `{name}` format captures), erring on the
//! side of keeping a local. This module reports nothing: `expand` turns an untyped live local
//! into an error.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};
use syn::{Block, Expr, Ident, Pat, Stmt, Type};

use crate::lower::{
    Toward, expr_has, marker_id, resume_stmts, stmt_has, toward_in_expr, toward_in_stmt,
};

/// A local in scope at a suspension point.
#[derive(Clone)]
#[cfg_attr(test, derive(Debug))]
pub(crate) struct Binding {
    pub(crate) name: Ident,
    pub(crate) ty: Option<Type>,
    pub(crate) mutable: bool,
    /// How many blocks (bodies, branches, arms) down from the function body it is bound.
    pub(crate) depth: u32,
    /// Declared without a value (`let x: T;`, assigned later).
    pub(crate) deferred: bool,
}

// ----- scopes -----

/// Adds the names a pattern binds (with their types when the pattern says them).
pub(crate) fn pat_bindings(p: &Pat, ty: Option<&Type>, out: &mut Vec<Binding>) {
    match p {
        Pat::Type(t) => pat_bindings(&t.pat, Some(&t.ty), out),
        Pat::Ident(i) => {
            out.push(Binding {
                name: i.ident.clone(),
                ty: ty.cloned(),
                mutable: i.mutability.is_some(),
                depth: 0,
                deferred: false,
            });
            if let Some((_, sub)) = &i.subpat {
                pat_bindings(sub, None, out);
            }
        }
        Pat::Tuple(t) => {
            let tys: Option<Vec<&Type>> = match ty {
                Some(Type::Tuple(tt)) if tt.elems.len() == t.elems.len() => {
                    Some(tt.elems.iter().collect())
                }
                _ => None,
            };
            for (i, el) in t.elems.iter().enumerate() {
                pat_bindings(el, tys.as_ref().map(|v| v[i]), out);
            }
        }
        Pat::TupleStruct(t) => t.elems.iter().for_each(|el| pat_bindings(el, None, out)),
        Pat::Struct(s) => s
            .fields
            .iter()
            .for_each(|f| pat_bindings(&f.pat, None, out)),
        Pat::Or(o) => {
            if let Some(first) = o.cases.first() {
                pat_bindings(first, None, out);
            }
        }
        Pat::Paren(p) => pat_bindings(&p.pat, ty, out),
        Pat::Reference(r) => pat_bindings(&r.pat, None, out),
        Pat::Slice(s) => s.elems.iter().for_each(|el| pat_bindings(el, None, out)),
        Pat::Guard(g) => pat_bindings(&g.pat, ty, out),
        _ => {}
    }
}

/// The locals in scope at marker `k` (outermost first; later entries shadow earlier ones).
pub(crate) fn scope_at(stmts: &[Stmt], k: usize, out: &mut Vec<Binding>) -> bool {
    for s in stmts {
        if stmt_has(s, k) {
            scope_step(toward_in_stmt(s, k), k, out);
            return true;
        }
        if let Stmt::Local(l) = s {
            let start = out.len();
            pat_bindings(&l.pat, None, out);
            if l.init.is_none() {
                for b in out.iter_mut().skip(start) {
                    b.deferred = true;
                }
            }
        }
    }
    false
}

fn let_bindings(cond: &Expr, out: &mut Vec<Binding>) {
    match cond {
        Expr::Let(l) => pat_bindings(&l.pat, None, out),
        Expr::Binary(b) => {
            let_bindings(&b.left, out);
            let_bindings(&b.right, out);
        }
        _ => {}
    }
}

/// The bindings pushed from `start` on are one block further down.
fn deepen(out: &mut [Binding], start: usize) {
    for b in out.iter_mut().skip(start) {
        b.depth += 1;
    }
}

/// The locals in scope from one step toward marker `k` down to it; those bound inside a
/// block, a branch or an arm are one block deeper.
fn scope_step(step: Toward<'_>, k: usize, out: &mut Vec<Binding>) {
    let start = out.len();
    match step {
        Toward::Expr(e) | Toward::Else(e) => return scope_step(toward_in_expr(e, k), k, out),
        Toward::Then { cond, stmts } => {
            let_bindings(cond, out);
            scope_at(stmts, k, out);
        }
        Toward::Arm(arm) => {
            pat_bindings(&arm.pat, None, out);
            scope_step(toward_in_expr(&arm.body, k), k, out);
        }
        Toward::Loop(stmts) | Toward::Block(stmts) => {
            scope_at(stmts, k, out);
        }
        Toward::Stop => return,
    }
    deepen(out, start);
}

// ----- free variables -----

/// Names used free in code (respecting `let`, closure, arm and loop scopes); a marker `j`
/// uses `marker_uses[j]`.
struct FreeVars<'a> {
    scopes: Vec<HashSet<String>>,
    used: BTreeSet<String>,
    marker_uses: &'a BTreeMap<usize, BTreeSet<String>>,
}

impl FreeVars<'_> {
    /// An `if` or `while` condition, then the block it guards, where its `let` bindings are
    /// in scope.
    fn visit_conditional(&mut self, cond: &Expr, block: &Block) {
        self.visit_expr(cond);
        let mut b = Vec::new();
        let_bindings(cond, &mut b);
        self.scopes
            .push(b.into_iter().map(|b| b.name.to_string()).collect());
        self.visit_block(block);
        self.scopes.pop();
    }

    fn bound(&self, n: &str) -> bool {
        self.scopes.iter().any(|s| s.contains(n))
    }
    fn use_name(&mut self, n: &str) {
        if !self.bound(n) {
            self.used.insert(n.to_owned());
        }
    }
    fn bind_pat(&mut self, p: &Pat) {
        let mut b = Vec::new();
        pat_bindings(p, None, &mut b);
        if let Some(top) = self.scopes.last_mut() {
            top.extend(b.into_iter().map(|b| b.name.to_string()));
        }
    }
    fn tokens(&mut self, ts: TokenStream) {
        let toks: Vec<TokenTree> = ts.into_iter().collect();
        for (i, t) in toks.iter().enumerate() {
            match t {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) => {
                    let after_dot =
                        i >= 1 && matches!(&toks[i - 1], TokenTree::Punct(p) if p.as_char() == '.');
                    if !after_dot {
                        self.use_name(&id.to_string());
                    }
                }
                TokenTree::Literal(l) => {
                    let s = l.to_string();
                    if s.starts_with('"') {
                        for name in format_captures(&s) {
                            self.use_name(&name);
                        }
                    }
                }
                TokenTree::Punct(_) => {}
            }
        }
    }
}

/// `{name}` / `{name:…}` captures in a format string literal.
fn format_captures(lit: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = lit.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '{' {
            if chars.get(i + 1) == Some(&'{') {
                i += 2;
                continue;
            }
            let mut j = i + 1;
            let mut name = String::new();
            while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
                name.push(chars[j]);
                j += 1;
            }
            if !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && matches!(chars.get(j), Some('}' | ':'))
            {
                out.push(name);
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

impl<'a> Visit<'a> for FreeVars<'_> {
    fn visit_block(&mut self, b: &'a Block) {
        self.scopes.push(HashSet::new());
        for s in &b.stmts {
            self.visit_stmt(s);
        }
        self.scopes.pop();
    }
    fn visit_local(&mut self, l: &'a syn::Local) {
        if let Some(init) = &l.init {
            self.visit_expr(&init.expr);
            if let Some((_, els)) = &init.diverge {
                self.visit_expr(els);
            }
        }
        self.bind_pat(&l.pat);
    }
    fn visit_expr_closure(&mut self, c: &'a syn::ExprClosure) {
        self.scopes.push(HashSet::new());
        for p in &c.inputs {
            self.bind_pat(p);
        }
        self.visit_expr(&c.body);
        self.scopes.pop();
    }
    fn visit_arm(&mut self, a: &'a syn::Arm) {
        self.scopes.push(HashSet::new());
        self.bind_pat(&a.pat);
        if let Pat::Guard(g) = &a.pat {
            self.visit_expr(&g.guard);
        }
        self.visit_expr(&a.body);
        self.scopes.pop();
    }
    fn visit_expr_if(&mut self, i: &'a syn::ExprIf) {
        self.visit_conditional(&i.cond, &i.then_branch);
        if let Some((_, els)) = &i.else_branch {
            self.visit_expr(els);
        }
    }
    fn visit_expr_let(&mut self, l: &'a syn::ExprLet) {
        self.visit_expr(&l.expr);
    }
    fn visit_expr_while(&mut self, w: &'a syn::ExprWhile) {
        self.visit_conditional(&w.cond, &w.body);
    }
    fn visit_expr_for_loop(&mut self, f: &'a syn::ExprForLoop) {
        self.visit_expr(&f.expr);
        self.scopes.push(HashSet::new());
        self.bind_pat(&f.pat);
        self.visit_block(&f.body);
        self.scopes.pop();
    }
    fn visit_expr_path(&mut self, p: &'a syn::ExprPath) {
        if p.qself.is_none() && p.path.segments.len() == 1 && p.path.leading_colon.is_none() {
            if let Some(id) = p.path.get_ident() {
                self.use_name(&id.to_string());
            }
        }
    }
    fn visit_expr(&mut self, e: &'a Expr) {
        if let Some(k) = marker_id(e) {
            if let Some(names) = self.marker_uses.get(&k) {
                for n in names.clone() {
                    self.use_name(&n);
                }
            }
            return;
        }
        visit::visit_expr(self, e);
    }
    fn visit_macro(&mut self, m: &'a syn::Macro) {
        self.tokens(m.tokens.clone());
    }
    fn visit_item(&mut self, _: &'a syn::Item) {}
}

/// The names used free in `stmts`.
pub(crate) fn free_vars(
    stmts: &[Stmt],
    marker_uses: &BTreeMap<usize, BTreeSet<String>>,
) -> BTreeSet<String> {
    let mut fv = FreeVars {
        scopes: vec![HashSet::new()],
        used: BTreeSet::new(),
        marker_uses,
    };
    for s in stmts {
        fv.visit_stmt(s);
    }
    fv.used
}

/// The names used free in token streams (ask chains).
pub(crate) fn free_vars_tokens(ts: TokenStream) -> BTreeSet<String> {
    let empty = BTreeMap::new();
    let mut fv = FreeVars {
        scopes: vec![HashSet::new()],
        used: BTreeSet::new(),
        marker_uses: &empty,
    };
    fv.tokens(ts);
    fv.used
}

/// One suspension point, lowered.
pub(crate) struct Lowered {
    /// The rest of the program after the suspension (markers of later suspensions kept).
    pub(crate) rest: Vec<Stmt>,
    /// The locals in scope at the suspension (innermost binding of each name).
    pub(crate) scope: Vec<Binding>,
    /// The live locals, in scope order.
    pub(crate) live: Vec<Binding>,
    /// Live locals that shadow a binding of the same name in an enclosing block: after the
    /// inner block the outer binding is back, but the state keeps one value per name.
    pub(crate) shadowing: Vec<Ident>,
}

/// Lowers every suspension `1..=n` of `body` (already validated and desugared).
/// `params` are in scope everywhere; `prompt_uses[k]` / `answer_uses[k]` are the names the
/// suspension's own expressions use at suspend / resume time.
pub(crate) fn lower(
    body: &Block,
    n: usize,
    params: &[Binding],
    prompt_uses: &BTreeMap<usize, BTreeSet<String>>,
    answer_uses: &BTreeMap<usize, BTreeSet<String>>,
) -> Vec<Lowered> {
    let mut flags = crate::lower::Flags::new(false);
    let mut out: Vec<Lowered> = Vec::with_capacity(n);
    for k in 1..=n {
        let rest = resume_stmts(&body.stmts, k, &mut flags);
        let mut scope = params.to_vec();
        scope_at(&body.stmts, k, &mut scope);
        // innermost binding of each name wins; a shadowed one of an enclosing block is noted
        let mut dedup: Vec<Binding> = Vec::new();
        let mut shadowed: Vec<Ident> = Vec::new();
        for b in scope {
            if dedup.iter().any(|d| d.name == b.name && d.depth < b.depth) {
                shadowed.push(b.name.clone());
            }
            dedup.retain(|d| d.name != b.name);
            dedup.push(b);
        }
        out.push(Lowered {
            rest,
            scope: dedup,
            live: Vec::new(),
            shadowing: shadowed,
        });
    }
    // fixed point
    loop {
        let mut uses: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
        for (i, l) in out.iter().enumerate() {
            let k = i + 1;
            let mut u: BTreeSet<String> = l.live.iter().map(|b| b.name.to_string()).collect();
            u.extend(prompt_uses.get(&k).cloned().unwrap_or_default());
            uses.insert(k, u);
        }
        let mut changed = false;
        for (i, l) in out.iter_mut().enumerate() {
            let k = i + 1;
            let mut used = free_vars(&l.rest, &uses);
            used.extend(answer_uses.get(&k).cloned().unwrap_or_default());
            let live: Vec<Binding> = l
                .scope
                .iter()
                .filter(|b| used.contains(&b.name.to_string()))
                .cloned()
                .collect();
            if live
                .iter()
                .map(|b| b.name.to_string())
                .ne(l.live.iter().map(|b| b.name.to_string()))
            {
                l.live = live;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut uses: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for (i, l) in out.iter().enumerate() {
        let mut u: BTreeSet<String> = l.live.iter().map(|b| b.name.to_string()).collect();
        u.extend(prompt_uses.get(&(i + 1)).cloned().unwrap_or_default());
        uses.insert(i + 1, u);
    }
    for (i, l) in out.iter_mut().enumerate() {
        let live: BTreeSet<String> = l.live.iter().map(|b| b.name.to_string()).collect();
        // A shadowed outer binding matters only where the code after the inner binding's
        // block uses it (then it would come back with the inner one's value).
        let after = after_by_depth(&body.stmts, i + 1, &uses);
        let depth_of = |name: &Ident| {
            l.scope
                .iter()
                .find(|b| &b.name == name)
                .map_or(0, |b| b.depth as usize)
        };
        l.shadowing.retain(|inner| {
            let name = inner.to_string();
            live.contains(&name)
                && after
                    .get(depth_of(inner))
                    .is_some_and(|used| used.contains(&name))
        });
        // A local declared without a value matters only when the resume code assigns it
        // (its value is not there yet when the flow suspends).
        let assigned = assigned_names(&l.rest);
        l.live
            .iter_mut()
            .for_each(|b| b.deferred = b.deferred && assigned.contains(&b.name.to_string()));
    }
    out
}

/// The names used free after the block at each depth (index) of the path from the body to
/// marker `k` ends: the statements that follow at the shallower levels, and the whole body of
/// a loop on the path (it runs again). Depths count as `scope_step` deepens them.
fn after_by_depth(
    stmts: &[Stmt],
    k: usize,
    uses: &BTreeMap<usize, BTreeSet<String>>,
) -> Vec<BTreeSet<String>> {
    // Depth 0, the function body: nothing comes after it.
    let mut after = After {
        k,
        uses,
        out: vec![BTreeSet::new()],
    };
    after.in_stmts(stmts, BTreeSet::new());
    after.out
}

/// The walk of [`after_by_depth`] down to marker `k`: `out[depth]` is what is used after
/// that depth's block ends; `acc`, what is used after the current place at its own depth.
struct After<'u> {
    k: usize,
    uses: &'u BTreeMap<usize, BTreeSet<String>>,
    out: Vec<BTreeSet<String>>,
}

impl After<'_> {
    fn in_stmts(&mut self, stmts: &[Stmt], acc: BTreeSet<String>) {
        let Some(i) = stmts.iter().position(|s| stmt_has(s, self.k)) else {
            return;
        };
        let mut next = acc;
        next.extend(free_vars(&stmts[i + 1..], self.uses));
        let step = toward_in_stmt(&stmts[i], self.k);
        if let (Toward::Expr(_), Stmt::Local(l)) = (&step, &stmts[i]) {
            // A `let … else` runs its `else` after the initialiser.
            if let Some((_, els)) = l.init.as_ref().and_then(|init| init.diverge.as_ref()) {
                next.extend(free_vars_expr(els, self.uses));
            }
        }
        self.step(step, next);
    }

    /// One level deeper: `out[depth]` is what is used after that level's block.
    fn deeper(&mut self, stmts: &[Stmt], acc: BTreeSet<String>) {
        self.out.push(acc.clone());
        self.in_stmts(stmts, acc);
    }

    fn in_expr(&mut self, e: &Expr, acc: BTreeSet<String>) {
        let (k, uses) = (self.k, self.uses);
        let mut acc = acc;
        // What the expression evaluates after the place that holds the marker.
        match e {
            // The arguments are evaluated after the receiver.
            Expr::MethodCall(m) => m
                .args
                .iter()
                .for_each(|a| acc.extend(free_vars_expr(a, uses))),
            // The place is evaluated after the value.
            Expr::Assign(a) => acc.extend(free_vars_expr(&a.left, uses)),
            // Either branch runs after the condition.
            Expr::If(i) if expr_has(&i.cond, k) => {
                acc.extend(free_vars(&i.then_branch.stmts, uses));
                if let Some((_, els)) = &i.else_branch {
                    acc.extend(free_vars_expr(els, uses));
                }
            }
            // An arm runs after the scrutinee.
            Expr::Match(m) if expr_has(&m.expr, k) => {
                for arm in &m.arms {
                    acc.extend(free_vars_expr(&arm.body, uses));
                }
            }
            // A loop's body runs again.
            Expr::Loop(l) => acc.extend(free_vars(&l.body.stmts, uses)),
            _ => {}
        }
        self.step(toward_in_expr(e, k), acc);
    }

    fn step(&mut self, step: Toward<'_>, acc: BTreeSet<String>) {
        match step {
            Toward::Expr(e) | Toward::Else(e) => self.in_expr(e, acc),
            Toward::Then { stmts, .. } | Toward::Loop(stmts) | Toward::Block(stmts) => {
                self.deeper(stmts, acc);
            }
            Toward::Arm(arm) => {
                self.out.push(acc.clone());
                self.in_expr(&arm.body, acc);
            }
            Toward::Stop => {}
        }
    }
}

/// The names used free in one expression.
fn free_vars_expr(e: &Expr, uses: &BTreeMap<usize, BTreeSet<String>>) -> BTreeSet<String> {
    free_vars(&[Stmt::Expr(e.clone(), None)], uses)
}

/// The names assigned in `stmts` (`name = …`, and every name of a destructuring assignment
/// such as `(a, b) = …`).
fn assigned_names(stmts: &[Stmt]) -> BTreeSet<String> {
    struct Assigned(BTreeSet<String>);
    struct Places<'s>(&'s mut BTreeSet<String>);
    impl<'a> Visit<'a> for Places<'_> {
        fn visit_expr_path(&mut self, p: &'a syn::ExprPath) {
            if let Some(id) = p.path.get_ident() {
                self.0.insert(id.to_string());
            }
        }
    }
    impl<'a> Visit<'a> for Assigned {
        fn visit_expr_assign(&mut self, a: &'a syn::ExprAssign) {
            Places(&mut self.0).visit_expr(&a.left);
            visit::visit_expr_assign(self, a);
        }
    }
    let mut v = Assigned(BTreeSet::new());
    for s in stmts {
        v.visit_stmt(s);
    }
    v.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::Errors;
    use crate::lower::{desugar_while, forward_stmts};
    use syn::parse_quote;

    fn prep(mut body: Block) -> (Block, usize) {
        let e = Errors::default();
        let s = crate::validate::validate(&mut body, &parse_quote!(cx), &e);
        assert!(e.is_empty(), "{:?}", e.messages());
        desugar_while(&mut body);
        (body, s.len())
    }

    #[test]
    fn design_example_lowers() {
        let design: syn::ItemFn = syn::parse_str(crate::fixtures::design()).expect("the example");
        let (body, n) = prep(*design.block);
        assert_eq!(n, 2);
        let l = lower(&body, n, &[], &BTreeMap::new(), &BTreeMap::new());
        let live1: Vec<String> = l[0].live.iter().map(|b| b.name.to_string()).collect();
        let live2: Vec<String> = l[1].live.iter().map(|b| b.name.to_string()).collect();
        assert_eq!(live1, Vec::<String>::new());
        assert_eq!(live2, vec!["item"]);
        // Resumed at the second ask: the rest of its iteration, then the loop again (which
        // reaches the same ask), and the code after the loop.
        let rest2 = &l[1].rest;
        assert_eq!(crate::lower::markers_in_stmts(rest2), vec![2]);
        let reached = std::cell::RefCell::new(Vec::new());
        let fwd = forward_stmts(rest2.clone(), &|k| {
            reached.borrow_mut().push(k);
            parse_quote!({
                return;
            })
        });
        assert_eq!(*reached.borrow(), vec![2]);
        assert_eq!(fwd.len(), 3, "the loop, the send, the result");
    }

    #[test]
    fn untyped_live_local_is_found() {
        let (body, n) = prep(parse_quote!({
            let name = cx.ask("Name?").await?.text().to_owned();
            let age: u32 = cx.ask("Age?").parse::<u32>("a number").await?;
            cx.send(format!("{name} is {age}")).await?;
            Ok(())
        }));
        let l = lower(&body, n, &[], &BTreeMap::new(), &BTreeMap::new());
        assert_eq!(l[1].live.len(), 1);
        assert!(l[1].live[0].ty.is_none());
    }

    #[test]
    fn format_captures_parse() {
        assert_eq!(
            format_captures("\"{a} {{b}} {c:>3} {0} {}\""),
            vec!["a", "c"]
        );
    }
}
