//! Parse: the `#[flow(…)]` arguments and the flow function's signature into [`FlowDef`].
//!
//! Checks only what the signature and the attribute say (an `async fn`, a `cx: &mut FlowCx`
//! first parameter, typed parameters, a `FlowResult` return, a known start trigger and
//! version policy). The body is checked by `validate`.

use proc_macro2::{Span, TokenStream};
use syn::parse::{ParseStream, Parser};
use syn::{
    Attribute, Block, Expr, FnArg, Ident, ItemFn, LitStr, Pat, Path, ReturnType, Token, Type,
    Visibility,
};

use crate::errors::Errors;

/// How the flow starts by itself.
#[cfg_attr(test, derive(Debug, PartialEq))]
pub(crate) enum Start {
    None,
    Command(LitStr),
    Keyword(LitStr),
    Regex(LitStr),
    Matcher(Path),
}

/// The version-mismatch policy.
#[cfg_attr(test, derive(Debug, PartialEq))]
pub(crate) enum Policy {
    /// With its notice: `None` for the default, `Some(None)` for `notice = none`.
    Restart(Option<Option<LitStr>>),
    Abandon,
    Migrate(Path),
}

/// The attribute's arguments.
pub(crate) struct FlowArgs {
    pub(crate) start: Start,
    pub(crate) start_span: Span,
    pub(crate) policy: Policy,
    /// `version = N`: mixed into the layout hash, bumped by hand when a kept local's type
    /// changes shape (the hash sees types by name only).
    pub(crate) version: Option<u32>,
    /// `args = path`: builds a flow's parameters from the message that starts it
    /// (`fn path(ctx: &Ctx) -> T`, a tuple for several).
    pub(crate) args: Option<syn::Path>,
}

/// A typed parameter after `cx`.
#[cfg_attr(test, derive(Debug, PartialEq))]
pub(crate) struct Param {
    pub(crate) name: Ident,
    pub(crate) ty: Type,
    pub(crate) mutable: bool,
}

/// The flow function, parsed.
pub(crate) struct FlowDef {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) name: Ident,
    pub(crate) cx: Ident,
    pub(crate) params: Vec<Param>,
    pub(crate) output: Type,
    pub(crate) body: Block,
    pub(crate) persistent: bool,
    pub(crate) args: FlowArgs,
}

