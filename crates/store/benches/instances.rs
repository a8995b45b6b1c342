//! Jobs completed per second and the latency of one fenced transition, with 1, 2 and 3
//! instances on one PostgreSQL (X1), beside SQLite's single instance, measured in one run.
//!
//! Each job goes the way a job waiting on a reset goes: created (held by the instance that
//! creates it), dispatched (its attempt recorded as in flight), failed into a wait, woken by
//! its timer, dispatched again, succeeded: five fenced transitions (P2) besides the creation.
//! Deadlines are not waited out; the store's work is what is measured. Each instance is a
//! store handle of its own (its own pool and owner id) driven by `threads` threads, as the
//! gateway's blocking pool drives it; every instance works on its own jobs. SQLite is one
//! file with `synchronous=FULL`, as `rebound serve` opens it; compare it with a PostgreSQL that
//! syncs its commits too (`REBOUND_PG_DURABLE=1 .ci/postgres start …`): the figures print the
//! server's `fsync` and `synchronous_commit`.
//!
//! Run: `cargo bench -p rebound-store --bench instances`, with `REBOUND_TEST_POSTGRES` (an
//! admin URL without password, for a role that may create databases),
//! `REBOUND_TEST_PGPASSWORD` and, for a server with TLS, `REBOUND_TEST_POSTGRES_CA` set
//! (`REBOUND_PG_DURABLE=1 .ci/postgres start DIR PORT` starts such a server, with TLS). After
//! `--`, `jobs=N` (default 400 per configuration) and `threads=N` (default 4 per instance).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    missing_docs,
    reason = "a benchmark program that prints"
)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use rebound_core::Policy;
use rebound_core::policy::document::PolicyDocument;
use rebound_store::{
    AttemptOp, AttemptOutcome, AttemptRecord, JobState, JobStore, NewJob, PostgresOptions,
    PostgresStore, SqliteStore,
};

fn new_job() -> NewJob {
    NewJob {
        protocol: "openai".into(),
        route_id: "r".into(),
        candidates: vec!["a".into()],
        policies: vec![PolicyDocument::of(&Policy::interactive())],
        request: br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#.to_vec(),
    }
}

/// One job's life; the time each of its transitions took.
fn run_job(store: &dyn JobStore, lat: &mut Vec<Duration>) {
    let now = SystemTime::now();
    let job = store.create(new_job(), now).unwrap();
    let mut generation = job.generation;
    let mut step = |change: &mut dyn FnMut(&mut rebound_store::JobRecord) -> Vec<AttemptOp>| {
        let started = Instant::now();
        let moved = store.transition(&job.id, generation, now, change).unwrap();
        lat.push(started.elapsed());
        generation = moved.generation;
    };
    for (number, last) in [(1, false), (2, true)] {
        step(&mut |j| {
            j.state = JobState::Dispatching;
            vec![AttemptOp::Begin(AttemptRecord::in_flight(number, "a", now))]
        });
        let outcome = if last {
            AttemptOutcome::Succeeded
        } else {
            AttemptOutcome::Failed
        };
        step(&mut |j| {
            j.state = if last {
                JobState::Succeeded
            } else {
                JobState::Waiting
            };
            j.deadline = (!last).then_some(now);
            vec![AttemptOp::Finish(AttemptRecord {
                finished: Some(now),
                outcome,
                status: Some(if last { 200 } else { 429 }),
                ..AttemptRecord::in_flight(number, "a", now)
            })]
        });
        if !last {
            step(&mut |j| {
                j.state = JobState::Pending;
                j.deadline = None;
                vec![]
            });
        }
    }
}

/// What one configuration measured.
struct Figures {
    jobs_per_second: f64,
    p50: Duration,
    p99: Duration,
}

