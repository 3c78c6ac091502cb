//! Validate: finds the suspension points of a flow body (`cx.ask(…).await`,
//! `cx.call(…).await`), checks that each stands where it can be lowered, numbers them in
//! source order and replaces each by a marker (`__botmesh_suspend!(k)`) that `lower` splits at.
//! Also rewrites `return e` into `return __done(e)` (the step's return type).
//!
//! Where an ask may stand: at the head of a statement's expression (`let x = ask…`,
//! `match ask… {}`, `if ask… {}`, `ask…;`), possibly inside `if`/`match`/`loop`/`while`/block
//! bodies that themselves stand at such a head. Anything else is an error with its fix:
//! an operand or argument (bind with `let` first), a closure, an async block, a `for` loop,
//! a macro call, a match guard, or an ask that is not awaited.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote};
use syn::visit_mut::{self, VisitMut};
use syn::{Block, Expr, Ident, Pat, Stmt};

use crate::errors::Errors;
use crate::identity::{self, Draft, Namer, SiteKind};

/// The marker macro that stands for suspension point `k` after validation.
pub(crate) const MARKER: &str = "__botmesh_suspend";

/// What a suspension point does.
#[cfg_attr(test, derive(Debug))]
pub(crate) enum Kind {
    /// `cx.ask(…)…​.await`: the chain without `.await`, and its answer-side methods.
    Ask {
        chain: Expr,
        answer_side: Vec<TokenStream>,
    },
    /// `cx.call(target).await`: the call expression and the callee's type path.
    Call { call: Expr, callee: syn::Path },
}

/// One suspension point.
#[cfg_attr(test, derive(Debug))]
pub(crate) struct Suspension {
    pub(crate) id: usize,
    pub(crate) kind: Kind,
    #[allow(dead_code)]
    pub(crate) span: Span,
    /// A short label for diagrams and messages: the prompt when it is a literal.
    pub(crate) label: String,
    /// What identifies it (see `identity`).
    pub(crate) draft: Draft,
    /// Its identity: the state's name in checkpoints, the ask's key.
    pub(crate) ident: String,
}

const PROMPT_SIDE: &[&str] = &["buttons", "idle", "key", "id"];
pub(crate) const ANSWER_SIDE: &[&str] = &["validate", "validate_with", "parse"];

#[derive(Clone, Copy, PartialEq)]
enum Pos {
    Head,
    NotHead,
}

struct Walker<'a> {
    cx: &'a Ident,
    errors: &'a Errors,
    found: Vec<Suspension>,
    namer: Namer,
}

/// Finds `cx.ask(…)` / `cx.call(…)` at the root of a method chain: (root method, span).
fn chain_root<'e>(e: &'e Expr, cx: &Ident) -> Option<(&'e Ident, Vec<&'e syn::ExprMethodCall>)> {
    let mut calls = Vec::new();
    let mut cur = e;
    loop {
        match cur {
            Expr::MethodCall(m) => {
                calls.push(m);
                if crate::parse::is_cx(&m.receiver, cx) {
                    return (m.method == "ask" || m.method == "call").then_some((&m.method, calls));
                }
                cur = &m.receiver;
            }
            Expr::Paren(p) => cur = &p.expr,
            _ => return None,
        }
    }
}

fn lit_label(e: &Expr) -> Option<String> {
    match e {
        Expr::Lit(l) => match &l.lit {
            syn::Lit::Str(s) => Some(s.value()),
            _ => None,
        },
        _ => None,
    }
}

