//! The shared health table on a real server (X3, S1): a deadline only ever extends
//! (`GREATEST`), a deadline one instance writes reaches another's listening connection as a
//! notification, an instance starting later reads the deadlines still running, and a broken
//! listening connection is an error after which listening again works. Run by
//! `.ci/run` like the other PostgreSQL tests; without a server they fail.

use std::time::{Duration, Instant, SystemTime};

use rebound_store::SharedDeadline;

use super::at;
use super::postgres::{Database, LIVE};

fn deadline(candidate: &str, until: SystemTime, code: &str) -> SharedDeadline {
    SharedDeadline {
        candidate: candidate.into(),
        state: "cooling".into(),
        until,
        scope: Some("account".into()),
        class: Some("rate_limit".into()),
        code: Some(code.into()),
        rule_id: Some("test.rule".into()),
        updated_by: String::new(),
    }
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_health_a_nearer_deadline_never_shortens_a_farther_one() {
    let db = Database::new();
    let a = db.instance(LIVE);
    let b = db.instance(LIVE);
    assert!(
        a.publish_deadline(&deadline("c", at(90_000), "far"))
            .unwrap()
    );
    // B's nearer deadline leaves A's in place, details and all.
    assert!(
        !b.publish_deadline(&deadline("c", at(30_000), "near"))
            .unwrap()
    );
    let kept = b.deadline("c").unwrap().unwrap();
    assert_eq!(
        (kept.until, kept.code.as_deref()),
        (at(90_000), Some("far"))
    );
    assert_eq!(kept.updated_by, a.owner());
    // An equal one does not move it either; a farther one does, with its own details.
    assert!(
        !b.publish_deadline(&deadline("c", at(90_000), "same"))
            .unwrap()
    );
    assert!(
        b.publish_deadline(&deadline("c", at(120_000), "farther"))
            .unwrap()
    );
    let moved = a.deadline("c").unwrap().unwrap();
    assert_eq!(
        (
            moved.until,
            moved.code.as_deref(),
            moved.updated_by.as_str()
        ),
        (at(120_000), Some("farther"), b.owner())
    );
    assert_eq!(a.deadline("other").unwrap(), None);
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_health_a_deadline_reaches_a_listening_instance_at_once() {
    let db = Database::new();
    let a = db.instance(LIVE);
    let b = db.instance(LIVE);
    let mut listener = b.listen_health().unwrap();
    // Nothing yet: the wait ends with its timeout and no id.
    assert_eq!(
        listener.wait(Duration::from_millis(50)).unwrap(),
        Vec::<String>::new()
    );
    let sent = Instant::now();
    assert!(
        a.publish_deadline(&deadline("primary#key2", at(90_000), "x"))
            .unwrap()
    );
    let ids = listener.wait(Duration::from_secs(5)).unwrap();
    let took = sent.elapsed();
    assert_eq!(ids, vec!["primary#key2".to_owned()]);
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // A deadline that did not move the row notifies no one.
    assert!(
        !a.publish_deadline(&deadline("primary#key2", at(10_000), "x"))
            .unwrap()
    );
    assert_eq!(
        listener.wait(Duration::from_millis(200)).unwrap(),
        Vec::<String>::new()
    );
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_health_a_starting_instance_reads_the_deadlines_still_running() {
    let db = Database::new();
    let a = db.instance(LIVE);
    a.publish_deadline(&deadline("ended", at(5_000), "x"))
        .unwrap();
    a.publish_deadline(&deadline("running", at(50_000), "y"))
        .unwrap();
    let later = db.instance(LIVE);
    let running = later.deadlines_after(at(10_000)).unwrap();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].candidate, "running");
    assert_eq!(running[0].until, at(50_000));
    // The row as stored: the wall-clock milliseconds the instance computed.
    let until_ms: i64 = db
        .client()
        .query_one(
            "SELECT until_ms FROM health WHERE candidate = 'running'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        at(50_000)
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
        u128::try_from(until_ms).unwrap()
    );
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_health_a_broken_listening_connection_is_an_error_and_listening_again_works() {
    let db = Database::new();
    let a = db.instance(LIVE);
    let b = db.instance(LIVE);
    let mut listener = b.listen_health().unwrap();
    // The server ends the listening session (as a restart or a failover does).
    let ended: i64 = db
        .client()
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN %') t",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(ended, 1);
    let broken = listener.wait(Duration::from_secs(5));
    assert!(broken.is_err(), "{broken:?}");
    // Listening again hears the next deadline.
    let mut again = b.listen_health().unwrap();
    assert!(a.publish_deadline(&deadline("c", at(90_000), "x")).unwrap());
    assert_eq!(
        again.wait(Duration::from_secs(5)).unwrap(),
        vec!["c".to_owned()]
    );
}
