//! The jsonl provider driven through in-memory pipes with a real bot.
//! Tests run on tokio's paused clock: the bot's delays and the waits between lines advance
//! virtual time, so the order of events does not depend on the machine's load.

use crate::support;

use std::time::Duration;
use tokio::time::Instant;

use crate::support::{Gate, Gated, Output};
use botmesh::prelude::*;
use botmesh_providers::JsonlProvider;
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, DuplexStream};

struct Harness {
    input: DuplexStream,
    output: Output,
    provider: JsonlProvider,
    bot: Bot,
}

fn harness(gate: Option<std::sync::Arc<Gate>>) -> Harness {
    let (input, provider_in) = tokio::io::duplex(64 * 1024);
    let (provider_out, output) = tokio::io::duplex(64 * 1024);
    let provider = JsonlProvider::with_io(provider_in, provider_out);
    let bot = match gate {
        Some(gate) => Bot::builder(Gated {
            inner: provider.clone(),
            gate,
        }),
        None => Bot::builder(provider.clone()),
    }
    .build()
    .expect("bot builds");
    provider.attach(&bot);
    bot.command("start", |ctx: Ctx| async move {
        ctx.reply_buttons("Continue?", [("yes", "Yes"), ("no", "No")])
            .await?;
        Ok(())
    });
    bot.when(matcher::button("yes"), |ctx: Ctx| async move {
        ctx.reply("You said yes").await?;
        Ok(())
    });
    bot.command("slow", |ctx: Ctx| async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ctx.reply("done at last").await?;
        Ok(())
    });
    bot.command("fail", |_ctx: Ctx| async move { Err("boom".into()) });
    bot.command("edit", |ctx: Ctx| async move {
        ctx.typing().await;
        let sent = ctx.reply("draft").await?;
        if let Some(id) = sent.message_id {
            ctx.edit(&id, "final").await?;
        }
        Ok(())
    });
    Harness {
        input,
        output: Output::new(output),
        provider,
        bot,
    }
}

async fn write(input: &mut DuplexStream, text: &str) {
    input.write_all(text.as_bytes()).await.expect("write input");
}

