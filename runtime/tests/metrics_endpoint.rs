//! `/metrics`: a bot that handled a few messages serves its pipeline and durability counters
//! on a port of its own (`MetricsServer`), and the scraped text is strict OpenMetrics
//! exposition: every line a `# HELP`, `# TYPE … counter` or `name_total value` sample, each
//! family announced before its sample, and `# EOF` last.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use botmesh::durable::DurabilityOptions;
use botmesh::operating::http::MetricsServer;
use botmesh::prelude::*;
use botmesh::testing::MockProvider;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 GET over a plain socket: (status line, headers, body).
async fn get(addr: SocketAddr, path: &str) -> (String, String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let (status, headers) = head.split_once("\r\n").unwrap();
    (status.to_owned(), headers.to_lowercase(), body.to_owned())
}

/// Parses OpenMetrics text strictly: the samples by name, or a panic naming the bad line.
fn parse_exposition(text: &str) -> BTreeMap<String, u64> {
    let mut samples = BTreeMap::new();
    let mut announced: Option<(String, bool, bool)> = None; // family, help seen, type seen
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "the text ends with # EOF");
    assert!(text.ends_with('\n'));
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect(line);
            assert!(valid_name(name), "bad name in {line:?}");
            assert!(!help.trim().is_empty(), "empty help in {line:?}");
            announced = Some((name.to_owned(), true, false));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect(line);
            let (family, help, _) = announced.clone().expect("TYPE after HELP");
            assert!(help && family == name, "TYPE of another family: {line:?}");
            assert_eq!(kind, "counter", "{line:?}");
            announced = Some((family, true, true));
        } else {
            assert!(!line.starts_with('#'), "unknown comment {line:?}");
            let (name, value) = line.split_once(' ').expect(line);
            let (family, _, typed) = announced.clone().expect("sample after its TYPE");
            assert!(typed, "sample before its TYPE: {line:?}");
            assert_eq!(name, format!("{family}_total"), "sample of another family");
            let value: u64 = value
                .parse()
                .unwrap_or_else(|_| panic!("bad value {line:?}"));
            assert!(
                samples.insert(name.to_owned(), value).is_none(),
                "{name} twice"
            );
        }
    }
    samples
}

#[tokio::test]
async fn metrics_serves_the_pipeline_and_durability_counters_as_openmetrics() {
    let mock = MockProvider::new();
    let metrics = MetricsServer::new("127.0.0.1:0");
    let bot = Bot::builder(mock.clone())
        .durability(DurabilityOptions::memory())
        .step(metrics.clone())
        .build()
        .unwrap();
    crate::common::hello_on_hi(&bot);
    bot.start().await.unwrap();
    for (i, chat) in ["alice", "bob", "carol"].iter().enumerate() {
        mock.say(chat, &format!("m{i}"), "/hi").await.unwrap();
    }
    // A redelivery of the first message is a duplicate.
    mock.say("alice", "m0", "/hi").await.unwrap();
    assert_eq!(mock.wait_for_sends(3, Duration::from_secs(10)).await, 3);
    bot.idle().await;

    let addr = metrics.local_addr().expect("bound while the bot runs");
    let (status, headers, body) = get(addr, "/metrics").await;
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        headers.contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{headers}"
    );
    let samples = parse_exposition(&body);

    assert_eq!(samples["botmesh_received_total"], 4);
    assert_eq!(samples["botmesh_dispatched_total"], 3);
    assert_eq!(samples["botmesh_sent_total"], 3);
    assert_eq!(samples["botmesh_send_failed_total"], 0);
    assert_eq!(samples["botmesh_durability_inbound_journaled_total"], 3);
    assert_eq!(samples["botmesh_durability_outbox_journaled_total"], 3);
    assert_eq!(samples["botmesh_durability_outbox_dead_total"], 0);
    // Every pipeline counter and the 13 durability counters, and nothing else.
    let pipeline = bot.metrics().counters().len();
    assert_eq!(samples.len(), pipeline + 13, "{body}");
    let durability = samples
        .keys()
        .filter(|k| k.starts_with("botmesh_durability_"))
        .count();
    assert_eq!(durability, 13);
    // The text is the bot's own snapshot: the same numbers as `Bot::metrics`.
    for (name, _, value) in bot.metrics().counters() {
        assert_eq!(samples[&format!("botmesh_{name}_total")], value, "{name}");
    }

    let (status, _, _) = get(addr, "/other").await;
    assert!(status.contains(" 404 "), "{status}");

    bot.stop().await.unwrap();
    assert_eq!(metrics.local_addr(), None);
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "closed at stop"
    );
}

#[tokio::test]
async fn without_journals_only_the_pipeline_counters_are_served() {
    let bot = Bot::builder(MockProvider::new())
        .durability(DurabilityOptions::off())
        .build()
        .unwrap();
    let samples = parse_exposition(&botmesh::operating::prometheus::render(&bot));
    assert!(
        samples
            .keys()
            .all(|k| !k.starts_with("botmesh_durability_"))
    );
    assert_eq!(samples.len(), bot.metrics().counters().len());
}

#[tokio::test]
async fn a_port_in_use_fails_the_start_and_names_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let bot = Bot::builder(MockProvider::new())
        .step(MetricsServer::new(addr.clone()))
        .build()
        .unwrap();
    let err = bot.start().await.unwrap_err().to_string();
    assert!(err.contains(&addr), "{err}");
}
