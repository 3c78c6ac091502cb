//! What the native client does without the network: the store across a reopen, the event
//! mapping, the inbound durability hook (a message acknowledged only once the bot accepted
//! it, none dropped), the message ids and the error classes. A live pairing needs a phone
//! (not in CI).

use std::sync::Arc;
use std::time::Duration;

use botmesh::durability::{DurableKv, MemoryKv, SqliteStore, Store};
use botmesh::message::MediaKind;
use whatsapp_rust::Jid;
use whatsapp_rust::bytes::Bytes;
use whatsapp_rust::send::SendError;
use whatsapp_rust::store::traits::{
    AppStateSyncKey, AppSyncStore, DeviceInfo, DeviceListRecord, DeviceStore, LidPnMappingEntry,
    MsgSecretEntry, MsgSecretStore, ProtocolStore, SignalStore, TcTokenEntry,
};
use whatsapp_rust::types::events::ConnectFailureReason;
use whatsapp_rust::types::events::{
    BatchOrigin, Connected, Event, InboundMessage, LoggedOut, MessageBatch, PairingCode,
    PairingQrCode, Receipt, StreamReplaced,
};
use whatsapp_rust::types::message::{MessageInfo, MessageSource};
use whatsapp_rust::types::presence::ReceiptType;
use whatsapp_rust::wacore::appstate::hash::HashState;
use whatsapp_rust::wacore::appstate::processor::AppStateMutationMAC;
use whatsapp_rust::wacore::store::error::StoreError;
use whatsapp_rust::waproto::whatsapp as wa;

use super::client::{
    AcceptHook, media_message, outgoing_message, send_error, send_options, wa_error,
};
use super::events::{EventMapper, content, fill_sender_alt};
use super::{NativeStore, NativeStoreError};
use crate::whatsapp_web::session::{
    Report, WaContent, WaError, WaEvent, WaEvents, WaMedia, WaOutgoing, WaSend,
};
use crate::whatsapp_web::{SessionStore, message_id_for};

fn mapping(lid: &str, phone: &str, at: i64) -> LidPnMappingEntry {
    LidPnMappingEntry {
        lid: lid.to_owned(),
        phone_number: phone.to_owned(),
        created_at: at,
        updated_at: at,
        learning_source: "usync".to_owned(),
    }
}

fn native(kv: Arc<dyn DurableKv>) -> NativeStore {
    NativeStore::new(SessionStore::new(kv, "s"))
}

const ADDRESS: &str = "15551234567@s.whatsapp.net";

