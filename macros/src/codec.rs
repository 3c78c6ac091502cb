//! The codecs of a persistent flow's state enum: `encode` / `decode` between the state and
//! JSON (`{"quantity": {"item": …}}`), one field at a time, without a serde derive.
//!
//! Each kept local (a name and a type, however many states keep it) has one codec, made by
//! `botmesh::flow::__codec::<T>()` spanned on the local's type: a type that is not
//! `Serialize + DeserializeOwned` fails there, once, with the runtime's `on_unimplemented`
//! message (why, and what to write instead). Non-persistent flows get stubs that answer
//! `FlowError::NotPersistent`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, Type};

use crate::identity::canonical;

/// A state field: (variant, field, type).
pub(crate) type CodecField = (Ident, Ident, Type);

/// The codec items (struct + constructor), and the bodies of `encode` and `decode`.
pub(crate) fn codecs(
    name: &Ident,
    state_ty: &Ident,
    flow_name: &str,
    persistent: bool,
    variants: &[(Ident, String)],
    fields: &[CodecField],
) -> (TokenStream, TokenStream, TokenStream) {
    if !persistent {
        return (
            quote!(),
            quote!({ let _ = state; ::core::result::Result::Err(::botmesh::flow::FlowError::NotPersistent { flow: #flow_name }) }),
            quote!({ let _ = value; ::core::result::Result::Err(::botmesh::flow::FlowError::NotPersistent { flow: #flow_name }) }),
        );
    }
    let codecs_ty = format_ident!("__{}_Codecs", name);
    let codecs_fn = format_ident!("__{}_codecs", name);
    // One codec per kept local: (its name in the codec struct, the local, its type, the
    // type's canonical form).
    let mut locals: Vec<(Ident, &Ident, &Type, String)> = Vec::new();
    for (_, f, t) in fields {
        let canon = canonical(quote!(#t));
        let bare = f.to_string().trim_start_matches("r#").to_owned();
        if locals.iter().any(|(_, lf, _, c)| *lf == f && *c == canon) {
            continue;
        }
        let same_name = locals.iter().filter(|(_, lf, _, _)| *lf == f).count();
        let key = if same_name == 0 {
            format_ident!("{}", bare)
        } else {
            format_ident!("{}__{}", bare, same_name + 1)
        };
        locals.push((key, f, t, canon));
    }
    let key_of = |f: &Ident, t: &Type| {
        let canon = canonical(quote!(#t));
        locals
            .iter()
            .find(|(_, lf, _, c)| *lf == f && *c == canon)
            .map(|(k, _, _, _)| k.clone())
    };
    let decl = locals
        .iter()
        .map(|(k, _, t, _)| quote!(#k: ::botmesh::flow::__Codec<#t>));
    let inits = locals.iter().map(|(k, _, t, _)| {
        let call = quote_spanned!(t.span()=> ::botmesh::flow::__codec::<#t>());
        quote!(#k: #call)
    });
    if locals.is_empty() {
        let enc_arms = variants.iter().map(|(v, state)| {
            quote!(#state_ty::#v {} => ::botmesh::flow::__encode(#flow_name, #state, []),)
        });
        let dec_arms = variants
            .iter()
            .map(|(v, state)| quote!(#state => ::core::result::Result::Ok(#state_ty::#v {}),));
        return (
            quote!(),
            quote!(match state { #(#enc_arms)* }),
            quote!({
                let (__botmesh_name, _) = ::botmesh::flow::__split_state(value, #flow_name)?;
                match __botmesh_name.as_str() {
                    #(#dec_arms)*
                    other => ::botmesh::flow::__unknown_state(#flow_name, other),
                }
            }),
        );
    }
    let items = quote! {
        #[doc(hidden)]
        #[allow(non_camel_case_types, dead_code)]
        struct #codecs_ty { #(#decl),* }

        #[doc(hidden)]
        #[allow(non_snake_case)]
        fn #codecs_fn() -> #codecs_ty {
            #codecs_ty { #(#inits),* }
        }
    };
    fn of<'f>(fields: &'f [CodecField], v: &'f Ident) -> impl Iterator<Item = &'f CodecField> {
        fields.iter().filter(move |(fv, _, _)| fv == v)
    }
    let enc_arms = variants.iter().map(|(v, state)| {
        let names = of(fields, v).map(|(_, f, _)| f);
        let puts = of(fields, v).map(|(_, f, t)| {
            let k = key_of(f, t);
            let fname = f.to_string();
            quote!((#fname, (__botmesh_c.#k.0)(#f)))
        });
        quote!(#state_ty::#v { #(#names),* } => ::botmesh::flow::__encode(#flow_name, #state, [#(#puts),*]),)
    });
    let dec_arms = variants.iter().map(|(v, state)| {
        let gets = of(fields, v).map(|(_, f, t)| {
            let k = key_of(f, t);
            let fname = f.to_string();
            quote!(#f: ::botmesh::flow::__decode(&mut __botmesh_f, #fname, #flow_name, __botmesh_c.#k.1)?)
        });
        quote!(#state => ::core::result::Result::Ok(#state_ty::#v { #(#gets),* }),)
    });
    // The generated names start with `__botmesh_`: the arms bind the state's fields (the
    // flow's own locals) by name, which would shadow shorter ones.
    let encode = quote!({
        let __botmesh_c = #codecs_fn();
        match state { #(#enc_arms)* }
    });
    let decode = quote!({
        let __botmesh_c = #codecs_fn();
        let (__botmesh_name, mut __botmesh_f) = ::botmesh::flow::__split_state(value, #flow_name)?;
        match __botmesh_name.as_str() {
            #(#dec_arms)*
            other => ::botmesh::flow::__unknown_state(#flow_name, other),
        }
    });
    (items, encode, decode)
}
