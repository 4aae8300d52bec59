//! `hale history ROLE`: a role's failover history, as the control plane
//! keeps it for the whole cluster (`GET /v1/roles/{role}/history`), as a
//! table an operator reads after an incident: when (UTC), epoch, holder
//! after the change, and why.

use clap::Args;

use hale_agent::view::{Cause, Change, HistoryView, ReleaseReason};

use crate::client_cmd::{block_on, ApiArgs};

/// `hale history ROLE [--limit N] [--json]`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The role.
    pub role: String,
    /// Only its last N changes (the control plane keeps the last 100).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
    /// Print JSON (the `History` schema of /v1/openapi.json).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// `hale history`.
pub fn run(args: &HistoryArgs) -> anyhow::Result<()> {
    let limit = args.limit.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let v = block_on(args.api.client().history(&args.role, limit))??;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", table(&v));
    }
    Ok(())
}

/// The history as the command prints it.
pub fn table(v: &HistoryView) -> String {
    let mut out = format!(
        "{:<25}{:>6}  {:<16}CAUSE\n",
        "TIME (UTC)", "EPOCH", "HOLDER"
    );
    if v.changes.is_empty() {
        out.push_str(&format!("(no change of {} recorded)\n", v.role));
    }
    if let Some(first) = v.changes.first().filter(|c| c.seq > 1) {
        out.push_str(&format!(
            "(older changes dropped: this is change #{})\n",
            first.seq
        ));
    }
    for c in &v.changes {
        out.push_str(&format!(
            "{:<25}{:>6}  {:<16}{}\n",
            c.at_unix_ms.map_or("unknown".to_owned(), utc),
            c.epoch,
            c.holder.as_deref().unwrap_or("-"),
            describe(c)
        ));
    }
    out
}

/// Unix milliseconds as an RFC 3339 UTC time to the millisecond.
fn utc(unix_ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(unix_ms);
    humantime::format_rfc3339_millis(t).to_string()
}

/// Who asked, as a suffix (`" (asked on n2)"`), or nothing.
fn asked(by: &Option<String>) -> String {
    by.as_deref()
        .map_or(String::new(), |n| format!(" (asked on {n})"))
}

/// What a change means, in words.
pub fn describe(c: &Change) -> String {
    let holder = c.holder.as_deref().unwrap_or("-");
    match &c.cause {
        Cause::FirstGrant => "first grant: nobody held it before".into(),
        Cause::LeaseExpired { previous } if previous == holder => {
            format!("granted back to {previous} after its own lease expired")
        }
        Cause::LeaseExpired { previous } => format!(
            "granted after {previous}'s lease expired ({previous} went silent: host down, agent \
             hung or killed, or cut off)"
        ),
        Cause::AfterRelease {
            previous: Some(p),
            named: Some(n),
        } if n == holder => format!("granted to {n}, the successor {p} named when it released"),
        Cause::AfterRelease {
            previous: Some(p),
            named: Some(n),
        } => format!("granted after {p} released it ({p} named {n}, which did not take it)"),
        Cause::AfterRelease {
            previous: Some(p),
            named: None,
        } => format!("granted after {p} released it"),
        Cause::AfterRelease { previous: None, .. } => {
            "granted after a release (not recorded: an older server applied it)".into()
        }
        Cause::SwitchoverDone { previous } => format!("switchover from {previous} done"),
        Cause::Released {
            previous,
            reason,
            next,
        } => {
            let named = next
                .as_deref()
                .map_or(String::new(), |n| format!(", naming {n} its successor"));
            format!("released by {previous}: {}{named}", reason_words(*reason))
        }
        Cause::SwitchoverOrdered { to, at_unix_ms, by } => {
            let when = match at_unix_ms {
                0 => "as soon as it has caught up".to_owned(),
                t => format!("not before {}", utc(*t)),
            };
            format!("switchover to {to} ordered, {when}{}", asked(by))
        }
        Cause::SwitchoverCancelled { to, by } => {
            format!("switchover to {to} cancelled{}", asked(by))
        }
        Cause::Paused { by } => format!("paused by an operator{}", asked(by)),
        Cause::Resumed { by, forced } => format!(
            "resumed by an operator{}{}",
            if *forced { " with --force" } else { "" },
            asked(by)
        ),
        Cause::Unknown => "a change this release of hale does not know".into(),
    }
}