/// Writes something through every method that stores data.
async fn write_all(s: &NativeStore) {
    s.put_identity(ADDRESS, [7; 32]).await.expect("identity");
    s.put_session(ADDRESS, b"session").await.expect("session");
    s.store_prekey(5, b"prekey-5", false).await.expect("prekey");
    s.store_prekey(12, b"prekey-12", false)
        .await
        .expect("prekey");
    s.mark_prekeys_uploaded(&[12, 99]).await.expect("mark");
    s.store_signed_prekey(1, b"spk-1").await.expect("spk");
    s.store_signed_prekey(2, b"spk-2").await.expect("spk");
    s.put_sender_key("group:sender", b"sender-key")
        .await
        .expect("sender key");
    let key = AppStateSyncKey {
        key_data: vec![1, 2, 3],
        fingerprint: vec![4],
        timestamp: 42,
    };
    s.set_sync_key(b"\x00\x01", key).await.expect("sync key");
    let mut state = HashState::default();
    state.version = 9;
    state.hash[0] = 0xAB;
    state.index_value_map.insert("index".to_owned(), vec![5, 6]);
    s.set_version("regular", state).await.expect("version");
    let mac = AppStateMutationMAC {
        index_mac: vec![0xEE; 32],
        value_mac: vec![0x11; 32],
    };
    s.put_mutation_macs("regular", 9, &[mac])
        .await
        .expect("macs");
    s.set_sender_key_status("g@g.us", &[("a:1@s.whatsapp.net", true), ("b@lid", false)])
        .await
        .expect("skd");
    let mapping = mapping("100000012345678", "15551234567", 2);
    s.put_lid_mapping(&mapping).await.expect("lid");
    s.save_base_key(ADDRESS, "M1", b"base").await.expect("base");
    let devices = DeviceListRecord {
        user: "15551234567".to_owned(),
        devices: vec![DeviceInfo::new(0, None), DeviceInfo::new(3, Some(1))],
        timestamp: 5,
        phash: Some("ph".to_owned()),
        raw_id: Some(8),
    };
    s.update_device_list(devices).await.expect("devices");
    s.put_group_metadata("g@g.us", b"meta")
        .await
        .expect("group");
    let token = TcTokenEntry {
        token: vec![9],
        token_timestamp: 100,
        sender_timestamp: Some(50),
    };
    s.put_tc_token("100000012345678@lid", &token)
        .await
        .expect("tc");
    s.store_sent_message("c@s.whatsapp.net", "3EB0A", b"payload")
        .await
        .expect("sent");
    s.store_pending_inbound("c@s.whatsapp.net", "c@s.whatsapp.net", "I1", b"inbound")
        .await
        .expect("pending");
    let chat = jid("c@s.whatsapp.net");
    let secret = MsgSecretEntry::new(&chat, &chat, "3EB0A", [3; 32], 0, 77);
    assert_eq!(s.put_msg_secrets(vec![secret]).await.expect("secret"), 1);
    assert_eq!(s.create().await.expect("create"), 1);
    let mut device = s.load().await.expect("load").expect("created");
    device.push_name = "Shop".to_owned();
    device.registration_id = 4242;
    s.save(&device).await.expect("save");
}

