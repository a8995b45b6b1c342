//! Several `rebound serve` instances on one PostgreSQL (X1, X2), with `rebound chaos` counting
//! every request: an instance SIGKILLed while it holds waiting jobs, or while an attempt is
//! out; the database restarted in the middle of a run; the jobs API of one instance acting on
//! another's job.
//!
//! These tests need a server: `.ci/run` starts a throwaway cluster and runs them with
//! `--ignored`, with `REBOUND_TEST_POSTGRES` (an admin URL without password),
//! `REBOUND_TEST_PGPASSWORD`, `REBOUND_TEST_POSTGRES_CA` (the CA of its certificate: the
//! instances connect over TLS) and `REBOUND_TEST_POSTGRES_RESTART` (a command that restarts
//! the server) set. Without them they fail; they never pass by skipping. Each test works in a
//! database of its own.

use std::process::Command;
use std::time::Duration;

use postgres::NoTls;
use serde_json::Value;

use crate::jobs::{JOB, Proc, attempts, get, poll, post, start, wait_for};

/// How long an instance's hold lasts in these tests: short, so a takeover comes soon after a
/// SIGKILL, and longer than the database restart, so no live instance loses a hold to it.
const LEASE_MS: u64 = 2000;

/// A database of one test's own, dropped with it.
pub(crate) struct Database {
    admin: postgres::Config,
    pub(crate) name: String,
    pub(crate) url: String,
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
        let name = format!("rebound_cli_{:016x}", fastrand_u64());
        admin
            .connect(NoTls)
            .unwrap()
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        let base = admin_url.rsplit_once('/').unwrap().0;
        Database {
            admin,
            url: format!("{base}/{name}"),
            name,
        }
    }
}

impl Database {
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

/// A random number from the process's hasher seed, for database names.
fn fastrand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::process::id())
}

pub(crate) fn chaos(script: &str) -> Proc {
    start(
        &[
            "chaos",
            "--listen",
            "127.0.0.1:0",
            "--chunk-delay-ms",
            "0",
            "--script",
            &format!("default={script}"),
        ],
        "",
    )
}

/// A gateway instance on the database `db`, with chaos as its one candidate.
fn instance(db: &Database, chaos: &str, name: &str) -> Proc {
    leased_instance(db, chaos, name, LEASE_MS)
}

/// The same, holding its jobs `lease_ms` without renewal.
fn leased_instance(db: &Database, chaos: &str, name: &str, lease_ms: u64) -> Proc {
    let dir = std::env::temp_dir().join(format!(
        "rebound-pg-{}-{}-{name}",
        db.name,
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("rebound.toml");
    // The takeover cases count each job's attempts exactly; the shared health ledger (S2)
    // would rest later jobs behind the first 429 without an attempt, so it is off here.
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nstore = \"{}?sslmode=require\"\nstore_ca_file = \"{}\"\nstore_password_env = \"REBOUND_TEST_PGPASSWORD\"\nstore_lease_ms = {lease_ms}\n[[candidate]]\nid = \"c\"\nprotocol = \"openai\"\nbase_url = \"http://{chaos}/v1\"\n[[route]]\nid = \"r\"\nmodels = [\"*\"]\ncandidates = [\"c\"]\n[health]\nenabled = false\n",
            db.url,
            std::env::var("REBOUND_TEST_POSTGRES_CA").expect(
                "REBOUND_TEST_POSTGRES_CA is not set: the CA of the test server's certificate"
            )
        ),
    )
    .unwrap();
    let gateway = start(
        &["serve", "--config", config.to_str().unwrap()],
        " resumed, ",
    );
    // The banner comes after the configuration was read: the folder is not needed any more.
    std::fs::remove_dir_all(&dir).unwrap();
    gateway
}

fn submit(gateway: &Proc) -> String {
    let job = post(&gateway.1, "/v1/rebound/jobs", JOB);
    job["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{job}"))
        .to_owned()
}

fn show(gateway: &Proc, id: &str) -> Value {
    get(&gateway.1, &format!("/v1/rebound/jobs/{id}"))
}

