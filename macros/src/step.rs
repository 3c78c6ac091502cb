//! Step: the body of a flow's `step` function, built so that no code of the flow is written
//! twice for states that continue the same way.
//!
//! The function body's top-level statements are cut after each one that holds a suspension
//! (an ask or a sub-flow call), into segments. Each segment is written once. A state resumes
//! inside the last statement of its segment (the rest of that statement, rebuilt by `lower`),
//! then hands the locals the following code uses (a tuple, typed by inference) to the code of
//! the next segment, which follows the `match` that dispatches on the state:
//!
//! ```text
//! __done({                                        // (the state's variants are imported by
//!     let (item,) = match state {                 //  the expansion's block; see `codec`)
//!         __Start {} => { …forward code…; (item,) }
//!         qty {} => {
//!             let __Some(mut __botmesh_resumed) = cx.__resume_ask("order/qty", …).await? else {
//!                 return __wait(qty {});          // the answer failed validation: wait again
//!             };
//!             …the rest of the statement…; (item,)
//!         }
//!         _ => __later(),                         // a state of a later segment
//!     };
//!     …the statements after it, up to the end of the body…
//! })
//! ```
//!
//! with one more `match` level per segment (a state of a later segment skips the earlier
//! ones). A plain ask (no `parse`/`validate`) cannot fail validation: its arm has no slot,
//! the answer is read where the ask stood (`cx.__answer_now()`). A segment that ends in a
//! loop opening with its only suspension, a plain ask (`let item = loop { let a =
//! cx.ask(…).await?; … }`), is written differently, so that the ask is not written again
//! for the loop's next iteration: the state's arm only gives back the locals it kept, the
//! other way in runs the statements before the loop (when there are none, the previous
//! segment's arms are this `match`'s own), and both meet at the loop, written once, whose
//! ask reads the answer when the step resumed there (`cx.__answered()`) and suspends
//! otherwise; such a segment's statements bind exactly what it hands on, so the next
//! segment runs them in its own block instead of taking a tuple from them. Forward code
//! stops at the next suspension (an early `return` carrying the live locals). Which locals
//! a state keeps is `liveness`'s (computed on the whole rest of the program, so that it
//! does not depend on this layout); the tuple carries only what the next segment uses. The
//! helpers (`botmesh::flow`'s `__answered`, `__wait`, `__done`, …) keep what every state
//! repeats out of the expansion: the shop's order flow expands to a step function of 1.4
//! times its source's tokens (pinned by `expand`'s size test).

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::TokenStream;
use quote::{ToTokens, format_ident, quote};
use syn::{Expr, Ident, Stmt};

use crate::diverge;
use crate::liveness::{self, Binding, Lowered};
use crate::lower::{self, Flags, markers_in_stmts};
use crate::validate::{ANSWER_SIDE, Kind, Suspension};

/// A segment of the body (see the module comment).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Segment {
    /// The top-level statements it runs when entered from the previous segment.
    pub(crate) stmts: std::ops::Range<usize>,
    /// The suspensions its last statement holds (they resume in this segment).
    pub(crate) states: Vec<usize>,
    /// What it hands on: the locals the following code uses, or `None` for the last
    /// segment, whose value is the flow's result.
    pub(crate) carries: Option<Vec<String>>,
}

/// Cuts a validated body into segments. `uses[k]` are the names suspension `k` needs from
/// the code around it (its prompt's and its kept locals).
pub(crate) fn segments(
    stmts: &[Stmt],
    params: &[Binding],
    uses: &BTreeMap<usize, BTreeSet<String>>,
) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, s) in stmts.iter().enumerate() {
        let held = markers_in_stmts(std::slice::from_ref(s));
        if held.is_empty() {
            continue;
        }
        let last = i + 1 == stmts.len();
        let carries = if last && matches!(s, Stmt::Expr(_, None)) {
            None
        } else {
            Some(carried(stmts, i, params, uses))
        };
        out.push(Segment {
            stmts: start..i + 1,
            states: held,
            carries,
        });
        start = i + 1;
    }
    if out.last().is_none_or(|s| s.carries.is_some()) {
        out.push(Segment {
            stmts: start..stmts.len(),
            states: Vec::new(),
            carries: None,
        });
    }
    out
}

