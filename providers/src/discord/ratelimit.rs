//! Discord's REST rate limits, kept before each request instead of learnt from 429s: the
//! per-route buckets (`X-RateLimit-Bucket`, `-Remaining`, `-Reset-After`), keyed by bucket and
//! top-level resource (the channel, the webhook token), the global limit of 50 requests per
//! second, and a global 429 (`"global": true`, `X-RateLimit-Global`) that pauses every route.
//!
//! [`Limiter::acquire`] waits when a bucket is spent until its reset (or the global window's
//! end), as long as that wait is short ([`MAX_WAIT`]); a longer one comes back as the wait,
//! for the caller to report as `RateLimited { retry_after }` and let the runtime retry. The
//! limits are never hard-coded but the global one: each bucket's come from its headers.
//! Interaction callbacks are outside the global limit (Discord's rule).
//!
//! It does not retry: a 429 is recorded ([`Limiter::limited`]) and reported.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::HeaderMap;
use tokio::time::Instant;

/// The longest wait [`Limiter::acquire`] sleeps through before handing it to the runtime.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(5);

/// Requests per second per bot, over every route but interaction callbacks.
const GLOBAL_PER_SECOND: u32 = 50;

/// A bucket's state, once its headers were seen.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    remaining: u32,
    reset_at: Instant,
}

#[derive(Debug)]
struct State {
    /// Route (`POST /channels/{}/messages`) → the bucket Discord named for it.
    routes: HashMap<String, String>,
    /// (bucket, or the route until named; top-level resource) → its state.
    buckets: HashMap<(String, String), Bucket>,
    /// Every route waits until then (a global 429).
    global_until: Option<Instant>,
    /// The global window: its start and the requests made in it.
    window: (Instant, u32),
}

/// The rate limits of one bot token.
#[derive(Debug)]
pub(crate) struct Limiter(Mutex<State>);

impl Default for Limiter {
    fn default() -> Self {
        Self(Mutex::new(State {
            routes: HashMap::new(),
            buckets: HashMap::new(),
            global_until: None,
            window: (Instant::now(), 0),
        }))
    }
}

/// Which limits a request counts against.
#[derive(Debug, Clone)]
pub(crate) struct RouteKey {
    /// The method and path with its ids replaced (`PATCH /webhooks/{}/{}/messages/@original`).
    pub(crate) route: String,
    /// The top-level resource (a channel id, an interaction token), part of the bucket's key.
    pub(crate) major: String,
    /// Counted against the global limit (all but interaction callbacks).
    pub(crate) global: bool,
}

impl Limiter {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bucket_key(state: &State, key: &RouteKey) -> (String, String) {
        let bucket = state
            .routes
            .get(&key.route)
            .cloned()
            .unwrap_or_else(|| key.route.clone());
        (bucket, key.major.clone())
    }

    /// How long `key` must wait before its request may go, `None` for now; takes its place
    /// (one of the bucket's remaining requests, one of the global window's) when it may go.
    fn reserve(&self, key: &RouteKey, now: Instant) -> Option<Instant> {
        let mut state = self.lock();
        if let Some(until) = state.global_until.filter(|u| *u > now) {
            return Some(until);
        }
        let bkey = Self::bucket_key(&state, key);
        if let Some(b) = state.buckets.get_mut(&bkey) {
            if b.reset_at <= now {
                state.buckets.remove(&bkey);
            } else if b.remaining == 0 {
                return Some(b.reset_at);
            } else {
                b.remaining -= 1;
            }
        }
        if key.global {
            let (start, count) = &mut state.window;
            if now.duration_since(*start) >= Duration::from_secs(1) {
                *start = now;
                *count = 0;
            }
            if *count >= GLOBAL_PER_SECOND {
                return Some(*start + Duration::from_secs(1));
            }
            *count += 1;
        }
        None
    }

