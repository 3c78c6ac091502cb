//! Expand: turns a parsed, validated and lowered flow into Rust: the flow's unit (or tuple)
//! struct named like the function, its state enum (serde-derived when `#[persistent]`), the
//! step function (one `match` arm per state), the layout hash, the Mermaid graph, the send,
//! effect and ask site ids, and the `::botmesh::flow::Flow` impl.
//!
//! When a check fails, every collected error is emitted as `compile_error!` next to a
//! best-effort item (the struct and a stub impl), so the rest of the crate still type-checks.

use std::collections::BTreeMap;

use proc_macro2::{Literal, TokenStream};
use quote::{ToTokens, format_ident, quote};
use syn::Stmt;

use crate::analyze::{self, Analyzed};
use crate::codec;
use crate::errors::Errors;
use crate::graph::{self, StateNode};
use crate::items::{flow_type, start_tokens, struct_tokens, stub};
use crate::lower;
use crate::parse::{self, FlowDef, Policy};
use crate::sites::{count_sends, reach};
use crate::step::Step;
use crate::validate::{Kind, Suspension};

/// `#[flow(…)]`.
pub(crate) fn flow(args: TokenStream, item: TokenStream, persistent: bool) -> TokenStream {
    let errors = Errors::default();
    let args = parse::parse_args(args, &errors);
    let Some(def) = parse::parse_fn(item, args, persistent, &errors) else {
        return errors.to_compile_errors();
    };
    expand(def, &errors)
}

/// `#[persistent]`: finds the `#[flow(…)]` next to it and expands it as persistent.
pub(crate) fn persistent(args: TokenStream, item: TokenStream) -> TokenStream {
    let errors = Errors::default();
    if !args.is_empty() {
        errors.spanned(&args, "#[persistent] takes no arguments");
    }
    let mut func: syn::ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => {
            errors.push(syn::Error::new(
                e.span(),
                "#[persistent] goes on a `#[flow]` function",
            ));
            return errors.to_compile_errors();
        }
    };
    let pos = func
        .attrs
        .iter()
        .position(|a| a.path().segments.last().is_some_and(|s| s.ident == "flow"));
    let Some(pos) = pos else {
        errors.at(
            func.sig.ident.span(),
            "#[persistent] goes with #[flow]: add `#[flow(start = …)]` to this function",
        );
        return errors.to_compile_errors();
    };
    let attr = func.attrs.remove(pos);
    let flow_args = match attr.meta {
        syn::Meta::List(l) => l.tokens,
        _ => TokenStream::new(),
    };
    let out = flow(flow_args, func.into_token_stream(), true);
    let errs = errors.to_compile_errors();
    quote!(#errs #out)
}

