//! The state enum of a flow and, when it is persistent, its codec.
//!
//! The enum is generic over the types of the locals its states keep (one parameter per kept
//! local: a name and a type, however many states keep it), and the `Flow` impl names it with
//! the types as the author wrote them (`__order_State<String, u32>`). A persistent flow's
//! enum derives serde (each variant named, or renamed, after its state's name, so a
//! checkpoint reads `{"quantity": {"item": …}}`: see [`variant`]), and its codec comes from a generic function whose bounds
//! require `Checkpointable` of each parameter: called with the author's types, a type that
//! cannot be saved is reported once, at the local where it is written, with the runtime's
//! `on_unimplemented` message (why, and what to write instead). A non-persistent flow has no
//! codec (the `Flow` trait's default: its state lives in memory only).

use std::collections::BTreeSet;

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
                    fn codec() -> __MaybeCodec<Self> {
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
            quote!(fn codec() -> __MaybeCodec<Self> { __Some(__state_codec::#args()) }),
        )
    }
}

/// The variant of the start state: `Start` in a persistent flow that names no type `Start`
/// (see [`variant`]), `__Start` otherwise (renamed `Start` when the flow is persistent).
pub(crate) fn start_variant(persistent: bool, named: &BTreeSet<String>) -> (Ident, bool) {
    if persistent && !named.contains("Start") {
        (format_ident!("Start"), false)
    } else {
        (format_ident!("__Start"), persistent)
    }
}

/// Every identifier in `tokens` (what the flow's code names, for [`variant`]).
pub(crate) fn idents_in(tokens: TokenStream, out: &mut BTreeSet<String>) {
    for t in tokens {
        match t {
            proc_macro2::TokenTree::Ident(i) => {
                out.insert(i.to_string());
            }
            proc_macro2::TokenTree::Group(g) => idents_in(g.stream(), out),
            _ => {}
        }
    }
}

/// The names `block` uses in the type namespace (types, traits, modules: every name of a
/// type, every segment of a path before its last, the path of a struct expression or
/// pattern) and every name inside a nested item or a macro call whose arguments are not
/// expressions (which the macro cannot read), for [`variant`]. The names of locals, functions and values are left out: no
/// variant can shadow them.
pub(crate) fn type_names(block: &syn::Block, out: &mut BTreeSet<String>) {
    use quote::ToTokens;
    use syn::visit::{self, Visit};

    struct Names<'a>(&'a mut BTreeSet<String>);
    impl<'ast> Visit<'ast> for Names<'_> {
        fn visit_type(&mut self, t: &'ast syn::Type) {
            idents_in(t.to_token_stream(), self.0);
        }
        fn visit_path(&mut self, p: &'ast syn::Path) {
            for s in p.segments.iter().rev().skip(1) {
                self.0.insert(s.ident.to_string());
            }
            visit::visit_path(self, p);
        }
        fn visit_expr_struct(&mut self, e: &'ast syn::ExprStruct) {
            idents_in(e.path.to_token_stream(), self.0);
            visit::visit_expr_struct(self, e);
        }
        fn visit_pat_struct(&mut self, p: &'ast syn::PatStruct) {
            idents_in(p.path.to_token_stream(), self.0);
            visit::visit_pat_struct(self, p);
        }
        fn visit_pat_tuple_struct(&mut self, p: &'ast syn::PatTupleStruct) {
            idents_in(p.path.to_token_stream(), self.0);
            visit::visit_pat_tuple_struct(self, p);
        }
        fn visit_macro(&mut self, m: &'ast syn::Macro) {
            // Expressions (`format!`'s arguments) are read as such.
            let args = m.parse_body_with(
                syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated,
            );
            match args {
                Ok(args) => {
                    idents_in(m.path.to_token_stream(), self.0);
                    args.iter().for_each(|e| self.visit_expr(e));
                }
                Err(_) => idents_in(m.to_token_stream(), self.0),
            }
        }
        fn visit_item(&mut self, i: &'ast syn::Item) {
            idents_in(i.to_token_stream(), self.0);
        }
    }
    Names(out).visit_block(block);
}

/// The variant of the state that waits at the ask (or call) `id` of identity `ident`. In a
/// persistent flow, an identity that is a plain lowercase name (`item`, `age`) that the flow
/// does not name as a type or module (see [`type_names`]) is the variant's own name, so that it needs no serde rename (its name in
/// checkpoints is the same). A braced variant is a name in the type namespace only, so the
/// expansion's block, which imports the variants, shadows no local, function or value, and
/// no type or module the flow names (a lowercase name the flow names so keeps `__S<n>`).
/// `__S<n>` otherwise, renamed after its identity when the flow is persistent.
pub(crate) fn variant(
    persistent: bool,
    id: usize,
    ident: &str,
    named: &BTreeSet<String>,
) -> (Ident, bool) {
    let plain = ident.starts_with(|c: char| c.is_ascii_lowercase())
        && ident
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !named.contains(ident);
    // Only a plain name is lexed: in the compiler, lexing `ask-1e0c…` reports an error.
    match (persistent && plain).then(|| syn::parse_str::<Ident>(ident)) {
        Some(Ok(v)) => (v, false),
        _ => (format_ident!("__S{}", id), persistent),
    }
}
