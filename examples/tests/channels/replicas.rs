//! Three replicas of the shop on one shared store (Postgres or Redis), as a user runs them
//! (`shop --store-url … --store-prefix … --replica shop-<i>`), behind a load balancer without
//! chat affinity: each webhook attempt goes to a random replica ([`Listen`]); on a polled
//! channel only the elected leader may fetch updates. Replicas are SIGKILLed at seeded
//! moments and restarted with their instance id; the first kill takes the leader (on a polled
//! channel) and keeps it down until a standby leads. The checks are the single shop's
//! ([`check`]: no reply twice unless an ambiguous send names the chat, no answer taken for
//! another question, the questions in order, every chat confirmed or named), plus, on a polled
//! channel, never two pollers at once at the fake.

use super::*;

/// How many replicas run.
const REPLICAS: usize = 3;
/// How many SIGKILLs a run takes.
const KILLS: usize = 3;
/// The replicas' leases: short, so that a run takes seconds (a standby takes the transport
/// over within the leader lease plus a campaign period).
const TURN_LEASE: &str = "6s";
const LEADER_LEASE: &str = "4s";
/// The log filter of a replica: warnings (ambiguous sends among them) and leader changes.
const RUST_LOG: &str = "warn,botmesh_durability::coordination=info";

impl Shop {
    /// Whether the running process leads the transport, by its last leader line since it
    /// started.
    fn leads(&self) -> bool {
        if self.child.is_none() {
            return false;
        }
        let log = self.log();
        log.get(self.log_from..)
            .unwrap_or_default()
            .lines()
            .rev()
            .find_map(|l| {
                if l.contains("this replica is now the leader") {
                    Some(true)
                } else if l.contains("lost the leader lease") {
                    Some(false)
                } else {
                    None
                }
            })
            .unwrap_or(false)
    }
}

/// Drives the users for `at_least`, then until `until` holds of the replicas (or `cap`).
async fn drive_while(
    users: &mut Users,
    channel: &dyn Channel,
    listen: &Listen,
    shops: &[Shop],
    at_least: Duration,
    cap: Duration,
    until: impl Fn(&[Shop]) -> bool,
) -> bool {
    let start = Instant::now();
    users
        .drive_for(channel, listen, cap, |_| {
            start.elapsed() >= at_least && until(shops)
        })
        .await
}

