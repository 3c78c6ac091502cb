//! Analyze: the front of the pipeline, from a parsed flow to its model. Gives sends and
//! effects their site ids (`sites`), finds and validates the suspensions (`validate`),
//! checks that identities are unique (`identity`), computes what lives across each suspension
//! (`liveness`) and reports kept locals that cannot be kept; then builds the [`FlowModel`]
//! that fingerprints and tests read. Emits no code: `expand` does.

use std::collections::{BTreeMap, BTreeSet};

use quote::{ToTokens, quote};
use syn::visit_mut::VisitMut;
use syn::{Block, Ident};

use crate::errors::Errors;
use crate::identity::{self, Draft};
use crate::liveness::{self, Binding, Lowered};
use crate::lower;
use crate::model::{self, FlowModel, Local};
use crate::parse::Param;
use crate::sites::Sites;
use crate::validate::{self, Kind, Suspension};

/// What a local kept across a suspension must be: a rule refuses a binding, and its message
/// names the local and the suspension (`the ask #1 (…)`). Reported in this order.
type KeptLocalRule = (fn(&Binding) -> bool, fn(&Ident, &str) -> String);

const KEPT_LOCAL_RULES: [KeptLocalRule; 2] = [
    (
        |b| b.deferred,
        |n, w| {
            format!(
                "`{n}` is declared without a value and lives across {w}: the flow keeps it in its state from where it is declared, so give it its value there (`let {n}: Type = if … {{ … }} else {{ … }};`)"
            )
        },
    ),
    (
        |b| b.ty.is_none(),
        |n, w| {
            format!(
                "`{n}` lives across {w}, so the flow keeps it in its state, and a kept local must name its type: write `let {n}: Type = …` (a pattern binding: rebind it first, `let {n}: Type = {n};`)"
            )
        },
    ),
];

/// A flow after analysis.
pub(crate) struct Analyzed {
    /// The body: sites given, suspensions replaced by markers, `while` loops desugared.
    pub(crate) body: Block,
    pub(crate) suspensions: Vec<Suspension>,
    /// One per suspension, in order.
    pub(crate) lowered: Vec<Lowered>,
    /// The parameters, as bindings in scope everywhere.
    pub(crate) param_bindings: Vec<Binding>,
    /// Send and effect sites with their identities.
    #[allow(dead_code)]
    pub(crate) sites: Vec<(String, Draft)>,
    pub(crate) model: FlowModel,
}

