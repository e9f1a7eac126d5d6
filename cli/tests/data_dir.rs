//! Two broker processes on one data directory, and a directory that is not Flume's.

use crate::common;

use common::{ok, run, stderr, BrokerProc};

#[test]
fn a_second_broker_process_on_a_data_directory_is_refused_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = BrokerProc::start(&data, &[]);
    let data_s = data.to_str().unwrap();
    let produce = |m: &str| {
        ok(&[
            "produce",
            "--broker",
            &first.addr,
            "--topic",
            "t",
            "--partition",
            "0",
            "--message",
            m,
        ])
    };
    assert!(produce("one").contains("offset=0"));

    let second = run(&["broker", "--port", "0", "--data", data_s]);
    assert!(!second.status.success());
    let err = stderr(&second);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("error:"), "{err}");
    assert!(err.contains(data_s), "names the directory: {err}");
    assert!(
        err.contains(&format!("pid {}", first.child.id())),
        "names the holder: {err}"
    );
    // The first broker is untouched and goes on from its own records.
    assert!(produce("two").contains("offset=1"));

    // A directory with someone else's files is refused, unless allowed.
    let foreign = dir.path().join("home");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("report.txt"), b"mine").unwrap();
    let refused = run(&["broker", "--port", "0", "--data", foreign.to_str().unwrap()]);
    assert!(!refused.status.success());
    let err = stderr(&refused);
    assert!(err.contains("--allow-foreign-data-dir"), "{err}");
    assert_eq!(
        std::fs::read_dir(&foreign).unwrap().count(),
        1,
        "nothing written"
    );
    let allowed = BrokerProc::start(&foreign, &["--allow-foreign-data-dir"]);
    ok(&["topics", "list", "--broker", &allowed.addr]);
}
