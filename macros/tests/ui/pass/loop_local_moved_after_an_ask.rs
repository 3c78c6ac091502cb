//! Compiles without a warning: the code `#[flow]` generates raises none of its own.
#![deny(warnings)]

use botmesh::prelude::*;

/// A loop-local String that lives across the ask and is moved after it.
#[flow(start = command("cart"))]
#[persistent]
async fn cart(cx: &mut FlowCx) -> FlowResult {
    let mut cart: Vec<String> = Vec::new();
    loop {
        let item: String = format!("item {}", cart.len() + 1);
        let a = cx.ask(format!("Add {item}?")).await?;
        if !a.is_yes() {
            break;
        }
        cart.push(item);
    }
    cx.send(format!("{} items", cart.len())).await?;
    Ok(())
}

/// The same with a second ask after the move (its marker in the resumed rest) and macros
/// without `break`/`continue` among their tokens: still lowered without a flag.
#[flow(start = command("cart2"))]
#[persistent]
async fn cart2(cx: &mut FlowCx) -> FlowResult {
    let mut cart: Vec<String> = Vec::new();
    loop {
        let item: String = format!("item {}", cart.len() + 1);
        let a = cx.ask(format!("Add {item}?")).await?;
        if !a.is_yes() {
            break;
        }
        cart.push(item);
        // A macro of another crate, without `break`/`continue` in its tokens.
        let _j = serde_json::json!({ "n": cart.len() });
        let _more = cx.ask(format!("{} so far. Go on?", cart.len())).await?;
    }
    cx.send(format!("{} items", cart.len())).await?;
    Ok(())
}

fn main() {
    let _ = cart;
    let _ = cart2;
}
