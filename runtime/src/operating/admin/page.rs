//! The admin page's HTML, rendered on the server: the counters, the sends chart, the dead
//! letters (error and payload, with retry, replay and discard buttons when actions are
//! enabled), the waiting conversations and the scheduled jobs (with a cancel button when
//! actions are enabled). Every value from a record is escaped; the page has
//! no script and loads nothing else.

use std::fmt::Write as _;

use crate::metrics::BotMetrics;
use crate::operating::views::{Conversation, DeadLetter, JobRow};

/// `s` with `& < > " '` escaped, for text and attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#f6f7f9}\
header{background:#1f2937;color:#fff;padding:10px 20px;display:flex;gap:16px;align-items:baseline}\
header h1{font-size:18px;margin:0}main{padding:8px 20px 24px}\
section{background:#fff;border:1px solid #e3e5e8;border-radius:6px;padding:10px 14px;margin:12px 0}\
h2{font-size:15px;margin:0 0 8px}table{border-collapse:collapse;width:100%}\
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eee;vertical-align:top}\
th{font-weight:600;color:#555}code,pre{font:12px ui-monospace,monospace}\
pre{margin:4px 0;white-space:pre-wrap;max-width:520px}.error{color:#b91c1c}\
.counters{display:flex;gap:20px;flex-wrap:wrap}.counters b{font-size:18px;display:block}\
.sent{fill:#2563eb}.failed{fill:#dc2626}.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}\
.flash{background:#ecfdf5;border:1px solid #a7f3d0;padding:6px 10px;border-radius:4px}\
.readonly{color:#666;font-size:12px}form{display:inline}button{font:inherit;padding:2px 10px;cursor:pointer}";

/// What one render of the page shows.
pub(crate) struct View<'a> {
    pub(crate) metrics: &'a BotMetrics,
    /// `None` when the bot runs without durable journals.
    pub(crate) dead: Option<&'a [DeadLetter]>,
    pub(crate) conversations: &'a [Conversation],
    pub(crate) jobs: &'a [JobRow],
    pub(crate) chart: &'a str,
    pub(crate) actions: bool,
    pub(crate) csrf: &'a str,
    pub(crate) flash: Option<&'a str>,
    /// The path the page is served at (`/admin`).
    pub(crate) base: &'a str,
}

/// The whole page.
pub(crate) fn render(v: &View<'_>) -> String {
    let mut out = String::with_capacity(8 * 1024);
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>botmesh admin</title>\
         <style>{STYLE}</style></head><body><header><h1>botmesh admin</h1><span>{}</span></header><main>",
        if v.actions {
            "actions enabled"
        } else {
            "read-only"
        }
    );
    if let Some(flash) = v.flash {
        let _ = write!(out, "<p class=\"flash\" id=\"flash\">{}</p>", escape(flash));
    }
    counters(&mut out, v);
    let _ = write!(
        out,
        "<section><h2>Sends in the last hour</h2><div class=\"legend\"><span class=\"sent\" style=\"background:#2563eb\"></span>sent\
         <span style=\"background:#dc2626\"></span>failed (per minute)</div>{}</section>",
        v.chart
    );
    dead_letters(&mut out, v);
    conversations(&mut out, v);
    jobs(&mut out, v);
    out.push_str("</main></body></html>");
    out
}

fn counters(out: &mut String, v: &View<'_>) {
    let m = v.metrics;
    let dead = v
        .dead
        .map_or_else(|| "-".to_owned(), |d| d.len().to_string());
    let _ = write!(
        out,
        "<section><h2>Counters (since start)</h2><div class=\"counters\">\
         <div><b>{}</b>received</div><div><b>{}</b>sent</div><div><b>{}</b>failed sends</div>\
         <div><b>{}</b>handler errors</div><div><b>{dead}</b>dead letters</div>\
         <div><b>{}</b>conversations waiting</div></div></section>",
        m.received,
        m.sent,
        m.send_failed,
        m.handler_errors,
        v.conversations.len(),
    );
}

fn button(out: &mut String, v: &View<'_>, action: &str, d: &DeadLetter, label: &str) {
    let _ = write!(
        out,
        "<form method=\"post\" action=\"{}/dead/{action}\"><input type=\"hidden\" name=\"kind\" value=\"{}\">\
         <input type=\"hidden\" name=\"id\" value=\"{}\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <button type=\"submit\" name=\"do\" value=\"{action}\">{label}</button></form> ",
        v.base,
        d.kind,
        escape(&d.id),
        escape(v.csrf),
    );
}

fn dead_letters(out: &mut String, v: &View<'_>) {
    out.push_str("<section id=\"dead-letters\"><h2>Dead letters</h2>");
    let Some(dead) = v.dead else {
        out.push_str(
            "<p>This bot runs without durable journals: nothing is dead-lettered.</p></section>",
        );
        return;
    };
    if !v.actions {
        out.push_str("<p class=\"readonly\">Read-only: retry, replay and discard are disabled (<code>AdminOptions::actions</code>).</p>");
    }
    if dead.is_empty() {
        out.push_str("<p>None.</p></section>");
        return;
    }
    out.push_str("<table><thead><tr><th>kind</th><th>id</th><th>chat</th><th>attempts</th><th>error</th><th>payload</th>");
    if v.actions {
        out.push_str("<th></th>");
    }
    out.push_str("</tr></thead><tbody>");
    for d in dead {
        let payload = serde_json::to_string_pretty(&d.payload).unwrap_or_default();
        let _ = write!(
            out,
            "<tr class=\"dead\" data-id=\"{id}\"><td>{}</td><td><code>{id}</code></td><td>{}</td><td>{}</td>\
             <td class=\"error\">{}</td><td><details><summary>payload</summary><pre>{}</pre></details></td>",
            d.kind,
            escape(&d.chat),
            d.attempts,
            escape(d.error.as_deref().unwrap_or("-")),
            escape(&payload),
            id = escape(&d.id),
        );
        if v.actions {
            out.push_str("<td>");
            if d.kind == "inbound" {
                button(out, v, "replay", d, "Replay");
            } else {
                button(out, v, "retry", d, "Retry");
            }
            button(out, v, "discard", d, "Discard");
            out.push_str("</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></section>");
}

fn conversations(out: &mut String, v: &View<'_>) {
    out.push_str("<section id=\"conversations\"><h2>Conversations waiting</h2>");
    if v.conversations.is_empty() {
        out.push_str("<p>None.</p></section>");
        return;
    }
    out.push_str("<table><thead><tr><th>chat</th><th>flow</th><th>waiting at</th><th>step</th><th>state</th></tr></thead><tbody>");
    for c in v.conversations {
        let state = serde_json::to_string_pretty(&c.state).unwrap_or_default();
        let _ = write!(
            out,
            "<tr class=\"conversation\"><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td>\
             <td><details><summary>state</summary><pre>{}</pre></details></td></tr>",
            escape(&c.chat),
            escape(&c.flows.join(" > ")),
            escape(&c.waiting_at),
            c.step,
            escape(&state),
        );
    }
    out.push_str("</tbody></table></section>");
}

/// A Unix time in ms as UTC, to the second (`2026-01-01T09:00:00Z`); `-` for none.
fn time(ms: Option<i64>) -> String {
    let Some(ms) = ms.and_then(|ms| u64::try_from(ms).ok()) else {
        return "-".to_owned();
    };
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(at).to_string()
}

fn jobs(out: &mut String, v: &View<'_>) {
    out.push_str("<section id=\"jobs\"><h2>Scheduled jobs</h2>");
    if !v.actions {
        out.push_str(
            "<p class=\"readonly\">Read-only: cancel is disabled (<code>AdminOptions::actions</code>).</p>",
        );
    }
    if v.jobs.is_empty() {
        out.push_str("<p>None.</p></section>");
        return;
    }
    out.push_str(
        "<table><thead><tr><th>id</th><th>state</th><th>schedule</th><th>chat</th><th>next run</th>\
                  <th>last run</th><th>outcome</th><th>runs</th>",
    );
    if v.actions {
        out.push_str("<th></th>");
    }
    out.push_str("</tr></thead><tbody>");
    for j in v.jobs {
        let outcome = match (&j.last_error, j.last_run_ms) {
            (Some(e), _) => format!("<span class=\"error\">failed: {}</span>", escape(e)),
            (None, Some(_)) => "ok".to_owned(),
            (None, None) => "-".to_owned(),
        };
        let _ = write!(
            out,
            "<tr class=\"job\" data-id=\"{id}\"><td><code>{id}</code></td><td>{}</td><td><code>{}</code></td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{outcome}</td><td>{} ({} failed, {} missed)</td>",
            j.state,
            escape(&j.schedule),
            escape(j.chat.as_deref().unwrap_or("-")),
            time(j.next_ms),
            time(j.last_run_ms),
            j.runs,
            j.failures,
            j.misses,
            id = escape(&j.id),
        );
        if v.actions {
            let _ = write!(
                out,
                "<td><form method=\"post\" action=\"{}/jobs/cancel\"><input type=\"hidden\" name=\"id\" value=\"{}\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\" name=\"do\" value=\"cancel\">Cancel</button></form></td>",
                v.base,
                escape(&j.id),
                escape(v.csrf),
            );
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></section>");
}

/// The page a request without a valid token gets: a form that asks for it.
pub(crate) fn login(base: &str, wrong: bool) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>botmesh admin</title>\
         <style>{STYLE}</style></head><body><header><h1>botmesh admin</h1></header><main><section>\
         <h2>Token required</h2>{}<form method=\"get\" action=\"{base}\"><input type=\"password\" name=\"token\" \
         placeholder=\"admin token\" autofocus> <button type=\"submit\">Open</button></form></section></main></body></html>",
        if wrong {
            "<p class=\"error\">That token is not this bot's.</p>"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_to_the_second() {
        assert_eq!(time(Some(1_767_258_000_123)), "2026-01-01T09:00:00Z");
        assert_eq!(time(None), "-");
    }

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape(r#"<b a="1">&'"#),
            "&lt;b a=&quot;1&quot;&gt;&amp;&#39;"
        );
    }
}
