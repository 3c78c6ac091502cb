//! Lower: splits a validated body at its suspension markers into one piece of structured Rust
//! per state, and computes which locals live across each suspension.
//!
//! For suspension `k`, the resume code is "the rest of the program" rebuilt outward from the
//! marker: the rest of its block; for an `if`/`match` branch, the rest of that branch; for a
//! `loop`, the rest of the iteration in a block of its own, then the same labelled loop
//! (`'whole: { 'first: { rest } 'label: loop { whole body } }`), the rest's `continue` turned
//! into `break 'first` and its `break` (with its value) into `break 'whole`, so they keep their
//! meaning and a local the rest moves is moved once (inside the loop it would be moved "in a
//! previous iteration"); up to the end of the function. `while` loops holding a
//! suspension are first rewritten as `loop { if cond { body } else { break } }`.
//!
//! Forward code (what a state runs until the next suspension) replaces the statement that
//! holds a marker at its head by the suspension itself (an early `return` carrying the live
//! locals) and drops the statements after it.
//!
//! Forward code also leaves out what can never run: the statements after one that always
//! suspends or leaves, a loop's re-entry after a resumed iteration that always leaves it, a
//! `let` whose value never comes, labels nothing names; a loop whose lowered body runs at
//! most once becomes a block. So the generated code raises no warning of its own.
//!
//! Which locals live across a suspension is `liveness`'s job. This module builds syntax only;
//! `step` turns it into the step function's body.

use quote::{ToTokens, quote};
use syn::visit::{self, Visit};
use syn::visit_mut::{self, VisitMut};
use syn::{Block, Expr, Stmt};

use crate::diverge;
use crate::validate::MARKER;

/// The marker id of an expression, if it is one.
pub(crate) fn marker_id(e: &Expr) -> Option<usize> {
    match e {
        Expr::Macro(m) if m.mac.path.is_ident(MARKER) => {
            m.mac.tokens.to_string().trim().parse().ok()
        }
        _ => None,
    }
}

#[derive(Default)]
struct FindMarkers(Vec<usize>);

