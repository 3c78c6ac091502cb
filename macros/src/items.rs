//! The items around a flow's state machine: the hidden flow struct and the constructor
//! function that takes the flow function's place (so `bot.flow(order)` works and a local
//! named `order` still shadows it), the start trigger, and the best-effort stub emitted next
//! to `compile_error!`s so the rest of the crate still type-checks.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::Ident;

use crate::parse::{self, Start};

pub(crate) fn start_tokens(s: &Start) -> TokenStream {
    match s {
        Start::None => quote!(__NoStart),
        Start::Command(l) => quote!(__Command(#l)),
        Start::Keyword(l) => quote!(__Keyword(#l)),
        Start::Regex(l) => quote!(__Regex(#l)),
        Start::Matcher(p) => quote!(__Matcher(#p)),
    }
}

/// The flow type's name: `__order_Flow` for `order`.
pub(crate) fn flow_type(name: &Ident) -> Ident {
    format_ident!("__{}_Flow", name)
}

/// The flow struct (hidden) and its constructor, the function `name(params)` that takes the
/// place of the flow function; plus the body of `into_start` (in the expansion's block, which
/// imports the state's variants).
pub(crate) fn struct_tokens(
    vis: &syn::Visibility,
    name: &Ident,
    docs: &[&syn::Attribute],
    params: &[parse::Param],
    start: &Ident,
) -> (TokenStream, TokenStream) {
    let flow_ty = flow_type(name);
    let tys: Vec<_> = params.iter().map(|p| &p.ty).collect();
    let names: Vec<_> = params.iter().map(|p| &p.name).collect();
    let inits = params.iter().enumerate().map(|(i, p)| {
        let n = &p.name;
        let idx = syn::Index::from(i);
        quote!(#n: self.#idx)
    });
    // Hidden, so it needs no doc of its own: the constructor carries the flow's.
    (
        quote! {
            #[doc(hidden)]
            #[allow(non_camel_case_types)]
            #vis struct #flow_ty(#(#tys),*);

            #(#docs)*
            #[allow(dead_code)]
            #vis fn #name(#(#names: #tys),*) -> #flow_ty {
                #flow_ty(#(#names),*)
            }
        },
        quote!(#start { #(#inits),* }),
    )
}

/// The best-effort item next to the errors: the struct and an impl whose step fails.
pub(crate) fn stub(
    attrs: &[syn::Attribute],
    vis: &syn::Visibility,
    name: &Ident,
    params: &[parse::Param],
    out: &syn::Type,
    persistent: bool,
) -> TokenStream {
    let docs: Vec<_> = attrs.iter().filter(|a| a.path().is_ident("doc")).collect();
    let flow_name = name.to_string();
    let (strukt, _) = struct_tokens(vis, name, &docs, params, &format_ident!("__Start"));
    let flow_ty = flow_type(name);
    quote! {
        #strukt
        impl ::botmesh::flow::Flow for #flow_ty {
            type State = ();
            type Output = #out;
            fn info() -> ::botmesh::flow::FlowInfo {
                ::botmesh::flow::FlowInfo {
                    name: #flow_name,
                    layout_hash: 0,
                    persistent: #persistent,
                    start: ::botmesh::flow::StartTrigger::None,
                    on_version_mismatch: ::botmesh::flow::VersionPolicy::Abandon,
                    mermaid: "",
                    states: &[],
                }
            }
            fn into_start(self) -> Self::State {}
            fn step(_cx: &mut ::botmesh::flow::FlowCx, _state: Self::State)
                -> impl ::core::future::Future<Output = ::core::result::Result<::botmesh::flow::Step<Self::State, Self::Output>, ::botmesh::HandlerError>> + ::core::marker::Send + '_
            {
                async { ::core::result::Result::Err(::core::convert::From::from("this flow did not compile")) }
            }
            fn encode(_state: &Self::State) -> ::core::result::Result<::botmesh::flow::__private::serde_json::Value, ::botmesh::flow::FlowError> {
                ::core::result::Result::Err(::botmesh::flow::FlowError::NotPersistent { flow: #flow_name })
            }
            fn decode(_value: ::botmesh::flow::__private::serde_json::Value) -> ::core::result::Result<Self::State, ::botmesh::flow::FlowError> {
                ::core::result::Result::Ok(())
            }
        }
    }
}
