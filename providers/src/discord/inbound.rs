//! What Discord delivers, as events: a gateway `MESSAGE_CREATE` becomes a [`Message`], an
//! interaction (from the interactions endpoint or a gateway `INTERACTION_CREATE`) an
//! [`Interaction`] with the 3-second deadline of its first answer.
//!
//! | Discord | event |
//! | --- | --- |
//! | `MESSAGE_CREATE` from a user | `Message`: chat = `channel_id`, sender = `author.id`, id = the message's snowflake (the runtime dedupes on it), group = has a `guild_id`, text = `content`, the first attachment as media (`channel/message/attachment` ids, never the signed URL), `reply_to` = `message_reference.message_id` |
//! | `MESSAGE_CREATE` from a bot, or from this bot | nothing (no reply loops) |
//! | slash command (type 2) | `Interaction` with data `/name value…` (option values in order, subcommands by name): `bot.command("name", …)` routes it |
//! | button (type 3) | `Interaction` with data = `custom_id`; a select: its first chosen value |
//! | modal submit (type 5) | `Interaction` with data = `custom_id` |
//! | autocomplete (type 4) and other types | nothing |
//!
//! Snowflakes are strings and stay strings. Ids are never read as floats.

use botmesh::message::{
    ChatId, Content, InboundMedia, Interaction, MediaKind, MediaRef, Message, MessageId, UserId,
};
use serde_json::Value;

use super::NAME;

/// The time an interaction gives its first answer.
pub(crate) const RESPOND_WITHIN_MS: i64 = 3_000;

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn display_name(user: &Value) -> Option<String> {
    str_of(user, "global_name")
        .or_else(|| str_of(user, "username"))
        .map(str::to_owned)
}

/// A `MESSAGE_CREATE`'s message; `None` for a bot's (this one's included) or one without
/// the fields a message has.
pub(crate) fn message(d: &Value, own_id: Option<&str>) -> Option<Message> {
    let author = d.get("author")?;
    let sender = str_of(author, "id")?;
    if author.get("bot").and_then(Value::as_bool) == Some(true) || Some(sender) == own_id {
        return None;
    }
    let id = str_of(d, "id")?;
    let channel = str_of(d, "channel_id")?;
    let text = str_of(d, "content").unwrap_or("").to_owned();
    let mentions_bot = own_id.is_some_and(|own| {
        d.get("mentions")
            .and_then(Value::as_array)
            .is_some_and(|m| m.iter().any(|u| str_of(u, "id") == Some(own)))
    });
    let content = match d
        .get("attachments")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        Some(att) => Content::Media(media(channel, id, att, &text)?),
        None => Content::Text(text),
    };
    Some(Message {
        id: MessageId(id.to_owned()),
        chat: ChatId(channel.to_owned()),
        sender: UserId(sender.to_owned()),
        sender_name: display_name(author),
        is_group: d.get("guild_id").is_some_and(|g| !g.is_null()),
        mentions_bot,
        timestamp_ms: timestamp_ms(d),
        content,
        reply_to: d
            .get("message_reference")
            .and_then(|r| str_of(r, "message_id"))
            .map(|m| MessageId(m.to_owned())),
        lang_hint: None,
    })
}

fn media(channel: &str, message: &str, att: &Value, caption: &str) -> Option<InboundMedia> {
    let id = str_of(att, "id")?;
    let mime = str_of(att, "content_type").map(str::to_owned);
    let kind = match mime.as_deref().unwrap_or("") {
        m if m.starts_with("image/") => MediaKind::Image,
        m if m.starts_with("video/") => MediaKind::Video,
        m if m.starts_with("audio/") => MediaKind::Audio,
        _ => MediaKind::Document,
    };
    Some(InboundMedia {
        kind,
        media_ref: MediaRef {
            provider: NAME.to_owned(),
            token: format!("{channel}/{message}/{id}"),
        },
        mime,
        caption: (!caption.is_empty()).then(|| caption.to_owned()),
        file_name: str_of(att, "filename").map(str::to_owned),
        size: att.get("size").and_then(Value::as_u64),
    })
}

/// The message's time from its snowflake (ms since 2015-01-01 in the top 42 bits).
fn timestamp_ms(d: &Value) -> i64 {
    const DISCORD_EPOCH_MS: i64 = 1_420_070_400_000;
    str_of(d, "id")
        .and_then(|id| id.parse::<u64>().ok())
        .and_then(|id| i64::try_from(id >> 22).ok())
        .map_or_else(botmesh::clock::now_ms, |ms| ms + DISCORD_EPOCH_MS)
}

/// What kind of interaction, for its deferred answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A slash command or a modal: deferred with "thinking…" (type 5), its answer edits it.
    Command,
    /// A button or a select on a message: deferred without a loading state (type 6).
    Component,
}

/// An interaction Discord asked the bot to answer.
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    pub(crate) interaction: Interaction,
    pub(crate) kind: Kind,
    pub(crate) application_id: String,
    pub(crate) token: String,
}