/// `jobs` jobs driven through `instances`, each by `threads` threads.
fn measure(instances: &[&dyn JobStore], threads: usize, jobs: usize) -> Figures {
    let left = AtomicUsize::new(jobs);
    let all = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        for store in instances {
            for _ in 0..threads {
                let (left, all) = (&left, &all);
                s.spawn(move || {
                    let mut lat = Vec::new();
                    while left
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok()
                    {
                        run_job(*store, &mut lat);
                    }
                    all.lock().unwrap().extend(lat);
                });
            }
        }
    });
    let elapsed = started.elapsed();
    let mut lat = all.into_inner().unwrap();
    lat.sort();
    let at = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    Figures {
        jobs_per_second: jobs as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
    }
}

fn arg(name: &str, default: usize) -> usize {
    std::env::args()
        .filter_map(|a| a.strip_prefix(&format!("{name}=")).map(str::to_owned))
        .next_back()
        .map_or(default, |v| v.parse().unwrap())
}

fn main() {
    let jobs = arg("jobs", 400);
    let threads = arg("threads", 4);
    let (Ok(admin_url), Ok(password)) = (
        std::env::var("REBOUND_TEST_POSTGRES"),
        std::env::var("REBOUND_TEST_PGPASSWORD"),
    ) else {
        eprintln!(
            "instances: set REBOUND_TEST_POSTGRES (an admin URL without password) and REBOUND_TEST_PGPASSWORD; `.ci/postgres start DIR PORT` starts a server"
        );
        std::process::exit(2);
    };
    let mut admin: postgres::Config = admin_url.parse().unwrap();
    admin.password(&password);
    let name = format!("rebound_bench_{:016x}", fastrand::u64(..));
    let mut client = admin.connect(postgres::NoTls).unwrap();
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let mut setting = |name: &str| -> String {
        client
            .query_one(&format!("SHOW {name}"), &[])
            .unwrap()
            .get(0)
    };
    let (fsync, synchronous_commit) = (setting("fsync"), setting("synchronous_commit"));
    let url = format!("{}/{name}", admin_url.rsplit_once('/').unwrap().0);
    let connect = || {
        PostgresStore::connect(PostgresOptions {
            url: url.clone(),
            password: Some(password.clone()),
            ca_file: std::env::var_os("REBOUND_TEST_POSTGRES_CA").map(Into::into),
            lease: Duration::from_secs(60),
            pool_size: u32::try_from(threads).unwrap(),
            owner: None,
        })
        .unwrap()
    };

    let dir = std::env::temp_dir().join(format!("rebound-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sqlite = SqliteStore::open(&dir.join("jobs.db")).unwrap();
    // Warm both up (file creation, first connections, plan caches).
    let warm = connect();
    measure(&[&sqlite], 1, 20);
    measure(&[&warm], 1, 20);

    let reference = measure(&[&sqlite], threads, jobs);
    let stores: Vec<PostgresStore> = (0..3).map(|_| connect()).collect();
    let mut rows = vec![("SQLite, 1 instance".to_owned(), reference)];
    for n in 1..=3 {
        let instances: Vec<&dyn JobStore> = stores[..n].iter().map(|s| s as _).collect();
        rows.push((
            format!("PostgreSQL, {n} instance{}", if n == 1 { "" } else { "s" }),
            measure(&instances, threads, jobs),
        ));
    }
    let sqlite_rate = rows[0].1.jobs_per_second;
    println!(
        "{jobs} jobs per configuration, 5 fenced transitions each, {threads} threads per instance; \
         SQLite synchronous=FULL, PostgreSQL fsync={fsync} synchronous_commit={synchronous_commit}"
    );
    println!(
        "{:<24} {:>10} {:>14} {:>16} {:>16}",
        "store", "jobs/s", "vs SQLite", "transition p50", "transition p99"
    );
    for (label, f) in &rows {
        println!(
            "{label:<24} {:>10.0} {:>13.2}x {:>13.2} ms {:>13.2} ms",
            f.jobs_per_second,
            f.jobs_per_second / sqlite_rate,
            f.p50.as_secs_f64() * 1000.0,
            f.p99.as_secs_f64() * 1000.0
        );
    }
    drop(stores);
    drop(warm);
    let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    let _ = std::fs::remove_dir_all(dir);
}