/// Expands a parsed flow (errors collected in `errors`).
pub(crate) fn expand(def: FlowDef, errors: &Errors) -> TokenStream {
    let FlowDef {
        attrs,
        vis,
        name,
        cx,
        params,
        output,
        body,
        persistent,
        args,
    } = def;
    let flow_name = name.to_string();
    let state_ty = format_ident!("__{}_State", name);

    let Analyzed {
        body,
        suspensions,
        lowered,
        param_bindings,
        model,
        ..
    } = analyze::analyze(&name, &cx, &params, args.version, body, errors);
    let out_ty = &output;
    if !errors.is_empty() {
        let stub = stub(&attrs, &vis, &name, &params, out_ty, persistent);
        let errs = errors.to_compile_errors();
        return quote!(#errs #stub);
    }

    // State enum: variants `__Start`, `__S1`, … in Rust (the step function imports them, so
    // they are named so as not to shadow the author's names); in checkpoints each suspension's state
    // is named after its identity.
    let mut variants = Vec::new();
    let mut state_names: Vec<(syn::Ident, String)> =
        vec![(format_ident!("__Start"), "Start".to_owned())];
    // (variant, field, type) of every state field, for the codecs.
    let mut codec_fields: Vec<codec::CodecField> = Vec::new();
    {
        let fields: Vec<TokenStream> = params
            .iter()
            .map(|p| {
                let (n, t) = (&p.name, &p.ty);
                quote!(#n: #t)
            })
            .collect();
        for p in &params {
            codec_fields.push((format_ident!("__Start"), p.name.clone(), p.ty.clone()));
        }
        variants.push(quote!(__Start { #(#fields),* }));
    }
    for (s, l) in suspensions.iter().zip(&lowered) {
        let v = format_ident!("__S{}", s.id);
        state_names.push((v.clone(), s.ident.clone()));
        let mut fields = Vec::new();
        for b in &l.live {
            let (n, t) = (&b.name, b.ty.as_ref());
            fields.push(quote!(#n: #t));
            if let Some(t) = t {
                codec_fields.push((v.clone(), n.clone(), t.clone()));
            }
        }
        variants.push(quote!(#v { #(#fields),* }));
    }
    let layout_hash = Literal::u64_suffixed(model.fingerprint());

    let susp_by_id: BTreeMap<usize, &Suspension> = suspensions.iter().map(|s| (s.id, s)).collect();
    let step = Step {
        cx: &cx,
        state_ty: &state_ty,
        flow_name: &flow_name,
        body: &body.stmts,
        suspensions: &suspensions,
        lowered: &lowered,
        params: &param_bindings,
    };
    let suspend = |k: usize| step.suspend(k);
    let node = |name: String, stmts: &[Stmt]| -> StateNode {
        let fwd = lower::forward_stmts(stmts.to_vec(), &suspend);
        let (reached, ends) = reach(stmts);
        let edges = reached
            .into_iter()
            .filter_map(|k| susp_by_id.get(&k))
            .map(|s| {
                let label = match &s.kind {
                    // A prompt built at run time: the ask's identity.
                    Kind::Ask { .. } if s.label == format!("ask {}", s.id) => {
                        format!("ask {}", s.ident)
                    }
                    Kind::Ask { .. } => format!("ask \"{}\"", s.label),
                    Kind::Call { .. } => s.label.clone(),
                };
                (s.ident.clone(), label)
            })
            .collect();
        StateNode {
            name,
            edges,
            ends,
            sends: count_sends(&fwd),
        }
    };
    let mut nodes = vec![node("Start".into(), &body.stmts)];
    for (s, l) in suspensions.iter().zip(&lowered) {
        nodes.push(node(s.ident.clone(), &l.rest));
    }
    let step_body = step.body();
    let mermaid = graph::mermaid(&flow_name, &nodes);
    let state_infos = std::iter::once(quote!(::botmesh::flow::StateInfo {
        name: "Start",
        answer: 0
    }))
    .chain(model.states.iter().map(|s| {
        let n = &s.ident;
        let a = Literal::u64_suffixed(s.answer_fingerprint());
        quote!(::botmesh::flow::StateInfo { name: #n, answer: #a })
    }));

    let (codec_items, encode, decode) = codec::codecs(
        &name,
        &state_ty,
        &flow_name,
        persistent,
        &state_names,
        &codec_fields,
    );
    let start = start_tokens(&args.start);
    let policy = match &args.policy {
        Policy::Restart(None) => quote!(::botmesh::flow::VersionPolicy::Restart {
            notice: ::core::option::Option::Some(::botmesh::flow::DEFAULT_RESTART_NOTICE)
        }),
        Policy::Restart(Some(None)) => quote!(::botmesh::flow::VersionPolicy::Restart {
            notice: ::core::option::Option::None
        }),
        Policy::Restart(Some(Some(n))) => quote!(::botmesh::flow::VersionPolicy::Restart {
            notice: ::core::option::Option::Some(#n)
        }),
        Policy::Abandon => quote!(::botmesh::flow::VersionPolicy::Abandon),
        Policy::Migrate(p) => quote!(::botmesh::flow::VersionPolicy::Migrate(#p)),
    };
    let mut callees: Vec<syn::Path> = Vec::new();
    for s in &suspensions {
        if let Kind::Call { callee, .. } = &s.kind {
            if !callees.iter().any(|c| c == callee) {
                callees.push(callee.clone());
            }
        }
    }
    // What a start trigger starts: the flow, its arguments built by `args = …`.
    let from_trigger = if params.is_empty() {
        quote!(
            fn from_trigger(_ctx: &::botmesh::Ctx) -> ::core::option::Option<Self> {
                ::core::option::Option::Some(Self())
            }
        )
    } else if let Some(build) = &args.args {
        let names: Vec<&syn::Ident> = params.iter().map(|p| &p.name).collect();
        let pat = if names.len() == 1 {
            quote!(#(#names)*)
        } else {
            quote!((#(#names),*))
        };
        quote! {
            fn from_trigger(ctx: &::botmesh::Ctx) -> ::core::option::Option<Self> {
                let #pat = #build(ctx);
                ::core::option::Option::Some(Self(#(#names),*))
            }
        }
    } else {
        quote!()
    };
    let docs: Vec<_> = attrs.iter().filter(|a| a.path().is_ident("doc")).collect();
    // The author's lint levels apply to the body, which `step` holds.
    let lints = attrs.iter().filter(|a| {
        ["allow", "warn", "deny", "forbid", "expect"]
            .iter()
            .any(|l| a.path().is_ident(l))
    });
    let (strukt, into_start, fresh) = struct_tokens(&vis, &name, &docs, &params, &state_ty);
    let flow_ty = flow_type(&name);
    let state_doc = format!("The states of flow `{flow_name}` (generated by `#[flow]`).");
    quote! {
        #strukt

        #[doc = #state_doc]
        #[doc(hidden)]
        #[allow(non_camel_case_types, dead_code, missing_docs)]
        #vis enum #state_ty { #(#variants),* }

        #codec_items

        impl #flow_ty {
            /// The state graph `#[flow]` built for this flow, as a Mermaid diagram.
            #[allow(dead_code)]
            pub const MERMAID: &'static str = #mermaid;
        }

        impl ::botmesh::flow::Flow for #flow_ty {
            type State = #state_ty;
            type Output = #out_ty;

            fn info() -> ::botmesh::flow::FlowInfo {
                ::botmesh::flow::FlowInfo {
                    name: #flow_name,
                    layout_hash: #layout_hash,
                    persistent: #persistent,
                    start: #start,
                    on_version_mismatch: #policy,
                    mermaid: Self::MERMAID,
                    states: &[#(#state_infos),*],
                }
            }

            fn into_start(self) -> Self::State { #into_start }

            #fresh

            #from_trigger

            #(#lints)*
            async fn step(#cx: &mut ::botmesh::flow::FlowCx, __botmesh_state: Self::State) -> ::botmesh::flow::__StepResult<Self> {
                #step_body
            }

            fn encode(state: &Self::State) -> ::core::result::Result<::botmesh::flow::__private::serde_json::Value, ::botmesh::flow::FlowError> { #encode }

            fn decode(value: ::botmesh::flow::__private::serde_json::Value) -> ::core::result::Result<Self::State, ::botmesh::flow::FlowError> { #decode }

            fn register_callees(reg: &mut dyn ::core::ops::FnMut(::botmesh::flow::Erased)) {
                let _ = &reg;
                #( reg(::botmesh::flow::__erase_fn(#callees)); )*
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_untyped_live_locals() {
        let out = flow(
            quote!(),
            quote! {
                async fn f(cx: &mut FlowCx) -> FlowResult {
                    let name = cx.ask("Name?").await?.text().to_owned();
                    let _age = cx.ask("Age?").await?;
                    cx.send(name).await?;
                    Ok(())
                }
            },
            false,
        );
        let text = out.to_string();
        assert!(text.contains("`name` lives across the ask #2"), "{text}");
    }
}

#[cfg(test)]
mod size {
    //! The size of what `#[flow]` writes for the demo shop's order flow.

    use proc_macro2::{TokenStream, TokenTree};

    const SHOP: &str = include_str!("../../examples/src/shop/order_flow.rs");

    /// Leaf tokens (identifiers, punctuation, literals).
    fn count(ts: TokenStream) -> usize {
        ts.into_iter()
            .map(|t| match t {
                TokenTree::Group(g) => count(g.stream()),
                _ => 1,
            })
            .sum()
    }

    fn count_ident(ts: TokenStream, name: &str) -> usize {
        ts.into_iter()
            .map(|t| match t {
                TokenTree::Group(g) => count_ident(g.stream(), name),
                TokenTree::Ident(i) if i == name => 1,
                _ => 0,
            })
            .sum()
    }

    /// The shop's flow function, from `pub async fn order` to its closing brace.
    fn shop_flow() -> TokenStream {
        let start = SHOP.find("pub async fn order(").expect("the shop's flow");
        let len = SHOP[start..].find("\n}\n").expect("its end") + 2;
        SHOP[start..start + len].parse().expect("tokens")
    }

    #[test]
    fn the_shop_flow_is_written_once() {
        let src = shop_flow();
        let out = super::flow(quote::quote!(start = none), src.clone(), true);
        let file: syn::File = syn::parse2(out.clone()).expect("an expansion");
        let step = file
            .items
            .iter()
            .filter_map(|i| match i {
                syn::Item::Impl(i) => Some(i),
                _ => None,
            })
            .flat_map(|i| &i.items)
            .find_map(|i| match i {
                syn::ImplItem::Fn(f) if f.sig.ident == "step" => Some(quote::quote!(#f)),
                _ => None,
            })
            .expect("a step function");
        let (src_n, step_n, all_n) = (count(src.clone()), count(step.clone()), count(out));
        // The flow's code is written once: the step function is at most twice its source.
        assert!(
            step_n <= 2 * src_n,
            "the step function has {step_n} tokens, the flow {src_n}"
        );
        // Every send and effect site is written once.
        let sends = count_ident(src.clone(), "send");
        assert!(sends >= 2);
        assert_eq!(count_ident(step.clone(), "__send_at"), sends);
        assert_eq!(
            count_ident(step, "__effect_at"),
            count_ident(src.clone(), "effect")
        );
        // Everything else (the state enum, the codecs, the `Flow` impl) stays small.
        assert!(
            all_n <= 6 * src_n,
            "the expansion has {all_n} tokens, the flow {src_n}"
        );
    }
}
