//! The PostgreSQL store against a real server (X1, X2): fencing (P2), claims and leases, the
//! restart rule applied at takeover (P3), migrations run by instances starting together, a
//! corrupt record, a wrong password, and TLS.
//!
//! These tests need a server: `.ci/run` starts a throwaway cluster and runs them with
//! `--ignored`, with `REBOUND_TEST_POSTGRES` (an admin URL without password),
//! `REBOUND_TEST_PGPASSWORD` and `REBOUND_TEST_POSTGRES_CA` (the CA of the server's
//! certificate) set. Run without them, they fail: they never pass by skipping.
//! Each test works in a database of its own, dropped at the end.

use std::time::Duration;

use postgres::NoTls;
use rebound_store::{
    AttemptOp, AttemptOutcome, AttemptRecord, JobState, JobStore, PostgresOptions, PostgresStore,
    StoreError, reconcile,
};

use super::{at, job};

/// A database of one test's own on the CI server, dropped with it.
pub(crate) struct Database {
    admin: postgres::Config,
    name: String,
    url: String,
    password: String,
}

impl Database {
    pub(crate) fn new() -> Database {
        let admin_url = std::env::var("REBOUND_TEST_POSTGRES").expect(
            "REBOUND_TEST_POSTGRES is not set: the PostgreSQL tests need a server (.ci/run starts one)",
        );
        let password = std::env::var("REBOUND_TEST_PGPASSWORD")
            .expect("REBOUND_TEST_PGPASSWORD is not set: the PostgreSQL role's password");
        let mut admin: postgres::Config = admin_url.parse().unwrap();
        admin.password(&password);
        let name = format!("rebound_store_{:016x}", fastrand::u64(..));
        let mut client = admin.connect(NoTls).unwrap();
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        let base = admin_url.rsplit_once('/').unwrap().0;
        Database {
            admin,
            url: format!("{base}/{name}"),
            name,
            password,
        }
    }

    /// The store of an instance whose holds last `lease`.
    pub(crate) fn instance(&self, lease: Duration) -> PostgresStore {
        PostgresStore::connect(PostgresOptions {
            url: self.url.clone(),
            password: Some(self.password.clone()),
            ca_file: ca_file(),
            lease,
            pool_size: 4,
            owner: None,
        })
        .unwrap()
    }

    /// The store of an instance that is as good as dead: its holds run out at once.
    fn dead_instance(&self) -> PostgresStore {
        self.instance(Duration::ZERO)
    }