/// The locals in scope after top-level statement `i` that the statements after it use.
fn carried(
    stmts: &[Stmt],
    i: usize,
    params: &[Binding],
    uses: &BTreeMap<usize, BTreeSet<String>>,
) -> Vec<String> {
    let used = liveness::free_vars(&stmts[i + 1..], uses);
    scope_after(stmts, i, params)
        .into_iter()
        .map(|b| b.name.to_string())
        .filter(|n| used.contains(n))
        .collect()
}

/// The bindings in scope at the top level after statement `i` (the innermost of each name).
fn scope_after(stmts: &[Stmt], i: usize, params: &[Binding]) -> Vec<Binding> {
    let mut all = params.to_vec();
    for s in &stmts[..=i] {
        if let Stmt::Local(l) = s {
            liveness::pat_bindings(&l.pat, None, &mut all);
        }
    }
    let mut out: Vec<Binding> = Vec::new();
    for b in all {
        out.retain(|d| d.name != b.name);
        out.push(b);
    }
    out
}

/// The bindings in scope at the top level before statement `i`.
fn scope_before(stmts: &[Stmt], i: usize, params: &[Binding]) -> Vec<Binding> {
    match i {
        0 => params.to_vec(),
        _ => scope_after(stmts, i - 1, params),
    }
}

/// What `step` needs to know about a flow.
pub(crate) struct Step<'a> {
    pub(crate) cx: &'a Ident,
    pub(crate) flow_name: &'a str,
    /// The validated body's statements.
    pub(crate) body: &'a [Stmt],
    pub(crate) suspensions: &'a [Suspension],
    pub(crate) lowered: &'a [Lowered],
    pub(crate) params: &'a [Binding],
    /// The state enum's variant of each suspension (see `codec::variant`).
    pub(crate) variants: &'a BTreeMap<usize, Ident>,
    /// The start state's variant.
    pub(crate) start: &'a Ident,
}

