//! Names the feature sets the shop and its channel tests are gated on, so that each list is
//! written once: `network_channel` (any network channel the shop can run on) and
//! `rest_channel` (the HTTP gateways, GoHighLevel and TikTok: one webhook harness in the crash
//! tests; the providers crate names the same set for the fakes both crates compile).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(network_channel, rest_channel)");
    let channels = [
        "telegram",
        "whatsapp-cloud",
        "whatsapp-web",
        "messenger",
        "instagram",
        "twilio",
        "gupshup",
        "evolution",
        "wppconnect",
        "discord",
        "gohighlevel",
        "tiktok",
        "email",
    ];
    let on = |feature: &&str| {
        let var = format!("CARGO_FEATURE_{}", feature.to_uppercase().replace('-', "_"));
        std::env::var_os(var).is_some()
    };
    if channels.iter().any(on) {
        println!("cargo::rustc-cfg=network_channel");
    }
    let rest = [
        "gupshup",
        "evolution",
        "wppconnect",
        "gohighlevel",
        "tiktok",
    ];
    if rest.iter().any(on) {
        println!("cargo::rustc-cfg=rest_channel");
    }
}
