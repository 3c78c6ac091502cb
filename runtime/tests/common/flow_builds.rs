//! `flow_builds!`: the builds of one flow, side by side.

/// Modules of one persistent flow each, written as the flow's body alone: `mod m: #[flow(…)]
/// fn name(cx, arg: T) { … }` declares `m::name`, a `#[persistent]` `pub(crate) async fn
/// name(cx: &mut FlowCx, arg: T) -> FlowResult` with the prelude in scope (`mod m { items }:
/// …` puts the items beside it). The builds of one flow that the key, version, identity and
/// upgrade tests (here and in the `tests` crate, which includes this file) set side by side.
/// The `#[flow]` attribute is taken as the caller's tokens (`$pound $flow`, not rebuilt here):
/// the lowering names the locals it keeps where the attribute stands, and they must be the
/// body's.
macro_rules! flow_builds {
    ($(
        $(#[$doc:meta])*
        $vis:vis mod $module:ident $({ $($item:item)* })?: $pound:tt $flow:tt
        fn $name:ident($cx:ident $(, $arg:ident: $ty:ty)*) { $($body:tt)* }
    )*) => {$(
        $(#[$doc])*
        $vis mod $module {
            use botmesh::prelude::*;

            $($($item)*)?

            $pound $flow
            #[persistent]
            pub(crate) async fn $name($cx: &mut FlowCx $(, $arg: $ty)*) -> FlowResult {
                $($body)*
            }
        }
    )*};
}