/// Parses `start = …, on_version_mismatch = …, version = N`.
pub(crate) fn parse_args(tokens: TokenStream, errors: &Errors) -> FlowArgs {
    let mut args = FlowArgs {
        start: Start::None,
        start_span: Span::call_site(),
        policy: Policy::Restart(None),
        version: None,
        args: None,
    };
    let parser = |input: ParseStream<'_>| -> syn::Result<()> {
        while !input.is_empty() {
            let key: Ident = input.parse()?;
            if key == "__persistent" {
                // set by #[persistent]; handled by the caller.
            } else if key == "args" {
                input.parse::<Token![=]>()?;
                args.args = Some(input.parse()?);
            } else if key == "version" {
                input.parse::<Token![=]>()?;
                let lit: syn::LitInt = input.parse()?;
                args.version = Some(lit.base10_parse::<u32>().map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        "`version = N` takes a whole number (bump it when a kept local's type changes shape)",
                    )
                })?);
            } else {
                input.parse::<Token![=]>()?;
                let kind: Ident = input.parse()?;
                match (key.to_string().as_str(), kind.to_string().as_str()) {
                    ("start", "none") => args.start = Start::None,
                    ("start", k @ ("command" | "keyword" | "regex" | "matcher")) => {
                        let content;
                        syn::parenthesized!(content in input);
                        args.start_span = kind.span();
                        args.start = match k {
                            "command" => Start::Command(content.parse()?),
                            "keyword" => Start::Keyword(content.parse()?),
                            "regex" => {
                                let lit: LitStr = content.parse()?;
                                if let Err(e) = regex_syntax_ok(&lit.value()) {
                                    errors.spanned(
                                        &lit,
                                        format!("invalid regex in `start = regex(…)`: {e}"),
                                    );
                                }
                                Start::Regex(lit)
                            }
                            _ => Start::Matcher(content.parse()?),
                        };
                    }
                    ("start", _) => {
                        return Err(syn::Error::new(
                            kind.span(),
                            "unknown start trigger: a flow starts with `command(\"name\")`, `keyword(\"word\")`, `regex(\"pattern\")`, `matcher(path::to::fn)` or `none` (started from code)",
                        ));
                    }
                    ("on_version_mismatch", "restart") => {
                        args.policy = Policy::Restart(None);
                        if input.peek(syn::token::Paren) {
                            let content;
                            syn::parenthesized!(content in input);
                            let key: Ident = content.parse()?;
                            if key != "notice" {
                                return Err(syn::Error::new(
                                    key.span(),
                                    "`restart` takes the notice the user gets first: `restart(notice = \"…\")` or `restart(notice = none)`",
                                ));
                            }
                            content.parse::<Token![=]>()?;
                            args.policy = if content.peek(LitStr) {
                                Policy::Restart(Some(Some(content.parse()?)))
                            } else {
                                let none: Ident = content.parse()?;
                                if none != "none" {
                                    return Err(syn::Error::new(
                                        none.span(),
                                        "a notice is a string literal, or `none` to send nothing",
                                    ));
                                }
                                Policy::Restart(Some(None))
                            };
                        }
                    }
                    ("on_version_mismatch", "abandon") => args.policy = Policy::Abandon,
                    ("on_version_mismatch", "migrate") => {
                        let content;
                        syn::parenthesized!(content in input);
                        args.policy = Policy::Migrate(content.parse()?);
                    }
                    ("on_version_mismatch", _) => {
                        return Err(syn::Error::new(
                            kind.span(),
                            "unknown version policy: use `restart` (or `restart(notice = \"…\")`), `abandon` or `migrate(path::to::fn)`",
                        ));
                    }
                    _ => {
                        return Err(syn::Error::new(
                            key.span(),
                            "unknown #[flow] option: the options are `start = …`, `args = path`, `on_version_mismatch = …` and `version = N`",
                        ));
                    }
                }
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        Ok(())
    };
    if let Err(e) = parser.parse2(tokens) {
        errors.push(e);
    }
    args
}

fn regex_syntax_ok(_pattern: &str) -> Result<(), String> {
    // The runtime compiles the regex when the flow is registered; the macro only keeps it.
    Ok(())
}

fn is_flowcx(ty: &Type) -> bool {
    match ty {
        Type::Reference(r) => {
            r.mutability.is_some()
                && matches!(&*r.elem, Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "FlowCx"))
        }
        _ => false,
    }
}

