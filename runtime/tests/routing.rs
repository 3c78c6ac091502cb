//! Routing through `MockProvider`: every dispatcher stage and its order, hooks (abort and
//! rewrite), access lists, dedupe, group mode, handoff, lang, plugins, triggers and events.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use botmesh::message::{Button, ChatId, Message, MessageId, OutgoingContent, Reaction, UserId};
use botmesh::prelude::*;
use botmesh::provider::{Accepted, CallEvent, EventKind};
use botmesh::testing::MockProvider;
use botmesh::{DropReason, SendOutcome};

use crate::common::events_picked;

fn bot_with(build: impl FnOnce(BotBuilder) -> BotBuilder) -> (Bot, MockProvider) {
    let mock = MockProvider::new();
    let bot = build(Bot::builder(mock.clone()))
        .build()
        .expect("valid config");
    (bot, mock)
}

fn reply(text: &'static str) -> impl Fn(Ctx) -> BoxFut + Send + Sync + 'static {
    move |ctx: Ctx| -> BoxFut {
        Box::pin(async move {
            ctx.reply(text).await?;
            Ok(())
        })
    }
}

type BoxFut = botmesh::bot::BoxFuture<HandlerResult>;

#[tokio::test]
async fn stages_run_in_the_dispatchers_order() {
    let (bot, mock) = bot_with(|b| b);
    bot.when(matcher::keyword(["help"]), reply("matcher:help"));
    bot.when(matcher::regex("^/?help"), reply("matcher:regex"));
    bot.command("help", reply("command:help"));
    bot.catch_all(reply("catch-all"));
    bot.when(matcher::button("yes"), reply("button:yes"));
    bot.start().await.unwrap();

    mock.say("a", "1", "/help").await.unwrap();
    mock.say("a", "2", "HELP").await.unwrap();
    mock.say("a", "3", "something else").await.unwrap();
    mock.press("a", "4", "yes").await.unwrap();
    mock.press("a", "5", "no").await.unwrap();
    bot.idle().await;
    assert_eq!(
        mock.texts("a"),
        [
            "command:help",
            "matcher:help",
            "catch-all",
            "button:yes",
            "catch-all"
        ],
        "command first, then matchers in registration order (first match wins), then catch-all"
    );
    bot.stop().await.unwrap();
}

#[tokio::test]
async fn on_message_takes_messages_in_matcher_order_but_not_interactions() {
    let (bot, mock) = bot_with(|b| b);
    bot.on_message(reply("on_message"));
    bot.when(
        matcher::keyword(["hi"]),
        reply("never: on_message was registered first"),
    );
    bot.catch_all(reply("catch-all"));
    bot.start().await.unwrap();
    mock.say("a", "1", "hi").await.unwrap();
    mock.press("a", "2", "x").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("a"), ["on_message", "catch-all"]);
}

#[tokio::test]
async fn command_args_and_prefixes() {
    let (bot, mock) = bot_with(|b| b);
    bot.command("order", |ctx: Ctx| async move {
        ctx.reply(format!("{}|{}", ctx.command().unwrap_or("-"), ctx.args()))
            .await?;
        Ok(())
    });
    bot.start().await.unwrap();
    mock.say("a", "1", "/Order@shop_bot 2 apples")
        .await
        .unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("a"), ["order|2 apples"]);
}

#[tokio::test]
async fn before_message_hook_can_stop_and_after_hooks_see_every_routed_message() {
    let (bot, mock) = bot_with(|b| b);
    let after = Arc::new(AtomicUsize::new(0));
    bot.before_message(|ctx: Ctx| async move {
        Ok(if ctx.text() == "secret" {
            HookFlow::Stop
        } else {
            HookFlow::Continue
        })
    });
    let a = after.clone();
    bot.after_message(move |_ctx: Ctx| {
        let a = a.clone();
        async move {
            a.fetch_add(1, Ordering::SeqCst);
        }
    });
    bot.catch_all(reply("ok"));
    bot.start().await.unwrap();
    mock.say("a", "1", "secret").await.unwrap();
    mock.say("a", "2", "public").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("a"), ["ok"]);
    assert_eq!(
        after.load(Ordering::SeqCst),
        1,
        "a stopped message skips the after hooks"
    );
    assert_eq!(bot.metrics().dropped_hook, 1);
}

