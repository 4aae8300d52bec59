//! Fencing and promotion.

use hale_postgres::{fence, promote, Fenced, PromoteError, Promotion, Standing};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::fixture::{eventually, Lab, Opts};

#[tokio::test]
async fn a_fenced_data_directory_refuses_promotion_and_fencing_twice_changes_nothing() {
    let lab = Lab::new();
    let p = lab.primary("p", Opts::default()).await;
    assert_eq!(fence(&p.cfg).await.expect("fence"), Fenced::StoppedFast);
    assert!(p.fenced());
    assert!(p.cfg.data_dir.join("standby.signal").exists());
    assert_eq!(fence(&p.cfg).await.expect("fence again"), Fenced::WasDown);

    let refused = promote(&p.cfg).await;
    assert!(
        matches!(refused, Err(PromoteError::Fenced { .. })),
        "{refused:?}"
    );
    assert_eq!(
        p.standing().await,
        Standing::Down,
        "a refused promotion starts nothing"
    );
}

#[tokio::test]
async fn fencing_a_sigstopped_primary_kills_it_and_it_then_boots_only_as_a_standby() {
    let lab = Lab::new();
    let p = lab.primary("p", Opts::default()).await;
    p.sql("CREATE TABLE t (id int)").await;
    let pid = p.postmaster_pid().expect("postmaster.pid");
    let children = children(pid);
    assert!(!children.is_empty(), "a running postmaster has children");
    kill(Pid::from_raw(pid), Signal::SIGSTOP).expect("SIGSTOP");

    assert_eq!(fence(&p.cfg).await.expect("fence"), Fenced::Killed);
    for pid in std::iter::once(pid).chain(children) {
        // A zombie (whose parent has not reaped it yet) runs nothing.
        assert!(
            matches!(state(pid), None | Some('Z')),
            "process {pid} is still alive"
        );
    }
    assert!(p.fenced());

    p.start(&lab).await;
    let standing = eventually("p answering", || async {
        Some(p.standing().await).filter(|s| *s != Standing::Down)
    })
    .await;
    assert!(matches!(standing, Standing::Replica { .. }), "{standing:?}");
    p.refuses_writes().await;
}

#[tokio::test]
async fn promotion_starts_a_stopped_standby_and_is_idempotent() {
    let lab = Lab::new();
    let p = lab.primary("p", Opts::default()).await;
    let s = lab.standby("s", &p, Opts::default()).await;
    s.stop(&lab, "fast").await;

    assert_eq!(
        promote(&s.cfg).await.expect("promote"),
        Promotion::Promoted { started: true }
    );
    assert!(matches!(
        s.standing().await,
        Standing::Primary { timeline: 2, .. }
    ));
    s.sql("CREATE TABLE after_promotion (id int)").await;
    assert_eq!(
        promote(&s.cfg).await.expect("promote again"),
        Promotion::AlreadyPrimary { started: false }
    );
    assert_eq!(
        promote(&p.cfg).await.expect("promote a primary"),
        Promotion::AlreadyPrimary { started: false }
    );
}

/// The state letter of a process, from `/proc/PID/stat`.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// The processes whose parent is `pid`.
fn children(pid: i32) -> Vec<i32> {
    let parent = |child: i32| -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
        stat[stat.rfind(')')? + 1..]
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&child| parent(child) == Some(pid))
        .collect()
}

#[tokio::test]
async fn fencing_a_primary_whose_disk_is_frozen_kills_it_within_seconds_and_marks_it_once_the_disk_answers(
) {
    let lab = Lab::new();
    let p = lab.primary("p", Opts::default()).await;
    let disk = crate::disk::Disk::holding(&lab, &p, 160, "").await;
    p.sql("CREATE TABLE t (id int)").await;
    let pid = p.postmaster_pid().expect("postmaster.pid");
    let mut processes = vec![pid];
    processes.extend(children(pid));
    // (A session opened on a frozen disk would wait on it too.)
    let client = p.client().await;
    disk.freeze();
    // A commit now waits on the disk, in the kernel.
    let writer =
        tokio::spawn(async move { client.batch_execute("INSERT INTO t VALUES (1)").await });

    let started = std::time::Instant::now();
    let fenced = tokio::time::timeout(std::time::Duration::from_secs(10), fence(&p.cfg))
        .await
        .expect("a fence on a frozen disk returns")
        .expect("and fences");
    assert_eq!(fenced, Fenced::KilledOnStalledDisk);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "fenced in {:?}",
        started.elapsed()
    );
    assert!(!p.fenced(), "the marker waits for the disk");

    // Thawed: every process dies without running again (the commit is
    // never acknowledged) and the marker is written.
    disk.thaw();
    eventually("the server's processes gone", || async {
        processes
            .iter()
            .all(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
                stat.map_or(true, |s| s.contains(") Z"))
            })
            .then_some(())
    })
    .await;
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), writer)
        .await
        .expect("the writer's session ends")
        .expect("joined");
    assert!(answer.is_err(), "the commit was acknowledged: {answer:?}");
    eventually("the marker written", || async { p.fenced().then_some(()) }).await;
    assert!(p.cfg.data_dir.join("standby.signal").exists());
    // The killed server's lock files stayed (on the disk it could not
    // write, and its socket's, naming a postmaster that may stay a zombie:
    // PostgreSQL then refuses to start); the next fence (a rejoin's first
    // step) removes them, and the server starts again (as a standby:
    // fenced).
    assert!(p.cfg.data_dir.join("postmaster.pid").exists());
    assert_eq!(fence(&p.cfg).await.expect("fence again"), Fenced::WasDown);
    assert!(!p.cfg.data_dir.join("postmaster.pid").exists());
    p.start(&lab).await;
    assert!(matches!(p.standing().await, Standing::Replica { .. }));
    drop(disk);
}