    /// A plain connection to the test's database.
    pub(crate) fn client(&self) -> postgres::Client {
        let mut config = self.admin.clone();
        config.dbname(&self.name);
        config.connect(NoTls).unwrap()
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut client) = self.admin.connect(NoTls) {
            let _ = client.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

pub(crate) const LIVE: Duration = Duration::from_secs(60);

/// The CA that signed the test server's certificate.
fn ca_file() -> Option<std::path::PathBuf> {
    Some(
        std::env::var("REBOUND_TEST_POSTGRES_CA")
            .expect("REBOUND_TEST_POSTGRES_CA is not set: the CA of the test server's certificate")
            .into(),
    )
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_transitions_are_fenced_by_generation() {
    let db = Database::new();
    let store = db.instance(LIVE);
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
    let stale = store.transition(&created.id, 1, at(3000), &mut |j| {
        j.state = JobState::Stopped;
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
    let read = store.get(&created.id).unwrap();
    assert_eq!(read, waiting, "a stale transition changed nothing");
    assert_eq!(read.deadline, Some(at(60_000)));
    assert_eq!(store.list(10).unwrap(), vec![read.clone()]);
    assert_eq!(store.in_states(&[JobState::Waiting]).unwrap(), vec![read]);
    assert!(matches!(
        store.get("job_nope"),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_keeps_attempts_with_their_classification() {
    let db = Database::new();
    let store = db.instance(LIVE);
    let id = store.create(job(), at(1000)).unwrap().id;
    store
        .transition(&id, 1, at(2000), &mut |j| {
            j.state = JobState::Dispatching;
            vec![AttemptOp::Begin(AttemptRecord::in_flight(1, "a", at(2000)))]
        })
        .unwrap();
    let finished = AttemptRecord {
        finished: Some(at(2500)),
        outcome: AttemptOutcome::Failed,
        status: Some(429),
        code: Some("rate_limited".into()),
        class: Some("rate_limited".into()),
        rule_id: Some("openai.rate_limit".into()),
        catalogue_version: Some("7".into()),
        phase: Some("setup".into()),
        ..AttemptRecord::in_flight(1, "a", at(2000))
    };
    let f = finished.clone();
    store
        .transition(&id, 2, at(2500), &mut |j| {
            j.state = JobState::Waiting;
            vec![AttemptOp::Finish(f.clone())]
        })
        .unwrap();
    assert_eq!(store.attempts(&id).unwrap(), vec![finished]);
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn a_live_instance_keeps_its_jobs_and_a_dead_one_loses_them_under_p3() {
    let db = Database::new();
    let live = db.instance(LIVE);
    let dead = db.dead_instance();
    let other = db.instance(LIVE);

    // The live instance's jobs are nobody else's to take.
    let kept = live.create(job(), at(1000)).unwrap();
    // The dead instance held one waiting job and one with an attempt out.
    let waiting = dead.create(job(), at(1000)).unwrap();
    dead.transition(&waiting.id, 1, at(2000), &mut |j| {
        j.state = JobState::Waiting;
        j.deadline = Some(at(7_200_000));
        vec![]
    })
    .unwrap();
    let sent = dead.create(job(), at(1000)).unwrap();
    dead.transition(&sent.id, 1, at(2000), &mut |j| {
        j.state = JobState::Dispatching;
        vec![AttemptOp::Begin(AttemptRecord::in_flight(1, "a", at(2000)))]
    })
    .unwrap();

    let r = reconcile(&other, at(10_000)).unwrap();

    // The waiting job resumes at its deadline, under a generation the dead instance never saw.
    assert_eq!(r.due.len(), 1, "{r:?}");
    assert_eq!(
        (r.due[0].id.as_str(), r.due[0].generation, r.due[0].deadline),
        (waiting.id.as_str(), 3, Some(at(7_200_000)))
    );
    // The job whose attempt may have been sent is held for a human, never re-sent.
    assert_eq!(r.action_required, vec![sent.id.clone()]);
    let held = other.get(&sent.id).unwrap();
    assert_eq!(held.state, JobState::ActionRequired);
    assert_eq!(held.error.unwrap()["reason"], "attempt_may_have_been_sent");
    assert_eq!(
        other.attempts(&sent.id).unwrap()[0].outcome,
        AttemptOutcome::Unknown
    );
    // What the dead instance still issues against the generations it knew is stale (P2).
    let late = dead.transition(&waiting.id, 2, at(11_000), &mut |j| {
        j.state = JobState::Pending;
        vec![]
    });
    assert!(matches!(late, Err(StoreError::Stale { .. })), "{late:?}");
    assert_eq!(dead.renew(std::slice::from_ref(&waiting.id)).unwrap(), 0);
    assert_eq!(other.renew(std::slice::from_ref(&waiting.id)).unwrap(), 1);
    // The live instance's job was not touched, and nothing is left to take.
    assert_eq!(live.get(&kept.id).unwrap().generation, 1);
    assert_eq!(reconcile(&other, at(12_000)).unwrap(), Default::default());
    assert!(live.claim().unwrap().is_empty());
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn instances_claiming_at_once_split_a_dead_instances_jobs_without_overlap() {
    let db = Database::new();
    let dead = db.dead_instance();
    let mut ids: Vec<String> = (0..30)
        .map(|i| dead.create(job(), at(1000 + i)).unwrap().id)
        .collect();
    let instances: Vec<PostgresStore> = (0..3).map(|_| db.instance(LIVE)).collect();
    let barrier = std::sync::Barrier::new(3);
    let claimed: Vec<Vec<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = instances
            .iter()
            .map(|store| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let jobs = store.claim().unwrap();
                    jobs.into_iter().map(|j| j.id).collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<String> = claimed.concat();
    all.sort();
    ids.sort();
    assert_eq!(all, ids, "every job taken exactly once: {claimed:?}");
    // Each taken job is held by the instance that took it, at generation 2.
    for (store, jobs) in instances.iter().zip(&claimed) {
        let mut client = db.client();
        for id in jobs {
            let row = client
                .query_one("SELECT owner, generation FROM jobs WHERE id = $1", &[id])
                .unwrap();
            assert_eq!(row.get::<_, String>(0), store.owner());
            assert_eq!(row.get::<_, i64>(1), 2);
        }
    }
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn two_instances_racing_on_one_generation_make_one_change() {
    let db = Database::new();
    let a = db.instance(LIVE);
    let b = db.instance(LIVE);
    let id = a.create(job(), at(1000)).unwrap().id;
    let barrier = std::sync::Barrier::new(2);
    let results: Vec<Result<_, StoreError>> = std::thread::scope(|s| {
        let handles: Vec<_> = [(&a, JobState::Stopped), (&b, JobState::Dispatching)]
            .into_iter()
            .map(|(store, state)| {
                let (barrier, id) = (&barrier, &id);
                s.spawn(move || {
                    barrier.wait();
                    store.transition(id, 1, at(2000), &mut |j| {
                        j.state = state;
                        vec![]
                    })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let won: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    assert!(
        results
            .iter()
            .any(|r| matches!(r, Err(StoreError::Stale { .. }))),
        "{results:?}"
    );
    let stored = a.get(&id).unwrap();
    assert_eq!((stored.state, stored.generation), (won[0].state, 2));
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn instances_starting_together_migrate_once() {
    let db = Database::new();
    let stores: Vec<PostgresStore> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3).map(|_| s.spawn(|| db.instance(LIVE))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let versions: Vec<i32> = db
        .client()
        .query("SELECT version FROM rebound_schema", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, vec![1, 2]);
    // A database newer than this rebound is refused, naming the versions.
    db.client()
        .batch_execute("INSERT INTO rebound_schema (version) VALUES (99)")
        .unwrap();
    let newer = PostgresStore::connect(PostgresOptions {
        url: db.url.clone(),
        password: Some(db.password.clone()),
        ca_file: ca_file(),
        lease: LIVE,
        pool_size: 1,
        owner: None,
    });
    let message = newer.err().unwrap().to_string();
    assert!(message.contains("schema version 99"), "{message}");
    drop(stores);
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_corrupt_fields_name_the_job_and_the_field() {
    let db = Database::new();
    let store = db.instance(LIVE);
    let id = store.create(job(), at(1000)).unwrap().id;
    db.client()
        .execute("UPDATE jobs SET policies = '[{]' WHERE id = $1", &[&id])
        .unwrap();
    match store.get(&id) {
        Err(StoreError::Corrupt { id: job, field, .. }) => {
            assert_eq!((job.as_str(), field.as_str()), (id.as_str(), "policies"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn a_wrong_password_is_an_error_that_does_not_show_it() {
    let db = Database::new();
    let secret = "not-the-password-4f1c";
    let refused = PostgresStore::connect(PostgresOptions {
        url: db.url.clone(),
        password: Some(secret.into()),
        ca_file: ca_file(),
        lease: LIVE,
        pool_size: 1,
        owner: None,
    });
    let message = refused.err().unwrap().to_string();
    assert!(
        message.contains("password authentication failed"),
        "{message}"
    );
    assert!(!message.contains(secret), "{message}");
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_over_tls_verifies_the_servers_certificate() {
    let db = Database::new();
    let options = |ca_file: Option<std::path::PathBuf>| PostgresOptions {
        url: format!("{}?sslmode=require", db.url),
        password: Some(db.password.clone()),
        ca_file,
        lease: LIVE,
        pool_size: 1,
        owner: None,
    };
    // Trusting the server's CA: connected, encrypted.
    let store = PostgresStore::connect(options(ca_file())).unwrap();
    store.create(job(), at(1000)).unwrap();
    let encrypted: i64 = db
        .client()
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.datname = $1 AND s.ssl",
            &[&db.name],
        )
        .unwrap()
        .get(0);
    assert!(encrypted >= 1, "no encrypted connection of the store's");
    // Without it, the certificate does not verify, and nothing is sent in the clear instead.
    let refused = PostgresStore::connect(options(None))
        .err()
        .unwrap()
        .to_string();
    assert!(refused.contains("certificate"), "{refused}");
    // A CA file that holds no certificate is an error naming the file.
    let empty = std::env::temp_dir().join(format!("rebound-empty-ca-{}", std::process::id()));
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let message = PostgresStore::connect(options(Some(empty.clone())))
        .err()
        .unwrap()
        .to_string();
    assert!(message.contains(&empty.display().to_string()), "{message}");
    std::fs::remove_file(empty).unwrap();
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn an_instance_that_lets_go_hands_its_open_jobs_over_at_once() {
    let db = Database::new();
    let stopping = db.instance(LIVE);
    let other = db.instance(LIVE);
    let open = stopping.create(job(), at(1000)).unwrap();
    let done = stopping.create(job(), at(1000)).unwrap();
    stopping
        .transition(&done.id, 1, at(2000), &mut |j| {
            j.state = JobState::Succeeded;
            vec![]
        })
        .unwrap();
    assert!(other.claim().unwrap().is_empty(), "held for a minute yet");
    assert_eq!(stopping.release().unwrap(), 1, "the open job only");
    let taken = other.claim().unwrap();
    assert_eq!(
        taken
            .iter()
            .map(|j| (j.id.as_str(), j.generation))
            .collect::<Vec<_>>(),
        vec![(open.id.as_str(), 2)]
    );
}