#[tokio::test]
async fn before_send_hook_rewrites_and_aborts() {
    let (bot, mock) = bot_with(|b| b);
    bot.before_send(|mut draft: SendDraft| async move {
        match draft.outgoing.content.text() {
            "drop me" => SendDecision::Abort,
            t => {
                let upper = t.to_uppercase();
                draft.outgoing.content = OutgoingContent::from(upper);
                SendDecision::Proceed(draft)
            }
        }
    });
    let outcomes: Arc<Mutex<Vec<SendOutcome>>> = Arc::default();
    let o = outcomes.clone();
    bot.catch_all(move |ctx: Ctx| {
        let o = o.clone();
        async move {
            let first = ctx.reply("drop me").await?;
            let second = ctx.reply("hello").await?;
            o.lock().unwrap().extend([first, second]);
            Ok(())
        }
    });
    let sent_after = Arc::new(AtomicUsize::new(0));
    let s = sent_after.clone();
    bot.after_send(move |info: SentInfo| {
        let s = s.clone();
        async move {
            assert_eq!(info.outgoing.content.text(), "HELLO");
            s.fetch_add(1, Ordering::SeqCst);
        }
    });
    bot.start().await.unwrap();
    mock.say("a", "1", "x").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("a"), ["HELLO"]);
    let outcomes = outcomes.lock().unwrap().clone();
    assert!(outcomes[0].skipped);
    assert!(!outcomes[1].skipped);
    assert_eq!(outcomes[0].key.as_deref(), Some("a/1:1"));
    assert_eq!(outcomes[1].key.as_deref(), Some("a/1:2"));
    assert_eq!(sent_after.load(Ordering::SeqCst), 1);
    assert_eq!(bot.metrics().send_skipped, 1);
    assert!(
        mock.keys_seen().is_empty(),
        "the idempotency key never reaches the provider"
    );
}

#[tokio::test]
async fn access_lists_block_and_allow() {
    let (bot, mock) = bot_with(|b| b.block_user("mallory"));
    bot.catch_all(reply("hi"));
    bot.start().await.unwrap();
    assert_eq!(
        mock.say("mallory", "1", "hello").await,
        Ok(Accepted::Handled)
    );
    mock.say("alice", "2", "hello").await.unwrap();
    bot.idle().await;
    assert!(mock.texts("mallory").is_empty());
    assert_eq!(mock.texts("alice"), ["hi"]);
    bot.block_user("alice");
    mock.say("alice", "3", "hello").await.unwrap();
    bot.unblock_user(&UserId::from("mallory"));
    mock.say("mallory", "4", "hello").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("alice"), ["hi"]);
    assert_eq!(mock.texts("mallory"), ["hi"]);
    assert_eq!(bot.metrics().dropped_blocked, 2);

    let (bot, mock) = bot_with(|b| b.allow_chat("vip"));
    bot.catch_all(reply("welcome"));
    bot.start().await.unwrap();
    mock.say("vip", "1", "x").await.unwrap();
    mock.say("other", "1", "x").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.sent().len(), 1);
    assert_eq!(mock.texts("vip"), ["welcome"]);
}

#[tokio::test]
async fn duplicates_are_dropped_by_chat_and_id() {
    let (bot, mock) = bot_with(|b| b);
    let seen = events_picked(&bot, |e| match e {
        BotEvent::Dropped { reason, .. } => Some(*reason),
        _ => None,
    });
    bot.catch_all(reply("once"));
    bot.start().await.unwrap();
    assert_eq!(mock.say("a", "1", "x").await, Ok(Accepted::Queued));
    assert_eq!(mock.say("a", "1", "x").await, Ok(Accepted::Duplicate));
    assert_eq!(
        mock.say("b", "1", "x").await,
        Ok(Accepted::Queued),
        "ids are per chat"
    );
    bot.idle().await;
    assert_eq!(mock.sent().len(), 2);
    assert_eq!(bot.metrics().dropped_duplicate, 1);
    assert_eq!(*seen.lock().unwrap(), [DropReason::Duplicate]);
}

#[tokio::test]
async fn group_mode_mentions_or_commands() {
    let (bot, mock) = bot_with(|b| b.group_mode(GroupMode::MentionsOrCommands));
    bot.command("ping", reply("pong"));
    bot.catch_all(reply("heard"));
    bot.start().await.unwrap();
    let group_msg = |id: &str, text: &str, mention: bool| {
        let mut m = Message::text(id, "g", text);
        m.is_group = true;
        m.sender = UserId::from("alice");
        m.mentions_bot = mention;
        botmesh::provider::ProviderEvent::Message(m)
    };
    mock.deliver(group_msg("1", "chatter", false))
        .await
        .unwrap();
    mock.deliver(group_msg("2", "/ping", false)).await.unwrap();
    mock.deliver(group_msg("3", "@bot hello", true))
        .await
        .unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("g"), ["pong", "heard"]);
    assert_eq!(bot.metrics().dropped_group, 1);
    let ledger = bot.store().ledger("g", 10).await.unwrap();
    assert_eq!(
        ledger.len(),
        5,
        "an ignored group message is still persisted (3 in, 2 out)"
    );
}

