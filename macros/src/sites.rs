//! Sites and shapes: the compile-time site ids of sends and effects (`<flow>/<state>/s<n>`,
//! `<flow>/<state>/e<n>`, numbered in source order within each state's code, also inside
//! macro calls whose arguments parse as expressions such as `join!`), the layout hash, and
//! the per-state analysis the Mermaid graph shows (which suspensions a state reaches, whether
//! it can end).

use std::collections::BTreeSet;

use quote::ToTokens;
use syn::visit::Visit;
use syn::visit_mut::{self, VisitMut};
use syn::{Expr, Ident, Stmt};

use crate::{lower, parse};

pub(crate) fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Gives send and effect calls on `cx` their compile-time site ids (also inside macro calls
/// whose arguments parse as expressions, e.g. `join!`).
pub(crate) struct Sites<'a> {
    pub(crate) cx: &'a Ident,
    pub(crate) prefix: String,
    pub(crate) sends: usize,
    pub(crate) effects: usize,
}

impl VisitMut for Sites<'_> {
    fn visit_expr_method_call_mut(&mut self, m: &mut syn::ExprMethodCall) {
        if parse::is_cx(&m.receiver, self.cx) {
            let site = if m.method == "send" {
                self.sends += 1;
                Some((format!("{}/s{}", self.prefix, self.sends), "__send_at"))
            } else if m.method == "effect" {
                self.effects += 1;
                Some((format!("{}/e{}", self.prefix, self.effects), "__effect_at"))
            } else {
                None
            };
            if let Some((site, method)) = site {
                m.method = Ident::new(method, m.method.span());
                let lit = syn::LitStr::new(&site, m.method.span());
                m.args.insert(0, syn::parse_quote!(#lit));
            }
        }
        visit_mut::visit_expr_method_call_mut(self, m);
    }

    fn visit_macro_mut(&mut self, mac: &mut syn::Macro) {
        let parser = syn::punctuated::Punctuated::<Expr, syn::Token![,]>::parse_terminated;
        if let Ok(mut exprs) = syn::parse::Parser::parse2(parser, mac.tokens.clone()) {
            let before = (self.sends, self.effects);
            for e in exprs.iter_mut() {
                self.visit_expr_mut(e);
            }
            if before != (self.sends, self.effects) {
                mac.tokens = exprs.into_token_stream();
            }
        }
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
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
pub(crate) fn analyze(stmts: &[Stmt]) -> (Vec<usize>, bool) {
    let reached = std::cell::RefCell::new(Vec::new());
    let record = |k: usize| -> Expr {
        reached.borrow_mut().push(k);
        syn::parse_quote!({ __botmesh_suspended!() })
    };
    let fwd = lower::forward_stmts(stmts.to_vec(), &record);
    let mut f = EndFinder::default();
    for s in &fwd {
        f.visit_stmt(s);
    }
    let last_is_suspend = matches!(fwd.last(), Some(Stmt::Expr(Expr::Block(b), None)) if b.block.stmts.len() == 1 && b.to_token_stream().to_string().contains("__botmesh_suspended"));
    let mut seen = BTreeSet::new();
    let reached: Vec<usize> = reached
        .into_inner()
        .into_iter()
        .filter(|k| seen.insert(*k))
        .collect();
    (reached, f.0 || !last_is_suspend)
}