    /// Waits until `key` may make its request. `Err(wait)`: the limit lasts longer than
    /// [`MAX_WAIT`]; nothing was reserved.
    pub(crate) async fn acquire(&self, key: &RouteKey) -> Result<(), Duration> {
        loop {
            let now = Instant::now();
            let Some(until) = self.reserve(key, now) else {
                return Ok(());
            };
            let wait = until.saturating_duration_since(now);
            if wait > MAX_WAIT {
                return Err(wait);
            }
            tracing::debug!(route = %key.route, ?wait, "discord rate limit: waiting");
            tokio::time::sleep_until(until).await;
        }
    }

    /// Records a response's rate-limit headers for `key`'s bucket.
    pub(crate) fn update(&self, key: &RouteKey, headers: &HeaderMap) {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let Some(remaining) = header("x-ratelimit-remaining").and_then(|v| v.parse::<u32>().ok())
        else {
            return;
        };
        let reset_after = header("x-ratelimit-reset-after")
            .and_then(seconds)
            .unwrap_or_default();
        let mut state = self.lock();
        if let Some(bucket) = header("x-ratelimit-bucket") {
            state.routes.insert(key.route.clone(), bucket.to_owned());
        }
        let bkey = Self::bucket_key(&state, key);
        state.buckets.insert(
            bkey,
            Bucket {
                remaining,
                reset_at: Instant::now() + reset_after,
            },
        );
    }

    /// Records a 429 for `key`: every route waits `retry_after` when it was global, else
    /// `key`'s bucket does.
    pub(crate) fn limited(&self, key: &RouteKey, retry_after: Duration, global: bool) {
        let until = Instant::now() + retry_after;
        let mut state = self.lock();
        if global {
            state.global_until = Some(state.global_until.map_or(until, |u| u.max(until)));
            return;
        }
        let bkey = Self::bucket_key(&state, key);
        state.buckets.insert(
            bkey,
            Bucket {
                remaining: 0,
                reset_at: until,
            },
        );
    }
}

/// Seconds with decimals (`"1.5"`) as a duration; `None` for anything else.
pub(crate) fn seconds(text: &str) -> Option<Duration> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(route: &str, major: &str) -> RouteKey {
        RouteKey {
            route: route.to_owned(),
            major: major.to_owned(),
            global: true,
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("a header value"));
        }
        h
    }

    #[tokio::test(start_paused = true)]
    async fn a_spent_bucket_waits_for_its_reset_per_channel() {
        let limiter = Limiter::default();
        let c1 = key("POST /channels/{}/messages", "1");
        let c2 = key("POST /channels/{}/messages", "2");
        limiter.update(
            &c1,
            &headers(&[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset-after", "1.5"),
                ("x-ratelimit-bucket", "abcd"),
            ]),
        );
        let start = Instant::now();
        assert_eq!(
            limiter.acquire(&c2).await,
            Ok(()),
            "another channel goes now"
        );
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(limiter.acquire(&c1).await, Ok(()));
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(1500),
            "waited for the reset"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_global_429_pauses_every_route_and_a_long_wait_is_handed_back() {
        let limiter = Limiter::default();
        let a = key("POST /channels/{}/messages", "1");
        let b = key("PATCH /webhooks/{}/{}/messages/@original", "t");
        limiter.limited(&a, Duration::from_millis(700), true);
        let start = Instant::now();
        assert_eq!(limiter.acquire(&b).await, Ok(()));
        assert_eq!(start.elapsed(), Duration::from_millis(700));
        limiter.limited(&a, Duration::from_secs(60), false);
        assert_eq!(limiter.acquire(&a).await, Err(Duration::from_secs(60)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_global_limit_allows_fifty_requests_a_second() {
        let limiter = Limiter::default();
        let start = Instant::now();
        for i in 0..51 {
            assert_eq!(
                limiter.acquire(&key("GET /x", &i.to_string())).await,
                Ok(())
            );
        }
        assert_eq!(start.elapsed(), Duration::from_secs(1), "the 51st waited");
    }

    #[test]
    fn seconds_read_decimals() {
        assert_eq!(seconds("64.57"), Some(Duration::from_secs_f64(64.57)));
        assert_eq!(seconds("-1"), None);
        assert_eq!(seconds("soon"), None);
    }
}
