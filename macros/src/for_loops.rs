//! For loops: a `for` loop whose body holds an ask (or a sub-flow call) is rewritten, before
//! validation, into a loop over the items it has not reached yet, kept in a local, so that
//! they live in the flow's state across the ask:
//!
//! ```text
//! for x in items { body }          // `items` a local or parameter of written type `C`
//! ⇒
//! {
//!     let mut __botmesh_rest_items: ::botmesh::flow::Remaining<C> =
//!         ::botmesh::flow::Remaining::new(items);
//!     while let Some(__botmesh_item) = __botmesh_rest_items.next() {
//!         let x: <C as IntoIterator>::Item = __botmesh_item;
//!         body
//!     }
//! }
//! ```
//!
//! `while` loops are lowered as usual after that. The kept local is named after the iterated
//! local, so that adding another loop does not rename it. A loop over anything else (a
//! borrow, a call, a range) is left alone; validation then says what to write.

use std::collections::HashMap;

use syn::visit::{self, Visit};
use syn::visit_mut::{self, VisitMut};
use syn::{Block, Expr, Ident, Pat, Stmt, Type};

use crate::liveness::pat_bindings;
use crate::parse::Param;

/// Rewrites the `for` loops of `body` that hold a suspension and go over a typed local.
pub(crate) fn desugar_for(body: &mut Block, cx: &Ident, params: &[Param]) {
    let mut r = Rewrite {
        cx,
        scopes: vec![
            params
                .iter()
                .map(|p| (p.name.to_string(), Some(p.ty.clone())))
                .collect(),
        ],
    };
    r.visit_block_mut(body);
}

struct Rewrite<'a> {
    cx: &'a Ident,
    /// Locals in scope, innermost block last: name → written type.
    scopes: Vec<HashMap<String, Option<Type>>>,
}

impl Rewrite<'_> {
    fn type_of(&self, name: &str) -> Option<Type> {
        self.scopes
            .iter()
            .rev()
            .find_map(|s| s.get(name))
            .cloned()
            .flatten()
    }

    fn bind(&mut self, pat: &Pat, ty: Option<&Type>) {
        let mut bs = Vec::new();
        pat_bindings(pat, ty, &mut bs);
        if let Some(scope) = self.scopes.last_mut() {
            for b in bs {
                scope.insert(b.name.to_string(), b.ty);
            }
        }
    }
}

impl VisitMut for Rewrite<'_> {
    fn visit_block_mut(&mut self, b: &mut Block) {
        self.scopes.push(HashMap::new());
        for s in &mut b.stmts {
            match s {
                Stmt::Local(l) => {
                    if let Some(init) = &mut l.init {
                        self.visit_expr_mut(&mut init.expr);
                        if let Some((_, els)) = &mut init.diverge {
                            self.visit_expr_mut(els);
                        }
                    }
                    let pat = l.pat.clone();
                    self.bind(&pat, None);
                }
                other => self.visit_stmt_mut(other),
            }
        }
        self.scopes.pop();
    }

    fn visit_expr_mut(&mut self, e: &mut Expr) {
        visit_mut::visit_expr_mut(self, e);
        let Expr::ForLoop(f) = e else { return };
        if !holds_suspension(&f.body, self.cx) {
            return;
        }
        let Expr::Path(p) = &*f.expr else { return };
        let Some(items) = p.path.get_ident().cloned() else {
            return;
        };
        let Some(ty) = self.type_of(&items.to_string()) else {
            return;
        };
        let rest = quote::format_ident!(
            "__botmesh_rest_{}",
            items.to_string().trim_start_matches("r#")
        );
        let (label, pat, stmts) = (&f.label, &f.pat, &f.body.stmts);
        *e = syn::parse_quote!({
            let mut #rest: ::botmesh::flow::Remaining<#ty> = ::botmesh::flow::Remaining::new(#items);
            #label while let ::core::option::Option::Some(__botmesh_item) = #rest.next() {
                let #pat: <#ty as ::core::iter::IntoIterator>::Item = __botmesh_item;
                #(#stmts)*
            }
        });
    }

    fn visit_expr_closure_mut(&mut self, _: &mut syn::ExprClosure) {}
    fn visit_expr_async_mut(&mut self, _: &mut syn::ExprAsync) {}
    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

/// Whether `cx.ask(…)` or `cx.call(…)` stands in `b` (outside closures and async blocks).
fn holds_suspension(b: &Block, cx: &Ident) -> bool {
    struct Find<'a>(&'a Ident, bool);
    impl<'a> Visit<'a> for Find<'_> {
        fn visit_expr_method_call(&mut self, m: &'a syn::ExprMethodCall) {
            self.1 |= crate::parse::is_cx(&m.receiver, self.0)
                && (m.method == "ask" || m.method == "call");
            visit::visit_expr_method_call(self, m);
        }
        fn visit_expr_closure(&mut self, _: &'a syn::ExprClosure) {}
        fn visit_expr_async(&mut self, _: &'a syn::ExprAsync) {}
        fn visit_item(&mut self, _: &'a syn::Item) {}
    }
    let mut f = Find(cx, false);
    f.visit_block(b);
    f.1
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn rewrite(mut body: Block) -> Block {
        desugar_for(&mut body, &parse_quote!(cx), &[]);
        body
    }

    fn has_for(b: &Block) -> bool {
        struct F(bool);
        impl<'a> Visit<'a> for F {
            fn visit_expr_for_loop(&mut self, _: &'a syn::ExprForLoop) {
                self.0 = true;
            }
        }
        let mut f = F(false);
        f.visit_block(b);
        f.0
    }

    #[test]
    fn a_for_over_a_typed_local_that_asks_becomes_a_while() {
        let b = rewrite(parse_quote!({
            let items: Vec<String> = vec![];
            for item in items {
                let _a = cx.ask(item).await?;
            }
        }));
        assert!(!has_for(&b));
        let Stmt::Expr(Expr::Block(block), _) = &b.stmts[1] else {
            panic!("a block");
        };
        let Stmt::Local(l) = &block.block.stmts[0] else {
            panic!("the kept items");
        };
        let mut bs = Vec::new();
        pat_bindings(&l.pat, None, &mut bs);
        assert_eq!(bs[0].name, "__botmesh_rest_items");
        assert!(matches!(
            &block.block.stmts[1],
            Stmt::Expr(Expr::While(_), None)
        ));
    }

    #[test]
    fn other_for_loops_stay() {
        let b = rewrite(parse_quote!({
            let items: Vec<String> = vec![];
            for item in &items {
                let _a = cx.ask(item).await?;
            }
            let more = vec![1];
            for n in more {
                let _a = cx.ask(n).await?;
            }
            for n in items {
                cx.send(n).await?;
            }
        }));
        assert_eq!(b.stmts.len(), 5);
        assert!(
            b.stmts[1..]
                .iter()
                .all(|s| !matches!(s, Stmt::Expr(Expr::Block(_), _)))
        );
    }
}
