//! `consume --group` over `kafka://` with a coordinator that never lets the
//! member join (`common::fake_kafka`): an interrupt stops it at once, and a
//! run that is to end says why it cannot join, ever more rarely, then gives up.

use std::io::Read;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::bin;
use crate::common::fake_kafka::{FakeKafka, OnJoin};

fn member(addr: &str, extra: &[&str]) -> Child {
    bin()
        .args(["consume", "--topic", "t", "--group", "g", "--broker"])
        .arg(format!("kafka://{addr}"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn consume --group")
}

/// The child's exit status, waiting at most `limit`.
fn exit_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A member stuck joining (its JoinGroup unanswered, or every connection
/// closed at its JoinGroup) exits at SIGINT within about a second, as an
/// interrupted run does: status 0.
#[test]
fn an_interrupt_stops_a_member_stuck_joining() {
    for (on_join, joins) in [(OnJoin::Hang, 1), (OnJoin::Close, 4)] {
        let fake = FakeKafka::start(on_join);
        let mut child = member(&fake.addr, &["--follow"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while fake.joins() < joins {
            assert!(
                child.try_wait().unwrap().is_none(),
                "{on_join:?}: the member exited before it was interrupted"
            );
            assert!(
                Instant::now() < deadline,
                "{on_join:?}: {} JoinGroups within 30 s",
                fake.joins()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let pid = child.id().to_string();
        let sent = Instant::now();
        assert!(std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success());
        let status = exit_within(&mut child, Duration::from_secs(10));
        let took = sent.elapsed();
        let _ = child.kill();
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        let status =
            status.unwrap_or_else(|| panic!("{on_join:?}: still running 10 s after SIGINT"));
        assert!(status.success(), "{on_join:?}: {status}: {err}");
        assert!(
            took < Duration::from_millis(1500),
            "{on_join:?}: exited {took:?} after SIGINT"
        );
    }
}

/// Without --follow, a member whose every join is refused warns at the 3rd
/// failure in a row and the 6th (naming the coordinator and the reason; not
/// at every attempt), then gives up at the 10th with an error that says so.
#[test]
fn a_member_that_cannot_join_warns_then_gives_up() {
    let fake = FakeKafka::start(OnJoin::Close);
    let mut child = member(&fake.addr, &["-e"]);
    let status = exit_within(&mut child, Duration::from_secs(90));
    let _ = child.kill();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = status.unwrap_or_else(|| panic!("still running after 90 s: {err}"));
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(fake.joins(), 10, "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 2, "{err}");
    for (w, n) in warnings.iter().zip([3, 6]) {
        let want = format!(
            "joining group g failed {n} times in a row (coordinator {})",
            fake.addr
        );
        assert!(w.contains(&want), "{w:?} lacks {want:?}");
        assert!(w.contains("the broker closed the connection"), "{w}");
    }
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: cannot join the group: joining group g failed 10 times in a row"),
        "{err}"
    );
}