/// Parses the function; returns `None` when the item is not a function at all.
pub(crate) fn parse_fn(
    item: TokenStream,
    args: FlowArgs,
    persistent: bool,
    errors: &Errors,
) -> Option<FlowDef> {
    let func: ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => {
            errors.push(syn::Error::new(
                e.span(),
                "#[flow] goes on an `async fn name(cx: &mut FlowCx, …) -> FlowResult`",
            ));
            return None;
        }
    };
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        errors.at(
            sig.fn_token.span,
            "a flow is an `async fn`: write `async fn`",
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.spanned(
            &sig.generics,
            "a flow cannot be generic: its state enum needs concrete types",
        );
    }
    let mut cx = None;
    let mut params = Vec::new();
    for (i, arg) in sig.inputs.iter().enumerate() {
        match arg {
            FnArg::Receiver(r) => {
                errors.spanned(r, "a flow is a free function, not a method: remove `self`")
            }
            FnArg::Typed(pt) => {
                let ident = match &*pt.pat {
                    Pat::Ident(p) if p.subpat.is_none() && p.by_ref.is_none() => {
                        Some((p.ident.clone(), p.mutability.is_some()))
                    }
                    _ => {
                        errors.spanned(&pt.pat, "a flow parameter is a plain name (`name: Type`): it is stored in the flow's state");
                        None
                    }
                };
                if i == 0 {
                    if is_flowcx(&pt.ty) {
                        cx = ident.map(|(n, _)| n);
                        continue;
                    }
                    errors.spanned(
                        &pt.ty,
                        "the first parameter of a flow is its context: `cx: &mut FlowCx`",
                    );
                    continue;
                }
                if let Some((name, mutable)) = ident {
                    params.push(Param {
                        name,
                        ty: (*pt.ty).clone(),
                        mutable,
                    });
                }
            }
        }
    }
    if sig.inputs.is_empty() {
        errors.at(
            sig.ident.span(),
            "a flow takes its context first: `cx: &mut FlowCx`",
        );
    }
    let output = match &sig.output {
        ReturnType::Type(_, ty) => flow_result_output(ty).unwrap_or_else(|| {
            errors.spanned(
                ty,
                "a flow returns `FlowResult` (or `FlowResult<T>` to hand a value to its caller)",
            );
            syn::parse_quote!(())
        }),
        ReturnType::Default => {
            errors.at(
                sig.paren_token.span.close(),
                "a flow returns `FlowResult`: add `-> FlowResult`",
            );
            syn::parse_quote!(())
        }
    };
    if !params.is_empty() && !matches!(args.start, Start::None) && args.args.is_none() {
        errors.at(
            args.start_span,
            "a flow with parameters that a trigger starts needs them built from the starting message: add `args = build` with `fn build(ctx: &Ctx) -> T` (a tuple for several parameters; `ctx.bot()` reaches the bot's state), or remove `start = …` and start it from code (`bot.start_flow(chat, name(args))`, `cx.call(name(args))`)",
        );
    }
    if let Some(a) = &args.args {
        if params.is_empty() {
            errors.spanned(
                a,
                "`args = …` builds a flow's parameters, and this flow has none: remove it",
            );
        } else if matches!(args.start, Start::None) {
            errors.spanned(a, "`args = …` builds the parameters when a trigger starts the flow, and this flow has none: add `start = …` or remove `args`");
        }
    }
    let attrs = func
        .attrs
        .iter()
        .filter(|a| !a.path().is_ident("persistent"))
        .cloned()
        .collect();
    let persistent = persistent || func.attrs.iter().any(|a| a.path().is_ident("persistent"));
    Some(FlowDef {
        attrs,
        vis: func.vis.clone(),
        name: sig.ident.clone(),
        cx: cx.unwrap_or_else(|| Ident::new("cx", Span::call_site())),
        params,
        output,
        body: (*func.block).clone(),
        persistent,
        args,
    })
}

/// `FlowResult` → `()`, `FlowResult<T>` → `T`.
fn flow_result_output(ty: &Type) -> Option<Type> {
    let Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?;
    if last.ident != "FlowResult" {
        return None;
    }
    match &last.arguments {
        syn::PathArguments::None => Some(syn::parse_quote!(())),
        syn::PathArguments::AngleBracketed(a) if a.args.len() == 1 => match a.args.first()? {
            syn::GenericArgument::Type(t) => Some(t.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Whether an expression is the path `cx` (the flow's context parameter).
pub(crate) fn is_cx(e: &Expr, cx: &Ident) -> bool {
    matches!(e, Expr::Path(p) if p.qself.is_none() && p.path.is_ident(cx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    #[test]
    fn args_parse() {
        let e = Errors::default();
        let a = parse_args(
            quote!(start = command("order"), on_version_mismatch = abandon),
            &e,
        );
        assert!(e.is_empty());
        assert!(matches!(a.start, Start::Command(ref l) if l.value() == "order"));
        assert_eq!(a.policy, Policy::Abandon);
        let _ = parse_args(quote!(start = telepathy("x")), &e);
        assert!(e.messages()[0].contains("unknown start trigger"));
    }

    #[test]
    fn signature_checks() {
        let e = Errors::default();
        let args = parse_args(quote!(), &e);
        let def = parse_fn(
            quote!(
                async fn f(cx: &mut FlowCx, n: u32) -> FlowResult<String> {
                    Ok(String::new())
                }
            ),
            args,
            false,
            &e,
        );
        assert!(e.is_empty(), "{:?}", e.messages());
        let def = def.expect("parsed");
        assert_eq!(def.params.len(), 1);
        let o = &def.output;
        assert_eq!(quote!(#o).to_string(), quote!(String).to_string());
        let args = parse_args(quote!(), &e);
        let _ = parse_fn(
            quote!(
                fn f(x: u32) {}
            ),
            args,
            false,
            &e,
        );
        let msgs = e.messages();
        assert!(msgs.iter().any(|m| m.contains("async fn")), "{msgs:?}");
        assert!(
            msgs.iter().any(|m| m.contains("cx: &mut FlowCx")),
            "{msgs:?}"
        );
    }
}
