//! Plugins: `bot.plug(plugin)` hands the plugin a scoped bot whose registrations (routes,
//! hooks, event listeners, lifecycle steps) are tagged with the plugin; `bot.unplug(name)`
//! removes exactly those. A plugin cannot be plugged twice under one name.

use async_trait::async_trait;

use crate::bot::Bot;
use crate::error::BotError;

/// A bundle of registrations.
///
/// ```
/// use botmesh::prelude::*;
///
/// struct Greeter;
///
/// #[async_trait::async_trait]
/// impl Plugin for Greeter {
///     fn name(&self) -> &str { "greeter" }
///     async fn install(&self, bot: &Bot) -> Result<(), BotError> {
///         bot.command("hello", |ctx: Ctx| async move { ctx.reply("Hello!").await?; Ok(()) });
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait Plugin: Send + Sync + 'static {
    /// The plugin's unique name.
    fn name(&self) -> &str;
    /// Registers the plugin's routes and hooks on `bot` (a scoped bot).
    async fn install(&self, bot: &Bot) -> Result<(), BotError>;
}

pub(crate) async fn plug(bot: &Bot, plugin: &dyn Plugin) -> Result<(), BotError> {
    let k = &bot.kernel;
    let name = plugin.name().to_owned();
    let owner = {
        let mut plugins = k.plugins.lock().unwrap_or_else(|e| e.into_inner());
        if plugins.contains_key(&name) {
            return Err(BotError::config(
                "plugin",
                format!("`{name}` is already plugged"),
            ));
        }
        let owner = k.new_owner();
        plugins.insert(name.clone(), owner);
        owner
    };
    let scoped = Bot {
        kernel: k.clone(),
        owner: Some(owner),
    };
    if let Err(e) = plugin.install(&scoped).await {
        remove(bot, owner);
        k.plugins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name);
        return Err(e);
    }
    tracing::debug!(plugin = %name, "plugged");
    Ok(())
}

fn remove(bot: &Bot, owner: u64) {
    let k = &bot.kernel;
    k.routes
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove_owner(owner);
    k.events.remove_owner(owner);
}

pub(crate) fn unplug(bot: &Bot, name: &str) -> Result<(), BotError> {
    let k = &bot.kernel;
    let owner = k
        .plugins
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(name)
        .ok_or_else(|| BotError::NotFound {
            what: "plugin",
            name: name.to_owned(),
        })?;
    remove(bot, owner);
    tracing::debug!(plugin = %name, "unplugged");
    Ok(())
}