impl<'a> Visit<'a> for FindMarkers {
    fn visit_expr(&mut self, e: &'a Expr) {
        match marker_id(e) {
            Some(k) => self.0.push(k),
            None => visit::visit_expr(self, e),
        }
    }
    fn visit_item(&mut self, _: &'a syn::Item) {}
}

/// The markers in a statement list, in order.
pub(crate) fn markers_in_stmts(stmts: &[Stmt]) -> Vec<usize> {
    let mut f = FindMarkers::default();
    for s in stmts {
        f.visit_stmt(s);
    }
    f.0
}

pub(crate) fn expr_has(e: &Expr, k: usize) -> bool {
    let mut f = FindMarkers::default();
    f.visit_expr(e);
    f.0.contains(&k)
}

fn expr_has_any(e: &Expr) -> bool {
    let mut f = FindMarkers::default();
    f.visit_expr(e);
    !f.0.is_empty()
}

pub(crate) fn stmt_has(s: &Stmt, k: usize) -> bool {
    markers_in_stmts(std::slice::from_ref(s)).contains(&k)
}

fn stmt_has_any(s: &Stmt) -> bool {
    !markers_in_stmts(std::slice::from_ref(s)).is_empty()
}

/// One step down from a statement or an expression toward marker `k` (what `liveness` and
/// `model` both walk: the first to collect the locals in scope, the second the constructs).
pub(crate) enum Toward<'e> {
    /// In an expression of the same scope (an operand, a condition, a scrutinee).
    Expr(&'e Expr),
    /// In the `then` block of an `if` with condition `cond`.
    Then { cond: &'e Expr, stmts: &'e [Stmt] },
    /// In an `else` branch (of an `if`, or of a `let`-`else`).
    Else(&'e Expr),
    /// In the body of a match arm.
    Arm(&'e syn::Arm),
    /// In the body of a loop.
    Loop(&'e [Stmt]),
    /// In a block (plain or `unsafe`).
    Block(&'e [Stmt]),
    /// Nowhere further: the marker itself, or a place neither walk enters.
    Stop,
}

/// Where marker `k` is, one step down in statement `s`.
pub(crate) fn toward_in_stmt(s: &Stmt, k: usize) -> Toward<'_> {
    match s {
        Stmt::Local(l) => match &l.init {
            Some(init) if expr_has(&init.expr, k) => Toward::Expr(&init.expr),
            Some(init) => init
                .diverge
                .as_ref()
                .map_or(Toward::Stop, |(_, els)| Toward::Else(els)),
            None => Toward::Stop,
        },
        Stmt::Expr(e, _) => Toward::Expr(e),
        _ => Toward::Stop,
    }
}

/// Where marker `k` is, one step down in expression `e`.
pub(crate) fn toward_in_expr(e: &Expr, k: usize) -> Toward<'_> {
    if marker_id(e) == Some(k) {
        return Toward::Stop;
    }
    match e {
        Expr::Await(a) => Toward::Expr(&a.base),
        Expr::Try(t) => Toward::Expr(&t.expr),
        Expr::MethodCall(m) => Toward::Expr(&m.receiver),
        Expr::Field(f) => Toward::Expr(&f.base),
        Expr::Paren(p) => Toward::Expr(&p.expr),
        Expr::Group(g) => Toward::Expr(&g.expr),
        Expr::Cast(c) => Toward::Expr(&c.expr),
        Expr::Let(l) => Toward::Expr(&l.expr),
        Expr::Assign(a) => Toward::Expr(&a.right),
        Expr::Return(r) => r.expr.as_deref().map_or(Toward::Stop, Toward::Expr),
        Expr::Break(b) => b.expr.as_deref().map_or(Toward::Stop, Toward::Expr),
        Expr::If(i) => {
            if expr_has(&i.cond, k) {
                Toward::Expr(&i.cond)
            } else if markers_in_stmts(&i.then_branch.stmts).contains(&k) {
                Toward::Then {
                    cond: &i.cond,
                    stmts: &i.then_branch.stmts,
                }
            } else {
                i.else_branch
                    .as_ref()
                    .map_or(Toward::Stop, |(_, els)| Toward::Else(els))
            }
        }
        Expr::Match(m) => {
            if expr_has(&m.expr, k) {
                Toward::Expr(&m.expr)
            } else {
                m.arms
                    .iter()
                    .find(|a| expr_has(&a.body, k))
                    .map_or(Toward::Stop, Toward::Arm)
            }
        }
        Expr::Loop(l) => Toward::Loop(&l.body.stmts),
        Expr::Block(b) => Toward::Block(&b.block.stmts),
        Expr::Unsafe(u) => Toward::Block(&u.block.stmts),
        _ => Toward::Stop,
    }
}

// ----- while → loop -----

struct DesugarWhile;

impl VisitMut for DesugarWhile {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        visit_mut::visit_expr_mut(self, e);
        if let Expr::While(w) = e {
            if expr_has_any(&Expr::While(w.clone())) {
                let label = &w.label;
                let cond = &w.cond;
                let body = &w.body;
                let brk = match &w.label {
                    Some(l) => {
                        let name = &l.name;
                        quote!(break #name)
                    }
                    None => quote!(break),
                };
                *e = syn::parse_quote!(#label loop { if #cond #body else { #brk } });
            }
        }
    }
    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

/// Rewrites `while` loops that hold a suspension as `loop { if cond { body } else { break } }`.
pub(crate) fn desugar_while(body: &mut Block) {
    DesugarWhile.visit_block_mut(body);
}

// ----- resume code -----

/// How resume code is being built.
pub(crate) struct Flags {
    /// Loops rebuilt so far (their labels are numbered).
    n: usize,
    /// What the suspension's marker becomes: the answer (or the sub-flow's output) read by
    /// the code that resumes there.
    take: Option<Expr>,
    /// Leave out a loop's re-entry after a resumed iteration that always leaves it (the
    /// code that runs). Liveness keeps it, so that what a state holds does not depend on it.
    prune: bool,
}

impl Flags {
    pub(crate) fn new(prune: bool) -> Self {
        Self {
            n: 0,
            take: None,
            prune,
        }
    }

    /// Resume code in which the marker becomes `take` (by default the slot the step
    /// function's arm filled: `__botmesh_resumed.__take()`).
    pub(crate) fn taking(mut self, take: Expr) -> Self {
        self.take = Some(take);
        self
    }
}

/// Rebuilds the rest of `stmts` from the statement that holds marker `k`.
pub(crate) fn resume_stmts(stmts: &[Stmt], k: usize, flags: &mut Flags) -> Vec<Stmt> {
    let Some(i) = stmts.iter().position(|s| stmt_has(s, k)) else {
        return Vec::new();
    };
    let mut out = vec![resume_stmt(&stmts[i], k, flags)];
    out.extend(stmts[i + 1..].iter().cloned());
    out
}

pub(crate) fn resume_stmt(s: &Stmt, k: usize, flags: &mut Flags) -> Stmt {
    match s {
        Stmt::Local(l) => {
            let mut l = l.clone();
            if let Some(init) = &mut l.init {
                if expr_has(&init.expr, k) {
                    *init.expr = resume_expr(&init.expr, k, flags);
                } else if let Some((_, els)) = &init.diverge {
                    if expr_has(els, k) {
                        return Stmt::Expr(resume_expr(els, k, flags), None);
                    }
                }
            }
            Stmt::Local(l)
        }
        Stmt::Expr(e, semi) => Stmt::Expr(resume_expr(e, k, flags), *semi),
        other => other.clone(),
    }
}

fn block_expr(stmts: Vec<Stmt>) -> Expr {
    syn::parse_quote!({ #(#stmts)* })
}

fn resume_expr(e: &Expr, k: usize, flags: &mut Flags) -> Expr {
    if marker_id(e) == Some(k) {
        return match &flags.take {
            Some(take) => take.clone(),
            None => syn::parse_quote!(__botmesh_resumed.__take()),
        };
    }
    let mut e = e.clone();
    match &mut e {
        Expr::Await(a) => *a.base = resume_expr(&a.base, k, flags),
        Expr::Try(t) => *t.expr = resume_expr(&t.expr, k, flags),
        Expr::MethodCall(m) => *m.receiver = resume_expr(&m.receiver, k, flags),
        Expr::Field(f) => *f.base = resume_expr(&f.base, k, flags),
        Expr::Paren(p) => *p.expr = resume_expr(&p.expr, k, flags),
        Expr::Group(g) => *g.expr = resume_expr(&g.expr, k, flags),
        Expr::Cast(c) => *c.expr = resume_expr(&c.expr, k, flags),
        Expr::Let(l) => *l.expr = resume_expr(&l.expr, k, flags),
        Expr::Assign(a) => *a.right = resume_expr(&a.right, k, flags),
        Expr::Return(r) => {
            if let Some(x) = &mut r.expr {
                **x = resume_expr(x, k, flags);
            }
        }
        Expr::Break(b) => {
            if let Some(x) = &mut b.expr {
                **x = resume_expr(x, k, flags);
            }
        }
        Expr::If(i) => {
            if expr_has(&i.cond, k) {
                *i.cond = resume_expr(&i.cond, k, flags);
            } else if markers_in_stmts(&i.then_branch.stmts).contains(&k) {
                return block_expr(resume_stmts(&i.then_branch.stmts, k, flags));
            } else if let Some((_, els)) = &i.else_branch {
                let inner = resume_expr(els, k, flags);
                return syn::parse_quote!({ #inner });
            }
        }
        Expr::Match(m) => {
            if expr_has(&m.expr, k) {
                *m.expr = resume_expr(&m.expr, k, flags);
            } else if let Some(arm) = m.arms.iter().find(|a| expr_has(&a.body, k)) {
                let inner = resume_expr(&arm.body, k, flags);
                return syn::parse_quote!({ #inner });
            }
        }
        Expr::Loop(l) => {
            flags.n += 1;
            let span = proc_macro2::Span::call_site();
            let first = syn::Lifetime::new(&format!("'__botmesh_first_{}", flags.n), span);
            let whole = syn::Lifetime::new(&format!("'__botmesh_loop_{}", flags.n), span);
            let mut rest = resume_stmts(&l.body.stmts, k, flags);
            let label = &l.label;
            let body = &l.body;
            if macros_hold_loop_control(&rest) {
                // A macro's `continue`/`break` cannot be retargeted (its tokens are opaque)
                // and would be refused in a labelled block: re-enter the loop through a
                // first-iteration flag instead (a local the rest moves then does not compile).
                let flag = quote::format_ident!("__botmesh_first_{}", flags.n);
                return syn::parse_quote!({
                    let mut #flag = true;
                    #label loop {
                        if #flag { #flag = false; #(#rest)* } else #body
                    }
                });
            }
            // The loop is entered again only when the resumed iteration can complete or
            // `continue`; its labels are written only where a `break` uses them.
            let lt = l.label.as_ref().map(|lb| &lb.name);
            let reenter =
                !flags.prune || !diverge::stmts_end(&rest) || diverge::continues(&rest, lt);
            let mut retarget = Retarget {
                first: first.clone(),
                whole: whole.clone(),
                label: l.label.as_ref().map(|lb| lb.name.ident.to_string()),
                depth: 0,
                used_first: false,
                used_whole: false,
            };
            for s in &mut rest {
                retarget.visit_stmt_mut(s);
            }
            let first_label = retarget.used_first.then(|| quote!(#first:));
            let whole_label = retarget.used_whole.then(|| quote!(#whole:));
            if reenter {
                return syn::parse_quote!(#whole_label {
                    #first_label { #(#rest)* }
                    #label loop #body
                });
            }
            return syn::parse_quote!(#whole_label { #(#rest)* });
        }
        Expr::Block(b) => {
            let rest = resume_stmts(&b.block.stmts, k, flags);
            let label = &b.label;
            return syn::parse_quote!(#label { #(#rest)* });
        }
        Expr::Unsafe(u) => {
            let rest = resume_stmts(&u.block.stmts, k, flags);
            return syn::parse_quote!(unsafe { #(#rest)* });
        }
        _ => {}
    }
    e
}

/// Whether `stmts` hold a macro call with `continue` or `break` among its tokens (a macro
/// whose own definition expands to them cannot be seen here: in a resumed iteration it is
/// refused by rustc, E0695, pointing at the macro).
fn macros_hold_loop_control(stmts: &[Stmt]) -> bool {
    fn tokens_hold(ts: proc_macro2::TokenStream) -> bool {
        ts.into_iter().any(|t| match t {
            proc_macro2::TokenTree::Ident(i) => i == "continue" || i == "break",
            proc_macro2::TokenTree::Group(g) => tokens_hold(g.stream()),
            _ => false,
        })
    }
    struct Find(bool);
    impl<'a> Visit<'a> for Find {
        fn visit_macro(&mut self, m: &'a syn::Macro) {
            self.0 |= tokens_hold(m.tokens.clone());
        }
    }
    let mut f = Find(false);
    for s in stmts {
        f.visit_stmt(s);
    }
    f.0
}

/// Points the `break`s and `continue`s of a loop's first, resumed iteration (taken out of the
/// loop) at the blocks that stand for it: `continue` (unlabelled at this loop's level, or with
/// its label) becomes `break 'first`, `break` becomes `break 'whole` (its value kept). Nested
/// loops' own unlabelled ones, closures and async blocks are left alone.
struct Retarget {
    first: syn::Lifetime,
    whole: syn::Lifetime,
    label: Option<String>,
    depth: usize,
    used_first: bool,
    used_whole: bool,
}

impl Retarget {
    fn ours(&self, label: Option<&syn::Lifetime>) -> bool {
        match label {
            None => self.depth == 0,
            Some(l) => self.label.as_deref() == Some(&l.ident.to_string()),
        }
    }

    fn nested(&mut self, f: impl FnOnce(&mut Self)) {
        self.depth += 1;
        f(self);
        self.depth -= 1;
    }
}

impl VisitMut for Retarget {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        match e {
            Expr::Continue(c) if self.ours(c.label.as_ref()) => {
                let first = &self.first;
                self.used_first = true;
                *e = syn::parse_quote!(break #first);
            }
            Expr::Break(b) if self.ours(b.label.as_ref()) => {
                b.label = Some(self.whole.clone());
                self.used_whole = true;
                if let Some(x) = &mut b.expr {
                    self.visit_expr_mut(x);
                }
            }
            Expr::Loop(l) => self.nested(|r| r.visit_block_mut(&mut l.body)),
            Expr::While(w) => {
                self.visit_expr_mut(&mut w.cond);
                self.nested(|r| r.visit_block_mut(&mut w.body));
            }
            Expr::ForLoop(f) => {
                self.visit_expr_mut(&mut f.expr);
                self.nested(|r| r.visit_block_mut(&mut f.body));
            }
            Expr::Closure(_) | Expr::Async(_) => {}
            _ => visit_mut::visit_expr_mut(self, e),
        }
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

// ----- forward code -----

/// The marker at the head of an expression (evaluated before anything else in it).
pub(crate) fn direct_marker(e: &Expr) -> Option<usize> {
    if let Some(k) = marker_id(e) {
        return Some(k);
    }
    match e {
        Expr::Await(a) => direct_marker(&a.base),
        Expr::Try(t) => direct_marker(&t.expr),
        Expr::MethodCall(m) => direct_marker(&m.receiver),
        Expr::Field(f) => direct_marker(&f.base),
        Expr::Paren(p) => direct_marker(&p.expr),
        Expr::Group(g) => direct_marker(&g.expr),
        Expr::Cast(c) => direct_marker(&c.expr),
        Expr::Let(l) => direct_marker(&l.expr),
        Expr::Assign(a) => direct_marker(&a.right),
        Expr::If(i) => direct_marker(&i.cond),
        Expr::Match(m) => direct_marker(&m.expr),
        Expr::Return(r) => r.expr.as_deref().and_then(direct_marker),
        Expr::Break(b) => b.expr.as_deref().and_then(direct_marker),
        _ => None,
    }
}

pub(crate) fn direct_marker_stmt(s: &Stmt) -> Option<usize> {
    match s {
        Stmt::Local(l) => l.init.as_ref().and_then(|i| direct_marker(&i.expr)),
        Stmt::Expr(e, _) => direct_marker(e),
        _ => None,
    }
}

/// `s` with the marker of suspension `k` replaced by `with`.
pub(crate) fn replace_marker(mut s: Stmt, k: usize, with: &Expr) -> Stmt {
    struct Replace<'a>(usize, &'a Expr);
    impl VisitMut for Replace<'_> {
        fn visit_expr_mut(&mut self, e: &mut Expr) {
            if marker_id(e) == Some(self.0) {
                *e = self.1.clone();
            } else {
                visit_mut::visit_expr_mut(self, e);
            }
        }
        fn visit_item_mut(&mut self, _: &mut syn::Item) {}
    }
    Replace(k, with).visit_stmt_mut(&mut s);
    s
}

/// Replaces suspensions by `suspend(k)` (a diverging block) and drops what follows them.
pub(crate) fn forward_stmts(stmts: Vec<Stmt>, suspend: &dyn Fn(usize) -> Expr) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        if !stmt_has_any(&s) {
            out.push(s);
            continue;
        }
        // A `mut` local of this list may be mutated only after the suspension, by another
        // state's code.
        allow_unused_mut(&mut out);
        if let Some(k) = direct_marker_stmt(&s) {
            out.push(Stmt::Expr(suspend(k), None));
            break;
        }
        let lowered = match s {
            Stmt::Local(mut l) => {
                if let Some(init) = &mut l.init {
                    *init.expr = forward_expr(*init.expr.clone(), suspend);
                    if let Some((_, els)) = &mut init.diverge {
                        **els = forward_expr((**els).clone(), suspend);
                    }
                }
                Stmt::Local(l)
            }
            Stmt::Expr(e, semi) => Stmt::Expr(forward_expr(e, suspend), semi),
            other => other,
        };
        // What follows a statement that always suspends or leaves is never run.
        let done = diverge::stmt_ends(&lowered);
        out.push(unbind_diverging(lowered));
        if done {
            break;
        }
    }
    out
}

/// A `let` whose value never comes (its initializer always suspends or leaves) binds
/// nothing: its initializer alone, so that the name is not reported unused.
pub(crate) fn unbind_diverging(s: Stmt) -> Stmt {
    match s {
        Stmt::Local(l)
            if l.init
                .as_ref()
                .is_some_and(|i| i.diverge.is_none() && diverge::ends(&i.expr)) =>
        {
            let init = l.init.map(|i| i.expr);
            Stmt::Expr(syn::parse_quote!(#init), Some(Default::default()))
        }
        other => other,
    }
}

/// `#[allow(unused_mut)]` on the `mut` locals of `stmts`: code after them, which another
/// state's code may hold, mutates them.
pub(crate) fn allow_unused_mut(stmts: &mut [Stmt]) {
    for prev in stmts {
        if let Stmt::Local(l) = prev {
            let mut bs = Vec::new();
            crate::liveness::pat_bindings(&l.pat, None, &mut bs);
            let allowed = l
                .attrs
                .iter()
                .any(|a| a.to_token_stream().to_string().contains("unused_mut"));
            if !allowed && bs.iter().any(|b| b.mutable) {
                l.attrs.push(syn::parse_quote!(#[allow(unused_mut)]));
            }
        }
    }
}

fn forward_block(b: &mut Block, suspend: &dyn Fn(usize) -> Expr) {
    b.stmts = forward_stmts(std::mem::take(&mut b.stmts), suspend);
}

fn forward_expr(mut e: Expr, suspend: &dyn Fn(usize) -> Expr) -> Expr {
    if !expr_has_any(&e) {
        return e;
    }
    if let Some(k) = direct_marker(&e) {
        return suspend(k);
    }
    match &mut e {
        Expr::Await(a) => *a.base = forward_expr(*a.base.clone(), suspend),
        Expr::Try(t) => *t.expr = forward_expr(*t.expr.clone(), suspend),
        Expr::MethodCall(m) => *m.receiver = forward_expr(*m.receiver.clone(), suspend),
        Expr::Field(f) => *f.base = forward_expr(*f.base.clone(), suspend),
        Expr::Paren(p) => *p.expr = forward_expr(*p.expr.clone(), suspend),
        Expr::Group(g) => *g.expr = forward_expr(*g.expr.clone(), suspend),
        Expr::Cast(c) => *c.expr = forward_expr(*c.expr.clone(), suspend),
        Expr::Assign(a) => *a.right = forward_expr(*a.right.clone(), suspend),
        Expr::Return(r) => {
            if let Some(x) = &mut r.expr {
                **x = forward_expr((**x).clone(), suspend);
            }
        }
        Expr::Break(b) => {
            if let Some(x) = &mut b.expr {
                **x = forward_expr((**x).clone(), suspend);
            }
        }
        Expr::If(i) => {
            forward_block(&mut i.then_branch, suspend);
            if let Some((_, els)) = &mut i.else_branch {
                **els = forward_expr((**els).clone(), suspend);
            }
        }
        Expr::Match(m) => {
            for arm in &mut m.arms {
                *arm.body = forward_expr(*arm.body.clone(), suspend);
            }
        }
        Expr::Loop(l) => {
            forward_block(&mut l.body, suspend);
            let label = l.label.as_ref().map(|lb| lb.name.clone());
            if diverge::stmts_end(&l.body.stmts)
                && !diverge::continues(&l.body.stmts, label.as_ref())
            {
                return once(l.body.clone(), label);
            }
            if label.is_some_and(|lb| !diverge::mentions_label(&l.body.stmts, &lb)) {
                l.label = None;
            }
        }
        Expr::While(w) => forward_block(&mut w.body, suspend),
        Expr::Block(b) => {
            forward_block(&mut b.block, suspend);
            if b.label
                .as_ref()
                .is_some_and(|lb| !diverge::mentions_label(&b.block.stmts, &lb.name))
            {
                b.label = None;
            }
        }
        Expr::Unsafe(u) => forward_block(&mut u.block, suspend),
        _ => {}
    }
    e
}

/// A loop whose lowered body never reaches its end nor continues runs at most once: written
/// as a block (a labelled one when a `break` leaves it), so that it does not read as a loop
/// that never loops.
fn once(mut body: Block, label: Option<syn::Lifetime>) -> Expr {
    let label = label
        .unwrap_or_else(|| syn::Lifetime::new("'__botmesh_once", proc_macro2::Span::call_site()));
    let mut own = OwnBreaks {
        label: &label,
        depth: 0,
    };
    own.visit_block_mut(&mut body);
    if diverge::mentions_label(&body.stmts, &label) {
        syn::parse_quote!(#label: #body)
    } else {
        syn::parse_quote!(#body)
    }
}

/// Names the loop's label on its own unlabelled `break`s.
struct OwnBreaks<'l> {
    label: &'l syn::Lifetime,
    depth: usize,
}

impl VisitMut for OwnBreaks<'_> {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        match e {
            Expr::Break(b) if b.label.is_none() && self.depth == 0 => {
                b.label = Some(self.label.clone());
                if let Some(x) = &mut b.expr {
                    self.visit_expr_mut(x);
                }
            }
            Expr::Loop(_) | Expr::While(_) | Expr::ForLoop(_) => {
                self.depth += 1;
                visit_mut::visit_expr_mut(self, e);
                self.depth -= 1;
            }
            Expr::Closure(_) | Expr::Async(_) => {}
            _ => visit_mut::visit_expr_mut(self, e),
        }
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}
