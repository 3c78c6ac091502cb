//! When a job runs: its occurrences (cron expressions in UTC through `croner`, fixed periods,
//! one-off times) and the missed-run plan of a due job.
//!
//! A due job whose next occurrence `o1` passed may have several occurrences `o1 … ok` at or
//! before now. The plan:
//!
//! | occurrences due | how late `ok` is | `Skip` | `RunOnce` | `RunAll` |
//! | --- | --- | --- | --- | --- |
//! | one | within the grace | run `o1` | run `o1` | run `o1` |
//! | one | beyond the grace | skip it | run it | run it |
//! | several | within the grace | run `ok`, `k-1` missed | run `ok`, `k-1` missed | run `o1` (then `o2`, … each once) |
//! | several | beyond the grace | skip all `k` | run `ok`, `k-1` missed | run `o1` (then `o2`, …) |
//!
//! Pure: no clock, no I/O.

use botmesh_durability::schedule::{JobDefinition, JobRecord, JobSchedule, MissedRuns, Plan};
use chrono::{DateTime, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// Past this many occurrences, a count of missed ones stops (a cron every second over a long
/// downtime); the plan is unchanged.
const COUNT_CAP: u64 = 100_000;

/// Parses a cron expression (5 fields, or 6 with seconds first; `@daily` and friends).
pub(crate) fn parse_cron(expr: &str) -> Result<Cron, String> {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .build()
        .parse(expr)
        .map_err(|e| e.to_string())
}

fn to_dt(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::<Utc>::from_timestamp_millis(ms)
}

fn cron_after(expr: &str, ms: i64, inclusive: bool) -> Option<i64> {
    let cron = parse_cron(expr).ok()?;
    let at = to_dt(ms)?;
    cron.find_next_occurrence(&at, inclusive)
        .ok()
        .map(|d| d.timestamp_millis())
}

fn cron_at_or_before(expr: &str, ms: i64) -> Option<i64> {
    let cron = parse_cron(expr).ok()?;
    let at = to_dt(ms)?;
    cron.find_previous_occurrence(&at, true)
        .ok()
        .map(|d| d.timestamp_millis())
}

/// The first occurrence of a new (or replaced) definition scheduled at `now`.
pub(crate) fn first(def: &JobDefinition, now: i64) -> Option<i64> {
    match &def.schedule {
        JobSchedule::At { at_ms } => Some(*at_ms),
        JobSchedule::Every {
            every_ms,
            anchor_ms,
        } => {
            let every = i64::try_from(*every_ms).ok()?.max(1);
            match anchor_ms {
                None => now.checked_add(every),
                // The first occurrence of the anchored series after now.
                Some(anchor) if *anchor > now => anchor.checked_add(every),
                Some(anchor) => {
                    let n = (now - anchor) / every + 1;
                    anchor.checked_add(n.checked_mul(every)?)
                }
            }
        }
        JobSchedule::Cron { expr } => cron_after(expr, now, false),
    }
}

/// The occurrence after `occurrence` (`None`: the job is done).
pub(crate) fn next_after(def: &JobDefinition, occurrence: i64) -> Option<i64> {
    match &def.schedule {
        JobSchedule::At { .. } => None,
        JobSchedule::Every { every_ms, .. } => {
            occurrence.checked_add(i64::try_from(*every_ms).ok()?.max(1))
        }
        JobSchedule::Cron { expr } => cron_after(expr, occurrence, false),
    }
}

/// The latest occurrence at or before `now`, starting from `first` (which is at or before now),
/// and how many occurrences `first ..= latest` are (capped).
fn latest_due(def: &JobDefinition, first: i64, now: i64) -> (i64, u64) {
    match &def.schedule {
        JobSchedule::At { .. } => (first, 1),
        JobSchedule::Every { every_ms, .. } => {
            let every = i64::try_from(*every_ms).unwrap_or(i64::MAX).max(1);
            let n = (now - first) / every;
            (
                first.saturating_add(n.saturating_mul(every)),
                u64::try_from(n).unwrap_or(0).saturating_add(1),
            )
        }
        JobSchedule::Cron { expr } => {
            let latest = cron_at_or_before(expr, now)
                .filter(|l| *l >= first)
                .unwrap_or(first);
            let mut count = 1;
            let mut at = first;
            while at < latest && count < COUNT_CAP {
                match cron_after(expr, at, false) {
                    Some(next) if next <= latest => {
                        at = next;
                        count += 1;
                    }
                    _ => break,
                }
            }
            (latest, count)
        }
    }
}

/// What to do with the due job `r` at `now` (see the module table); `grace_ms` is how late an
/// occurrence may start and still count as on time.
pub(crate) fn plan(r: &JobRecord, now: i64, grace_ms: i64) -> Plan {
    let first = r.next_ms.unwrap_or(now);
    let (latest, count) = latest_due(&r.def, first, now);
    let on_time = now.saturating_sub(latest) <= grace_ms;
    match (r.def.missed, count) {
        (_, 1) if on_time => Plan::Run {
            occurrence_ms: first,
            missed: 0,
        },
        (MissedRuns::RunAll, _) => Plan::Run {
            occurrence_ms: first,
            missed: 0,
        },
        (MissedRuns::Skip, _) if !on_time => Plan::Skip {
            next_ms: next_after(&r.def, latest),
            missed: count,
        },
        _ => Plan::Run {
            occurrence_ms: latest,
            missed: count - 1,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(schedule: JobSchedule, missed: MissedRuns, next_ms: i64) -> JobRecord {
        JobRecord::new(
            "j",
            JobDefinition {
                schedule,
                task: "t".into(),
                chat: None,
                data: serde_json::Value::Null,
                missed,
            },
            Some(next_ms),
            0,
        )
    }

    const EVERY_10: JobSchedule = JobSchedule::Every {
        every_ms: 10,
        anchor_ms: None,
    };

    #[test]
    fn each_policy_plans_the_occurrences_a_downtime_missed() {
        // Due at 10, 20, 30; now 35 (5 late): within a grace of 10, beyond a grace of 2.
        let run = |occurrence_ms, missed| Plan::Run {
            occurrence_ms,
            missed,
        };
        let r = |p| record(EVERY_10, p, 10);
        assert_eq!(plan(&r(MissedRuns::RunAll), 35, 2), run(10, 0));
        assert_eq!(plan(&r(MissedRuns::RunOnce), 35, 2), run(30, 2));
        assert_eq!(
            plan(&r(MissedRuns::Skip), 35, 2),
            Plan::Skip {
                next_ms: Some(40),
                missed: 3
            }
        );
        assert_eq!(plan(&r(MissedRuns::Skip), 35, 10), run(30, 2));
        // One occurrence, on time: every policy runs it.
        for p in [MissedRuns::Skip, MissedRuns::RunOnce, MissedRuns::RunAll] {
            assert_eq!(plan(&record(EVERY_10, p, 30), 31, 2), run(30, 0));
        }
        // A one-off late beyond the grace.
        let at = JobSchedule::At { at_ms: 5 };
        assert_eq!(
            plan(&record(at.clone(), MissedRuns::Skip, 5), 100, 2),
            Plan::Skip {
                next_ms: None,
                missed: 1
            }
        );
        assert_eq!(plan(&record(at, MissedRuns::RunOnce, 5), 100, 2), run(5, 0));
    }

    #[test]
    fn cron_occurrences_are_counted_in_utc() {
        // Every minute; due from 00:01, now 00:05:30.
        let cron = JobSchedule::Cron {
            expr: "* * * * *".into(),
        };
        let r = record(cron, MissedRuns::RunOnce, 60_000);
        assert_eq!(
            plan(&r, 330_000, 1_000),
            Plan::Run {
                occurrence_ms: 300_000,
                missed: 4
            }
        );
        assert_eq!(next_after(&r.def, 300_000), Some(360_000));
        assert_eq!(first(&r.def, 61_000), Some(120_000));
        assert!(parse_cron("61 * * * *").is_err());
        assert!(parse_cron("*/5 * * * * *").is_ok(), "seconds are optional");
    }

    #[test]
    fn an_anchored_period_continues_its_series() {
        let def = record(
            JobSchedule::Every {
                every_ms: 10,
                anchor_ms: Some(3),
            },
            MissedRuns::Skip,
            0,
        )
        .def;
        assert_eq!(first(&def, 0), Some(13));
        assert_eq!(first(&def, 25), Some(33));
    }
}
