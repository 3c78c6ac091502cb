//! A program that uses botmesh's network channels and builds its own `reqwest` client must not
//! panic for want of a TLS crypto provider, whichever it builds first. The crate's tests share
//! one process (`tests/main.rs`), and none of them installs a process-default rustls provider
//! (their Postgres runs without TLS, their Redis over plain TCP), so this test finds none
//! installed, as a user's `main` does; one installed by another test would fail its last check.

use botmesh_providers::telegram::{TelegramConfig, TelegramProvider};

#[test]
fn a_users_reqwest_client_works_before_and_after_a_botmesh_provider() {
    // Before any botmesh provider exists: reqwest's own TLS setup must find a provider.
    let before = std::panic::catch_unwind(reqwest::Client::new);
    assert!(
        before.is_ok(),
        "reqwest::Client::new() panicked before botmesh was used"
    );

    let provider = TelegramProvider::new(TelegramConfig::new("123:abc"));
    assert!(provider.is_ok(), "the Telegram provider builds its client");

    let after = std::panic::catch_unwind(reqwest::Client::new);
    assert!(
        after.is_ok(),
        "reqwest::Client::new() panicked after a botmesh provider was built"
    );
    // Installing a provider of one's own still works: botmesh installed none process-wide.
    assert!(rustls::crypto::CryptoProvider::get_default().is_none());
}