impl Step<'_> {
    fn variant(&self, k: usize) -> Ident {
        self.variants
            .get(&k)
            .cloned()
            .unwrap_or_else(|| format_ident!("__S{}", k))
    }

    fn susp(&self, k: usize) -> Option<(&Suspension, &Lowered)> {
        self.suspensions
            .iter()
            .zip(self.lowered)
            .find(|(s, _)| s.id == k)
    }

    /// What suspension `k` needs from the code around it.
    pub(crate) fn uses(&self) -> BTreeMap<usize, BTreeSet<String>> {
        let cx = self.cx.to_string();
        self.suspensions
            .iter()
            .zip(self.lowered)
            .map(|(s, l)| {
                let prompt = match &s.kind {
                    Kind::Ask { chain, .. } => chain.to_token_stream(),
                    Kind::Call { call, .. } => call.to_token_stream(),
                };
                let mut u = liveness::free_vars_tokens(prompt);
                u.remove(&cx);
                u.extend(l.live.iter().map(|b| b.name.to_string()));
                (s.id, u)
            })
            .collect()
    }

    /// The suspension `k` as code: send the prompt (or start the sub-flow) and return the
    /// state with its kept locals.
    pub(crate) fn suspend(&self, k: usize) -> Expr {
        let Some((s, l)) = self.susp(k) else {
            return syn::parse_quote!({});
        };
        let cx = self.cx;
        let v = self.variant(k);
        let live = names(&l.live);
        match &s.kind {
            Kind::Ask { chain, .. } => {
                let site = format!("{}/{}", self.flow_name, s.ident);
                let prompt = prompt_side(chain);
                syn::parse_quote!(return #cx.__ask_at(#site, #prompt, #v { #(#live),* }).await)
            }
            Kind::Call { call, .. } => syn::parse_quote!({
                #cx.__call(#call);
                return __wait(#v { #(#live),* });
            }),
        }
    }

    fn forward(&self, stmts: Vec<Stmt>) -> Vec<Stmt> {
        lower::forward_stmts(stmts, &|k| self.suspend(k))
    }

    /// The body of the `step` function's `async` block.
    pub(crate) fn body(&self) -> TokenStream {
        let segs = segments(self.body, self.params, &self.uses());
        let stage = self
            .stage(&segs, segs.len() - 1, quote!(__botmesh_state))
            .expr();
        quote!(__done(#stage))
    }

    /// Segment `j` over the state `scrut`: its value is what it carries (or the flow's result
    /// for the last one).
    fn stage(&self, segs: &[Segment], j: usize, scrut: TokenStream) -> Staged {
        if let Some(code) = self.loop_head_stage(segs, j, &scrut) {
            return code;
        }
        let seg = &segs[j];
        let mut arms = Vec::new();
        for &k in &seg.states {
            arms.push(self.state_arm(k, &self.body[seg.stmts.end - 1], seg));
        }
        let entered: Vec<Stmt> = self.body[seg.stmts.clone()].to_vec();
        if j == 0 {
            let fields = names(self.params);
            let code = self.then_hand_on(self.forward(entered), seg);
            let rebind = rebind_mut(self.params.iter().filter(|b| b.mutable).map(|b| &b.name));
            let start = self.start;
            arms.push(quote!(#start { #(#fields),* } => { #rebind #code }));
            if segs.iter().skip(1).any(|s| !s.states.is_empty()) {
                // A later state is resumed in its own segment.
                arms.push(quote!(_ => __later(),));
            }
        } else {
            let code = self.then_hand_on(self.forward(entered), seg);
            if seg.states.is_empty() {
                let take = self.take_carried(&segs[j - 1], self.stage(segs, j - 1, scrut));
                return Staged::Expr(quote!({ #take #code }));
            }
            let s = format_ident!("__botmesh_s{}", j);
            let take = self.take_carried(&segs[j - 1], self.stage(segs, j - 1, quote!(#s)));
            arms.push(quote!(#s => { #take #code }));
        }
        Staged::Match { scrut, arms }
    }

    /// Segment `j` when its last statement is a loop (or `let … = loop …`) that opens with its
    /// only suspension, a plain ask: the loop is written once, its ask reading the answer
    /// when the step resumed there (`cx.__answered()`, taken by the first ask that reads it)
    /// and suspending otherwise. The state's arm only gives back the locals it kept, the
    /// other way in runs the statements before the loop, and both meet at the loop, so the
    /// ask is not written a second time for the loop's next iteration. `None` for any other
    /// segment.
    fn loop_head_stage(&self, segs: &[Segment], j: usize, scrut: &TokenStream) -> Option<Staged> {
        let seg = &segs[j];
        let [k] = seg.states[..] else {
            return None;
        };
        let (s, l) = self.susp(k)?;
        match &s.kind {
            Kind::Ask { answer_side, .. } if answer_side.is_empty() => {}
            _ => return None,
        }
        let held_at = seg.stmts.end - 1;
        let held = &self.body[held_at];
        let lp = match held {
            Stmt::Expr(Expr::Loop(lp), _) => lp,
            Stmt::Local(syn::Local {
                init: Some(init), ..
            }) if init.diverge.is_none() => match &*init.expr {
                Expr::Loop(lp) => lp,
                _ => return None,
            },
            _ => return None,
        };
        if lp.body.stmts.first().and_then(lower::direct_marker_stmt) != Some(k) {
            return None;
        }
        // What the loop and the code after it use, in scope before it: the state keeps
        // exactly these (nothing is bound between the loop's start and its ask).
        let used = liveness::free_vars(&self.body[held_at..], &self.uses());
        let carried: Vec<Binding> = scope_before(self.body, held_at, self.params)
            .into_iter()
            .filter(|b| used.contains(&b.name.to_string()))
            .collect();
        let kept: BTreeSet<String> = l.live.iter().map(|b| b.name.to_string()).collect();
        if kept != carried.iter().map(|b| b.name.to_string()).collect() {
            return None;
        }
        let ids = tuple(names(&carried));
        let rebind = rebind_mut(carried.iter().filter(|b| b.mutable).map(|b| &b.name));
        let mut before: Vec<Stmt> = self.body[seg.stmts.start..held_at].to_vec();
        lower::allow_unused_mut(&mut before);
        // With nothing carried the match is a statement: its arms hand on no `()`.
        let hand = (!carried.is_empty() && !diverge::stmts_end(&before)).then(|| ids.clone());
        let v = self.variant(k);
        let fields = names(&l.live);
        let mut arms = vec![quote!(#v { #(#fields),* } => #ids,)];
        // Whether the state only says where the step starts: nothing to take from it.
        let nothing_kept =
            j == 0 && carried.is_empty() && before.is_empty() && self.params.is_empty();
        if j == 0 {
            let params = names(self.params);
            let rebind = rebind_mut(self.params.iter().filter(|b| b.mutable).map(|b| &b.name));
            let start = self.start;
            arms.push(quote!(#start { #(#params),* } => { #rebind #(#before)* #hand }));
            if segs.iter().skip(1).any(|s| !s.states.is_empty()) {
                arms.push(quote!(_ => __later(),));
            }
        } else {
            let s = format_ident!("__botmesh_s{}", j);
            if before.is_empty() {
                // The previous segment hands on what the loop takes (the same locals, in
                // scope at the same point): its arms are this match's, or it is one arm.
                match self.stage(segs, j - 1, scrut.clone()) {
                    Staged::Match { arms: prev, .. } => arms.extend(prev),
                    _ => {
                        let prev = self.stage(segs, j - 1, quote!(#s)).expr();
                        arms.push(quote!(#s => #prev,));
                    }
                }
            } else {
                let prev = self.stage(segs, j - 1, quote!(#s));
                let take = self.take_carried(&segs[j - 1], prev);
                arms.push(quote!(#s => { #take #(#before)* #hand }));
            }
        }
        let cx = self.cx;
        let suspend = self.suspend(k);
        let ask: Expr = syn::parse_quote!(
            if let __Some(__botmesh_answer) = #cx.__answered() {
                __botmesh_answer
            } else {
                #suspend
            }
        );
        let looped = lower::replace_marker(held.clone(), k, &ask);
        let bind = if nothing_kept {
            // Started or resumed at the loop, the step runs the loop: no state to look at.
            quote!()
        } else if carried.is_empty() {
            quote!(match #scrut { #(#arms)* })
        } else {
            quote!(let #ids = match #scrut { #(#arms)* }; #rebind)
        };
        // The locals bound here, besides the loop's: those the state kept.
        let mut bound: Vec<String> = carried.iter().map(|b| b.name.to_string()).collect();
        if let Stmt::Local(local) = &looped {
            let mut out = Vec::new();
            liveness::pat_bindings(&local.pat, None, &mut out);
            bound.extend(out.iter().map(|b| b.name.to_string()));
        }
        match &seg.carries {
            Some(hands)
                if !diverge::stmt_ends(&looped) && bound.iter().all(|b| hands.contains(b)) =>
            {
                Some(Staged::Flat {
                    stmts: quote!(#bind #looped),
                    hands: hands.clone(),
                })
            }
            _ => {
                let code = self.then_hand_on(vec![looped], seg);
                Some(Staged::Expr(quote!({ #bind #code })))
            }
        }
    }

    /// `let (a, b) = <before>;` (with `mut` rebinds), or the statement alone; or, when
    /// `before` binds exactly what it hands on, its statements themselves.
    fn take_carried(&self, prev: &Segment, before: Staged) -> TokenStream {
        let before = match before {
            Staged::Flat { stmts, .. } => return stmts,
            other => other.expr(),
        };
        let carried = prev.carries.as_deref().unwrap_or_default();
        if carried.is_empty() {
            return quote!(#before;);
        }
        let bindings = scope_after(self.body, prev.stmts.end - 1, self.params);
        let ids: Vec<&Ident> = carried
            .iter()
            .filter_map(|c| bindings.iter().find(|b| b.name == c.as_str()))
            .map(|b| &b.name)
            .collect();
        let muts = carried
            .iter()
            .filter_map(|c| bindings.iter().find(|b| b.name == c.as_str() && b.mutable))
            .map(|b| &b.name);
        let rebind = rebind_mut(muts);
        let ids = tuple(ids);
        quote!(let #ids = #before; #rebind)
    }

    /// Code, then the tuple a segment hands on when the code can complete.
    fn then_hand_on(&self, code: Vec<Stmt>, seg: &Segment) -> TokenStream {
        let hand = match &seg.carries {
            Some(c) if !c.is_empty() && !diverge::stmts_end(&code) => {
                tuple(c.iter().map(|n| format_ident!("{}", n)))
            }
            _ => quote!(),
        };
        quote!(#(#code)* #hand)
    }

    /// The arm of state `k`: take the answer (or the sub-flow's output), run the rest of the
    /// statement `held` that holds it, hand on.
    fn state_arm(&self, k: usize, held: &Stmt, seg: &Segment) -> TokenStream {
        let Some((s, l)) = self.susp(k) else {
            return quote!();
        };
        let cx = self.cx;
        let v = self.variant(k);
        let fields = names(&l.live);
        let resume = match &s.kind {
            // A plain ask cannot fail validation: its answer is read where the ask stood.
            Kind::Ask { answer_side, .. } if answer_side.is_empty() => None,
            Kind::Ask { answer_side, .. } => {
                let site = format!("{}/{}", self.flow_name, s.ident);
                Some(quote!(#cx.__resume_ask(#site, __resumed() #(#answer_side)*).await?))
            }
            Kind::Call { callee, .. } => {
                Some(quote!(#cx.__resume_call(__output_of(#callee)).await?))
            }
        };
        let flags = match resume {
            Some(_) => Flags::new(true),
            None => Flags::new(true).taking(syn::parse_quote!(#cx.__answer_now())),
        };
        let rest = lower::unbind_diverging(lower::resume_stmt(held, k, &mut { flags }));
        let code = self.then_hand_on(self.forward(vec![rest]), seg);
        let rebind = rebind_mut(l.live.iter().filter(|b| b.mutable).map(|b| &b.name));
        let take = resume.map(|resume| {
            quote! {
                let __Some(mut __botmesh_resumed) = #resume else {
                    return __wait(#v { #(#fields),* });
                };
            }
        });
        quote! {
            #v { #(#fields),* } => {
                #take
                #rebind
                #code
            }
        }
    }
}

/// A segment's code, as `Step::stage` builds it.
enum Staged {
    /// An expression: its value is what the segment hands on.
    Expr(TokenStream),
    /// A `match` over the state `scrut` (whose arms a loop's stage may take as its own).
    Match {
        scrut: TokenStream,
        arms: Vec<TokenStream>,
    },
    /// Statements after which the locals the segment hands on (`hands`) are bound, and no
    /// other local of theirs: the segment that takes them runs the statements in its own
    /// block rather than binding a tuple they hand on.
    Flat {
        stmts: TokenStream,
        hands: Vec<String>,
    },
}

impl Staged {
    /// As an expression: `{ stmts (hands) }` for statements.
    fn expr(self) -> TokenStream {
        match self {
            Staged::Expr(e) => e,
            Staged::Match { scrut, arms } => quote!(match #scrut { #(#arms)* }),
            Staged::Flat { stmts, hands } if hands.is_empty() => quote!({ #stmts }),
            Staged::Flat { stmts, hands } => {
                let ids = tuple(hands.iter().map(|n| format_ident!("{}", n)));
                quote!({ #stmts #ids })
            }
        }
    }
}

/// An ask's chain without its answer side (`.validate(…)`, `.parse(…)`): only the prompt
/// side is sent when the flow suspends; the answer side runs when it resumes.
fn prompt_side(chain: &Expr) -> Expr {
    match chain {
        // The answer side, and `.id(…)` (the macro's, a no-op at run time).
        Expr::MethodCall(m)
            if ANSWER_SIDE.contains(&m.method.to_string().as_str()) || m.method == "id" =>
        {
            prompt_side(&m.receiver)
        }
        Expr::MethodCall(m) => {
            let mut m = m.clone();
            *m.receiver = prompt_side(&m.receiver);
            Expr::MethodCall(m)
        }
        other => other.clone(),
    }
}

/// `(a,)` or `(a, b)`: a tuple of locals (a pattern or a value).
fn tuple<T: ToTokens>(items: impl IntoIterator<Item = T>) -> TokenStream {
    let items: Vec<T> = items.into_iter().collect();
    match items.as_slice() {
        [one] => quote!((#one,)),
        all => quote!((#(#all),*)),
    }
}

fn names(bs: &[Binding]) -> Vec<&Ident> {
    bs.iter().map(|b| &b.name).collect()
}

/// `let mut x = x;` for locals the author declared `mut` (allowed to stay unmutated: the
/// code of one state may not be the part that mutates them).
fn rebind_mut<'a>(names: impl Iterator<Item = &'a Ident>) -> TokenStream {
    let names: Vec<&Ident> = names.collect();
    if names.is_empty() {
        return quote!();
    }
    quote!(#[allow(unused_mut)] let (#(mut #names,)*) = (#(#names,)*);)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::Errors;
    use proc_macro2::TokenStream;

    /// The segments of a flow, with the names of the states they resume.
    fn plan(src: &str) -> Vec<(Vec<String>, Option<Vec<String>>)> {
        let e = Errors::default();
        let args = crate::parse::parse_args(TokenStream::new(), &e);
        let item: TokenStream = src.parse().expect("tokens");
        let def = crate::parse::parse_fn(item, args, true, &e).expect("a function");
        let a = crate::analyze::analyze(&def.name, &def.cx, &def.params, None, def.body, &e);
        assert!(e.is_empty(), "{:?}", e.messages());
        let step = Step {
            cx: &def.cx,
            flow_name: "f",
            body: &a.body.stmts,
            suspensions: &a.suspensions,
            lowered: &a.lowered,
            params: &a.param_bindings,
            variants: &BTreeMap::new(),
            start: &format_ident!("__Start"),
        };
        segments(&a.body.stmts, &a.param_bindings, &step.uses())
            .into_iter()
            .map(|s| {
                let states = s
                    .states
                    .iter()
                    .map(|k| a.suspensions[k - 1].ident.clone())
                    .collect();
                (states, s.carries)
            })
            .collect()
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    /// Each case: what it shows, a flow, and its plan.
    #[test]
    fn a_body_is_cut_after_each_statement_holding_an_ask() {
        let cases = [
            (
                "one segment per statement holding an ask, then the rest",
                r#"
                async fn f(cx: &mut FlowCx, n: u32) -> FlowResult {
                    let unused = 1;
                    let item: String = loop {
                        let a = cx.ask("Item?").id("item").await?;
                        if !a.text().is_empty() { break a.text().to_owned(); }
                    };
                    let qty: u32 = cx.ask("Qty?").id("qty").parse::<u32>("A number.").await?;
                    cx.send(format!("{qty} x {item} ({n})")).await?;
                    Ok(())
                }"#,
                vec![
                    (names(&["item"]), Some(names(&["n", "item"]))),
                    (names(&["qty"]), Some(names(&["n", "item", "qty"]))),
                    (vec![], None),
                ],
            ),
            (
                "an ask in the tail expression gives the result",
                r#"
                async fn f(cx: &mut FlowCx) -> FlowResult {
                    cx.send("hi").await?;
                    match cx.ask("Go?").id("go").await?.text() {
                        "yes" => Ok(()),
                        _ => Ok(()),
                    }
                }"#,
                vec![(names(&["go"]), None)],
            ),
            (
                "a flow without asks is one segment",
                r#"
                async fn f(cx: &mut FlowCx) -> FlowResult {
                    cx.send("hi").await?;
                    Ok(())
                }"#,
                vec![(vec![], None)],
            ),
        ];
        for (what, src, expected) in cases {
            assert_eq!(plan(src), expected, "{what}");
        }
    }
}
