//! Diverge: whether control can leave a piece of lowered code at its end. Lowering uses it so
//! that generated code never follows code that cannot complete: a state's forward code stops
//! after a statement that always suspends or leaves, a loop is not re-entered after a resumed
//! iteration that always leaves it, and a segment hands its locals on only when it can
//! complete (see `step`). Rustc would otherwise warn, in the user's name, about unreachable
//! code the macro wrote.
//!
//! The answer is conservative: `ends` says true only when the code surely does not complete
//! (a `return`, `break` or `continue`, a `loop` that no `break` leaves, an `if` whose branches
//! all end, a `match` whose arms all end, a block holding such a statement, `panic!`-like
//! macros, a suspension marker: lowered, it returns). Anything it cannot see through counts
//! as completing.

use syn::visit::{self, Visit};
use syn::{Expr, Stmt};

use crate::lower::marker_id;

const DIVERGING_MACROS: &[&str] = &["panic", "unreachable", "todo", "unimplemented"];

/// Whether `stmts`, run in order, surely do not complete.
pub(crate) fn stmts_end(stmts: &[Stmt]) -> bool {
    stmts.iter().any(stmt_ends)
}

/// Whether a statement surely does not complete.
pub(crate) fn stmt_ends(s: &Stmt) -> bool {
    match s {
        Stmt::Local(l) => l.init.as_ref().is_some_and(|i| ends(&i.expr)),
        Stmt::Expr(e, _) => ends(e),
        Stmt::Macro(m) => macro_ends(&m.mac),
        Stmt::Item(_) => false,
    }
}

fn macro_ends(m: &syn::Macro) -> bool {
    m.path
        .segments
        .last()
        .is_some_and(|s| DIVERGING_MACROS.iter().any(|d| s.ident == d))
}

/// Whether an expression surely does not complete.
pub(crate) fn ends(e: &Expr) -> bool {
    match e {
        Expr::Return(_) | Expr::Break(_) | Expr::Continue(_) => true,
        Expr::Block(b) => {
            stmts_end(&b.block.stmts)
                && b.label
                    .as_ref()
                    .is_none_or(|l| !mentions_label(&b.block.stmts, &l.name))
        }
        Expr::Unsafe(u) => stmts_end(&u.block.stmts),
        Expr::Loop(l) => !breaks_out(&l.body.stmts, l.label.as_ref().map(|l| &l.name)),
        Expr::If(i) => {
            ends(&i.cond)
                || (stmts_end(&i.then_branch.stmts)
                    && i.else_branch.as_ref().is_some_and(|(_, e)| ends(e)))
        }
        Expr::Match(m) => {
            ends(&m.expr) || (!m.arms.is_empty() && m.arms.iter().all(|a| ends(&a.body)))
        }
        Expr::Macro(m) => macro_ends(&m.mac) || marker_id(e).is_some(),
        Expr::Await(a) => ends(&a.base),
        Expr::Try(t) => ends(&t.expr),
        Expr::MethodCall(m) => ends(&m.receiver),
        Expr::Field(f) => ends(&f.base),
        Expr::Paren(p) => ends(&p.expr),
        Expr::Group(g) => ends(&g.expr),
        Expr::Cast(c) => ends(&c.expr),
        Expr::Let(l) => ends(&l.expr),
        Expr::Assign(a) => ends(&a.right),
        _ => false,
    }
}

/// Whether a `break` in `stmts` may leave the loop whose body they are (an unlabelled one
/// outside nested loops, or one naming `label`).
pub(crate) fn breaks_out(stmts: &[Stmt], label: Option<&syn::Lifetime>) -> bool {
    jumps_out(stmts, label, false)
}

/// Whether a `continue` in `stmts` may go to the loop whose body they are.
pub(crate) fn continues(stmts: &[Stmt], label: Option<&syn::Lifetime>) -> bool {
    jumps_out(stmts, label, true)
}

/// Whether a `break` (a `continue` with `want_continue`) in `stmts` reaches their loop.
fn jumps_out(stmts: &[Stmt], label: Option<&syn::Lifetime>, want_continue: bool) -> bool {
    let mut f = Breaks {
        label,
        depth: 0,
        found: false,
        want_continue,
    };
    stmts.iter().for_each(|s| f.visit_stmt(s));
    f.found
}

