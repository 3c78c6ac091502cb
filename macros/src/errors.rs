//! Error collection, as serde_derive does it: every check pushes a spanned `syn::Error`, and
//! the expansion reports them all at once (combined), next to a best-effort item.

use std::cell::RefCell;
use std::fmt::Display;

use proc_macro2::{Span, TokenStream};

/// Collects spanned errors.
#[derive(Default)]
pub(crate) struct Errors {
    errors: RefCell<Vec<syn::Error>>,
}

impl Errors {
    /// Adds an error at `span`.
    pub(crate) fn at(&self, span: Span, msg: impl Display) {
        self.errors.borrow_mut().push(syn::Error::new(span, msg));
    }

    /// Adds an error spanning `tokens` (first to last token).
    pub(crate) fn spanned(&self, tokens: impl quote::ToTokens, msg: impl Display) {
        self.errors
            .borrow_mut()
            .push(syn::Error::new_spanned(tokens, msg));
    }

    /// Adds a parse error.
    pub(crate) fn push(&self, e: syn::Error) {
        self.errors.borrow_mut().push(e);
    }

    /// Whether nothing went wrong.
    pub(crate) fn is_empty(&self) -> bool {
        self.errors.borrow().is_empty()
    }

    /// The errors, as `compile_error!` invocations.
    pub(crate) fn to_compile_errors(&self) -> TokenStream {
        let mut all: Option<syn::Error> = None;
        for e in self.errors.borrow().iter() {
            match &mut all {
                Some(a) => a.combine(e.clone()),
                None => all = Some(e.clone()),
            }
        }
        all.map(|e| e.to_compile_error()).unwrap_or_default()
    }

    /// The messages (tests).
    #[cfg(test)]
    pub(crate) fn messages(&self) -> Vec<String> {
        self.errors
            .borrow()
            .iter()
            .map(ToString::to_string)
            .collect()
    }
}