/// Reads back what [`write_all`] wrote.
async fn check_all(s: &NativeStore) {
    assert_eq!(
        s.load_identity(ADDRESS).await.expect("identity"),
        Some([7; 32])
    );
    assert_eq!(
        s.get_session(ADDRESS).await.expect("session"),
        Some(Bytes::from_static(b"session"))
    );
    assert!(s.has_session(ADDRESS).await.expect("has"));
    assert!(
        s.has_signal_state_for_user("15551234567")
            .await
            .expect("state")
    );
    assert!(
        !s.has_signal_state_for_user("1555123456")
            .await
            .expect("prefix")
    );
    assert_eq!(
        s.load_prekey(5).await.expect("prekey"),
        Some(Bytes::from_static(b"prekey-5"))
    );
    assert_eq!(s.get_max_prekey_id().await.expect("max"), 12);
    assert_eq!(
        s.load_prekeys_batch(&[5, 12, 99])
            .await
            .expect("batch")
            .len(),
        2
    );
    assert_eq!(
        s.load_signed_prekey(2).await.expect("spk"),
        Some(b"spk-2".to_vec())
    );
    assert_eq!(
        s.load_all_signed_prekeys().await.expect("all spk"),
        vec![(1, b"spk-1".to_vec()), (2, b"spk-2".to_vec())]
    );
    assert_eq!(
        s.get_sender_key("group:sender").await.expect("sender key"),
        Some(b"sender-key".to_vec())
    );
    let key = s
        .get_sync_key(b"\x00\x01")
        .await
        .expect("sync")
        .expect("key");
    assert_eq!((key.key_data, key.timestamp), (vec![1, 2, 3], 42));
    assert_eq!(
        s.get_latest_sync_key_id().await.expect("latest"),
        Some(vec![0, 1])
    );
    let state = s.get_version("regular").await.expect("version");
    assert_eq!((state.version, state.hash[0]), (9, 0xAB));
    assert_eq!(state.index_value_map.get("index"), Some(&vec![5, 6]));
    assert_eq!(s.get_version("other").await.expect("default").version, 0);
    assert_eq!(
        s.get_mutation_mac("regular", &[0xEE; 32])
            .await
            .expect("mac"),
        Some(vec![0x11; 32])
    );
    let macs = s
        .get_mutation_macs("regular", &[[0xEE; 32], [0; 32]])
        .await
        .expect("macs");
    assert_eq!(macs.len(), 1);
    assert_eq!(
        s.get_sender_key_devices("g@g.us").await.expect("skd"),
        vec![
            ("a:1@s.whatsapp.net".to_owned(), true),
            ("b@lid".to_owned(), false)
        ]
    );
    let by_lid = s.get_lid_mapping("100000012345678").await.expect("lid");
    assert_eq!(
        by_lid.map(|m| m.phone_number).as_deref(),
        Some("15551234567")
    );
    let by_pn = s.get_pn_mapping("15551234567").await.expect("pn");
    assert_eq!(by_pn.map(|m| m.lid).as_deref(), Some("100000012345678"));
    assert_eq!(s.get_all_lid_mappings().await.expect("all").len(), 1);
    assert!(
        s.has_same_base_key(ADDRESS, "M1", b"base")
            .await
            .expect("base")
    );
    assert!(
        !s.has_same_base_key(ADDRESS, "M1", b"other")
            .await
            .expect("base")
    );
    let devices = s
        .get_devices("15551234567")
        .await
        .expect("devices")
        .expect("some");
    assert_eq!(devices.devices.len(), 2);
    assert_eq!(devices.raw_id, Some(8));
    assert_eq!(
        s.get_group_metadata("g@g.us").await.expect("group"),
        Some(b"meta".to_vec())
    );
    let token = s
        .get_tc_token("100000012345678@lid")
        .await
        .expect("tc")
        .expect("some");
    assert_eq!((token.token, token.sender_timestamp), (vec![9], Some(50)));
    assert_eq!(
        s.get_all_tc_token_jids().await.expect("jids"),
        vec!["100000012345678@lid".to_owned()]
    );
    assert_eq!(
        s.get_pending_inbound("c@s.whatsapp.net", "c@s.whatsapp.net", "I1")
            .await
            .expect("pending"),
        Some(b"inbound".to_vec())
    );
    assert_eq!(
        s.get_msg_secret_with_ts("c@s.whatsapp.net", "c@s.whatsapp.net", "3EB0A")
            .await
            .expect("secret"),
        Some((vec![3; 32], 77))
    );
    assert!(s.exists().await.expect("exists"));
    let device = s.load().await.expect("load").expect("device");
    assert_eq!(
        (device.push_name.as_str(), device.registration_id),
        ("Shop", 4242)
    );
    // A take consumes: a second retry receipt finds nothing.
    assert_eq!(
        s.take_sent_message("c@s.whatsapp.net", "3EB0A")
            .await
            .expect("take"),
        Some(b"payload".to_vec())
    );
    assert_eq!(
        s.take_sent_message("c@s.whatsapp.net", "3EB0A")
            .await
            .expect("take again"),
        None
    );
}

#[tokio::test]
async fn the_store_keeps_every_method_s_data_in_memory() {
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    write_all(&native(Arc::clone(&kv))).await;
    check_all(&native(kv)).await;
}

#[tokio::test]
async fn the_store_keeps_every_method_s_data_across_a_reopen_of_sqlite() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("bot.db");
    let store = SqliteStore::open(&path);
    store.open().await.expect("open");
    write_all(&native(Arc::new(store.durability_kv()))).await;
    store.close().await.expect("close");
    drop(store);
    let store = SqliteStore::open(&path);
    store.open().await.expect("reopen");
    check_all(&native(Arc::new(store.durability_kv()))).await;
    store.close().await.expect("close");
}