fn holds_word(ts: proc_macro2::TokenStream, word: &str) -> bool {
    ts.into_iter().any(|t| match t {
        proc_macro2::TokenTree::Ident(i) => i == word,
        proc_macro2::TokenTree::Group(g) => holds_word(g.stream(), word),
        _ => false,
    })
}

/// Whether a `break` or `continue` in `stmts` names `label` (also inside macro calls).
pub(crate) fn mentions_label(stmts: &[Stmt], label: &syn::Lifetime) -> bool {
    struct Find<'l>(&'l syn::Lifetime, bool);
    impl<'a> Visit<'a> for Find<'_> {
        fn visit_lifetime(&mut self, l: &'a syn::Lifetime) {
            self.1 |= l.ident == self.0.ident;
        }
        fn visit_macro(&mut self, m: &'a syn::Macro) {
            self.1 |= m.tokens.to_string().contains(&self.0.to_string());
        }
        fn visit_item(&mut self, _: &'a syn::Item) {}
    }
    let mut f = Find(label, false);
    stmts.iter().for_each(|s| f.visit_stmt(s));
    f.1
}

struct Breaks<'l> {
    label: Option<&'l syn::Lifetime>,
    depth: usize,
    found: bool,
    want_continue: bool,
}

impl Breaks<'_> {
    fn ours(&self, label: Option<&syn::Lifetime>) -> bool {
        match label {
            None => self.depth == 0,
            Some(l) => self.label.is_some_and(|mine| mine.ident == l.ident),
        }
    }
}

impl<'a> Visit<'a> for Breaks<'_> {
    fn visit_expr(&mut self, e: &'a Expr) {
        match e {
            Expr::Break(b) if !self.want_continue && self.ours(b.label.as_ref()) => {
                self.found = true;
            }
            Expr::Continue(c) if self.want_continue && self.ours(c.label.as_ref()) => {
                self.found = true;
            }
            Expr::Loop(_) | Expr::While(_) | Expr::ForLoop(_) => {
                self.depth += 1;
                visit::visit_expr(self, e);
                self.depth -= 1;
            }
            Expr::Closure(_) | Expr::Async(_) => {}
            _ => visit::visit_expr(self, e),
        }
    }

    // A macro's tokens are opaque: one that holds the keyword may leave the loop.
    fn visit_macro(&mut self, m: &'a syn::Macro) {
        let word = if self.want_continue {
            "continue"
        } else {
            "break"
        };
        self.found |= holds_word(m.tokens.clone(), word);
    }

    fn visit_item(&mut self, _: &'a syn::Item) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    #[test]
    fn what_ends() {
        let yes: Vec<Expr> = vec![
            parse_quote!(return x),
            parse_quote!(loop {
                f();
            }),
            parse_quote!(loop {
                loop {
                    break;
                }
            }),
            parse_quote!({
                f();
                return;
            }),
            parse_quote!(if a { return } else { break }),
            parse_quote!(match a {
                1 => return,
                _ => panic!(),
            }),
            parse_quote!(
                loop {
                    {
                        return;
                    }
                }
                .await
            ),
        ];
        for e in &yes {
            assert!(ends(e), "{}", quote::quote!(#e));
        }
        let no: Vec<Expr> = vec![
            parse_quote!(f()),
            parse_quote!(loop {
                if a {
                    break;
                }
            }),
            parse_quote!('a: loop {
                loop {
                    break 'a;
                }
            }),
            parse_quote!(loop {
                m!(break);
            }),
            parse_quote!(if a {
                return;
            }),
            parse_quote!('b: {
                if a {
                    break 'b;
                }
                return;
            }),
            parse_quote!(match a {
                1 => return,
                _ => 2,
            }),
        ];
        for e in &no {
            assert!(!ends(e), "{}", quote::quote!(#e));
        }
    }

    #[test]
    fn continues_of_a_loop() {
        let body: syn::Block = parse_quote!({
            if a {
                continue;
            }
            loop {
                continue;
            }
        });
        assert!(continues(&body.stmts, None));
        let body: syn::Block = parse_quote!({
            loop {
                continue;
            }
        });
        assert!(!continues(&body.stmts, None));
        let body: syn::Block = parse_quote!({
            loop {
                continue 'o;
            }
        });
        let o: syn::Lifetime = parse_quote!('o);
        assert!(continues(&body.stmts, Some(&o)));
    }
}