fn parse(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn acks_only_after_acceptance_and_nacks_refusals() {
    let gate = Gate::closed();
    let Harness {
        mut input,
        mut output,
        bot,
        ..
    } = harness(Some(gate.clone()));
    let run = support::spawn_run(&bot);
    write(
        &mut input,
        "{\"id\":\"m1\",\"chat\":\"a\",\"text\":\"/start\"}\n",
    )
    .await;
    write(
        &mut input,
        "{\"id\":\"m2\",\"chat\":\"a\",\"text\":\"hello\"}\n",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        output.next_within(Duration::from_millis(200)).await,
        None,
        "no ack before acceptance"
    );
    assert_eq!(
        gate.calls(),
        1,
        "the next line is read only once the first was delivered"
    );

    gate.reject_next
        .store(true, std::sync::atomic::Ordering::SeqCst);
    gate.permits.add_permits(1);
    let nack = output.next_json().await;
    assert_eq!(nack["type"], "nack", "{nack}");
    assert_eq!(nack["id"], "m1");
    assert!(
        nack["error"]
            .as_str()
            .is_some_and(|e| e.contains("disk on fire")),
        "{nack}"
    );

    gate.permits.add_permits(100);
    assert_eq!(output.next_json().await, json!({"type": "ack", "id": "m2"}));
    // A redelivery of the refused line is accepted.
    write(
        &mut input,
        "{\"id\":\"m1\",\"chat\":\"a\",\"text\":\"/start\"}\n",
    )
    .await;
    assert_eq!(output.next_json().await, json!({"type": "ack", "id": "m1"}));
    let send = output.next_json().await;
    assert_eq!(send["type"], "send");
    assert_eq!(send["text"], "Continue?");
    assert_eq!(send["key"], "a/m1:1");

    drop(input);
    run.await.expect("run task").expect("run ok");
}

/// The output lines of a bot on the default harness that reads `input` to its end.
async fn run_to_the_end(input_lines: &str) -> Vec<Value> {
    let mut h = harness(None);
    let run = support::spawn_run(&h.bot);
    write(&mut h.input, input_lines).await;
    drop(h.input);
    run.await.expect("run task").expect("run ok");
    h.provider.output().flush().await.expect("output written");
    parse(&h.output.rest().await)
}

#[tokio::test(start_paused = true)]
async fn malformed_lines_report_their_number_and_input_goes_on() {
    let lines = run_to_the_end(concat!(
        "{\"id\":\"1\",\"chat\":\"a\",\"text\":\"/start\"}\n",
        "this is not json\n",
        "\n",
        "{\"id\":\"3\",\"text\":\"no chat\"}\n",
        "{\"id\":\"5\",\"chat\":\"a\",\"button\":\"yes\",\"title\":\"Yes\"}\n",
    ))
    .await;

    let errors: Vec<&Value> = lines.iter().filter(|l| l["type"] == "error").collect();
    assert_eq!(errors.len(), 2, "{lines:?}");
    assert_eq!(errors[0]["line"], 2);
    assert!(
        errors[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("invalid JSON"))
    );
    assert_eq!(errors[1]["line"], 4);
    assert!(
        errors[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("`chat`"))
    );

    let acks: Vec<&Value> = lines.iter().filter(|l| l["type"] == "ack").collect();
    assert_eq!(
        acks,
        vec![
            &json!({"type": "ack", "id": "1"}),
            &json!({"type": "ack", "id": "5"})
        ]
    );

    let sends: Vec<&Value> = lines.iter().filter(|l| l["type"] == "send").collect();
    assert_eq!(sends.len(), 2, "{lines:?}");
    assert_eq!(sends[0]["chat"], "a");
    assert_eq!(sends[0]["key"], "a/1:1");
    assert_eq!(
        sends[0]["buttons"],
        json!([{"id": "yes", "title": "Yes"}, {"id": "no", "title": "No"}])
    );
    assert!(sends[0]["message_id"].is_string());
    assert_eq!(sends[1]["text"], "You said yes");
    assert_eq!(sends[1]["key"], "a/interaction:5:1");
    // A message's ack comes before the sends it causes.
    let pos = |v: &Value| lines.iter().position(|l| l == v).expect("present");
    assert!(pos(acks[0]) < pos(sends[0]));
    assert!(pos(acks[1]) < pos(sends[1]));
}

#[tokio::test(start_paused = true)]
async fn end_of_input_stops_the_bot_after_the_drain() {
    let Harness {
        mut input,
        mut output,
        provider,
        bot,
    } = harness(None);
    let started = Instant::now();
    let run = support::spawn_run(&bot);
    write(
        &mut input,
        "{\"id\":\"s1\",\"chat\":\"b\",\"text\":\"/slow\"}\n",
    )
    .await;
    support::end_input_and_drain(input, run, &bot, started, Duration::from_millis(300)).await;
    provider.output().flush().await.expect("output written");
    let lines = parse(&output.rest().await);
    assert_eq!(lines[0], json!({"type": "ack", "id": "s1"}));
    assert_eq!(lines[1]["type"], "send");
    assert_eq!(lines[1]["text"], "done at last");
    assert_eq!(lines[1]["key"], "b/s1:1");
}

#[tokio::test(start_paused = true)]
async fn duplicates_are_acked_and_errors_edits_typing_print() {
    let lines = run_to_the_end(concat!(
        "{\"id\":\"d1\",\"chat\":\"c\",\"text\":\"/edit\"}\n",
        "{\"id\":\"d1\",\"chat\":\"c\",\"text\":\"/edit\"}\n",
        "{\"id\":\"d2\",\"chat\":\"c\",\"text\":\"/fail\"}\n",
    ))
    .await;
    let of = |t: &str| {
        lines
            .iter()
            .filter(|l| l["type"] == t)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(of("ack").len(), 3, "a duplicate is acked too: {lines:?}");
    assert_eq!(of("typing"), vec![json!({"type": "typing", "chat": "c"})]);
    let sends = of("send");
    assert_eq!(sends.len(), 1, "the duplicate was not handled twice");
    let edits = of("edit");
    assert_eq!(edits.len(), 1);
    assert_eq!(edits[0]["text"], "final");
    assert_eq!(edits[0]["message_id"], sends[0]["message_id"]);
    let events = of("event");
    assert!(
        events
            .iter()
            .any(|e| e["name"] == "dropped" && e["reason"] == "duplicate"),
        "{events:?}"
    );
    assert!(
        events.iter().any(
            |e| e["name"] == "error" && e["error"].as_str().is_some_and(|s| s.contains("boom"))
        ),
        "{events:?}"
    );
}

// Real time: the next incarnation must start a wall-clock millisecond later than the lease
// was taken, which a paused tokio clock does not move (the test waits for the clock to move).
#[tokio::test]
async fn a_durability_event_prints_with_its_chat() {
    use botmesh::durability::keys::SendKey;
    use botmesh::durability::outbox::NewSend;
    use botmesh::durability::{MemoryKv, outbox::JournalBegun};
    use botmesh::durable::DurabilityOptions;

    let (input, provider_in) = tokio::io::duplex(64 * 1024);
    let (provider_out, output) = tokio::io::duplex(64 * 1024);
    let mut output = Output::new(output);
    let provider = JsonlProvider::with_io(provider_in, provider_out);
    let kv = std::sync::Arc::new(MemoryKv::new());
    let durable = || DurabilityOptions::shared(kv.clone()).instance_id("i1");
    // An earlier incarnation of the bot (same scope, same instance id) was about to call the
    // provider for chat c when it died: the send's outcome is unknown, which the next start
    // reports.
    let before = Bot::builder(botmesh::testing::MockProvider::new())
        .durability(durable())
        .build()
        .expect("earlier bot builds");
    let earlier = before.durability().expect("durable").clone();
    let begun = earlier
        .outbox()
        .journal_and_begin(NewSend::new(
            SendKey::explicit("k1"),
            "c",
            serde_json::to_value(Outgoing::from("hi")).expect("a payload"),
        ))
        .await
        .expect("journal");
    let leased_at = botmesh::clock::now_ms();
    assert!(matches!(begun, JournalBegun::Leased { .. }), "{begun:?}");
    drop((earlier, before));
    // The next incarnation starts later than that lease was taken: wait for the millisecond
    // clock to move on.
    while botmesh::clock::now_ms() <= leased_at {
        tokio::task::yield_now().await;
    }
    let bot = Bot::builder(provider.clone())
        .durability(durable())
        .build()
        .expect("bot builds");
    provider.attach(&bot);
    let mut events = bot.subscribe();
    let run = support::spawn_run(&bot);
    // The input ends once the start reported the send of unknown outcome.
    let reported = tokio::time::timeout(Duration::from_secs(5), async {
        while let Ok(event) = events.recv().await {
            if matches!(&event, BotEvent::Durability(e) if e.name() == "ambiguous") {
                return;
            }
        }
    });
    reported
        .await
        .expect("the start reports the ambiguous send");
    drop(input);
    run.await.expect("run task").expect("run ok");
    provider.output().flush().await.expect("output written");
    let lines = parse(&output.rest().await);
    let ambiguous = lines
        .iter()
        .find(|l| l["type"] == "event" && l["name"] == "durability:ambiguous")
        .unwrap_or_else(|| panic!("no ambiguous event: {lines:?}"));
    assert_eq!(ambiguous["chat"], "c", "{ambiguous}");
    assert_eq!(ambiguous["detail"]["key"], "k1", "{ambiguous}");
    assert_eq!(ambiguous["detail"]["text"], "hi", "{ambiguous}");
}