#[tokio::test]
async fn deletes_and_expiries_remove_what_they_name() {
    let s = native(Arc::new(MemoryKv::new()));
    write_all(&s).await;
    s.delete_identity(ADDRESS).await.expect("delete");
    s.delete_session(ADDRESS).await.expect("delete");
    assert_eq!(s.load_identity(ADDRESS).await.expect("identity"), None);
    assert!(
        !s.has_signal_state_for_user("15551234567")
            .await
            .expect("state")
    );
    s.remove_prekey(12).await.expect("remove");
    s.mark_prekeys_uploaded(&[12]).await.expect("mark");
    // Marking a consumed key does not bring it back.
    assert_eq!(s.load_prekey(12).await.expect("prekey"), None);
    assert_eq!(s.get_max_prekey_id().await.expect("max"), 5);
    s.remove_signed_prekey(1).await.expect("remove");
    assert_eq!(s.load_all_signed_prekeys().await.expect("all").len(), 1);
    s.delete_sender_key("group:sender").await.expect("delete");
    assert_eq!(s.get_sender_key("group:sender").await.expect("get"), None);
    s.delete_mutation_macs("regular", &[vec![0xEE; 32]])
        .await
        .expect("delete");
    assert_eq!(
        s.get_mutation_mac("regular", &[0xEE; 32])
            .await
            .expect("mac"),
        None
    );
    s.delete_sender_key_device_rows(&["b@lid"])
        .await
        .expect("rows");
    assert_eq!(
        s.get_sender_key_devices("g@g.us").await.expect("skd").len(),
        1
    );
    s.clear_all_sender_key_devices().await.expect("clear");
    assert!(
        s.get_sender_key_devices("g@g.us")
            .await
            .expect("skd")
            .is_empty()
    );
    // A LID moved to another number no longer answers for the old one.
    let moved = mapping("100000012345678", "15550000000", 3);
    s.put_lid_mapping(&moved).await.expect("moved");
    s.delete_base_key(ADDRESS, "M1").await.expect("base");
    s.delete_devices("15551234567").await.expect("devices");
    s.delete_group_metadata("g@g.us").await.expect("group");
    let kept = [
        (
            "the old number's mapping",
            s.get_pn_mapping("15551234567")
                .await
                .expect("old")
                .is_some(),
        ),
        (
            "the base key",
            s.has_same_base_key(ADDRESS, "M1", b"base")
                .await
                .expect("base"),
        ),
        (
            "the devices",
            s.get_devices("15551234567")
                .await
                .expect("devices")
                .is_some(),
        ),
        (
            "the group metadata",
            s.get_group_metadata("g@g.us")
                .await
                .expect("group")
                .is_some(),
        ),
    ];
    let kept: Vec<&str> = kept
        .iter()
        .filter(|(_, k)| *k)
        .map(|(what, _)| *what)
        .collect();
    assert!(kept.is_empty(), "still there after their delete: {kept:?}");
    // The token's bytes are older than the cutoff but its sender bucket is live: kept.
    assert_eq!(s.delete_expired_tc_tokens(200, 10).await.expect("tc"), 0);
    assert_eq!(s.delete_expired_tc_tokens(200, 60).await.expect("tc"), 1);
    assert_eq!(s.delete_expired_sent_messages(0).await.expect("sent"), 0);
    assert_eq!(
        s.delete_expired_sent_messages(i64::MAX)
            .await
            .expect("sent"),
        1
    );
    assert_eq!(
        s.delete_expired_pending_inbound(i64::MAX)
            .await
            .expect("pending"),
        1
    );
    // A secret that never expires stays; one with a deadline goes after it.
    assert_eq!(
        s.delete_expired_msg_secrets(i64::MAX)
            .await
            .expect("secrets"),
        0
    );
    let (chat, sender) = (jid("c@s.whatsapp.net"), jid("x@s.whatsapp.net"));
    let later = MsgSecretEntry::new(&chat, &sender, "M2", [1; 32], 10, 0);
    s.put_msg_secrets(vec![later]).await.expect("secret");
    assert_eq!(s.delete_expired_msg_secrets(10).await.expect("secrets"), 1);
    s.clear_mutation_macs("regular").await.expect("clear");
}

