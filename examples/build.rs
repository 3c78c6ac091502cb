//! Names the feature set the shop and its channel tests are gated on, so that the list is
//! written once: `network_channel` (any network channel the shop can run on).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(network_channel)");
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
}