/// `rebound jobs ARGS --gateway` the instance, its standard output; it must succeed.
fn jobs_cli(gateway: &Proc, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .arg("jobs")
        .args(args)
        .args(["--gateway", &format!("http://{}", gateway.1)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rebound jobs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every job done, each with exactly two attempts (the 429 and the success), the second
/// one no earlier than the deadline the first one set.
fn assert_each_ran_twice(observer: &Proc, ids: &[String], deadlines: &[u64]) {
    for (id, deadline) in ids.iter().zip(deadlines) {
        let done = wait_for(&observer.1, id, "succeeded", Duration::from_secs(30));
        let on_record = done["attempts"].as_array().unwrap();
        assert_eq!(on_record.len(), 2, "{done}");
        assert!(
            on_record[1]["started_ms"].as_u64().unwrap() >= *deadline,
            "resumed before its deadline: {done}"
        );
    }
}

/// Each job's deadline once all of them wait.
fn deadlines(observer: &Proc, ids: &[String]) -> Vec<u64> {
    ids.iter()
        .map(|id| {
            wait_for(&observer.1, id, "waiting", Duration::from_secs(10))["deadline_ms"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_three_instances_and_the_one_holding_most_is_sigkilled() {
    let db = Database::new();
    // Each of the 30 jobs meets one 429 (its first attempt) and then succeeds. Chaos answers
    // by request order, not by job: the retry-after is long enough for every first attempt to
    // come before any second one, which the count below checks.
    let chaos = chaos(&format!("{}ok", "429+retry-after:10, ".repeat(30)));
    let mut a = Some(instance(&db, &chaos.1, "a"));
    let b = instance(&db, &chaos.1, "b");
    let c = instance(&db, &chaos.1, "c");
    // A takes 16 jobs, B and C 7 each: a job is held by the instance that created it.
    let mut ids = Vec::new();
    for (gateway, n) in [(a.as_ref().unwrap(), 16), (&b, 7), (&c, 7)] {
        ids.extend((0..n).map(|_| submit(gateway)));
    }
    let deadlines = deadlines(&b, &ids);
    assert_eq!(attempts(&chaos.1), 30, "one attempt each so far");
    drop(a.take()); // SIGKILL, holding 16 waiting jobs

    // B and C take A's jobs over once its leases run out, and run them at their deadlines.
    assert_each_ran_twice(&b, &ids, &deadlines);
    assert_eq!(
        attempts(&chaos.1),
        60,
        "exactly two requests per job: nothing dispatched twice"
    );
    // Every job is listed by either survivor.
    let listed = get(&c.1, "/v1/rebound/jobs");
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 30, "{listed}");
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_an_instance_sigkilled_with_an_attempt_out_leaves_it_for_a_human() {
    let db = Database::new();
    let chaos = chaos("stall:60000, ok");
    let a = instance(&db, &chaos.1, "a");
    let b = instance(&db, &chaos.1, "b");
    let id = submit(&a);
    poll(
        "the attempt reaching chaos",
        Duration::from_secs(5),
        || attempts(&chaos.1),
        |n| *n == 1,
    );
    assert_eq!(show(&b, &id)["state"], "dispatching");
    drop(a); // SIGKILL while the attempt is out

    let held = wait_for(&b.1, &id, "action_required", Duration::from_secs(15));
    assert_eq!(
        held["error"]["reason"], "attempt_may_have_been_sent",
        "{held}"
    );
    assert_eq!(held["attempts"][0]["outcome"], "unknown", "{held}");
    assert_eq!(
        attempts(&chaos.1),
        1,
        "the attempt that may have been sent was not re-sent"
    );
    // A human decides, through the survivor: retry now.
    jobs_cli(&b, &["retry", &id]);
    wait_for(&b.1, &id, "succeeded", Duration::from_secs(10));
    assert_eq!(attempts(&chaos.1), 2, "the human's retry, and nothing else");
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_a_job_submitted_to_one_instance_is_shown_retried_and_stopped_through_another() {
    let db = Database::new();
    let chaos = chaos("429+retry-after:3, ok, 429+retry-after:600");
    let a = instance(&db, &chaos.1, "a");
    let b = instance(&db, &chaos.1, "b");

    // Retried through B while A waits out its deadline: B runs it at once.
    let first = submit(&a);
    let waiting = wait_for(&b.1, &first, "waiting", Duration::from_secs(5));
    let deadline = waiting["deadline_ms"].as_u64().unwrap();
    assert!(jobs_cli(&b, &["list"]).contains(&first));
    assert!(jobs_cli(&b, &["show", &first]).contains("waiting"));
    jobs_cli(&b, &["retry", &first]);
    let done = wait_for(&b.1, &first, "succeeded", Duration::from_secs(5));
    assert!(
        done["attempts"][1]["started_ms"].as_u64().unwrap() < deadline,
        "B ran it before A's timer: {done}"
    );
    assert_eq!(attempts(&chaos.1), 2);

    // Stopped through B, fenced by the generation it read.
    let second = submit(&a);
    let waiting = wait_for(&b.1, &second, "waiting", Duration::from_secs(5));
    let generation = waiting["generation"].as_u64().unwrap();
    let stale = post(
        &b.1,
        &format!("/v1/rebound/jobs/{second}/stop"),
        &format!("{{\"generation\": {}}}", generation - 1),
    );
    assert_eq!(stale["error"]["type"], "stale_generation", "{stale}");
    jobs_cli(&b, &["stop", &second]);
    assert_eq!(show(&a, &second)["state"], "stopped");

    // A's timer for the first job fires at its deadline and finds it moved on: nothing sent.
    poll(
        "A's deadline for the first job passing",
        Duration::from_secs(10),
        || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64
        },
        |now| *now > deadline + 1000,
    );
    assert_eq!(
        attempts(&chaos.1),
        3,
        "no request after the stop or the retry"
    );
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_restarted_mid_run_loses_nothing_and_runs_nothing_twice() {
    let db = Database::new();
    let restart = std::env::var("REBOUND_TEST_POSTGRES_RESTART").expect(
        "REBOUND_TEST_POSTGRES_RESTART is not set: the command that restarts the test server",
    );
    let chaos = chaos(&format!("{}ok", "429+retry-after:10, ".repeat(30)));
    let instances: Vec<Proc> = ["a", "b", "c"]
        .iter()
        .map(|name| instance(&db, &chaos.1, name))
        .collect();
    let ids: Vec<String> = (0..30).map(|i| submit(&instances[i % 3])).collect();
    let deadlines = deadlines(&instances[0], &ids);
    assert_eq!(attempts(&chaos.1), 30, "one attempt each so far");

    let status = Command::new("sh").args(["-c", &restart]).status().unwrap();
    assert!(status.success(), "{restart}: {status}");

    // After the restart every instance serves the jobs API again, from the database.
    for gateway in &instances {
        let listed = poll(
            "the jobs list after the restart",
            Duration::from_secs(30),
            || get(&gateway.1, "/v1/rebound/jobs"),
            |l| l["jobs"].as_array().is_some_and(|j| j.len() == 30),
        );
        assert_eq!(listed["jobs"].as_array().unwrap().len(), 30);
    }
    assert_each_ran_twice(&instances[1], &ids, &deadlines);
    assert_eq!(attempts(&chaos.1), 60, "no job ran twice");
    // And each instance takes new work.
    let more: Vec<String> = instances.iter().map(submit).collect();
    for id in &more {
        wait_for(&instances[2].1, id, "succeeded", Duration::from_secs(10));
    }
    assert_eq!(attempts(&chaos.1), 63);
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_an_instance_stopped_with_sigterm_hands_its_jobs_over_at_once() {
    let db = Database::new();
    let chaos = chaos("429+retry-after:3, ok");
    // Leases far longer than the test: only the stopping instance letting its jobs go can
    // explain a takeover.
    let mut a = leased_instance(&db, &chaos.1, "a", 600_000);
    let b = leased_instance(&db, &chaos.1, "b", 600_000);
    let id = submit(&a);
    let deadline = wait_for(&b.1, &id, "waiting", Duration::from_secs(5))["deadline_ms"]
        .as_u64()
        .unwrap();
    let interrupted = Command::new("kill")
        .args(["-TERM", &a.0.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    assert!(a.0.wait().unwrap().success(), "a clean stop");

    let done = wait_for(&b.1, &id, "succeeded", Duration::from_secs(15));
    let on_record = done["attempts"].as_array().unwrap();
    assert_eq!(on_record.len(), 2, "{done}");
    assert!(
        on_record[1]["started_ms"].as_u64().unwrap() >= deadline,
        "resumed before its deadline: {done}"
    );
    assert_eq!(attempts(&chaos.1), 2);
}