#[tokio::test]
async fn undecodable_values_fail_with_the_key_named() {
    let kv: Arc<dyn DurableKv> = Arc::new(MemoryKv::new());
    let session = SessionStore::new(Arc::clone(&kv), "s");
    session
        .put("wa/device", b"not json".to_vec())
        .await
        .expect("put");
    session
        .put("wa/identity/15551234567@s.whatsapp.net", vec![1, 2, 3])
        .await
        .expect("put");
    let s = native(kv);
    let typed = |e: StoreError| -> (String, bool) {
        let inner = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<NativeStoreError>())
            .expect("a NativeStoreError inside");
        (
            inner.key().to_owned(),
            matches!(inner, NativeStoreError::Corrupt { .. }),
        )
    };
    let Err(e) = s.load().await else {
        panic!("`not json` loaded as a device");
    };
    assert!(matches!(e, StoreError::Serialization(_)));
    assert_eq!(typed(e), ("wa/device".to_owned(), true));
    let e = s
        .load_identity("15551234567@s.whatsapp.net")
        .await
        .expect_err("3 bytes");
    assert_eq!(
        typed(e),
        ("wa/identity/15551234567@s.whatsapp.net".to_owned(), true)
    );
    let store_failed = NativeStoreError::Store {
        key: "wa/session/x".to_owned(),
        source: WaError::Store("disk full".to_owned()),
    };
    assert!(store_failed.to_string().contains("`wa/session/x`"));
    assert!(matches!(
        StoreError::from(store_failed),
        StoreError::Database(_)
    ));
}

fn jid(s: &str) -> Jid {
    s.parse().expect("jid")
}

fn info(id: &str, chat: &str, sender: &str, alt: Option<&str>) -> MessageInfo {
    MessageInfo {
        id: id.to_owned(),
        source: MessageSource {
            chat: jid(chat),
            sender: jid(sender),
            sender_alt: alt.map(jid),
            ..Default::default()
        },
        push_name: "Ana".to_owned(),
        is_offline: true,
        ..Default::default()
    }
}

fn batch(messages: Vec<(wa::Message, MessageInfo)>) -> Event {
    Event::Messages(
        MessageBatch::builder()
            .messages(Arc::from(inbound(messages)))
            .origin(BatchOrigin::OfflineDrain)
            .build(),
    )
}

fn inbound(messages: Vec<(wa::Message, MessageInfo)>) -> Vec<InboundMessage> {
    messages
        .into_iter()
        .map(|(m, i)| {
            InboundMessage::builder()
                .message(Arc::new(m))
                .info(Arc::new(i))
                .build()
        })
        .collect()
}

/// A provider that answers each message handed over with `answer(id)`, after a yield, and
/// records the ids handed over in order.
fn provider(
    capacity: usize,
    answer: impl Fn(&str) -> Result<(), WaError> + Send + 'static,
) -> (WaEvents, tokio::task::JoinHandle<Vec<String>>) {
    let (events, mut rx) = WaEvents::channel(capacity);
    let task = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(Report { event, accepted }) = rx.recv().await {
            tokio::task::yield_now().await;
            let WaEvent::Message(m) = event else {
                continue;
            };
            seen.push(m.info.id.clone());
            if let Some(done) = accepted {
                let _ = done.send(answer(&m.info.id));
            }
        }
        seen
    });
    (events, task)
}

fn hook(events: WaEvents) -> AcceptHook {
    AcceptHook::new(
        events,
        Arc::new(EventMapper::new()),
        native(Arc::new(MemoryKv::new())),
    )
}

#[tokio::test]
async fn the_hook_returns_once_the_bot_accepted_a_burst_larger_than_the_mailbox() {
    const BURST: usize = 5000;
    let pn = "15551234567@s.whatsapp.net";
    let batch = inbound(
        (0..BURST)
            .map(|i| (text("x"), info(&format!("3EB0{i:05}"), pn, pn, None)))
            .collect(),
    );
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&accepted);
    // A channel of 8: the hook waits for the provider instead of dropping.
    let (events, task) = provider(8, move |_| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    });
    let hook = hook(events);
    hook.accept(&batch).await.expect("accepted");
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        BURST,
        "the hook returned once the bot accepted every message"
    );
    drop(hook);
    let seen = task.await.expect("provider");
    let expected: Vec<String> = (0..BURST).map(|i| format!("3EB0{i:05}")).collect();
    assert_eq!(seen, expected, "every message, in order");
}

