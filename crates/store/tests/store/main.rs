//! The SQLite store: fencing, attempts, reconciliation, durability across reopen, schema
//! migration, and what a corrupt record does (P1–P4); the PostgreSQL store in `postgres`
//! (X1, X2).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rebound_core::policy::document::PolicyDocument;
use rebound_core::{Policy, TurnSnapshot};
use rebound_store::{
    AttemptOp, AttemptOutcome, AttemptRecord, DueJob, JobState, JobStore, NewJob, SqliteStore,
    StoreError, reconcile,
};

mod postgres;
mod postgres_health;

/// `ms` milliseconds after the Unix epoch.
fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn job() -> NewJob {
    NewJob {
        protocol: "openai".into(),
        route_id: "r".into(),
        candidates: vec!["a".into(), "b".into()],
        policies: vec![
            PolicyDocument::of(&Policy::interactive()),
            PolicyDocument::of(&Policy::immediate_skip()),
        ],
        request: br#"{"model":"m","messages":[]}"#.to_vec(),
    }
}

/// A fresh directory for one test's database file.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rebound-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn transitions_are_fenced_by_generation() {
    let store = SqliteStore::in_memory().unwrap();
    let created = store.create(job(), at(1000)).unwrap();
    assert_eq!((created.state, created.generation), (JobState::Pending, 1));
    let waiting = store
        .transition(&created.id, 1, at(2000), &mut |j| {
            j.state = JobState::Waiting;
            j.deadline = Some(at(60_000));
            vec![]
        })
        .unwrap();
    assert_eq!(waiting.generation, 2);
    // A timer armed at generation 1 fires late: stale, nothing changes.
    let stale = store.transition(&created.id, 1, at(3000), &mut |j| {
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
        (now.state, now.generation, now.deadline, now.updated),
        (JobState::Waiting, 2, Some(at(60_000)), at(2000))
    );
}

