//! The model of a flow: what the macro found (its parameters, suspensions with their
//! identities, answer sides, live locals and the control structure around them, its sends and
//! effects), as plain data (`Debug + PartialEq`, tested directly), and the fingerprints
//! computed from it.
//!
//! The layout fingerprint covers everything that can make an old checkpoint or key mean
//! something else: a site added, removed or renamed, a kept local added, removed, renamed or
//! retyped (types by their canonical syntax), an answer parsed differently, a suspension moved
//! into or out of a loop or branch, `version = N`. It is computed from this model's own
//! serialization, never from printed tokens. A state's fingerprint covers one suspension (its
//! identity, answer side and kept locals), so a checkpoint of another build can still resume
//! at an ask that did not change.

use proc_macro2::TokenStream;
use syn::Stmt;

use crate::identity::{SiteKind, canonical, fnv1a};
use crate::lower::{Toward, stmt_has, toward_in_expr, toward_in_stmt};

/// A kept local or a parameter: its name and the canonical form of its type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Local {
    pub(crate) name: String,
    pub(crate) ty: String,
}

impl Local {
    pub(crate) fn new(name: &syn::Ident, ty: Option<&syn::Type>) -> Self {
        Self {
            name: name.to_string().trim_start_matches("r#").to_owned(),
            ty: ty.map_or_else(String::new, |t| canonical(quote::quote!(#t))),
        }
    }
}

/// A control construct between the function body and a suspension.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Construct {
    Loop,
    If,
    Else,
    Match,
    Block,
}

/// One suspension point.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct State {
    /// Its identity (the state's name in checkpoints).
    pub(crate) ident: String,
    pub(crate) kind: SiteKind,
    /// What the answer becomes: the canonical form of an ask's answer-side calls
    /// (`.parse::<u32>(…)`, `.validate(…)`), or a call's callee.
    pub(crate) answer: String,
    /// The locals kept in the state, in scope order.
    pub(crate) live: Vec<Local>,
    /// The constructs it stands in, outermost first.
    pub(crate) within: Vec<Construct>,
}

impl State {
    /// The fingerprint of what an answer at this state becomes (its kind and answer side).
    pub(crate) fn answer_fingerprint(&self) -> u64 {
        fnv1a(&format!("{:?}|{}", self.kind, self.answer))
    }
}

/// A flow, as the macro understood it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FlowModel {
    pub(crate) name: String,
    pub(crate) version: Option<u32>,
    pub(crate) params: Vec<Local>,
    pub(crate) states: Vec<State>,
    /// Send identities, in source order.
    pub(crate) sends: Vec<String>,
    /// Effect identities, in source order.
    pub(crate) effects: Vec<String>,
}

fn locals(out: &mut String, ls: &[Local]) {
    for l in ls {
        out.push_str(&l.name);
        out.push(':');
        out.push_str(&l.ty);
        out.push(';');
    }
}

impl FlowModel {
    /// The canonical serialization the fingerprint hashes (one line per item).
    pub(crate) fn serialize(&self) -> String {
        let mut out = String::new();
        if let Some(v) = self.version {
            out.push_str(&format!("version {v}\n"));
        }
        out.push_str("params ");
        locals(&mut out, &self.params);
        out.push('\n');
        for s in &self.states {
            out.push_str(&format!(
                "{:?} {} within {:?} answer {} live ",
                s.kind, s.ident, s.within, s.answer
            ));
            locals(&mut out, &s.live);
            out.push('\n');
        }
        for s in &self.sends {
            out.push_str(&format!("send {s}\n"));
        }
        for e in &self.effects {
            out.push_str(&format!("effect {e}\n"));
        }
        out
    }

    /// The layout fingerprint.
    pub(crate) fn fingerprint(&self) -> u64 {
        fnv1a(&self.serialize())
    }
}

/// The canonical form of an ask's answer-side calls.
pub(crate) fn answer_side(calls: &[TokenStream]) -> String {
    calls
        .iter()
        .map(|c| canonical(c.clone()))
        .collect::<Vec<_>>()
        .join("")
}

/// The constructs between the body and marker `k` (body validated, `while` desugared).
pub(crate) fn within(stmts: &[Stmt], k: usize) -> Vec<Construct> {
    let mut out = Vec::new();
    within_stmts(stmts, k, &mut out);
    out
}

fn within_stmts(stmts: &[Stmt], k: usize, out: &mut Vec<Construct>) {
    if let Some(s) = stmts.iter().find(|s| stmt_has(s, k)) {
        within_step(toward_in_stmt(s, k), k, out);
    }
}

/// The constructs from one step toward marker `k` down to it.
fn within_step(step: Toward<'_>, k: usize, out: &mut Vec<Construct>) {
    match step {
        Toward::Expr(e) => within_step(toward_in_expr(e, k), k, out),
        Toward::Then { stmts, .. } => enter(Construct::If, stmts, k, out),
        Toward::Else(e) => {
            out.push(Construct::Else);
            within_step(toward_in_expr(e, k), k, out);
        }
        Toward::Arm(arm) => {
            out.push(Construct::Match);
            within_step(toward_in_expr(&arm.body, k), k, out);
        }
        Toward::Loop(stmts) => enter(Construct::Loop, stmts, k, out),
        Toward::Block(stmts) => enter(Construct::Block, stmts, k, out),
        Toward::Stop => {}
    }
}

/// `construct`, then the constructs within its statements.
fn enter(construct: Construct, stmts: &[Stmt], k: usize, out: &mut Vec<Construct>) {
    out.push(construct);
    within_stmts(stmts, k, out);
}
