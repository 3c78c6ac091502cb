//! Sites and shapes: the site ids of sends and effects (`<flow>/<identity>`, see `identity`),
//! given once to the whole body before it is split (so a site repeated in several states'
//! code keeps one id; the runtime counts its uses within a step), also inside macro calls
//! whose arguments parse as expressions such as `join!`; and the per-state analysis the
//! Mermaid graph shows (which suspensions a state reaches, whether it can end, its sends).

use std::collections::BTreeSet;

use proc_macro2::Span;
use quote::ToTokens;
use syn::visit::Visit;
use syn::visit_mut::{self, VisitMut};
use syn::{Expr, Ident, Stmt};

use crate::errors::Errors;
use crate::identity::{self, Draft, Namer, SiteKind};
use crate::validate::MARKER;
use crate::{diverge, lower, parse};

/// Gives send and effect calls on `cx` their site ids: `cx.send(m)` becomes
/// `cx.__send_at("<flow>/<identity>", m)`. A send named `.id("…")` or `.key("…")` (a literal)
/// takes the name as its identity.
pub(crate) struct Sites<'a> {
    pub(crate) cx: &'a Ident,
    pub(crate) flow: &'a str,
    pub(crate) errors: &'a Errors,
    pub(crate) namer: Namer,
    /// Every site met, with its identity, in source order.
    pub(crate) found: Vec<(String, Draft)>,
    /// The name on the call being visited (`.id("…")` around `cx.send(…)`).
    next_name: Option<(String, Span)>,
}

impl<'a> Sites<'a> {
    pub(crate) fn new(cx: &'a Ident, flow: &'a str, errors: &'a Errors) -> Self {
        Self {
            cx,
            flow,
            errors,
            namer: Namer::default(),
            found: Vec::new(),
            next_name: None,
        }
    }

    fn is_send(&self, e: &Expr) -> bool {
        matches!(e, Expr::MethodCall(m) if m.method == "send" && parse::is_cx(&m.receiver, self.cx))
    }
}

impl VisitMut for Sites<'_> {
    fn visit_expr_method_call_mut(&mut self, m: &mut syn::ExprMethodCall) {
        let mut receiver_name = None;
        if (m.method == "id" || m.method == "key") && self.is_send(&m.receiver) {
            match identity::literal_name(&m.args, self.errors) {
                Some(name) => receiver_name = Some(name),
                None if m.method == "id" => self.errors.spanned(
                    &m.args,
                    "`.id(…)` names a site with a string literal (`.id(\"welcome\")`): the name is decided at compile time",
                ),
                None => {}
            }
        }
        if parse::is_cx(&m.receiver, self.cx) && (m.method == "send" || m.method == "effect") {
            let (kind, method) = if m.method == "send" {
                (SiteKind::Send, "__send_at")
            } else {
                (SiteKind::Effect, "__effect_at")
            };
            let named = self.next_name.take();
            let draft = Draft {
                kind,
                content: identity::canonical(m.args.to_token_stream()),
                span: named.as_ref().map_or(m.method.span(), |(_, s)| *s),
                name: named.map(|(n, _)| n),
            };
            let id = self.namer.name(&draft);
            let lit = syn::LitStr::new(&format!("{}/{id}", self.flow), m.method.span());
            self.found.push((id, draft));
            m.method = Ident::new(method, m.method.span());
            m.args.insert(0, syn::parse_quote!(#lit));
        }
        // The receiver is visited first: a send there takes the name.
        self.next_name = receiver_name;
        visit_mut::visit_expr_method_call_mut(self, m);
    }

    fn visit_macro_mut(&mut self, mac: &mut syn::Macro) {
        let parser = syn::punctuated::Punctuated::<Expr, syn::Token![,]>::parse_terminated;
        if let Ok(mut exprs) = syn::parse::Parser::parse2(parser, mac.tokens.clone()) {
            let before = self.found.len();
            for e in exprs.iter_mut() {
                self.visit_expr_mut(e);
            }
            if before != self.found.len() {
                mac.tokens = exprs.into_token_stream();
            }
        }
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

/// How many sends a state's code makes (its `__send_at` calls, also inside macro calls).
pub(crate) fn count_sends(stmts: &[Stmt]) -> usize {
    fn count(ts: proc_macro2::TokenStream) -> usize {
        ts.into_iter()
            .map(|t| match t {
                proc_macro2::TokenTree::Ident(i) if i == "__send_at" => 1,
                proc_macro2::TokenTree::Group(g) => count(g.stream()),
                _ => 0,
            })
            .sum()
    }
    stmts.iter().map(|s| count(s.to_token_stream())).sum()
}

#[derive(Default)]
struct EndFinder(bool);

impl<'a> Visit<'a> for EndFinder {
    fn visit_expr_return(&mut self, _: &'a syn::ExprReturn) {
        self.0 = true;
    }
    fn visit_expr_closure(&mut self, _: &'a syn::ExprClosure) {}
    fn visit_expr_async(&mut self, _: &'a syn::ExprAsync) {}
    fn visit_item(&mut self, _: &'a syn::Item) {}
}

/// The suspensions a state's code reaches (in order) and whether it can end.
pub(crate) fn reach(stmts: &[Stmt]) -> (Vec<usize>, bool) {
    let reached = std::cell::RefCell::new(Vec::new());
    let marker = syn::Ident::new(MARKER, proc_macro2::Span::call_site());
    let record = |k: usize| -> Expr {
        reached.borrow_mut().push(k);
        let k = proc_macro2::Literal::usize_unsuffixed(k);
        syn::parse_quote!(#marker!(#k))
    };
    let fwd = lower::forward_stmts(stmts.to_vec(), &record);
    let mut f = EndFinder::default();
    for s in &fwd {
        f.visit_stmt(s);
    }
    let mut seen = BTreeSet::new();
    let reached: Vec<usize> = reached
        .into_inner()
        .into_iter()
        .filter(|k| seen.insert(*k))
        .collect();
    (reached, f.0 || !diverge::stmts_end(&fwd))
}
