//! Identities of a flow's sites: every ask, sub-flow call, send and effect gets one, and keys
//! and checkpoint states are named after it.
//!
//! An identity comes from the site's own content, never from its position among other sites:
//! the canonical form of its syntax ([`canonical`]: the token tree with spans and spacing
//! dropped, literals by value) hashed to eight hex digits, prefixed by the kind (`ask-1f0c9a2e`,
//! `send-…`, `effect-…`, `call-…`), plus `-2`, `-3`, … for the second and later sites of the
//! same kind and content in source order. An author names a site with `.id("age")` (asks and
//! sends) or a literal `.key("…")` (sends), and the name is the identity. So adding, removing,
//! moving or reformatting a site leaves every other site's identity as it was; two sites with
//! one identity are a compile error at the second. This module does not rewrite code.

use std::collections::BTreeMap;
use std::fmt::Write;

use proc_macro2::{Delimiter, Spacing, Span, TokenStream, TokenTree};

use crate::errors::Errors;

/// What kind of site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum SiteKind {
    Ask,
    Call,
    Send,
    Effect,
}

impl SiteKind {
    fn prefix(self) -> &'static str {
        match self {
            SiteKind::Ask => "ask",
            SiteKind::Call => "call",
            SiteKind::Send => "send",
            SiteKind::Effect => "effect",
        }
    }
}

/// The canonical form of a token stream: identifiers, punctuation (with `~` after a joint
/// one, so `&&` and `& &` differ), literals by value and groups by delimiter, separated by
/// single spaces. Independent of spans, line breaks and how tokens would print.
pub(crate) fn canonical(ts: TokenStream) -> String {
    let mut out = String::new();
    canonical_into(ts, &mut out);
    out
}

fn canonical_into(ts: TokenStream, out: &mut String) {
    let tokens: Vec<TokenTree> = ts.into_iter().collect();
    for (i, t) in tokens.iter().enumerate() {
        // rustfmt adds and removes the trailing comma of a list laid out vertically and the
        // comma after a match arm's block: neither changes what the code says.
        if let TokenTree::Punct(p) = t {
            let last = i + 1 == tokens.len();
            let after_block = i > 0
                && matches!(&tokens[i - 1], TokenTree::Group(g) if g.delimiter() == Delimiter::Brace);
            if p.as_char() == ',' && (last || after_block) {
                continue;
            }
        }
        match t.clone() {
            TokenTree::Ident(i) => {
                let s = i.to_string();
                let _ = write!(out, "{} ", s.trim_start_matches("r#"));
            }
            TokenTree::Punct(p) => {
                out.push(p.as_char());
                if p.spacing() == Spacing::Joint {
                    out.push('~');
                }
                out.push(' ');
            }
            TokenTree::Literal(l) => {
                let _ = write!(out, "{} ", literal(&l));
            }
            TokenTree::Group(g) => {
                let (open, close) = match g.delimiter() {
                    Delimiter::Parenthesis => ("( ", ") "),
                    Delimiter::Brace => ("{ ", "} "),
                    Delimiter::Bracket => ("[ ", "] "),
                    Delimiter::None => ("", ""),
                };
                out.push_str(open);
                canonical_into(g.stream(), out);
                out.push_str(close);
            }
        }
    }
}

/// A literal by value: `"a"` and `r"a"` are the same string, `0x10` and `16` the same number.
fn literal(l: &proc_macro2::Literal) -> String {
    match syn::Lit::new(l.clone()) {
        syn::Lit::Str(s) => format!("str{:?}{}", s.value(), s.suffix()),
        syn::Lit::ByteStr(s) => format!("bytes{:?}{}", s.value(), s.suffix()),
        syn::Lit::CStr(s) => format!("cstr{:?}{}", s.value(), s.suffix()),
        syn::Lit::Byte(b) => format!("byte{}{}", b.value(), b.suffix()),
        syn::Lit::Char(c) => format!("char{:?}{}", c.value(), c.suffix()),
        syn::Lit::Int(i) => format!("int{}{}", i.base10_digits(), i.suffix()),
        syn::Lit::Float(f) => format!("float{}{}", f.base10_digits(), f.suffix()),
        syn::Lit::Bool(b) => b.value.to_string(),
        _ => l.to_string(),
    }
}

/// FNV-1a, 64 bits: stable across builds and platforms (std's hashers are not).
pub(crate) fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Eight hex digits of a canonical form.
fn short_hash(content: &str) -> String {
    let h = fnv1a(content);
    format!("{:08x}", (h ^ (h >> 32)) & 0xffff_ffff)
}

/// One site, as the passes found it.
#[derive(Debug, Clone)]
pub(crate) struct Draft {
    pub(crate) kind: SiteKind,
    /// The canonical form of what the site says (the prompt, the outgoing message, …).
    pub(crate) content: String,
    /// The author's name for it (`.id("age")`).
    pub(crate) name: Option<String>,
    pub(crate) span: Span,
}

