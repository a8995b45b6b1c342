//! The SQLite store: fencing, attempts, reconciliation, durability across reopen (P1–P4).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use std::sync::Arc;

use rebound_store::{
    AttemptOp, AttemptRecord, JobState, NewJob, RouteStore, SqliteStore, StoreError,
};

fn job() -> NewJob {
    NewJob {
        protocol: "openai".into(),
        route_id: "r".into(),
        candidates: vec!["a".into(), "b".into()],
        policies: serde_json::json!([{"version": 1}, {"version": 1}]),
        request: br#"{"model":"m","messages":[]}"#.to_vec(),
    }
}

#[test]
fn transitions_are_fenced_by_generation() {
    let store = SqliteStore::in_memory().unwrap();
    let created = store.create(job(), 1000).unwrap();
    assert_eq!((created.state, created.generation), (JobState::Pending, 1));
    let waiting = store
        .transition(&created.id, 1, 2000, &mut |j| {
            j.state = JobState::Waiting;
            j.deadline_ms = Some(60_000);
            vec![]
        })
        .unwrap();
    assert_eq!(waiting.generation, 2);
    // A timer armed at generation 1 fires late: stale, nothing changes.
    let stale = store.transition(&created.id, 1, 3000, &mut |j| {
        j.state = JobState::Dispatching;
        vec![]
    });
    assert!(
        matches!(
            stale,
            Err(StoreError::Stale {
                expected: 1,
                actual: 2,
                ..
            })
        ),
        "{stale:?}"
    );
    let now = store.get(&created.id).unwrap();
    assert_eq!(
        (now.state, now.generation, now.deadline_ms),
        (JobState::Waiting, 2, Some(60_000))
    );
}

#[test]
fn two_transitions_racing_on_one_generation_make_one_change() {
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let id = store.create(job(), 0).unwrap().id;
    let handles: Vec<_> = [JobState::Dispatching, JobState::Stopped]
        .into_iter()
        .map(|state| {
            let store = Arc::clone(&store);
            let id = id.clone();
            std::thread::spawn(move || {
                store.transition(&id, 1, 1, &mut |j| {
                    j.state = state;
                    vec![]
                })
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    assert_eq!(
        results
            .iter()
            .filter(|r| matches!(r, Err(StoreError::Stale { .. })))
            .count(),
        1
    );
    assert_eq!(store.get(&id).unwrap().generation, 2);
}

#[test]
fn attempts_keep_their_classification() {
    let store = SqliteStore::in_memory().unwrap();
    let id = store.create(job(), 0).unwrap().id;
    store
        .transition(&id, 1, 10, &mut |j| {
            j.state = JobState::Dispatching;
            vec![AttemptOp::Begin(AttemptRecord {
                number: 1,
                candidate: "a".into(),
                started_ms: 10,
                outcome: "in_flight".into(),
                ..Default::default()
            })]
        })
        .unwrap();
    store
        .transition(&id, 2, 20, &mut |j| {
            j.state = JobState::Waiting;
            vec![AttemptOp::Finish(AttemptRecord {
                number: 1,
                candidate: "a".into(),
                started_ms: 10,
                finished_ms: Some(20),
                outcome: "failed".into(),
                status: Some(429),
                code: Some("quota_exhausted".into()),
                class: Some("hard".into()),
                rule_id: Some("openai.insufficient_quota".into()),
                catalogue_version: Some("2026.11.30".into()),
                phase: Some("setup".into()),
            })]
        })
        .unwrap();
    let attempts = store.attempts(&id).unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        attempts[0].rule_id.as_deref(),
        Some("openai.insufficient_quota")
    );
    assert_eq!(attempts[0].catalogue_version.as_deref(), Some("2026.11.30"));
}

#[test]
fn reconciliation_after_a_restart() {
    let dir = std::env::temp_dir().join(format!("rebound-store-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("routes.db");
    let (waiting, dispatching, pending) = {
        let store = SqliteStore::open(&path).unwrap();
        let w = store.create(job(), 0).unwrap().id;
        store
            .transition(&w, 1, 1, &mut |j| {
                j.state = JobState::Waiting;
                j.deadline_ms = Some(7_200_000);
                vec![]
            })
            .unwrap();
        let d = store.create(job(), 0).unwrap().id;
        store
            .transition(&d, 1, 1, &mut |j| {
                j.state = JobState::Dispatching;
                vec![AttemptOp::Begin(AttemptRecord {
                    number: 1,
                    candidate: "a".into(),
                    started_ms: 1,
                    outcome: "in_flight".into(),
                    ..Default::default()
                })]
            })
            .unwrap();
        let p = store.create(job(), 0).unwrap().id;
        (w, d, p)
    }; // the store is dropped: as good as a crash for what was committed
    let store = SqliteStore::open(&path).unwrap();
    let r = store.reconcile(5).unwrap();
    assert_eq!(r.action_required, vec![dispatching.clone()]);
    assert!(
        r.due.contains(&(waiting.clone(), 2, Some(7_200_000))),
        "{r:?}"
    );
    assert!(r.due.contains(&(pending.clone(), 1, None)), "{r:?}");
    assert_eq!(
        store.get(&dispatching).unwrap().state,
        JobState::ActionRequired
    );
    assert_eq!(store.attempts(&dispatching).unwrap()[0].outcome, "unknown");
    assert_eq!(
        store.get(&waiting).unwrap().request,
        job().request,
        "the request survives"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn unknown_routes_and_newer_schemas_are_errors() {
    let store = SqliteStore::in_memory().unwrap();
    assert!(matches!(
        store.get("job_nope"),
        Err(StoreError::NotFound(_))
    ));
    assert!(store.list(10).unwrap().is_empty());
    // A database written by a newer rebound is refused, not misread.
    let dir = std::env::temp_dir().join(format!("rebound-store-newer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("routes.db");
    drop(SqliteStore::open(&path).unwrap());
    rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let refused = SqliteStore::open(&path);
    assert!(
        matches!(&refused, Err(StoreError::Database(m)) if m.contains("schema version 99")),
        "{:?}",
        refused.err()
    );
    std::fs::remove_dir_all(dir).unwrap();
}
