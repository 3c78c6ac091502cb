//! `#[flow]` lowering of shapes that must compile and behave: shadowing that never brings an
//! outer local back, a name reused in a loop, a deferred initialisation complete before the ask,
//! a macro expanding to `continue` in a resumed loop iteration, and loops resumed mid-iteration
//! (labels, `continue` in nested loops, `break` with values, loops in match arms, `while`).
//! The shapes the lowering refuses are pinned by `macros/tests/ui/fail`.
#![allow(missing_docs, clippy::unwrap_used)]
use botmesh::prelude::*;
use botmesh::testing::Transcript;

/// `if let Some(x) = x` across an ask: the outer `order` is moved into the pattern and never
/// used after the block, so nothing can "come back" with the wrong value.
#[flow(start = command("fp1"))]
#[persistent]
async fn fp1(cx: &mut FlowCx) -> FlowResult {
    let order: Option<String> = Some("tea".to_owned());
    if let Some(order) = order {
        // the rebinding the untyped-pattern error asks for
        let order: String = order;
        let _ok = cx.ask(format!("Confirm {order}?")).await?;
        cx.send(format!("ordered {order}")).await?;
    }
    Ok(())
}

/// A name reused inside a loop; the outer one is dead after its first use.
#[flow(start = command("fp2"))]
#[persistent]
async fn fp2(cx: &mut FlowCx) -> FlowResult {
    let reply: String = cx.ask("Name?").await?.text().to_owned();
    cx.send(format!("Hi {reply}")).await?;
    loop {
        let reply: String = cx.ask("Age?").await?.text().to_owned();
        if reply.parse::<u32>().is_ok() {
            break;
        }
        let _ok = cx.ask("Not a number. Again?").await?;
        cx.send(format!("you said {reply}")).await?;
    }
    Ok(())
}

/// A local declared first and given its value before the ask (deferred initialisation that
/// is complete when the flow suspends).
#[flow(start = command("fp3"))]
#[persistent]
#[allow(clippy::needless_late_init)] // the deferred initialisation is what this flow tests
async fn fp3(cx: &mut FlowCx) -> FlowResult {
    let size: String;
    if cx.ctx().text().contains("big") {
        size = "L".to_owned();
    } else {
        size = "M".to_owned();
    }
    let _ok = cx.ask(format!("Size {size}, ok?")).await?;
    cx.send(format!("Size {size}")).await?;
    Ok(())
}

#[tokio::test]
async fn the_flows_run() {
    let mut t = Transcript::of(|bot| {
        bot.flow(fp1).flow(fp2).flow(fp3);
    })
    .await
    .unwrap();
    t.says_all("a", &["/fp1", "yes"]).await;
    t.says_all("b", &["/fp2", "Ann", "x", "y", "30"]).await;
    t.says_all("c", &["/fp3 big", "yes"]).await;
    let r = t.render();
    assert!(r.contains("ordered tea"), "{r}");
    assert!(r.contains("you said x"), "{r}");
    assert!(r.contains("Size L"), "{r}");
}

/// Its `continue` comes from the call site, so the lowering sees it.
macro_rules! unless {
    ($c:expr, $then:expr) => {
        if !$c {
            $then;
        }
    };
}

#[flow(start = command("m"))]
#[persistent]
async fn m(cx: &mut FlowCx) -> FlowResult {
    let mut n: u32 = 0;
    loop {
        let a: String = cx.ask("number?").await?.text().to_owned();
        unless!(a.parse::<u32>().is_ok(), continue);
        n += 1;
        if n == 2 {
            break;
        }
    }
    cx.send(format!("{n}")).await?;
    Ok(())
}

/// A macro call with `continue` among its tokens cannot be retargeted: the loop is re-entered
/// through a flag, and `continue` keeps its meaning.
#[tokio::test]
async fn a_macro_continue_in_a_resumed_iteration() {
    let mut t = botmesh_tests::transcript_of_flow(m).await;
    for say in ["/m", "x", "1", "y", "2"] {
        t.says("a", say).await;
    }
    let last = botmesh_tests::last_reply(&t);
    assert!(last.ends_with(": 2"), "{}", t.render());
}

#[flow(start = command("nest"))]
#[persistent]
async fn nest(cx: &mut FlowCx) -> FlowResult {
    let mut log: Vec<String> = Vec::new();
    let mut round: u32 = 0;
    let total: u32 = 'outer: loop {
        round += 1;
        if round > 3 {
            break 'outer 99;
        }
        let mut inner: u32 = 0;
        loop {
            inner += 1;
            let a: String = cx
                .ask(format!("r{round} i{inner}?"))
                .await?
                .text()
                .to_owned();
            match a.as_str() {
                "next" => continue 'outer,
                "stop" => break 'outer round * 10 + inner,
                "out" => break,
                _ => {}
            }
            if inner >= 2 {
                continue;
            }
            log.push(a);
        }
        log.push(format!("after r{round}"));
    };
    cx.send(format!("total {total} {}", log.join(","))).await?;
    Ok(())
}

#[flow(start = command("wh"))]
#[persistent]
async fn wh(cx: &mut FlowCx) -> FlowResult {
    let mut i: u32 = 0;
    let mut got: Vec<String> = Vec::new();
    while i < 3 {
        i += 1;
        let a: String = cx.ask(format!("w{i}?")).await?.text().to_owned();
        if a == "skip" {
            continue;
        }
        got.push(a);
    }
    let mode: String = cx.ask("mode?").await?.text().to_owned();
    let n: usize = match mode.as_str() {
        "loop" => loop {
            let b: String = cx.ask("more?").await?.text().to_owned();
            if b == "done" {
                break got.len();
            }
            got.push(b);
        },
        _ => 0,
    };
    cx.send(format!("got {} n {n}", got.join(","))).await?;
    Ok(())
}

#[flow(start = command("three"))]
#[persistent]
async fn three(cx: &mut FlowCx) -> FlowResult {
    let mut seen: Vec<String> = Vec::new();
    'outer: loop {
        let a: String = cx.ask("a?").await?.text().to_owned();
        loop {
            let b: String = cx.ask("b?").await?.text().to_owned();
            if b == "up" {
                seen.push(format!("up{a}"));
                continue 'outer;
            }
            let c: String = cx.ask("c?").await?.text().to_owned();
            seen.push(format!("{a}{b}{c}"));
            if c == "x" {
                break;
            }
        }
        if a == "q" {
            break;
        }
    }
    cx.send(seen.join(",")).await?;
    Ok(())
}

#[tokio::test]
async fn loops_keep_their_meaning() {
    let mut t = Transcript::of(|bot| {
        bot.flow(nest).flow(wh).flow(three);
    })
    .await
    .unwrap();
    t.says_all("a", &["/nest", "a", "b", "out", "next", "c", "stop"])
        .await;
    t.says_all("b", &["/wh", "x", "skip", "y", "loop", "p", "done"])
        .await;
    t.says_all("c", &["/three", "1", "up", "q", "b1", "c1", "b2", "x"])
        .await;
    let r = t.render();
    println!("{r}");
    assert!(r.contains("up1,qb1c1,qb2x"), "{r}");
    assert!(r.contains("total 32 a,after r1,c"), "{r}");
    assert!(r.contains("r3 i1?"), "{r}");
    assert!(r.contains("got x,y,p n 3"), "{r}");
}