impl Walker<'_> {
    fn not_head_msg(&self) -> &'static str {
        "an ask cannot be a call's argument or an operand: the flow stops at an ask and goes on with its answer in a later step, and the expression around it cannot be cut there (what it computed before the ask would be lost); bind the answer with `let` first (`let answer = cx.ask(…).await?;`) and use `answer` here"
    }

    /// Registers a suspension (`e` is `chain.await`) and returns its marker.
    fn suspension(&mut self, base: &Expr, await_span: Span) -> Option<Expr> {
        let (root, calls) = chain_root(base, self.cx)?;
        let id = self.found.len() + 1;
        let root_call = calls.last()?;
        let span = root.span();
        let mut named = None;
        let kind = if root == "ask" {
            let mut answer_side = Vec::new();
            for m in calls.iter().rev().skip(1) {
                let name = m.method.to_string();
                if name == "id" {
                    match identity::literal_name(&m.args, self.errors) {
                        Some(name) => named = Some(name),
                        None => self.errors.spanned(
                            &m.args,
                            "`.id(…)` names an ask with a string literal (`.id(\"age\")`): the name is decided at compile time",
                        ),
                    }
                }
                if ANSWER_SIDE.contains(&name.as_str()) {
                    let method = &m.method;
                    let turbofish = &m.turbofish;
                    let args = &m.args;
                    answer_side.push(quote!(.#method #turbofish (#args)));
                } else if !PROMPT_SIDE.contains(&name.as_str()) {
                    self.errors.at(
                        m.method.span(),
                        format!("unknown ask option `{name}`: an ask takes `.buttons(…)`, `.idle(…)`, `.key(…)`, `.id(\"name\")`, `.validate(f, \"re-ask\")`, `.validate_with(f)` or `.parse::<T>(\"re-ask\")`"),
                    );
                }
            }
            Kind::Ask {
                chain: base.clone(),
                answer_side,
            }
        } else {
            let target = root_call.args.first();
            let callee = match target {
                Some(Expr::Path(p)) if root_call.args.len() == 1 => Some(p.path.clone()),
                Some(Expr::Call(c)) if root_call.args.len() == 1 => match &*c.func {
                    Expr::Path(p) => Some(p.path.clone()),
                    _ => None,
                },
                _ => None,
            };
            let Some(callee) = callee else {
                self.errors.spanned(&root_call.args, "`cx.call` takes a flow by its name: `cx.call(other_flow)` or `cx.call(other_flow(args))`");
                return None;
            };
            if calls.len() > 1 {
                self.errors.at(
                    calls[0].method.span(),
                    "`cx.call(…)` takes no options: write `cx.call(flow).await`",
                );
            }
            Kind::Call {
                call: base.clone(),
                callee,
            }
        };
        let label = match &kind {
            Kind::Ask { .. } => root_call
                .args
                .first()
                .and_then(lit_label)
                .unwrap_or_else(|| format!("ask {id}")),
            Kind::Call { callee, .. } => {
                format!("call {}", quote!(#callee).to_string().replace(' ', ""))
            }
        };
        // The prompt's arguments are ordinary expressions: an ask there is not at a head.
        let mut scan = Scan {
            cx: self.cx,
            errors: self.errors,
            msg: Some(self.not_head_msg()),
        };
        let mut chain = base.clone();
        if let Some((_, calls)) = chain_root_mut(&mut chain, self.cx) {
            for args in calls {
                for a in args {
                    scan.visit_expr_mut(a);
                }
            }
        }
        let _ = await_span;
        let draft = Draft {
            kind: if root == "ask" {
                SiteKind::Ask
            } else {
                SiteKind::Call
            },
            content: identity::canonical(root_call.args.to_token_stream()),
            span: named.as_ref().map_or(span, |(_, s)| *s),
            name: named.map(|(n, _)| n),
        };
        let ident = self.namer.name(&draft);
        self.found.push(Suspension {
            id,
            kind,
            span,
            label,
            draft,
            ident,
        });
        let lit = proc_macro2::Literal::usize_unsuffixed(id);
        let marker = Ident::new(MARKER, span);
        Some(syn::parse_quote!(#marker!(#lit)))
    }

    fn block(&mut self, b: &mut Block, pos: Pos) {
        for s in &mut b.stmts {
            self.stmt(s, pos);
        }
    }

    fn stmt(&mut self, s: &mut Stmt, pos: Pos) {
        match s {
            Stmt::Local(l) => {
                if let Some(init) = &mut l.init {
                    self.expr(&mut init.expr, pos);
                    if let Some((_, els)) = &mut init.diverge {
                        self.scan(els, LET_ELSE_MSG);
                    }
                }
            }
            Stmt::Expr(e, _) => self.expr(e, pos),
            Stmt::Macro(m) => scan_macro(&m.mac, self.cx, self.errors),
            Stmt::Item(_) => {}
        }
    }

    fn scan(&self, e: &mut Expr, msg: &'static str) {
        Scan {
            cx: self.cx,
            errors: self.errors,
            msg: Some(msg),
        }
        .visit_expr_mut(e);
    }

    fn expr(&mut self, e: &mut Expr, pos: Pos) {
        let not_head = self.not_head_msg();
        match e {
            Expr::Await(a) if chain_root(&a.base, self.cx).is_some() => {
                if pos == Pos::NotHead {
                    if let Some((root, _)) = chain_root(&a.base, self.cx) {
                        self.errors.at(root.span(), not_head);
                    }
                    return;
                }
                let span = a.await_token.span;
                if let Some(marker) = self.suspension(&a.base.clone(), span) {
                    *e = marker;
                }
            }
            Expr::Await(a) => self.expr(&mut a.base, pos),
            Expr::Try(t) => self.expr(&mut t.expr, pos),
            Expr::MethodCall(m) => {
                if crate::parse::is_cx(&m.receiver, self.cx)
                    && (m.method == "ask" || m.method == "call")
                {
                    self.errors.at(
                        m.method.span(),
                        format!(
                            "`cx.{}(…)` must be awaited where it stands: `cx.{}(…).await`",
                            m.method, m.method
                        ),
                    );
                    return;
                }
                self.expr(&mut m.receiver, pos);
                for a in &mut m.args {
                    self.scan(a, not_head);
                }
            }
            Expr::Field(f) => self.expr(&mut f.base, pos),
            Expr::Paren(p) => self.expr(&mut p.expr, pos),
            Expr::Group(g) => self.expr(&mut g.expr, pos),
            Expr::Cast(c) => self.expr(&mut c.expr, pos),
            Expr::Let(l) => self.expr(&mut l.expr, pos),
            Expr::Assign(a) => {
                self.scan(&mut a.left, not_head);
                self.expr(&mut a.right, pos);
            }
            Expr::Return(r) => {
                if let Some(x) = &mut r.expr {
                    self.expr(x, pos);
                }
            }
            Expr::Break(b) => {
                if let Some(x) = &mut b.expr {
                    self.expr(x, pos);
                }
            }
            Expr::If(i) => {
                self.expr(&mut i.cond, pos);
                self.block(&mut i.then_branch, pos);
                if let Some((_, els)) = &mut i.else_branch {
                    self.expr(els, pos);
                }
            }
            Expr::Match(m) => {
                self.expr(&mut m.expr, pos);
                for arm in &mut m.arms {
                    if let Pat::Guard(g) = &mut arm.pat {
                        self.scan(&mut g.guard, "an ask cannot be lowered inside a match guard: ask before the `match` and bind the answer with `let`");
                    }
                    self.expr(&mut arm.body, pos);
                }
            }
            Expr::Loop(l) => self.block(&mut l.body, pos),
            Expr::While(w) => {
                self.expr(&mut w.cond, pos);
                self.block(&mut w.body, pos);
            }
            Expr::Block(b) => self.block(&mut b.block, pos),
            Expr::Unsafe(u) => self.block(&mut u.block, pos),
            Expr::ForLoop(f) => {
                self.scan(&mut f.expr, not_head);
                Scan {
                    cx: self.cx,
                    errors: self.errors,
                    msg: Some(FOR_MSG),
                }
                .visit_block_mut(&mut f.body);
            }
            other => self.scan(other, not_head),
        }
    }
}

const FOR_MSG: &str = "an ask in a `for` loop needs the loop to go over an owned local whose type is written: the flow keeps the items it has not reached yet in its state across the ask; bind them first and loop over that local (`let items: Vec<Item> = …; for item in items { … }`)";
const CLOSURE_MSG: &str = "an ask cannot be lowered inside a closure: a flow suspends only in its own body; ask outside the closure, bind the answer with `let`, and use it inside";
const ASYNC_MSG: &str = "an ask cannot be lowered inside an async block: a flow suspends only in its own body; ask outside the block and bind the answer with `let` (use `cx.effect(async { … })` only for side effects)";
const LET_ELSE_MSG: &str = "an ask cannot be lowered in the `else` of a `let … else`: write a `match` instead (`let x = match … { Some(v) => v, None => { let a = cx.ask(…).await?; …; return Ok(()); } };`)";
const MACRO_MSG: &str = "an ask cannot be lowered inside a macro call: bind its answer with `let` first (`let answer = cx.ask(…).await?;`) and pass `answer` to the macro";

/// Reports every ask below a position where none can be lowered.
struct Scan<'a> {
    cx: &'a Ident,
    errors: &'a Errors,
    msg: Option<&'static str>,
}

impl VisitMut for Scan<'_> {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        if let Expr::MethodCall(m) = e {
            if crate::parse::is_cx(&m.receiver, self.cx)
                && (m.method == "ask" || m.method == "call")
            {
                if let Some(msg) = self.msg {
                    self.errors.at(m.method.span(), msg);
                }
                for a in &mut m.args {
                    self.visit_expr_mut(a);
                }
                return;
            }
        }
        visit_mut::visit_expr_mut(self, e);
    }

    fn visit_expr_closure_mut(&mut self, c: &mut syn::ExprClosure) {
        let saved = self.msg.replace(CLOSURE_MSG);
        visit_mut::visit_expr_closure_mut(self, c);
        self.msg = saved;
    }

    fn visit_expr_async_mut(&mut self, a: &mut syn::ExprAsync) {
        let saved = self.msg.replace(ASYNC_MSG);
        visit_mut::visit_expr_async_mut(self, a);
        self.msg = saved;
    }

    fn visit_expr_for_loop_mut(&mut self, f: &mut syn::ExprForLoop) {
        self.visit_expr_mut(&mut f.expr);
        let saved = self.msg.replace(FOR_MSG);
        self.visit_block_mut(&mut f.body);
        self.msg = saved;
    }

    fn visit_macro_mut(&mut self, m: &mut syn::Macro) {
        scan_macro(m, self.cx, self.errors);
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

/// Reports `cx.ask(` / `cx.call(` inside a macro's tokens.
fn scan_macro(m: &syn::Macro, cx: &Ident, errors: &Errors) {
    fn walk(ts: TokenStream, cx: &Ident, errors: &Errors) {
        let tokens: Vec<TokenTree> = ts.into_iter().collect();
        for (i, t) in tokens.iter().enumerate() {
            match t {
                TokenTree::Group(g) => walk(g.stream(), cx, errors),
                TokenTree::Ident(id) if id == "ask" || id == "call" => {
                    let dot = i >= 1
                        && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '.');
                    let recv = i >= 2 && matches!(&tokens[i - 2], TokenTree::Ident(r) if r == cx);
                    if dot && recv {
                        errors.at(id.span(), MACRO_MSG);
                    }
                }
                _ => {}
            }
        }
    }
    walk(m.tokens.clone(), cx, errors);
}

fn chain_root_mut<'e>(
    e: &'e mut Expr,
    cx: &Ident,
) -> Option<(
    (),
    Vec<&'e mut syn::punctuated::Punctuated<Expr, syn::Token![,]>>,
)> {
    let mut out = Vec::new();
    let mut cur = e;
    loop {
        match cur {
            Expr::MethodCall(m) => {
                let is_root = crate::parse::is_cx(&m.receiver, cx);
                out.push(&mut m.args);
                if is_root {
                    return Some(((), out));
                }
                cur = &mut m.receiver;
            }
            Expr::Paren(p) => cur = &mut p.expr,
            _ => return None,
        }
    }
}

/// Rewrites `return e` into `return __done(e)` (`::botmesh::flow`, which the step
/// function imports under that name; not inside closures,
/// async blocks or nested items).
struct Returns;

impl VisitMut for Returns {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        if let Expr::Return(r) = e {
            if let Some(x) = &mut r.expr {
                self.visit_expr_mut(x);
                let inner = x.clone();
                **x = syn::parse_quote!(__done(#inner));
            }
            return;
        }
        visit_mut::visit_expr_mut(self, e);
    }
    fn visit_expr_closure_mut(&mut self, _: &mut syn::ExprClosure) {}
    fn visit_expr_async_mut(&mut self, _: &mut syn::ExprAsync) {}
    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

/// Validates the body in place: suspensions become markers; returns them in source order.
pub(crate) fn validate(body: &mut Block, cx: &Ident, errors: &Errors) -> Vec<Suspension> {
    Returns.visit_block_mut(body);
    let mut w = Walker {
        cx,
        errors,
        found: Vec::new(),
        namer: Namer::default(),
    };
    w.block(body, Pos::Head);
    w.found
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn run(body: Block) -> (Vec<Suspension>, Vec<String>, Block) {
        let e = Errors::default();
        let mut body = body;
        let cx: Ident = parse_quote!(cx);
        let s = validate(&mut body, &cx, &e);
        (s, e.messages(), body)
    }

    #[test]
    fn finds_asks_at_heads() {
        let (s, errs, body) = run(parse_quote!({
            let item: String = cx.ask("What?").await?.text().to_owned();
            let n: u32 = loop {
                match cx.ask("How many?").parse::<u32>("a number").await {
                    Ok(n) => break n,
                    Err(e) => return Err(e.into()),
                }
            };
            let r: u8 = cx.call(sub).await?;
            Ok(())
        }));
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].label, "What?");
        assert!(matches!(&s[1].kind, Kind::Ask { answer_side, .. } if answer_side.len() == 1));
        assert!(matches!(&s[2].kind, Kind::Call { .. }));
        assert_eq!(crate::lower::markers_in_stmts(&body.stmts), vec![1, 2, 3]);
    }

    #[test]
    fn rejects_asks_elsewhere() {
        let (_, errs, _) = run(parse_quote!({
            foo(cx.ask("a").await?);
            let f = || cx.ask("b");
            for x in 0..3 {
                let y = cx.ask("c").await?;
            }
            let g = async { cx.ask("d").await };
            println!("{}", cx.ask("e").await?.text());
            let h = cx.ask("f");
            Ok(())
        }));
        assert_eq!(errs.len(), 6, "{errs:?}");
        assert!(errs[0].contains("bind the answer with `let` first"));
        assert!(errs[1].contains("closure"));
        assert!(errs[2].contains("`for` loop"));
        assert!(errs[3].contains("async block"));
        assert!(errs[4].contains("macro call"));
        assert!(errs[5].contains("must be awaited"));
    }
}
