//! The console provider driven through in-memory pipes with a real bot.
//! Tests run on tokio's paused clock: the bot's delays and the waits between lines advance
//! virtual time, so the order of events does not depend on the machine's load.

use crate::support;

use std::time::Duration;
use tokio::time::Instant;

use crate::support::{Gate, Gated, Output};
use botmesh::message::{Location, OutgoingContent};
use botmesh::prelude::*;
use botmesh_providers::ConsoleProvider;
use tokio::io::{AsyncWriteExt, DuplexStream};

fn console_bot(gate: std::sync::Arc<Gate>) -> (DuplexStream, Output, ConsoleProvider, Bot) {
    let (input, provider_in) = tokio::io::duplex(64 * 1024);
    let (provider_out, output) = tokio::io::duplex(64 * 1024);
    let provider = ConsoleProvider::with_io(provider_in, provider_out).chat("ann");
    let bot = Bot::builder(Gated {
        inner: provider.clone(),
        gate,
    })
    .build()
    .expect("bot builds");
    bot.command("start", |ctx: Ctx| async move {
        ctx.reply_buttons("Continue?", [("yes", "Yes"), ("no", "No")])
            .await?;
        Ok(())
    });
    bot.when(matcher::interaction(), |ctx: Ctx| async move {
        let title = ctx
            .interaction()
            .and_then(|i| i.title.clone())
            .unwrap_or_default();
        ctx.reply(format!(
            "pressed {} ({title}) from {}",
            ctx.text(),
            ctx.sender()
        ))
        .await?;
        Ok(())
    });
    bot.command("where", |ctx: Ctx| async move {
        let sent = ctx
            .reply(OutgoingContent::Location(Location {
                latitude: 48.8584,
                longitude: 2.2945,
                name: Some("Tower".into()),
                address: None,
            }))
            .await?;
        ctx.reply("first\nsecond").await?;
        if let Some(id) = sent.message_id {
            ctx.edit(&id, "moved").await?;
        }
        Ok(())
    });
    bot.command("slow", |ctx: Ctx| async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ctx.reply("done at last").await?;
        Ok(())
    });
    bot.catch_all(|ctx: Ctx| async move {
        ctx.reply(format!("text: {}", ctx.text())).await?;
        Ok(())
    });
    (input, Output::new(output), provider, bot)
}

async fn write(input: &mut DuplexStream, text: &str) {
    input.write_all(text.as_bytes()).await.expect("write input");
}

#[tokio::test(start_paused = true)]
async fn buttons_render_numbered_and_are_answered_by_number_or_title() {
    let (mut input, mut output, _provider, bot) = console_bot(Gate::open());
    let run = support::spawn_run(&bot);
    write(&mut input, "/start\n").await;
    assert_eq!(output.next().await, "bot> Continue?");
    assert_eq!(output.next().await, "     [1] Yes  [2] No");
    write(&mut input, "1\n").await;
    assert_eq!(output.next().await, "bot> pressed yes (Yes) from ann");
    // The last message had no buttons: a number is plain text now.
    write(&mut input, "2\n").await;
    assert_eq!(output.next().await, "bot> text: 2");
    write(&mut input, "/start\n").await;
    assert_eq!(output.next().await, "bot> Continue?");
    assert_eq!(output.next().await, "     [1] Yes  [2] No");
    write(&mut input, "  no \n").await;
    assert_eq!(output.next().await, "bot> pressed no (No) from ann");
    drop(input);
    run.await.expect("run task").expect("run ok");
}

#[tokio::test(start_paused = true)]
async fn one_liners_multiline_and_edits() {
    let (mut input, mut output, _provider, bot) = console_bot(Gate::open());
    let run = support::spawn_run(&bot);
    write(&mut input, "/where\n").await;
    assert_eq!(
        output.next().await,
        "bot> [location: Tower (48.85840, 2.29450)]"
    );
    assert_eq!(output.next().await, "bot> first");
    assert_eq!(output.next().await, "     second");
    assert_eq!(output.next().await, "bot (edited)> moved");
    drop(input);
    run.await.expect("run task").expect("run ok");
}

