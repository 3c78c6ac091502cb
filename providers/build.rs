//! Names for the feature sets the sources are gated on, so that each list is written once:
//! `meta_channel` (any of the Meta channels: the `meta` module), `gateway_channel` (any of the
//! HTTP-gateway channels: the `gateway` module's webhook secret and settings), `rest_channel`
//! (the channels whose REST calls and webhook parsers use the `gateway` module's shared parts:
//! the gateways, GoHighLevel and TikTok), `http_api_channel` (any channel that sends through an
//! HTTP API: the API-call helpers), `media_download_channel` (the channels that download media
//! through the SSRF-guarded client: `media::fetch`), `network_channel` (any network channel,
//! email included: the media and settings helpers they share) and `background_task` (the
//! providers that run a task between their start and stop: console, JSON lines, email, WhatsApp
//! Web's fake session; the `task` module).

fn main() {
    println!(
        "cargo::rustc-check-cfg=cfg(meta_channel, gateway_channel, rest_channel, network_channel, http_api_channel, media_download_channel, background_task)"
    );
    let on = |feature: &str| {
        let var = format!("CARGO_FEATURE_{}", feature.to_uppercase().replace('-', "_"));
        std::env::var_os(var).is_some()
    };
    let meta = ["whatsapp-cloud", "messenger", "instagram"]
        .into_iter()
        .any(on);
    if meta {
        println!("cargo::rustc-cfg=meta_channel");
    }
    let gateway = ["gupshup", "evolution", "wppconnect"].into_iter().any(on);
    if gateway {
        println!("cargo::rustc-cfg=gateway_channel");
    }
    let rest = gateway || on("gohighlevel") || on("tiktok");
    if rest {
        println!("cargo::rustc-cfg=rest_channel");
    }
    let http_api = meta || rest || on("telegram") || on("twilio") || on("discord");
    if http_api {
        println!("cargo::rustc-cfg=http_api_channel");
    }
    let media_download = meta
        || [
            "telegram",
            "twilio",
            "gupshup",
            "discord",
            "gohighlevel",
            "tiktok",
        ]
        .into_iter()
        .any(on);
    if media_download {
        println!("cargo::rustc-cfg=media_download_channel");
    }
    if http_api || on("email") {
        println!("cargo::rustc-cfg=network_channel");
    }
    if ["console", "jsonl", "email", "whatsapp-web"]
        .into_iter()
        .any(on)
    {
        println!("cargo::rustc-cfg=background_task");
    }
}