/// Analyzes a flow's body (errors collected in `errors`).
pub(crate) fn analyze(
    name: &Ident,
    cx: &Ident,
    params: &[Param],
    version: Option<u32>,
    mut body: Block,
    errors: &Errors,
) -> Analyzed {
    let flow_name = name.to_string();
    let cx = cx.clone();
    // Send and effect sites get their ids once, before the body is split into states.
    let mut sites = Sites::new(&cx, &flow_name, errors);
    sites.visit_block_mut(&mut body);
    crate::for_loops::desugar_for(&mut body, &cx, params);
    let suspensions: Vec<Suspension> = validate::validate(&mut body, &cx, errors);
    lower::desugar_while(&mut body);
    {
        let mut all: Vec<(String, identity::Draft)> = suspensions
            .iter()
            .map(|s| (s.ident.clone(), s.draft.clone()))
            .collect();
        all.extend(sites.found.iter().cloned());
        identity::check_unique(&all, &flow_name, errors);
    }

    let not_cx = |mut s: BTreeSet<String>| {
        s.remove(&cx.to_string());
        s
    };
    let mut prompt_uses = BTreeMap::new();
    let mut answer_uses = BTreeMap::new();
    for s in &suspensions {
        match &s.kind {
            Kind::Ask { chain, answer_side } => {
                prompt_uses.insert(
                    s.id,
                    not_cx(liveness::free_vars_tokens(chain.to_token_stream())),
                );
                answer_uses.insert(
                    s.id,
                    not_cx(liveness::free_vars_tokens(quote!(#(#answer_side)*))),
                );
            }
            Kind::Call { call, .. } => {
                prompt_uses.insert(
                    s.id,
                    not_cx(liveness::free_vars_tokens(call.to_token_stream())),
                );
            }
        }
    }
    let param_bindings: Vec<Binding> = params
        .iter()
        .map(|p| Binding {
            name: p.name.clone(),
            ty: Some(p.ty.clone()),
            mutable: p.mutable,
            depth: 0,
            deferred: false,
        })
        .collect();
    let lowered = liveness::lower(
        &body,
        suspensions.len(),
        &param_bindings,
        &prompt_uses,
        &answer_uses,
    );

    // Live locals must be keepable: not shadowing another, given their value where they are
    // declared, of a named type.
    let what = |s: &Suspension| match &s.kind {
        Kind::Ask { .. } => format!("the ask #{} (`{}`)", s.id, s.label),
        Kind::Call { .. } => format!("the sub-flow call #{} (`{}`)", s.id, s.label),
    };
    for (s, l) in suspensions.iter().zip(&lowered) {
        for inner in &l.shadowing {
            errors.at(
                inner.span(),
                format!(
                    "`{inner}` shadows the `{inner}` of an enclosing block and lives across {w}: the flow keeps one value per name in its state, so after this block `{inner}` would come back with this one's value; rename one of them",
                    w = what(s)
                ),
            );
        }
        for (refused, message) in KEPT_LOCAL_RULES {
            for b in l.live.iter().filter(|b| refused(b)) {
                errors.at(b.name.span(), message(&b.name, &what(s)));
            }
        }
    }

    let ids_of = |kind| {
        let found = sites.found.iter().filter(|(_, d)| d.kind == kind);
        found.map(|(id, _)| id.clone()).collect()
    };
    let model = FlowModel {
        name: flow_name.clone(),
        version,
        params: params
            .iter()
            .map(|p| Local::new(&p.name, Some(&p.ty)))
            .collect(),
        states: suspensions
            .iter()
            .zip(&lowered)
            .map(|(s, l)| model::State {
                ident: s.ident.clone(),
                kind: s.draft.kind,
                answer: match &s.kind {
                    Kind::Ask { answer_side, .. } => model::answer_side(answer_side),
                    Kind::Call { callee, .. } => identity::canonical(callee.to_token_stream()),
                },
                live: l
                    .live
                    .iter()
                    .map(|b| Local::new(&b.name, b.ty.as_ref()))
                    .collect(),
                within: model::within(&body.stmts, s.id),
            })
            .collect(),
        sends: ids_of(identity::SiteKind::Send),
        effects: ids_of(identity::SiteKind::Effect),
    };
    Analyzed {
        body,
        suspensions,
        lowered,
        param_bindings,
        sites: sites.found,
        model,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::design;
    use crate::identity::SiteKind;
    use crate::model::{Construct, State};
    use proc_macro2::TokenStream;

    fn analyzed(item: TokenStream) -> (Analyzed, Vec<String>) {
        let e = Errors::default();
        let args = crate::parse::parse_args(TokenStream::new(), &e);
        let def = crate::parse::parse_fn(item, args, true, &e).expect("a function");
        let a = analyze(&def.name, &def.cx, &def.params, None, def.body, &e);
        (a, e.messages())
    }

    fn model_of(src: &str) -> FlowModel {
        let (a, errs) = analyzed(src.parse().expect("tokens"));
        assert!(errs.is_empty(), "{errs:?}");
        a.model
    }

    #[test]
    fn the_design_example_as_a_model() {
        let m = model_of(design());
        let idents: Vec<&str> = m.states.iter().map(|s| s.ident.as_str()).collect();
        assert_eq!(idents.len(), 2);
        assert!(
            idents
                .iter()
                .all(|i| i.starts_with("ask-") && i.len() == 12),
            "{idents:?}"
        );
        assert_eq!(
            m.states[1],
            State {
                ident: idents[1].to_owned(),
                kind: SiteKind::Ask,
                answer: String::new(),
                live: vec![Local {
                    name: "item".into(),
                    ty: "String ".into()
                }],
                within: vec![Construct::Loop],
            }
        );
        assert!(m.states[0].live.is_empty() && m.states[0].within.is_empty());
        assert_eq!(m.sends.len(), 2);
        assert!(m.effects.is_empty() && m.params.is_empty());
    }

    #[test]
    fn inserting_a_send_and_an_ask_keeps_every_other_identity() {
        let before = model_of(design());
        // A greeting first, a second ask after the first, a send at the end.
        let after = model_of(
            &design()
                .replacen("let item", "cx.send(\"Welcome!\").await?;\nlet item", 1)
                .replacen(
                    "let qty",
                    "let size: String = cx.ask(\"Which size?\").await?.text().to_owned();\nlet qty",
                    1,
                )
                .replacen(
                    "Ok(())",
                    "cx.send(format!(\"Size {size}\")).await?;\nOk(())",
                    1,
                ),
        );
        for s in &before.states {
            assert!(after.states.iter().any(|a| a.ident == s.ident), "{s:?}");
        }
        for s in &before.sends {
            assert!(after.sends.contains(s), "{s}");
        }
        assert_eq!(after.states.len(), 3);
        assert_eq!(after.sends.len(), 4);
        assert_ne!(before.fingerprint(), after.fingerprint());
    }

    #[test]
    fn reformatting_changes_nothing() {
        let tight = model_of(design());
        let loose = model_of(
            r#"
            async fn order(cx: &mut FlowCx) -> FlowResult {
                let item: String = cx
                    .ask(r"What would you like?")
                    .await?
                    .text()
                    .to_owned();
                let qty: u32 = loop { let answer = cx.ask("How many?").await?;
                    match answer.text().trim().parse() { Ok(n) if n > 0 => { break n },
                        _ => { cx.send("Please answer with a number.",).await? }, } };
                cx.send(format!(
                    "Ordered {qty} x {item}",
                ))
                .await?;
                Ok(())
            }"#,
        );
        let idents = |m: &FlowModel| m.states.iter().map(|s| s.ident.clone()).collect::<Vec<_>>();
        assert_eq!(idents(&tight), idents(&loose));
        assert_eq!(tight.sends, loose.sends);
        assert_eq!(tight.fingerprint(), loose.fingerprint());
    }

    #[test]
    fn the_fingerprint_sees_kept_types_answers_and_structure() {
        let base = model_of(design()).fingerprint();
        let retyped = model_of(&design().replace("let item: String", "let item: Box<str>"));
        assert_ne!(base, retyped.fingerprint());
        let parsed = model_of(&design().replace(
            r#"cx.ask("What would you like?").await?.text().to_owned()"#,
            r#"cx.ask("What would you like?").parse::<String>("Again?").await?"#,
        ));
        assert_ne!(base, parsed.fingerprint());
        assert_eq!(parsed.states[0].ident, model_of(design()).states[0].ident);
        let renamed = model_of(&design().replace("How many?", "How many cups?"));
        assert_ne!(base, renamed.fingerprint());
    }

    #[test]
    fn named_sites_and_collisions() {
        let m = model_of(
            r#"
            async fn f(cx: &mut FlowCx) -> FlowResult {
                let age: u32 = cx.ask(format!("Age, {}?", 1)).id("age").parse::<u32>("A number.").await?;
                cx.send("hi").id("greeting").await?;
                cx.send("hi").await?;
                cx.send("hi").await?;
                Ok(())
            }"#,
        );
        assert_eq!(m.states[0].ident, "age");
        assert_eq!(m.sends[0], "greeting");
        assert_eq!(m.sends[2], format!("{}-2", m.sends[1]));
        let (_, errs) = analyzed(
            r#"
            async fn f(cx: &mut FlowCx) -> FlowResult {
                let a: u32 = cx.ask("Age?").id("age").parse::<u32>("A number.").await?;
                cx.send("x").id("age").await?;
                Ok(())
            }"#
            .parse()
            .expect("tokens"),
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("has the identity `age`"), "{errs:?}");
    }
}