#[tokio::test(start_paused = true)]
async fn reads_the_next_line_only_after_the_delivery_returned() {
    let gate = Gate::closed();
    let (mut input, mut output, _provider, bot) = console_bot(gate.clone());
    let run = support::spawn_run(&bot);
    write(&mut input, "one\ntwo\n").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        gate.calls(),
        1,
        "the second line waits until the first was accepted"
    );
    gate.permits.add_permits(1);
    assert_eq!(output.next().await, "bot> text: one");
    assert_eq!(
        gate.wait_calls(2).await,
        2,
        "the second line is read once the first was accepted"
    );
    gate.reject_next
        .store(true, std::sync::atomic::Ordering::SeqCst);
    gate.permits.add_permits(100);
    let refused = output.next().await;
    assert!(refused.starts_with("(not delivered: "), "{refused}");
    drop(input);
    run.await.expect("run task").expect("run ok");
}

#[tokio::test(start_paused = true)]
async fn end_of_input_stops_the_bot_after_the_drain() {
    let (mut input, mut output, provider, bot) = console_bot(Gate::open());
    let started = Instant::now();
    let run = support::spawn_run(&bot);
    write(&mut input, "/slow\n").await;
    support::end_input_and_drain(input, run, &bot, started, Duration::from_millis(300)).await;
    provider.output().flush().await.expect("output written");
    assert_eq!(output.rest().await, vec!["bot> done at last".to_owned()]);
}

#[tokio::test(start_paused = true)]
async fn an_attached_console_takes_turns_so_piped_numbers_answer_the_latest_buttons() {
    let (mut input, mut output, provider, bot) = console_bot(Gate::open());
    provider.attach(&bot);
    let run = support::spawn_run(&bot);
    write(&mut input, "/start\n2\n/start\nyes\n").await;
    drop(input);
    run.await.expect("run task").expect("run ok");
    provider.output().flush().await.expect("output written");
    assert_eq!(
        output.rest().await,
        vec![
            "bot> Continue?",
            "     [1] Yes  [2] No",
            "bot> pressed no (No) from ann",
            "bot> Continue?",
            "     [1] Yes  [2] No",
            "bot> pressed yes (Yes) from ann",
        ]
    );
}

/// The shop on the console, restarted while its order flow waits for an answer: the new
/// console shows the question the chat is waiting on before reading a line, and the answer
/// typed next is taken for it.
#[tokio::test]
async fn after_a_restart_the_console_shows_the_question_the_chat_waits_on() {
    use botmesh::durability::{MemoryKv, MemoryStore};
    use botmesh::durable::DurabilityOptions;
    use botmesh_examples::shop;

    let store = MemoryStore::new();
    let kv = std::sync::Arc::new(MemoryKv::new());
    let start = |store: MemoryStore| {
        let (input, provider_in) = tokio::io::duplex(64 * 1024);
        let (provider_out, output) = tokio::io::duplex(64 * 1024);
        let console = ConsoleProvider::with_io(provider_in, provider_out).chat("ann");
        let bot = shop::shop_bot(
            Bot::builder(console.clone())
                .bot_id(shop::BOT_ID)
                .store(store)
                .durability(DurabilityOptions::shared(kv.clone()).instance_id("console-1")),
        )
        .expect("shop");
        console.attach(&bot);
        let run = support::spawn_run(&bot);
        (input, Output::new(output), run)
    };
    let until = async |output: &mut Output, start: &str| loop {
        let line = output.next().await;
        if line.starts_with(start) {
            return line;
        }
    };

    let (mut input, mut output, run) = start(store.clone());
    write(&mut input, "/order\n").await;
    until(&mut output, "bot> What would you like?").await;
    drop(input);
    run.await.expect("run task").expect("first run");

    let (mut input, mut output, run) = start(store.clone());
    let first = output.next().await;
    assert!(
        first.starts_with("bot (waiting for your answer)> What would you like?"),
        "the question is shown again first: {first}"
    );
    write(&mut input, "Coffee\n").await;
    until(&mut output, "bot> How many Coffee?").await;
    drop(input);
    run.await.expect("run task").expect("second run");
}