#[tokio::test]
async fn a_message_not_accepted_fails_the_hook_and_is_handed_over_again() {
    let pn = "15551234567@s.whatsapp.net";
    let batch = inbound(vec![
        (text("one"), info("3EB01", pn, pn, None)),
        (text("two"), info("3EB02", pn, pn, None)),
        (text("three"), info("3EB03", pn, pn, None)),
    ]);
    let refused = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let refuse = Arc::clone(&refused);
    let (events, task) = provider(4, move |id| {
        if id == "3EB02" && refuse.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Err(WaError::NotAccepted {
                id: id.to_owned(),
                reason: "the journal is away".to_owned(),
            });
        }
        Ok(())
    });
    let hook = hook(events.clone());
    // The second is refused: the hook fails (the client acknowledges none of the batch) and
    // the third is not handed over before it.
    let e = hook.accept(&batch).await.expect_err("not accepted");
    assert!(
        matches!(e, WaError::NotAccepted { ref id, .. } if id == "3EB02"),
        "{e}"
    );
    // The server delivers the batch again: the first was accepted already (dropped here; the
    // bot's inbox would drop it too), the others are handed over.
    hook.accept(&batch).await.expect("accepted");
    // Delivered once more (an acknowledgement lost): nothing is handed over.
    hook.accept(&batch).await.expect("accepted");
    drop((hook, events));
    assert_eq!(
        task.await.expect("provider"),
        ["3EB01", "3EB02", "3EB02", "3EB03"]
    );
}

#[tokio::test]
async fn a_stopped_provider_fails_the_hook() {
    let pn = "15551234567@s.whatsapp.net";
    let (events, rx) = WaEvents::channel(1);
    drop(rx);
    let hook = hook(events);
    let batch = inbound(vec![(text("one"), info("3EB01", pn, pn, None))]);
    let e = hook.accept(&batch).await.expect_err("not accepted");
    assert!(matches!(e, WaError::NotAccepted { .. }), "{e}");
}

#[test]
fn messages_the_hook_handed_over_are_not_mapped_again() {
    let pn = "15551234567@s.whatsapp.net";
    let committed = Event::Messages(
        MessageBatch::builder()
            .messages(Arc::from(inbound(vec![(
                text("one"),
                info("3EB01", pn, pn, None),
            )])))
            .origin(BatchOrigin::Live)
            .hook_committed(true)
            .build(),
    );
    assert!(EventMapper::new().map(&committed).is_empty());
}

fn text(t: &str) -> wa::Message {
    use whatsapp_rust::wacore::proto_helpers::MessageBuilderExt;
    wa::Message::text(t)
}

#[test]
fn messages_map_to_the_seam_and_a_redelivered_key_is_dropped() {
    let mapper = EventMapper::new();
    let lid = "100000012345678@lid";
    let pn = "15551234567@s.whatsapp.net";
    let event = batch(vec![
        (
            text("hola"),
            info("3EB01", lid, "100000012345678:2@lid", Some(pn)),
        ),
        // The same key again in the same batch (an offline replay): dropped.
        (
            text("hola"),
            info("3EB01", lid, "100000012345678:2@lid", Some(pn)),
        ),
        (text("menu"), info("3EB02", lid, lid, None)),
    ]);
    let out = mapper.map(&event);
    assert_eq!(out.len(), 2);
    let WaEvent::Message(first) = &out[0] else {
        panic!("a message: {out:?}");
    };
    assert_eq!(first.info.id, "3EB01");
    assert_eq!(first.info.source.chat, lid);
    assert_eq!(first.info.source.sender, "100000012345678:2@lid");
    assert_eq!(first.info.source.sender_alt.as_deref(), Some(pn));
    assert_eq!(first.info.push_name.as_deref(), Some("Ana"));
    assert!(first.info.is_offline);
    assert_eq!(
        first.content,
        WaContent::Text {
            text: "hola".to_owned()
        }
    );
    // After a reconnect the server delivers both again: nothing new.
    let again = batch(vec![(text("menu"), info("3EB02", lid, lid, None))]);
    assert!(mapper.map(&again).is_empty());
}

