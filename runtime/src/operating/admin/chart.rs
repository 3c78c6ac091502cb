//! The admin page's chart: the bot's `sent` and `send_failed` counters sampled into a short
//! history, turned into sends and failed sends per minute over the last hour, drawn as a
//! server-rendered SVG bar chart (no script). The history is the process's: it starts empty
//! at a restart, like the counters.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;

use crate::operating::admin::page::escape;

/// Minutes the chart covers.
pub(crate) const MINUTES: usize = 60;
const MINUTE_MS: i64 = 60_000;
/// Samples closer than this to the last one are not kept.
pub(crate) const SAMPLE_EVERY_MS: i64 = 10_000;

/// One reading of the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    at_ms: i64,
    sent: u64,
    failed: u64,
}

/// Samples of the counters over the last hour (and one before it, as the base).
#[derive(Debug, Default)]
pub(crate) struct SendHistory {
    samples: Mutex<VecDeque<Sample>>,
}

/// Sends and failed sends in one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Minute {
    pub(crate) sent: u64,
    pub(crate) failed: u64,
}

impl SendHistory {
    /// Records the counters read at `at_ms`; drops what the chart no longer needs.
    pub(crate) fn record(&self, at_ms: i64, sent: u64, failed: u64) {
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let sample = Sample {
            at_ms,
            sent,
            failed,
        };
        // Kept samples stand at least the sampling period apart; the newest reading replaces
        // the last one while it is closer than that to the one before.
        let n = samples.len();
        let crowded = n >= 2 && samples[n - 1].at_ms - samples[n - 2].at_ms < SAMPLE_EVERY_MS;
        match samples.back_mut() {
            Some(last) if crowded => *last = sample,
            _ => samples.push_back(sample),
        }
        let horizon = at_ms - (MINUTES as i64 + 1) * MINUTE_MS;
        while samples.len() > 2 && samples.get(1).is_some_and(|s| s.at_ms < horizon) {
            samples.pop_front();
        }
    }

    /// The last hour before `now_ms`, oldest minute first.
    pub(crate) fn minutes(&self, now_ms: i64) -> Vec<Minute> {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        // The counters as of `t`: the last sample at or before it (the first one before any).
        let at = |t: i64| -> (u64, u64) {
            samples
                .iter()
                .rev()
                .find(|s| s.at_ms <= t)
                .or(samples.front())
                .map_or((0, 0), |s| (s.sent, s.failed))
        };
        (0..MINUTES)
            .map(|i| {
                let end = now_ms - (MINUTES - 1 - i) as i64 * MINUTE_MS;
                let (s0, f0) = at(end - MINUTE_MS);
                let (s1, f1) = at(end);
                Minute {
                    sent: s1.saturating_sub(s0),
                    failed: f1.saturating_sub(f0),
                }
            })
            .collect()
    }
}

/// The bar chart of `minutes` (oldest first) as an inline SVG element.
pub(crate) fn svg(minutes: &[Minute]) -> String {
    const W: usize = 720;
    const H: usize = 160;
    const LEFT: usize = 40;
    const BOTTOM: usize = 20;
    let top = minutes
        .iter()
        .map(|m| m.sent.max(m.failed))
        .max()
        .unwrap_or(0)
        .max(1);
    let plot_h = (H - BOTTOM - 10) as f64;
    let slot = (W - LEFT) as f64 / minutes.len().max(1) as f64;
    let bar = (slot / 2.0 - 1.0).max(1.0);
    let y = |v: u64| (H - BOTTOM) as f64 - v as f64 / top as f64 * plot_h;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg id="sends-chart" role="img" aria-label="Sends and failed sends per minute, last hour" viewBox="0 0 {W} {H}" width="{W}" height="{H}" xmlns="http://www.w3.org/2000/svg">"#
    );
    let _ = write!(
        out,
        r##"<line x1="{LEFT}" y1="{b}" x2="{W}" y2="{b}" stroke="#999"/><text x="{l}" y="14" font-size="11" text-anchor="end">{top}</text><text x="{l}" y="{b}" font-size="11" text-anchor="end">0</text>"##,
        b = H - BOTTOM,
        l = LEFT - 4,
    );
    for (i, m) in minutes.iter().enumerate() {
        let x = LEFT as f64 + i as f64 * slot;
        let ago = minutes.len() - 1 - i;
        for (offset, value, class, what) in [
            (0.0, m.sent, "sent", "sent"),
            (bar + 1.0, m.failed, "failed", "failed"),
        ] {
            if value == 0 {
                continue;
            }
            let _ = write!(
                out,
                r#"<rect class="{class}" x="{:.1}" y="{:.1}" width="{bar:.1}" height="{:.1}"><title>{}</title></rect>"#,
                x + offset,
                y(value),
                (H - BOTTOM) as f64 - y(value),
                escape(&format!("{value} {what}, {ago} min ago")),
            );
        }
    }
    let _ = write!(
        out,
        r#"<text x="{LEFT}" y="{y}" font-size="11">60 min ago</text><text x="{}" y="{y}" font-size="11" text-anchor="middle">30 min ago</text><text x="{W}" y="{y}" font-size="11" text-anchor="end">now</text></svg>"#,
        LEFT + (W - LEFT) / 2,
        y = H - 4,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_are_the_differences_of_the_counters() {
        let h = SendHistory::default();
        let now = 10 * 3_600_000;
        h.record(now - 5 * MINUTE_MS, 10, 1);
        h.record(now - 3 * MINUTE_MS - 30_000, 14, 1);
        h.record(now - 30_000, 20, 3);
        let m = h.minutes(now);
        assert_eq!(m.len(), MINUTES);
        assert_eq!(m[MINUTES - 4], Minute { sent: 4, failed: 0 });
        assert_eq!(m[MINUTES - 1], Minute { sent: 6, failed: 2 });
        let total: u64 = m.iter().map(|m| m.sent).sum();
        assert_eq!(total, 10, "everything since the first sample");
    }

    #[test]
    fn samples_older_than_the_hour_are_dropped_but_one_base() {
        let h = SendHistory::default();
        for i in 0..200 {
            h.record(i * 30_000, i as u64, 0);
        }
        let kept = h.samples.lock().unwrap_or_else(|e| e.into_inner()).len();
        assert!(kept <= 2 * MINUTES + 4, "{kept}");
        assert_eq!(h.minutes(199 * 30_000)[MINUTES - 1].sent, 2);
    }

    #[test]
    fn the_svg_has_a_bar_per_nonzero_value_with_its_title() {
        let mut minutes = vec![Minute::default(); MINUTES];
        minutes[59] = Minute { sent: 3, failed: 1 };
        let svg = svg(&minutes);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<rect").count(), 2);
        assert!(svg.contains("<title>3 sent, 0 min ago</title>"));
        assert!(svg.contains("<title>1 failed, 0 min ago</title>"));
    }
}