/// An interaction's event (`received_ms`: when it arrived, for its deadline); `Ok(None)` for
/// a type the bot does not handle (autocomplete), `Err` for a body that is not an interaction.
pub(crate) fn interaction(body: &Value, received_ms: i64) -> Result<Option<Parsed>, String> {
    let field = |k: &str| str_of(body, k).ok_or_else(|| format!("no {k}"));
    let kind_code = body.get("type").and_then(Value::as_u64).ok_or("no type")?;
    let data = body.get("data").unwrap_or(&Value::Null);
    let (kind, text) = match kind_code {
        2 => (Kind::Command, command_text(data)),
        3 => {
            let chosen = data
                .get("values")
                .and_then(Value::as_array)
                .and_then(|v| v.first())
                .and_then(Value::as_str);
            let text = chosen
                .or_else(|| str_of(data, "custom_id"))
                .ok_or("no custom_id")?;
            (Kind::Component, text.to_owned())
        }
        5 => (
            Kind::Command,
            str_of(data, "custom_id").ok_or("no custom_id")?.to_owned(),
        ),
        _ => return Ok(None),
    };
    let user = body
        .get("member")
        .and_then(|m| m.get("user"))
        .or_else(|| body.get("user"))
        .ok_or("no member.user or user")?;
    let interaction = Interaction {
        id: field("id")?.to_owned(),
        chat: ChatId(field("channel_id")?.to_owned()),
        sender: UserId(str_of(user, "id").ok_or("no user id")?.to_owned()),
        sender_name: display_name(user),
        data: text,
        title: None,
        message_id: body
            .get("message")
            .and_then(|m| str_of(m, "id"))
            .map(|m| MessageId(m.to_owned())),
        is_group: body.get("guild_id").is_some_and(|g| !g.is_null()),
        timestamp_ms: received_ms,
        respond_by_ms: Some(received_ms + RESPOND_WITHIN_MS),
        from_text: false,
    };
    Ok(Some(Parsed {
        interaction,
        kind,
        application_id: field("application_id")?.to_owned(),
        token: field("token")?.to_owned(),
    }))
}

/// `/name value…`: a slash command as the text of a command (subcommand names and option
/// values in order).
fn command_text(data: &Value) -> String {
    fn options(list: &Value, out: &mut Vec<String>) {
        for o in list.as_array().into_iter().flatten() {
            match o.get("value") {
                Some(Value::String(s)) => out.push(s.clone()),
                Some(v) if !v.is_null() => out.push(v.to_string()),
                _ => {
                    // A subcommand (group): its name, then its own options.
                    if let Some(name) = str_of(o, "name") {
                        out.push(name.to_owned());
                    }
                    options(o.get("options").unwrap_or(&Value::Null), out);
                }
            }
        }
    }
    let mut parts = vec![format!("/{}", str_of(data, "name").unwrap_or(""))];
    options(data.get("options").unwrap_or(&Value::Null), &mut parts);
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_message_create_is_a_message_and_a_bots_own_is_nothing() {
        let d = json!({"id": "1234567890123456789", "channel_id": "111", "guild_id": "222",
            "author": {"id": "333", "username": "ana", "global_name": "Ana"},
            "content": "hello bot", "mentions": [{"id": "999"}],
            "message_reference": {"message_id": "77", "channel_id": "111"}});
        let m = message(&d, Some("999")).expect("a message");
        assert_eq!(
            (m.id.as_str(), m.chat.as_str(), m.sender.as_str()),
            ("1234567890123456789", "111", "333")
        );
        assert_eq!(m.text_content(), "hello bot");
        assert!(m.is_group && m.mentions_bot);
        assert_eq!(m.sender_name.as_deref(), Some("Ana"));
        assert_eq!(m.reply_to.as_ref().map(MessageId::as_str), Some("77"));
        assert!(m.timestamp_ms > 1_420_070_400_000);
        let mut own = d.clone();
        own["author"]["id"] = json!("999");
        assert!(message(&own, Some("999")).is_none());
        let mut bot = d;
        bot["author"]["bot"] = json!(true);
        assert!(message(&bot, Some("999")).is_none());
    }

    #[test]
    fn an_attachment_is_media_by_ids_not_by_its_signed_url() {
        let d = json!({"id": "5", "channel_id": "111", "author": {"id": "3"}, "content": "look",
            "attachments": [{"id": "444", "filename": "a.png", "content_type": "image/png", "size": 52000,
                "url": "https://cdn.discordapp.com/attachments/111/444/a.png?ex=1&is=2&hm=3&"}]});
        let Some(Message {
            content: Content::Media(m),
            ..
        }) = message(&d, None)
        else {
            panic!("media");
        };
        assert_eq!(m.media_ref.token, "111/5/444");
        assert_eq!(
            (m.kind, m.caption.as_deref()),
            (MediaKind::Image, Some("look"))
        );
    }

    #[test]
    fn interactions_carry_a_command_text_or_a_custom_id() {
        let cmd = json!({"id": "555", "application_id": "666", "type": 2, "token": "tok",
            "channel_id": "111", "guild_id": "222", "member": {"user": {"id": "333", "username": "ana"}},
            "data": {"id": "1", "name": "order", "type": 1, "options": [{"name": "q", "type": 3, "value": "coffee"}, {"name": "n", "type": 4, "value": 2}]}});
        let p = interaction(&cmd, 1000).expect("parsed").expect("handled");
        assert_eq!(p.interaction.data, "/order coffee 2");
        assert_eq!(
            (p.kind, p.token.as_str(), p.application_id.as_str()),
            (Kind::Command, "tok", "666")
        );
        assert_eq!(p.interaction.respond_by_ms, Some(4000));
        let button = json!({"id": "556", "application_id": "666", "type": 3, "token": "t2",
            "channel_id": "111", "user": {"id": "333"}, "message": {"id": "777"},
            "data": {"component_type": 2, "custom_id": "vote:yes"}});
        let p = interaction(&button, 0).expect("parsed").expect("handled");
        assert_eq!(
            (p.interaction.data.as_str(), p.kind),
            ("vote:yes", Kind::Component)
        );
        assert_eq!(
            p.interaction.message_id.as_ref().map(MessageId::as_str),
            Some("777")
        );
        assert!(!p.interaction.is_group);
        assert!(
            interaction(&json!({"type": 4}), 0)
                .expect("parsed")
                .is_none()
        );
        assert!(interaction(&json!({"type": 3, "data": {}}), 0).is_err());
    }
}