#[tokio::test]
async fn a_lid_sender_gets_its_phone_number_from_the_client_s_mappings() {
    let s = native(Arc::new(MemoryKv::new()));
    let mapping = mapping("100000012345678", "15551234567", 1);
    s.put_lid_mapping(&mapping).await.expect("lid");
    let lid = "100000012345678@lid";
    let mut message = super::events::message(&text("hi"), &info("3EB03", lid, lid, None));
    fill_sender_alt(&s, &mut message).await;
    assert_eq!(
        message.info.source.sender_alt.as_deref(),
        Some("15551234567@s.whatsapp.net")
    );
}

#[test]
fn media_reactions_and_protocol_messages_map_to_their_content() {
    let media = WaMedia {
        kind: MediaKind::Voice,
        direct_path: "/v/t62.7117-24/1".to_owned(),
        media_key: vec![1; 32],
        file_sha256: vec![2; 32],
        file_enc_sha256: vec![3; 32],
        file_length: 1234,
        mimetype: Some("audio/ogg; codecs=opus".to_owned()),
        caption: None,
        file_name: None,
    };
    // What the session sends for a forwarded media ref reads back as the same media.
    assert_eq!(
        content(&media_message(&media)),
        WaContent::Media(media.clone())
    );
    let document = WaMedia {
        kind: MediaKind::Document,
        caption: Some("the invoice".to_owned()),
        file_name: Some("invoice.pdf".to_owned()),
        mimetype: Some("application/pdf".to_owned()),
        ..media.clone()
    };
    assert_eq!(
        content(&media_message(&document)),
        WaContent::Media(document)
    );
    let mut no_key = media_message(&media);
    if let Some(audio) = no_key.audio_message.as_option_mut() {
        audio.media_key = None;
    }
    assert!(matches!(content(&no_key), WaContent::Other { .. }));
    let reaction = outgoing_message(
        "15551234567@s.whatsapp.net",
        &WaOutgoing::Reaction {
            target_id: "3EB0AA".to_owned(),
            emoji: "👍".to_owned(),
        },
    );
    assert_eq!(
        content(&reaction),
        WaContent::Reaction {
            target_id: "3EB0AA".to_owned(),
            emoji: "👍".to_owned()
        }
    );
    let revoke = wa::Message {
        protocol_message: whatsapp_rust::buffa::MessageField::some(
            wa::message::ProtocolMessage::default(),
        ),
        ..Default::default()
    };
    assert!(matches!(content(&revoke), WaContent::Other { kind } if kind == "protocol"));
    let quoted = outgoing_message(
        "15551234567@s.whatsapp.net",
        &WaOutgoing::Text {
            text: "1. Menu".to_owned(),
            quoted: Some("3EB0BB".to_owned()),
        },
    );
    assert_eq!(
        content(&quoted),
        WaContent::Text {
            text: "1. Menu".to_owned()
        }
    );
}