#[tokio::test]
async fn handoff_gate_keeps_the_bot_quiet_until_released() {
    let (bot, mock) = bot_with(|b| b);
    bot.catch_all(reply("bot here"));
    bot.start().await.unwrap();
    bot.handoff(
        "a",
        Some("agent-7".into()),
        Some("asked for a human".into()),
    )
    .await
    .unwrap();
    assert!(bot.is_handed_off(&ChatId::from("a")));
    mock.say("a", "1", "hello?").await.unwrap();
    mock.say("b", "1", "hello?").await.unwrap();
    bot.idle().await;
    assert!(mock.texts("a").is_empty());
    assert_eq!(mock.texts("b"), ["bot here"]);
    assert_eq!(
        bot.store().handoffs().await.unwrap().len(),
        1,
        "handoffs are persisted"
    );
    assert!(bot.release("a").await.unwrap());
    mock.say("a", "2", "hello?").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("a"), ["bot here"]);
    assert_eq!(bot.metrics().dropped_handoff, 1);
}

#[tokio::test]
async fn handoffs_are_restored_on_start() {
    let store = botmesh::durability::MemoryStore::new();
    let (bot, _mock) = bot_with(|b| b.store(store.clone()));
    bot.start().await.unwrap();
    bot.handoff("a", None, None).await.unwrap();
    bot.stop().await.unwrap();
    let (bot2, mock2) = bot_with(|b| b.store(store.clone()));
    bot2.catch_all(reply("bot here"));
    bot2.start().await.unwrap();
    mock2.say("a", "1", "x").await.unwrap();
    bot2.idle().await;
    assert!(mock2.texts("a").is_empty());
}

#[tokio::test]
async fn lang_resolution_and_storage() {
    let (bot, mock) = bot_with(|b| b.default_lang("en"));
    bot.command("lang", |ctx: Ctx| async move {
        let lang = ctx.args().to_owned();
        ctx.set_lang(&lang).await?;
        Ok(())
    });
    bot.catch_all(|ctx: Ctx| async move {
        ctx.reply(ctx.lang().await).await?;
        Ok(())
    });
    bot.start().await.unwrap();
    mock.say("a", "1", "hi").await.unwrap();
    let mut m = Message::text("2", "a", "hi");
    m.lang_hint = Some("pt_BR".into());
    mock.deliver(botmesh::provider::ProviderEvent::Message(m))
        .await
        .unwrap();
    mock.say("a", "3", "/lang de").await.unwrap();
    mock.say("a", "4", "hi").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("a"), ["en", "pt-br", "de"]);
}

struct Greeter;

#[async_trait::async_trait]
impl Plugin for Greeter {
    fn name(&self) -> &str {
        "greeter"
    }
    async fn install(&self, bot: &Bot) -> Result<(), BotError> {
        bot.command("hello", reply("hello from the plugin"));
        bot.before_send(|mut d: SendDraft| async move {
            let t = format!("{} 👋", d.outgoing.content.text());
            d.outgoing.content = OutgoingContent::from(t);
            SendDecision::Proceed(d)
        });
        bot.on_event(|_| {});
        Ok(())
    }
}

#[tokio::test]
async fn unplug_removes_exactly_what_the_plugin_registered() {
    let (bot, mock) = bot_with(|b| b);
    bot.catch_all(reply("core"));
    let before = bot.registrations();
    bot.plug(Greeter).await.unwrap();
    assert_eq!(bot.registrations(), before + 2);
    assert!(
        bot.plug(Greeter).await.is_err(),
        "a plugin name is plugged once"
    );
    bot.start().await.unwrap();
    mock.say("a", "1", "/hello").await.unwrap();
    bot.idle().await;
    bot.unplug("greeter").unwrap();
    assert_eq!(bot.registrations(), before);
    mock.say("a", "2", "/hello").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("a"), ["hello from the plugin 👋", "core"]);
    assert!(matches!(
        bot.unplug("greeter"),
        Err(BotError::NotFound { .. })
    ));
}