/// Gives sites their identities, one kind at a time in source order.
#[derive(Default)]
pub(crate) struct Namer {
    seen: BTreeMap<(SiteKind, String), usize>,
}

impl Namer {
    /// The identity of the next site (its name, or its content's hash and occurrence).
    pub(crate) fn name(&mut self, d: &Draft) -> String {
        if let Some(n) = &d.name {
            return n.clone();
        }
        let n = self.seen.entry((d.kind, d.content.clone())).or_insert(0);
        *n += 1;
        let base = format!("{}-{}", d.kind.prefix(), short_hash(&d.content));
        if *n == 1 { base } else { format!("{base}-{n}") }
    }
}

/// The name a call's one string-literal argument gives a site (`.id("welcome")`), checked
/// with [`check_name`]; `None` when the arguments are not one string literal.
pub(crate) fn literal_name(
    args: &syn::punctuated::Punctuated<syn::Expr, syn::Token![,]>,
    errors: &Errors,
) -> Option<(String, Span)> {
    match args.first() {
        Some(syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        })) if args.len() == 1 => {
            check_name(&s.value(), s.span(), errors);
            Some((s.value(), s.span()))
        }
        _ => None,
    }
}

/// Checks an author's name: the characters a key can carry unescaped.
pub(crate) fn check_name(name: &str, span: Span, errors: &Errors) {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !ok {
        errors.at(
            span,
            format!(
                "`{name}` cannot name a site: a site's name is part of its keys, so use letters, digits, `_`, `-` and `.` (for example `.id(\"age\")`)"
            ),
        );
    }
}

/// Reports every identity given to two sites, at the later one.
pub(crate) fn check_unique(sites: &[(String, Draft)], flow: &str, errors: &Errors) {
    let mut first: BTreeMap<&str, &Draft> = BTreeMap::new();
    for (id, d) in sites {
        match first.get(id.as_str()) {
            None => {
                first.insert(id, d);
            }
            Some(earlier) => {
                let what = |d: &Draft| match d.kind {
                    SiteKind::Ask => "an ask",
                    SiteKind::Call => "a sub-flow call",
                    SiteKind::Send => "a send",
                    SiteKind::Effect => "an effect",
                };
                let fix = if d.name.is_some() {
                    "rename one of them"
                } else {
                    "name this one with `.id(\"…\")`"
                };
                errors.at(
                    d.span,
                    format!(
                        "{this} of flow `{flow}` has the identity `{id}`, which {that} before it already has: keys and checkpoints name a site by its identity, so each must be unique; {fix}",
                        this = what(d),
                        that = what(earlier),
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    #[test]
    fn canonical_ignores_layout_and_literal_spelling() {
        let a = canonical(quote!(format!("{} x {}", qty, item)));
        let b: TokenStream = "format ! (\n  \"{} x {}\" ,qty,\n item )"
            .parse()
            .expect("tokens");
        assert_eq!(a, canonical(b));
        let raw: TokenStream = "send(r\"hi\", 0x10)".parse().expect("tokens");
        assert_eq!(canonical(raw), canonical(quote!(send("hi", 16))));
        assert_ne!(canonical(quote!(a && b)), canonical(quote!(a & &b)));
        let trailing: TokenStream = "f(a, b,); match x { A => { 1 }, B => 2, }"
            .parse()
            .expect("tokens");
        assert_eq!(
            canonical(trailing),
            canonical(quote!(f(a, b); match x { A => { 1 } B => 2 }))
        );
    }

    fn draft(kind: SiteKind, content: &str, name: Option<&str>) -> Draft {
        Draft {
            kind,
            content: content.to_owned(),
            name: name.map(str::to_owned),
            span: Span::call_site(),
        }
    }

    #[test]
    fn identical_sites_count_by_kind_and_content() {
        let mut n = Namer::default();
        let a1 = n.name(&draft(SiteKind::Send, "str\"a\"", None));
        let b = n.name(&draft(SiteKind::Send, "str\"b\"", None));
        let a2 = n.name(&draft(SiteKind::Send, "str\"a\"", None));
        let ask = n.name(&draft(SiteKind::Ask, "str\"a\"", None));
        let named = n.name(&draft(SiteKind::Ask, "str\"a\"", Some("age")));
        assert_eq!(a2, format!("{a1}-2"));
        assert_ne!(a1, b);
        assert!(
            a1.starts_with("send-") && ask.starts_with("ask-"),
            "{a1} {ask}"
        );
        assert_eq!(a1.len(), "send-".len() + 8);
        assert_eq!(named, "age");
    }

    #[test]
    fn collisions_are_reported_at_the_later_site() {
        let e = Errors::default();
        check_unique(
            &[
                ("age".into(), draft(SiteKind::Ask, "x", Some("age"))),
                ("age".into(), draft(SiteKind::Send, "y", Some("age"))),
            ],
            "order",
            &e,
        );
        let m = e.messages();
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].starts_with("a send of flow `order` has the identity `age`, which an ask"));
        check_name("a b", Span::call_site(), &e);
        assert_eq!(e.messages().len(), 2);
    }
}