#[test]
fn connection_pairing_receipt_and_session_events_map_to_the_seam() {
    let mapper = EventMapper::new();
    let map = |e: Event| mapper.map(&e);
    let qr = PairingQrCode::builder()
        .code("2@abc,def".to_owned())
        .timeout(Duration::from_secs(60));
    let code = PairingCode::builder()
        .code("ABCD1234".to_owned())
        .timeout(Duration::from_secs(180));
    let cases = [
        (
            Event::Connected(Connected::builder().build()),
            WaEvent::Connected,
        ),
        (
            Event::PairingQrCode(qr.build()),
            WaEvent::PairingQrCode {
                code: "2@abc,def".to_owned(),
                timeout_secs: 60,
            },
        ),
        (
            Event::PairingCode(code.build()),
            WaEvent::PairingCode {
                code: "ABCD1234".to_owned(),
                timeout_secs: 180,
            },
        ),
        (
            Event::StreamReplaced(StreamReplaced::builder().build()),
            WaEvent::StreamReplaced,
        ),
    ];
    for (event, expected) in cases {
        assert_eq!(map(event), vec![expected]);
    }
    let out = map(Event::LoggedOut(
        LoggedOut::builder()
            .on_connect(false)
            .reason(ConnectFailureReason::LoggedOut)
            .build(),
    ));
    assert!(matches!(&out[..], [WaEvent::LoggedOut { reason }] if reason.contains("LoggedOut")));
    let receipt = |kind: ReceiptType| {
        Event::Receipt(
            Receipt::builder()
                .source(MessageSource {
                    chat: jid("15551234567@s.whatsapp.net"),
                    sender: jid("15551234567:3@s.whatsapp.net"),
                    ..Default::default()
                })
                .message_ids(vec!["3EB0AA".to_owned(), "3EB0BB".to_owned()])
                .timestamp(whatsapp_rust::chrono::Utc::now())
                .r#type(kind)
                .offline(false)
                .build(),
        )
    };
    assert_eq!(
        map(receipt(ReceiptType::Read)),
        vec![WaEvent::Receipt {
            chat: "15551234567@s.whatsapp.net".to_owned(),
            sender: "15551234567@s.whatsapp.net".to_owned(),
            is_group: false,
            ids: vec!["3EB0AA".to_owned(), "3EB0BB".to_owned()],
            status: "read".to_owned(),
        }]
    );
    assert!(matches!(
        &map(receipt(ReceiptType::Delivered))[..],
        [WaEvent::Receipt { status, .. }] if status == "delivered"
    ));
    // Retry receipts are the client's business.
    assert!(map(receipt(ReceiptType::Retry)).is_empty());
}

#[test]
fn a_send_goes_out_under_the_id_of_its_outbox_key() {
    let id = message_id_for(Some("outbox/chat-1/step-3"));
    assert_eq!(id, message_id_for(Some("outbox/chat-1/step-3")));
    assert_ne!(id, message_id_for(Some("outbox/chat-1/step-4")));
    assert!(id.starts_with("3EB0") && id.len() == 20, "{id}");
    let send = WaSend {
        to: "15551234567@s.whatsapp.net".to_owned(),
        id: id.clone(),
        content: WaOutgoing::Text {
            text: "hi".to_owned(),
            quoted: None,
        },
    };
    // A resend after a crash builds the same options: the same message for the recipient.
    assert_eq!(send_options(&send).message_id.as_deref(), Some(id.as_str()));
}

#[test]
fn client_errors_are_classed_for_the_outbox() {
    assert_eq!(
        send_error(&SendError::NotLoggedIn, "x@s.whatsapp.net"),
        WaError::NotConnected
    );
    assert!(matches!(
        send_error(
            &SendError::InvalidRequest("empty".to_owned()),
            "x@s.whatsapp.net"
        ),
        WaError::Refused { code: 400, .. }
    ));
    let rejected =
        |code: u16, backoff: Option<u32>| whatsapp_rust::wacore::request::IqError::ServerError {
            code,
            text: "no".to_owned(),
            error_type: None,
            backoff,
        };
    assert_eq!(
        wa_error(&rejected(429, Some(30))),
        WaError::RateLimited {
            retry_after: Some(Duration::from_secs(30))
        }
    );
    assert!(matches!(
        wa_error(&rejected(503, None)),
        WaError::Server { code: 503, .. }
    ));
    let lid_only = SendError::Internal(whatsapp_rust::anyhow::Error::new(rejected(463, None)));
    assert!(matches!(
        send_error(&lid_only, "15551234567@s.whatsapp.net"),
        WaError::Unreachable { to, .. } if to == "15551234567@s.whatsapp.net"
    ));
    let expired =
        whatsapp_rust::anyhow::Error::new(whatsapp_rust::http::HttpStatusError { status: 410 })
            .context("download failed");
    let cause: &(dyn std::error::Error + 'static) = expired.as_ref();
    assert_eq!(wa_error(cause), WaError::MediaExpired { status: 410 });
    assert!(matches!(
        wa_error(&std::io::Error::other("boom")),
        WaError::Client(_)
    ));
}