#[tokio::test]
async fn trigger_takes_the_queue_slot_and_respects_gates() {
    let (bot, mock) = bot_with(|b| b.block_chat("blocked"));
    bot.start().await.unwrap();
    bot.trigger("a", |ctx: Ctx| async move {
        assert!(ctx.message().is_none());
        ctx.reply("reminder").await?;
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(mock.texts("a"), ["reminder"]);
    assert!(bot.trigger("blocked", reply("no")).await.is_err());
    bot.handoff("h", None, None).await.unwrap();
    assert!(matches!(
        bot.trigger("h", reply("no")).await,
        Err(BotError::HandedOff { .. })
    ));
    assert_eq!(mock.sent().len(), 1);
}

#[tokio::test]
async fn calls_reactions_and_status_go_through_hooks_and_events() {
    let (bot, mock) = bot_with(|b| b);
    let events = events_picked(&bot, |e| match e {
        BotEvent::Call(_) => Some("call".to_owned()),
        BotEvent::Provider { kind, .. } => Some(format!("{kind:?}")),
        _ => None,
    });
    bot.before_event(EventKind::Reaction, |ev| async move {
        match ev {
            botmesh::provider::ProviderEvent::Reaction { reaction, .. }
                if reaction.emoji == "💩" =>
            {
                HookFlow::Stop
            }
            _ => HookFlow::Continue,
        }
    });
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    bot.on_call(move |_call: CallEvent| {
        let c = c.clone();
        async move {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    });
    bot.start().await.unwrap();
    let reaction = |emoji: &str| botmesh::provider::ProviderEvent::Reaction {
        chat: ChatId::from("a"),
        sender: UserId::from("a"),
        reaction: Reaction {
            message_id: MessageId::from("m"),
            emoji: emoji.to_owned(),
        },
    };
    // A call from `chat`, by video or not.
    let call = |id: &str, chat: &str, video: bool| {
        botmesh::provider::ProviderEvent::Call(CallEvent {
            id: id.into(),
            chat: ChatId::from(chat),
            sender: UserId::from(chat),
            video,
        })
    };
    mock.deliver(reaction("👍")).await.unwrap();
    mock.deliver(reaction("💩")).await.unwrap();
    mock.deliver(call("c1", "a", false)).await.unwrap();
    bot.handoff("h", None, None).await.unwrap();
    mock.deliver(call("c2", "h", true)).await.unwrap();
    assert_eq!(*events.lock().unwrap(), ["Reaction", "call"]);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the handed-off chat's call is gated"
    );
}

#[tokio::test]
async fn handler_errors_and_panics_are_reported_and_the_chat_goes_on() {
    let (bot, mock) = bot_with(|b| b);
    let errors = events_picked(&bot, |e| match e {
        BotEvent::Error { context, error, .. } => Some(format!("{context}: {error}")),
        _ => None,
    });
    bot.command(
        "fail",
        |_ctx: Ctx| async move { Err("card declined".into()) },
    );
    bot.command("panic", |_ctx: Ctx| async move {
        if true {
            panic!("boom");
        }
        Ok(())
    });
    bot.catch_all(reply("still here"));
    bot.start().await.unwrap();
    mock.say("a", "1", "/fail").await.unwrap();
    mock.say("a", "2", "/panic").await.unwrap();
    mock.say("a", "3", "hi").await.unwrap();
    bot.idle().await;
    assert_eq!(mock.texts("a"), ["still here"]);
    let errors = errors.lock().unwrap().clone();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("card declined"));
    assert!(errors[1].contains("panicked: boom"));
    assert_eq!(bot.metrics().handler_errors, 2);
}

#[tokio::test]
async fn ledger_records_messages_in_and_out() {
    let (bot, mock) = bot_with(|b| b);
    bot.catch_all(reply("answer"));
    bot.start().await.unwrap();
    mock.say("a", "1", "question").await.unwrap();
    bot.idle().await;
    let ledger = bot.store().ledger("a", 10).await.unwrap();
    let rows: Vec<_> = ledger
        .iter()
        .map(|e| (e.direction, e.status, e.text.clone(), e.key.clone()))
        .collect();
    use botmesh::durability::store::Direction;
    use botmesh::durability::store::LedgerStatus;
    assert_eq!(
        rows,
        [
            (
                Direction::Inbound,
                LedgerStatus::Received,
                Some("question".into()),
                None
            ),
            (
                Direction::Outbound,
                LedgerStatus::Sent,
                Some("answer".into()),
                Some("a/1:1".into())
            ),
        ]
    );
    assert!(bot.store().chat("a").await.unwrap().is_some());
    assert!(bot.store().contact("a").await.unwrap().is_some());
}

#[tokio::test]
async fn buttons_reach_the_provider() {
    let (bot, mock) = bot_with(|b| b);
    bot.catch_all(|ctx: Ctx| async move {
        ctx.reply_buttons(
            "Confirm?",
            [Button::with_id("yes", "Yes"), Button::new("No")],
        )
        .await?;
        Ok(())
    });
    bot.start().await.unwrap();
    mock.say("a", "1", "x").await.unwrap();
    bot.idle().await;
    match &mock.sent()[0].outgoing.content {
        OutgoingContent::Text { buttons, .. } => {
            assert_eq!(
                buttons.iter().map(|b| b.id.as_str()).collect::<Vec<_>>(),
                ["yes", "No"]
            )
        }
        other => panic!("unexpected {other:?}"),
    }
}