/// Three replicas of the shop on `channel` (a fresh fake per seed, from `fake`) and the
/// shared store at `url` (a fresh prefix per run), through [`KILLS`] SIGKILLs at seeded
/// moments; see the module docs for what is checked.
pub async fn replicas_survive_sigkills<C: Channel, F: std::future::Future<Output = C>>(
    fake: impl Fn() -> F,
    backend: &str,
    url: &str,
    seeds: std::ops::Range<u64>,
) {
    for seed in seeds {
        let started = Instant::now();
        let channel = Arc::new(fake().await);
        let polled = channel.poll_overlaps().is_some();
        let dir = tempfile::tempdir().expect("a temporary directory");
        // A fresh table / key prefix: runs in parallel (and earlier runs) share nothing.
        let prefix = format!(
            "rep{}_{seed}_{}_",
            std::process::id(),
            fastrand::u32(..1_000_000)
        );
        let mut shops: Vec<Shop> = (0..REPLICAS)
            .map(|i| {
                let mut shop = Shop::new(dir.path().join(format!("shop-{i}.db")));
                let replica = format!("shop-{i}");
                shop.args = [
                    "--store-url",
                    url,
                    "--store-prefix",
                    &prefix,
                    "--replica",
                    &replica,
                    "--turn-lease",
                    TURN_LEASE,
                    "--leader-lease",
                    LEADER_LEASE,
                ]
                .map(str::to_owned)
                .to_vec();
                shop.rust_log = RUST_LOG;
                shop
            })
            .collect();
        for shop in &mut shops {
            shop.start(&*channel);
        }
        let listen = Listen::new(shops.iter().map(|s| s.listen.clone()).collect(), seed);
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut users = Users::default();
        let mut kills = Vec::new();
        // What happened when (for a failure's explanation).
        let mut timeline: Vec<(Instant, String)> = Vec::new();
        for kill in 0..KILLS {
            let busy = Duration::from_millis(rng.u64(300..1500));
            // The first kill waits for a leader too (the replicas may still be starting).
            let cap = if kill == 0 {
                Duration::from_secs(30)
            } else {
                busy
            };
            drive_while(&mut users, &*channel, &listen, &shops, busy, cap, |shops| {
                !polled || shops.iter().any(Shop::leads)
            })
            .await;
            if kill == 0 {
                // The leader (any replica on a webhook channel), down until another leads.
                let leader = shops.iter().position(Shop::leads);
                assert!(
                    !polled || leader.is_some(),
                    "{backend} seed {seed}: no replica leads the polled transport"
                );
                let victim = leader.unwrap_or_else(|| rng.usize(..REPLICAS));
                shops[victim].kill9();
                timeline.push((
                    Instant::now(),
                    format!("shop-{victim} (leader: {leader:?}) killed"),
                ));
                let taken_over = drive_while(
                    &mut users,
                    &*channel,
                    &listen,
                    &shops,
                    Duration::from_millis(500),
                    Duration::from_secs(30),
                    |shops| !polled || shops.iter().any(Shop::leads),
                )
                .await;
                assert!(
                    taken_over,
                    "{backend} seed {seed}: no standby took the transport over from shop-{victim}"
                );
                kills.push(victim);
                shops[victim].start(&*channel);
                timeline.push((Instant::now(), format!("shop-{victim} restarted")));
            } else {
                let victim = rng.usize(..REPLICAS);
                let leader = shops[victim].leads();
                shops[victim].kill9();
                timeline.push((
                    Instant::now(),
                    format!("shop-{victim} (leads: {leader}) killed"),
                ));
                let down = Duration::from_millis(rng.u64(0..500));
                drive_while(&mut users, &*channel, &listen, &shops, down, down, |_| true).await;
                kills.push(victim);
                shops[victim].start(&*channel);
                timeline.push((Instant::now(), format!("shop-{victim} restarted")));
            }
        }
        // Until every chat is confirmed or named by an ambiguous send (whose confirmation may
        // never come), and then a little more for the named ones.
        let accounted = |shops: &[Shop]| {
            let named: HashSet<String> = shops.iter().flat_map(Shop::ambiguous_chats).collect();
            (1..=CHATS).all(|u| {
                named.contains(&channel.chat(u))
                    || channel.delivered(u).iter().any(|t| t.starts_with(DONE))
            })
        };
        let cap = Duration::from_secs(90);
        drive_while(
            &mut users,
            &*channel,
            &listen,
            &shops,
            Duration::ZERO,
            cap,
            accounted,
        )
        .await;
        let grace = Duration::from_secs(3);
        drive_while(&mut users, &*channel, &listen, &shops, grace, grace, |_| {
            true
        })
        .await;
        users.settle(&*channel).await;
        timeline.push((Instant::now(), "every chat done".to_owned()));
        for (i, shop) in shops.iter_mut().enumerate() {
            let leader = shop.leads();
            shop.stop();
            timeline.push((
                Instant::now(),
                format!("shop-{i} (leads: {leader}) stopped"),
            ));
        }
        let outcome = check(&*channel, &shops, false);
        let overlaps = channel.poll_overlaps().unwrap_or_default();
        if !overlaps.is_empty() {
            let at = |t: Instant| {
                t.into_std()
                    .saturating_duration_since(started.into_std())
                    .as_secs_f64()
            };
            let mut lines: Vec<(f64, String)> = timeline
                .iter()
                .map(|(t, what)| (at(*t), what.clone()))
                .collect();
            let name = |caller: &str| {
                shops
                    .iter()
                    .position(|s| s.listen.replace(['.', ':'], "-") == caller)
                    .map_or_else(|| caller.to_owned(), |i| format!("shop-{i}"))
            };
            lines.extend(overlaps.iter().map(|(t, polling, came)| {
                let what = format!("{} polled while {} was polling", name(came), name(polling));
                (at(Instant::from_std(*t)), what)
            }));
            lines.sort_by(|a, b| a.0.total_cmp(&b.0));
            let lines: Vec<String> = lines
                .iter()
                .map(|(t, w)| format!("{t:>6.2} s {w}"))
                .collect();
            panic!(
                "{backend} seed {seed}: replicas polled {} at once:\n{}",
                channel.name(),
                lines.join("\n")
            );
        }
        println!(
            "{} {} on {backend} seed {seed}: {CHATS} chats ordered on {REPLICAS} replicas through SIGKILLs of {kills:?} in {:.1} s; {outcome:?}",
            channel.name(),
            if polled { "polling" } else { "webhook" },
            started.elapsed().as_secs_f64()
        );
    }
}
