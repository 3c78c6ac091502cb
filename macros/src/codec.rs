//! The codecs of a persistent flow's state enum: `encode` / `decode` between the state and
//! JSON (`{"S2": {"item": …}}`), one field at a time, without a serde derive.
//!
//! Every field goes through a checker function named after it and the suspension it lives
//! across (`item_lives_across_ask_2`), bounded by `botmesh::flow::Checkpointable` and spanned
//! on the field's type: a type that is not `Serialize + DeserializeOwned` fails there, with
//! the runtime's `on_unimplemented` message, once per field. Non-persistent flows get stubs
//! that answer `FlowError::NotPersistent`.

use std::collections::BTreeMap;

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, Type};

/// A state field: (variant, field, type, checker function).
pub(crate) type CodecField = (Ident, Ident, Type, Ident);

/// The codec items (struct + constructor), and the bodies of `encode` and `decode`.
pub(crate) fn codecs(
    name: &Ident,
    state_ty: &Ident,
    flow_name: &str,
    persistent: bool,
    variants: &[(Ident, String)],
    codec_fields: &[CodecField],
) -> (TokenStream, TokenStream, TokenStream) {
    let codecs_ty = format_ident!("__{}_Codecs", name);
    let codecs_fn = format_ident!("__{}_codecs", name);
    let codec_key =
        |v: &Ident, f: &Ident| format_ident!("{}_{}", v, f.to_string().trim_start_matches("r#"));
    let codec_items = if persistent {
        let decl = codec_fields.iter().map(|(v, f, t, _)| {
            let k = codec_key(v, f);
            quote!(#k: ::botmesh::flow::__Codec<#t>)
        });
        let checkers = codec_fields.iter().map(|(_, _, t, c)| {
            quote_spanned! {t.span()=>
                fn #c<T: ::botmesh::flow::Checkpointable>() -> ::botmesh::flow::__Codec<T> {
                    (::botmesh::flow::__enc::<T>, ::botmesh::flow::__dec::<T>)
                }
            }
        });
        let inits = codec_fields.iter().map(|(v, f, t, c)| {
            let k = codec_key(v, f);
            let call = quote_spanned!(t.span()=> #c::<#t>());
            quote!(#k: #call)
        });
        quote! {
            #[doc(hidden)]
            #[allow(non_camel_case_types, non_snake_case, dead_code)]
            struct #codecs_ty { #(#decl),* }

            #[doc(hidden)]
            #[allow(non_snake_case, dead_code)]
            fn #codecs_fn() -> #codecs_ty {
                #(#checkers)*
                #codecs_ty { #(#inits),* }
            }
        }
    } else {
        quote!()
    };
    // variant ident → (name in checkpoints, fields)
    let mut variant_fields: BTreeMap<String, (String, Vec<Ident>)> = BTreeMap::new();
    for (v, name) in variants {
        variant_fields.insert(v.to_string(), (name.clone(), Vec::new()));
    }
    for (v, f, _, _) in codec_fields {
        if let Some((_, fs)) = variant_fields.get_mut(&v.to_string()) {
            fs.push(f.clone());
        }
    }
    let (encode, decode) = if persistent {
        let enc_arms = variant_fields.iter().map(|(v, (vs, fs))| {
            let vi = format_ident!("{}", v);
            let vs = vs.as_str();
            let puts = fs.iter().map(|f| {
                let k = codec_key(&vi, f);
                let fname = f.to_string();
                quote!(__botmesh_map.insert(#fname.to_owned(), (__botmesh_codecs.#k.0)(#f).map_err(|e| ::botmesh::flow::FlowError::Encode { flow: #flow_name, reason: e })?);)
            });
            quote!(#state_ty::#vi { #(#fs),* } => { #(#puts)* (#vs, __botmesh_map) })
        });
        let dec_arms = variant_fields.iter().map(|(v, (vs, fs))| {
            let vi = format_ident!("{}", v);
            let vs = vs.as_str();
            let gets = fs.iter().map(|f| {
                let k = codec_key(&vi, f);
                let fname = f.to_string();
                quote!(#f: (__botmesh_codecs.#k.1)(::botmesh::flow::__field(&mut __botmesh_fields, #fname, #flow_name)?).map_err(|e| ::botmesh::flow::FlowError::Decode { flow: #flow_name.to_owned(), reason: e })?)
            });
            quote!(#vs => ::core::result::Result::Ok(#state_ty::#vi { #(#gets),* }),)
        });
        (
            // The generated names start with `__botmesh_`: the arms bind the state's fields
            // (the flow's own locals) by name, which would shadow shorter ones.
            quote!({
                let __botmesh_codecs = #codecs_fn();
                let mut __botmesh_map = ::botmesh::flow::__private::serde_json::Map::new();
                let (__botmesh_name, __botmesh_map) = match state { #(#enc_arms)* };
                let mut __botmesh_out = ::botmesh::flow::__private::serde_json::Map::new();
                __botmesh_out.insert(__botmesh_name.to_owned(), ::botmesh::flow::__private::serde_json::Value::Object(__botmesh_map));
                ::core::result::Result::Ok(::botmesh::flow::__private::serde_json::Value::Object(__botmesh_out))
            }),
            quote!({
                let __botmesh_codecs = #codecs_fn();
                let (__botmesh_name, mut __botmesh_fields) = ::botmesh::flow::__split_state(value, #flow_name)?;
                match __botmesh_name.as_str() {
                    #(#dec_arms)*
                    other => ::core::result::Result::Err(::botmesh::flow::FlowError::Decode { flow: #flow_name.to_owned(), reason: ::std::format!("unknown state `{other}`") }),
                }
            }),
        )
    } else {
        (
            quote!({ let _ = state; ::core::result::Result::Err(::botmesh::flow::FlowError::NotPersistent { flow: #flow_name }) }),
            quote!({ let _ = value; ::core::result::Result::Err(::botmesh::flow::FlowError::NotPersistent { flow: #flow_name }) }),
        )
    };
    (codec_items, encode, decode)
}
