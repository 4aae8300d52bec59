//! Upstream rate limits: `429` with `Retry-After`, and Sentry's
//! `X-Sentry-Rate-Limits` (`retry_after:categories:scope[:reason], ...`,
//! categories separated by `;`, empty meaning all).

use std::time::Duration;

use tokio::time::Instant;

use crate::counters::Category;

/// Used when a 429 carries no parsable `Retry-After` (Sentry SDKs use 60 s).
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(60);

/// When each category may be sent again.
#[derive(Debug, Default, Clone)]
pub(crate) struct RateLimits {
    all: Option<Instant>,
    per: [Option<Instant>; Category::ALL.len()],
}

impl RateLimits {
    /// Whether `cat` is limited at `now`.
    pub(crate) fn is_limited(&self, cat: Category, now: Instant) -> bool {
        let active = |t: Option<Instant>| t.is_some_and(|t| now < t);
        active(self.all) || active(self.per[cat.index()])
    }

    /// Records the limits a response carries. Returns whether it had any.
    pub(crate) fn update(
        &mut self,
        now: Instant,
        status: u16,
        retry_after: Option<&str>,
        sentry_limits: Option<&str>,
    ) -> bool {
        if let Some(h) = sentry_limits {
            let mut any = false;
            for (cats, secs) in parse_sentry_limits(h) {
                let until = now + secs;
                any = true;
                if cats.is_empty() {
                    self.all = self.all.max(Some(until));
                }
                for c in cats {
                    self.per[c.index()] = self.per[c.index()].max(Some(until));
                }
            }
            if any {
                return true;
            }
        }
        if status == 429 {
            let secs = retry_after.and_then(parse_secs);
            let until = now + secs.unwrap_or(DEFAULT_RETRY_AFTER);
            self.all = self.all.max(Some(until));
            return true;
        }
        false
    }
}

/// Parses `X-Sentry-Rate-Limits`; unknown categories are ignored (a limit
/// naming only unknown categories does not limit everything).
pub(crate) fn parse_sentry_limits(h: &str) -> Vec<(Vec<Category>, Duration)> {
    let mut out = Vec::new();
    for limit in h.split(',') {
        let mut parts = limit.trim().split(':');
        let Some(secs) = parts.next().and_then(parse_secs) else {
            continue;
        };
        let cats_text = parts.next().unwrap_or("").trim();
        let cats: Vec<Category> = cats_text
            .split(';')
            .filter(|s| !s.is_empty())
            .filter_map(Category::parse)
            .collect();
        if !cats_text.is_empty() && cats.is_empty() {
            continue;
        }
        out.push((cats, secs));
    }
    out
}

/// A delay in seconds as a header gives it (fractions allowed), capped at
/// a day; `None` unless a finite number of seconds, at least 0.
fn parse_secs(text: &str) -> Option<Duration> {
    let s: f64 = text.trim().parse().ok()?;
    (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(86_400.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_headers() {
        let now = Instant::now();
        let mut l = RateLimits::default();
        assert!(l.update(now, 429, Some("3"), None));
        assert!(l.is_limited(Category::Error, now));
        assert!(!l.is_limited(Category::Error, now + Duration::from_secs(3)));
        let mut l = RateLimits::default();
        assert!(l.update(
            now,
            200,
            None,
            Some("60:transaction;foo:organization, 5::key")
        ));
        assert!(l.is_limited(Category::Transaction, now + Duration::from_secs(30)));
        assert!(!l.is_limited(Category::Error, now + Duration::from_secs(6)));
        assert!(l.is_limited(Category::Error, now + Duration::from_secs(4)));
        let mut l = RateLimits::default();
        assert!(!l.update(now, 200, None, Some("10:nonsense:org")));
        assert!(!l.is_limited(Category::Error, now));
    }
}