#[test]
fn two_transitions_racing_on_one_generation_make_one_change() {
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let id = store.create(job(), at(0)).unwrap().id;
    let handles: Vec<_> = [JobState::Dispatching, JobState::Stopped]
        .into_iter()
        .map(|state| {
            let store = Arc::clone(&store);
            let id = id.clone();
            std::thread::spawn(move || {
                store.transition(&id, 1, at(1), &mut |j| {
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

fn failed_attempt() -> AttemptRecord {
    AttemptRecord {
        finished: Some(at(20)),
        outcome: AttemptOutcome::Failed,
        status: Some(429),
        code: Some("quota_exhausted".into()),
        class: Some("hard".into()),
        rule_id: Some("openai.insufficient_quota".into()),
        catalogue_version: Some("2026.11.30".into()),
        phase: Some("setup".into()),
        ..AttemptRecord::in_flight(1, "a", at(10))
    }
}

#[test]
fn attempts_keep_their_classification() {
    let store = SqliteStore::in_memory().unwrap();
    let id = store.create(job(), at(0)).unwrap().id;
    store
        .transition(&id, 1, at(10), &mut |j| {
            j.state = JobState::Dispatching;
            vec![AttemptOp::Begin(AttemptRecord::in_flight(1, "a", at(10)))]
        })
        .unwrap();
    store
        .transition(&id, 2, at(20), &mut |j| {
            j.state = JobState::Waiting;
            vec![AttemptOp::Finish(failed_attempt())]
        })
        .unwrap();
    assert_eq!(store.attempts(&id).unwrap(), vec![failed_attempt()]);
}

#[test]
fn a_record_reads_back_as_it_was_written_times_included() {
    let store = SqliteStore::in_memory().unwrap();
    // Wall-clock times to the millisecond, as the columns keep them.
    let created_at = at(1_796_050_800_123);
    let deadline = at(1_796_058_000_456);
    let created = store.create(job(), created_at).unwrap();
    let written = store
        .transition(
            &created.id,
            1,
            created_at + Duration::from_millis(7),
            &mut |j| {
                j.state = JobState::Waiting;
                j.deadline = Some(deadline);
                j.pending_outcome = Some("reset_wait".into());
                j.classification = Some(serde_json::json!({"code": "rate_limited"}));
                j.turn = TurnSnapshot {
                    candidate: 1,
                    retries: [1, 0, 2],
                    reset_waited: [true, false, false],
                    attempts: 4,
                    waited_ms: 120_000,
                };
                vec![]
            },
        )
        .unwrap();
    let read = store.get(&created.id).unwrap();
    assert_eq!(read, written);
    assert_eq!(
        (read.created, read.updated, read.deadline),
        (
            created_at,
            created_at + Duration::from_millis(7),
            Some(deadline)
        )
    );
    assert_eq!(read.policies, job().policies, "the typed snapshot survives");
    assert_eq!(store.list(10).unwrap(), vec![written]);
}

#[test]
fn reconciliation_after_a_restart() {
    let dir = temp_dir("reconcile");
    let path = dir.join("jobs.db");
    let (waiting, dispatching, pending) = {
        let store = SqliteStore::open(&path).unwrap();
        let w = store.create(job(), at(0)).unwrap().id;
        store
            .transition(&w, 1, at(1), &mut |j| {
                j.state = JobState::Waiting;
                j.deadline = Some(at(7_200_000));
                vec![]
            })
            .unwrap();
        let d = store.create(job(), at(0)).unwrap().id;
        store
            .transition(&d, 1, at(1), &mut |j| {
                j.state = JobState::Dispatching;
                vec![AttemptOp::Begin(AttemptRecord::in_flight(1, "a", at(1)))]
            })
            .unwrap();
        let p = store.create(job(), at(0)).unwrap().id;
        (w, d, p)
    }; // the store is dropped: as good as a crash for what was committed
    let store = SqliteStore::open(&path).unwrap();
    let r = reconcile(&store, at(5)).unwrap();
    assert_eq!(r.action_required, vec![dispatching.clone()]);
    assert!(
        r.due.contains(&DueJob {
            id: waiting.clone(),
            generation: 2,
            deadline: Some(at(7_200_000))
        }),
        "{r:?}"
    );
    assert!(
        r.due.contains(&DueJob {
            id: pending.clone(),
            generation: 1,
            deadline: None
        }),
        "{r:?}"
    );
    assert_eq!(r.due.len(), 2, "{r:?}");
    let held = store.get(&dispatching).unwrap();
    assert_eq!(held.state, JobState::ActionRequired);
    assert_eq!(held.error.unwrap()["reason"], "attempt_may_have_been_sent");
    let attempts = store.attempts(&dispatching).unwrap();
    assert_eq!(
        (attempts[0].outcome, attempts[0].finished),
        (AttemptOutcome::Unknown, Some(at(5)))
    );
    assert_eq!(
        store.get(&waiting).unwrap().request,
        job().request,
        "the request survives"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn unknown_jobs_and_newer_schemas_are_errors() {
    let store = SqliteStore::in_memory().unwrap();
    assert!(matches!(
        store.get("job_nope"),
        Err(StoreError::NotFound(_))
    ));
    assert!(store.list(10).unwrap().is_empty());
    // A database written by a newer rebound is refused, not misread.
    let dir = temp_dir("newer");
    let path = dir.join("jobs.db");
    drop(SqliteStore::open(&path).unwrap());
    rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let refused = SqliteStore::open(&path);
    assert!(
        matches!(&refused, Err(StoreError::Database(m)) if m.contains("the jobs' schema has version 99; this rebound knows up to 2")),
        "{:?}",
        refused.err()
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_corrupt_policy_snapshot_is_an_error_naming_the_job_and_the_field() {
    let dir = temp_dir("corrupt");
    let path = dir.join("jobs.db");
    let id = SqliteStore::open(&path)
        .unwrap()
        .create(job(), at(0))
        .unwrap()
        .id;
    // Not a list of policy documents: a key no document has.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE jobs SET policies = '[{\"version\": 1, \"ratelimit\": {}}]' WHERE id = ?1",
            [&id],
        )
        .unwrap();
    let store = SqliteStore::open(&path).unwrap();
    for read in [
        store.get(&id).map(|_| ()),
        store.list(10).map(|_| ()),
        reconcile(&store, at(1)).map(|_| ()),
    ] {
        match read {
            Err(StoreError::Corrupt {
                id: named,
                field,
                message,
            }) => {
                assert_eq!((named.as_str(), field.as_str()), (id.as_str(), "policies"));
                assert!(message.contains("ratelimit"), "{message}");
            }
            other => panic!("a corrupt snapshot read as {other:?}"),
        }
    }
    let error = store.get(&id).unwrap_err().to_string();
    assert!(
        error.contains(&id) && error.contains("`policies`"),
        "{error}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_corrupt_attempt_names_the_job_and_the_attempt() {
    let dir = temp_dir("corrupt-attempt");
    let path = dir.join("jobs.db");
    let id = {
        let store = SqliteStore::open(&path).unwrap();
        let id = store.create(job(), at(0)).unwrap().id;
        store
            .transition(&id, 1, at(1), &mut |_| {
                vec![AttemptOp::Begin(AttemptRecord::in_flight(1, "a", at(1)))]
            })
            .unwrap();
        id
    };
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE attempts SET outcome = 'lost' WHERE job_id = ?1",
            [&id],
        )
        .unwrap();
    let store = SqliteStore::open(&path).unwrap();
    match store.attempts(&id) {
        Err(StoreError::Corrupt {
            id: named, field, ..
        }) => {
            assert_eq!((named, field.as_str()), (id, "attempts[1].outcome"));
        }
        other => panic!("a corrupt attempt read as {other:?}"),
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The version-1 schema, from before durable jobs had one name: the table was `routes`, and
/// an attempt named its job `route_id`. Kept here as data, as a released database has it.
const SCHEMA_V1: &str = r"
CREATE TABLE routes (
    id               TEXT PRIMARY KEY,
    generation       INTEGER NOT NULL,
    state            TEXT NOT NULL,
    protocol         TEXT NOT NULL,
    route_id         TEXT NOT NULL,
    candidates       TEXT NOT NULL,
    policies         TEXT NOT NULL,
    request          BLOB NOT NULL,
    turn             TEXT NOT NULL,
    deadline_ms      INTEGER,
    pending_outcome  TEXT,
    classification   TEXT,
    response_status  INTEGER,
    response         BLOB,
    error            TEXT,
    created_ms       INTEGER NOT NULL,
    updated_ms       INTEGER NOT NULL
);
CREATE INDEX routes_by_state ON routes (state, deadline_ms);
CREATE TABLE attempts (
    route_id          TEXT NOT NULL REFERENCES routes (id),
    number            INTEGER NOT NULL,
    candidate         TEXT NOT NULL,
    started_ms        INTEGER NOT NULL,
    finished_ms       INTEGER,
    outcome           TEXT NOT NULL,
    status            INTEGER,
    code              TEXT,
    class             TEXT,
    rule_id           TEXT,
    catalogue_version TEXT,
    phase             TEXT,
    PRIMARY KEY (route_id, number)
);
PRAGMA user_version = 1;
";

/// A waiting job and its two attempts, as version 1 wrote them.
const ROWS_V1: &str = r#"
INSERT INTO routes VALUES (
    'job_00000000000000010000000a', 3, 'waiting', 'openai', 'jobs', '["first","second"]',
    '[{"version":1,"rate_limit":{"reset_wait":{"max_ms":600000},"exhausted":"skip"},"transient":{"retry":{"max":10,"initial_ms":1000,"cap_ms":30000,"jitter":0.25},"exhausted":"skip"},"hard":{"exhausted":"skip"}},{"version":1,"hard":{"exhausted":"stop"}}]',
    X'7B226D6F64656C223A226770742D78227D',
    '{"candidate":0,"retries":[0,0,0],"reset_waited":[true,false,false],"attempts":2,"waited_ms":0}',
    1796050920000, 'reset_wait',
    '{"code":"rate_limited","class":"rate_limit","rule_id":"openai.rate_limit_exceeded","catalogue_version":"2026.11.30"}',
    NULL, NULL, NULL, 1796050800000, 1796050800250
);
INSERT INTO attempts VALUES (
    'job_00000000000000010000000a', 1, 'first', 1796050800100, 1796050800200, 'failed', 429,
    'rate_limited', 'rate_limit', 'openai.rate_limit_exceeded', '2026.11.30', 'setup'
);
INSERT INTO attempts VALUES (
    'job_00000000000000010000000a', 2, 'first', 1796050920000, NULL, 'in_flight', NULL,
    NULL, NULL, NULL, NULL, NULL
);
"#;

#[test]
fn a_version_1_database_opens_with_its_jobs_and_attempts_intact() {
    let dir = temp_dir("v1");
    let path = dir.join("routes.db");
    {
        let old = rusqlite::Connection::open(&path).unwrap();
        old.execute_batch(SCHEMA_V1).unwrap();
        old.execute_batch(ROWS_V1).unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let id = "job_00000000000000010000000a";
    let job = store.get(id).unwrap();
    assert_eq!(
        (job.state, job.generation, job.route_id.as_str()),
        (JobState::Waiting, 3, "jobs")
    );
    assert_eq!(job.candidates, ["first", "second"]);
    assert_eq!(job.request, br#"{"model":"gpt-x"}"#);
    assert_eq!(
        (job.created, job.updated, job.deadline),
        (
            at(1_796_050_800_000),
            at(1_796_050_800_250),
            Some(at(1_796_050_920_000))
        )
    );
    assert_eq!((job.turn.attempts, job.turn.reset_waited[0]), (2, true));
    assert_eq!(job.pending_outcome.as_deref(), Some("reset_wait"));
    assert_eq!(
        job.classification.unwrap()["rule_id"],
        "openai.rate_limit_exceeded"
    );
    // The snapshot written as untyped JSON reads back typed, and still compiles.
    assert_eq!(job.policies.len(), 2);
    let catalogue = rebound_core::Catalogue::shipped().unwrap();
    for doc in &job.policies {
        doc.compile(&Policy::immediate_skip(), &catalogue).unwrap();
    }
    let attempts = store.attempts(id).unwrap();
    assert_eq!(
        attempts,
        vec![
            AttemptRecord {
                finished: Some(at(1_796_050_800_200)),
                outcome: AttemptOutcome::Failed,
                status: Some(429),
                code: Some("rate_limited".into()),
                class: Some("rate_limit".into()),
                rule_id: Some("openai.rate_limit_exceeded".into()),
                catalogue_version: Some("2026.11.30".into()),
                phase: Some("setup".into()),
                ..AttemptRecord::in_flight(1, "first", at(1_796_050_800_100))
            },
            AttemptRecord::in_flight(2, "first", at(1_796_050_920_000)),
        ]
    );
    // The migrated database works: a fenced transition with attempt operations, and the
    // restart rule over it.
    store
        .transition(id, 3, at(1_796_050_921_000), &mut |j| {
            j.state = JobState::Dispatching;
            vec![]
        })
        .unwrap();
    let r = reconcile(&store, at(1_796_050_922_000)).unwrap();
    assert_eq!(r.action_required, vec![id.to_owned()]);
    assert_eq!(
        store.attempts(id).unwrap()[1].outcome,
        AttemptOutcome::Unknown
    );
    // And no name from before is left in the schema; the foreign key follows the rename.
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 2);
    let mut stmt = conn
        .prepare("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")
        .unwrap();
    let schema: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get("name")?, r.get("sql")?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let names: Vec<&str> = schema.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["attempts", "jobs", "jobs_by_state"]);
    let attempts_sql = &schema[0].1;
    assert!(
        attempts_sql.contains("job_id") && !attempts_sql.contains("route_id"),
        "{attempts_sql}"
    );
    assert!(
        attempts_sql.contains(r#"REFERENCES "jobs""#),
        "{attempts_sql}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_new_database_has_the_same_schema_as_a_migrated_one() {
    let dir = temp_dir("fresh");
    let path = dir.join("jobs.db");
    drop(SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")
        .unwrap();
    let names: Vec<String> = stmt
        .query_map([], |r| r.get("name"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(names, ["attempts", "jobs", "jobs_by_state"]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn processes_opening_a_new_file_at_once_all_open_it() {
    // A gateway opens jobs and runs in the file, and a second gateway or `rebound jobs` may
    // start beside it. Each connection here is as separate as another process's: the version
    // used to be read before the migration's transaction, so two could both find a new file at
    // version 0 and the second failed on `table … already exists`.
    let dir = temp_dir("at-once");
    for round in 0..20 {
        let path = dir.join(format!("jobs-{round}.db"));
        let start = Arc::new(std::sync::Barrier::new(6));
        let openers: Vec<_> = (0..6)
            .map(|i| {
                let (path, start) = (path.clone(), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    if i % 2 == 0 {
                        SqliteStore::open(&path)
                            .map(drop)
                            .map_err(|e| e.to_string())
                    } else {
                        rebound_store::runs::SqliteRunStore::open(&path)
                            .map(drop)
                            .map_err(|e| e.to_string())
                    }
                })
            })
            .collect();
        for opener in openers {
            if let Err(e) = opener.join().unwrap() {
                panic!("round {round}: {e}");
            }
        }
        // And the file is whole: a job can be written and read back.
        let store = SqliteStore::open(&path).unwrap();
        let id = store.create(job(), at(0)).unwrap().id;
        assert_eq!(store.get(&id).unwrap().id, id);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_current_file_opens_while_another_process_holds_its_write_lock() {
    // `rebound jobs` started while a gateway writes: opening a file whose schema is current
    // only reads it. Taking the write lock at every open made such a start wait out the busy
    // timeout (5 s) and fail with "database is locked" when the writer held on.
    let dir = temp_dir("while-writing");
    let path = dir.join("jobs.db");
    drop(SqliteStore::open(&path).unwrap());
    drop(rebound_store::runs::SqliteRunStore::open(&path).unwrap());
    let writer = rusqlite::Connection::open(&path).unwrap();
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    let store = SqliteStore::open(&path).unwrap();
    assert!(store.list(10).unwrap().is_empty());
    drop(rebound_store::runs::SqliteRunStore::open(&path).unwrap());
    writer.execute_batch("COMMIT").unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}
