use botmesh::prelude::*;

// Each inner local shadows an outer one across an ask, and the outer one is used after the
// inner block within the same expression: refused (the state keeps one value per name).

/// The inner `x` shadows the outer one across ask b; the method call's argument uses the
/// outer `x` after the inner block ends.
#[flow(start = command("mc"))]
#[persistent]
async fn mc(cx: &mut FlowCx) -> FlowResult {
    let x: u32 = 100;
    let y: u32 = ({
        let x: u32 = cx.ask("a?").await?.text().parse().unwrap_or(0);
        let _b = cx.ask("b?").await?;
        x
    } as u32)
        .max(x);
    cx.send(format!("mc {y}")).await?;
    Ok(())
}

/// The `else` of a let-else uses the outer `x` after the inner block ends.
#[flow(start = command("le"))]
#[persistent]
async fn le(cx: &mut FlowCx) -> FlowResult {
    let x: String = "outer".to_owned();
    let Some(_y): Option<u32> = ({
        let x: String = cx.ask("a?").await?.text().to_owned();
        let _b = cx.ask("b?").await?;
        x.parse::<u32>().ok()
    }) else {
        cx.send(format!("le {x}")).await?;
        return Ok(());
    };
    Ok(())
}

/// The assignee `v[i]` is evaluated after the assigned value (the inner block).
#[flow(start = command("asg"))]
#[persistent]
async fn asg(cx: &mut FlowCx) -> FlowResult {
    let mut v: Vec<u32> = vec![0, 0, 0];
    let i: usize = 0;
    v[i] = {
        let i: usize = cx.ask("a?").await?.text().parse().unwrap_or(0);
        let _b = cx.ask("b?").await?;
        i as u32 + 7
    };
    cx.send(format!("asg {v:?}")).await?;
    Ok(())
}

fn main() {
    let _ = (mc, le, asg);
}