/// Why a holder released its role, in words.
fn reason_words(reason: Option<ReleaseReason>) -> &'static str {
    match reason {
        Some(ReleaseReason::ServiceFailing) => "its service's checks failed",
        Some(ReleaseReason::Handover) => "an operator's handover",
        Some(ReleaseReason::Switchover) => "the switchover ordered",
        Some(ReleaseReason::Leaving) => "its agent stopped",
        Some(ReleaseReason::PromoteHookFailed) => "its promote hook failed",
        Some(ReleaseReason::PromoteHookTimedOut) => "its promote hook timed out",
        Some(ReleaseReason::LeaseExpired) => "its own lease ran out first (renewals not committed)",
        Some(ReleaseReason::Unused) => "granted too late to use, given straight back",
        Some(ReleaseReason::Other) => "a reason this release of hale does not know",
        None => "no reason given (an agent of an older release)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(seq: u64, epoch: u64, holder: Option<&str>, at: Option<u64>, cause: Cause) -> Change {
        Change {
            seq,
            epoch,
            holder: holder.map(str::to_owned),
            at_unix_ms: at,
            cause,
        }
    }

    #[test]
    fn the_table_shows_utc_time_epoch_holder_and_cause_oldest_first() {
        let v = HistoryView {
            role: "db".into(),
            changes: vec![
                change(1, 1, Some("n0"), Some(1_764_731_524_512), Cause::FirstGrant),
                change(
                    2,
                    2,
                    Some("n1"),
                    Some(1_764_733_217_020),
                    Cause::LeaseExpired {
                        previous: "n0".into(),
                    },
                ),
                change(
                    3,
                    2,
                    None,
                    None,
                    Cause::Released {
                        previous: "n1".into(),
                        reason: Some(ReleaseReason::ServiceFailing),
                        next: None,
                    },
                ),
            ],
        };
        assert_eq!(
            table(&v),
            "TIME (UTC)                EPOCH  HOLDER          CAUSE\n\
             2025-12-03T03:12:04.512Z      1  n0              first grant: nobody held it before\n\
             2025-12-03T03:40:17.020Z      2  n1              granted after n0's lease expired \
             (n0 went silent: host down, agent hung or killed, or cut off)\n\
             unknown                       2  -               released by n1: its service's \
             checks failed\n"
        );
        let dropped = HistoryView {
            role: "db".into(),
            changes: vec![change(52, 9, None, None, Cause::Paused { by: None })],
        };
        assert!(table(&dropped).contains("(older changes dropped: this is change #52)\n"));
        let none = HistoryView {
            role: "db".into(),
            changes: vec![],
        };
        assert!(table(&none).ends_with("(no change of db recorded)\n"));
    }

    #[test]
    fn every_cause_reads_as_what_happened() {
        let words =
            |holder: Option<&str>, cause: Cause| describe(&change(1, 1, holder, None, cause));
        let s = |x: &str| Some(x.to_owned());
        assert_eq!(
            words(
                s("a").as_deref(),
                Cause::LeaseExpired {
                    previous: "a".into()
                }
            ),
            "granted back to a after its own lease expired"
        );
        let after = |previous: Option<String>, named: Option<String>| Cause::AfterRelease {
            previous,
            named,
        };
        assert_eq!(
            words(Some("c"), after(s("b"), s("c"))),
            "granted to c, the successor b named when it released"
        );
        assert_eq!(
            words(Some("a"), after(s("b"), s("c"))),
            "granted after b released it (b named c, which did not take it)"
        );
        assert_eq!(
            words(Some("a"), after(s("b"), None)),
            "granted after b released it"
        );
        assert_eq!(
            words(Some("a"), after(None, None)),
            "granted after a release (not recorded: an older server applied it)"
        );
        assert_eq!(
            words(
                Some("b"),
                Cause::SwitchoverDone {
                    previous: "a".into()
                }
            ),
            "switchover from a done"
        );
        let released = Cause::Released {
            previous: "a".into(),
            reason: Some(ReleaseReason::Switchover),
            next: s("b"),
        };
        assert_eq!(
            words(None, released),
            "released by a: the switchover ordered, naming b its successor"
        );
        let released = Cause::Released {
            previous: "a".into(),
            reason: None,
            next: None,
        };
        assert_eq!(
            words(None, released),
            "released by a: no reason given (an agent of an older release)"
        );
        let ordered = Cause::SwitchoverOrdered {
            to: "b".into(),
            at_unix_ms: 1_764_731_524_000,
            by: s("n2"),
        };
        assert_eq!(
            words(Some("a"), ordered),
            "switchover to b ordered, not before 2025-12-03T03:12:04.000Z (asked on n2)"
        );
        let ordered = Cause::SwitchoverOrdered {
            to: "b".into(),
            at_unix_ms: 0,
            by: None,
        };
        assert_eq!(
            words(Some("a"), ordered),
            "switchover to b ordered, as soon as it has caught up"
        );
        let cancelled = Cause::SwitchoverCancelled {
            to: "b".into(),
            by: s("n1"),
        };
        assert_eq!(
            words(Some("a"), cancelled),
            "switchover to b cancelled (asked on n1)"
        );
        assert_eq!(
            words(Some("a"), Cause::Paused { by: s("n2") }),
            "paused by an operator (asked on n2)"
        );
        let resumed = Cause::Resumed {
            by: s("n3"),
            forced: true,
        };
        assert_eq!(
            words(Some("a"), resumed),
            "resumed by an operator with --force (asked on n3)"
        );
        assert_eq!(
            words(None, Cause::Unknown),
            "a change this release of hale does not know"
        );
    }
}
