//! The state enum of a flow and, when it is persistent, its codec.
//!
//! The enum is generic over the types of the locals its states keep (one parameter per kept
//! local: a name and a type, however many states keep it), and the `Flow` impl names it with
//! the types as the author wrote them (`__order_State<String, u32>`). A persistent flow's
//! enum derives serde (each variant renamed to its state's name, so a checkpoint reads
//! `{"quantity": {"item": …}}`), and its codec comes from a generic function whose bounds
//! require `Checkpointable` of each parameter: called with the author's types, a type that
//! cannot be saved is reported once, at the local where it is written, with the runtime's
//! `on_unimplemented` message (why, and what to write instead). A non-persistent flow has no
//! codec (the `Flow` trait's default: its state lives in memory only).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Ident, Type};

use crate::identity::canonical;

/// A state field: (variant, field, type).
pub(crate) type CodecField = (Ident, Ident, Type);

/// The kept locals of a flow's states: one type parameter each.
pub(crate) struct Kept {
    /// (parameter, local, type as written, the type's canonical form).
    locals: Vec<(Ident, Ident, Type, String)>,
}

impl Kept {
    pub(crate) fn new(fields: &[CodecField]) -> Self {
        let mut locals: Vec<(Ident, Ident, Type, String)> = Vec::new();
        for (_, f, t) in fields {
            let canon = canonical(quote!(#t));
            if locals.iter().any(|(_, lf, _, c)| lf == f && *c == canon) {
                continue;
            }
            let param = format_ident!("__T{}", locals.len());
            locals.push((param, f.clone(), t.clone(), canon));
        }
        Self { locals }
    }

    /// The parameter that stands for local `f` of type `t`.
    pub(crate) fn param(&self, f: &Ident, t: &Type) -> Option<&Ident> {
        let canon = canonical(quote!(#t));
        self.locals
            .iter()
            .find(|(_, lf, _, c)| lf == f && *c == canon)
            .map(|(p, _, _, _)| p)
    }

    /// `<__T0, __T1>` (nothing when no state keeps a local).
    pub(crate) fn params(&self) -> TokenStream {
        self.angled(self.locals.iter().map(|(p, _, _, _)| quote!(#p)))
    }

    /// `<String, u32>`: the types as the author wrote them (their spans point at the flow).
    pub(crate) fn args(&self) -> TokenStream {
        self.angled(self.locals.iter().map(|(_, _, t, _)| quote!(#t)))
    }

    fn angled(&self, items: impl Iterator<Item = TokenStream>) -> TokenStream {
        let items: Vec<TokenStream> = items.collect();
        if items.is_empty() {
            quote!()
        } else {
            quote!(<#(#items),*>)
        }
    }

    /// The attributes of a persistent flow's state enum.
    pub(crate) fn derive(&self) -> TokenStream {
        quote! {
            #[derive(__Serialize, __Deserialize)]
            #[serde(crate = "::botmesh::flow::__private::serde")]
        }
    }

    /// A persistent flow's codec: the generic function (an item of the expansion's block) and
    /// the `Flow::codec` method that calls it with the author's types.
    pub(crate) fn codec(&self, state_ty: &Ident) -> (TokenStream, TokenStream) {
        if self.locals.is_empty() {
            return (
                quote!(),
                quote!(
                    fn codec() -> __Option<__Codec<Self::State>> {
                        __Some(__codec())
                    }
                ),
            );
        }
        let bounds = self
            .locals
            .iter()
            .map(|(p, _, _, _)| quote!(#p: __Checkpointable));
        let params = self.params();
        let args = self.args();
        (
            quote! {
                fn __state_codec<#(#bounds),*>() -> __Codec<#state_ty #params> { __codec() }
            },
            quote!(fn codec() -> __Option<__Codec<Self::State>> { __Some(__state_codec::#args()) }),
        )
    }
}
