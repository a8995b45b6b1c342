//! The shared health ledger across `rebound serve` instances on one PostgreSQL (X3, S1, S2):
//! a cooldown one instance learns from the server is honoured by another within one second,
//! which then skips that candidate with zero attempts on it, and rests a job on it behind the
//! same deadline. `rebound chaos` counts every request. Run by `.ci/run` with the other
//! PostgreSQL tests; without a server they fail.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::jobs::{JOB, Proc, attempts, get, poll, post, start, wait_for};
use crate::postgres::{Database, chaos};

/// An instance with the shared health ledger on (the default): route `r` tries `p` (the
/// primary chaos) then `f` (the fallback chaos); route `solo` has `p` alone.
fn instance(db: &Database, primary: &str, fallback: &str, name: &str) -> Proc {
    let dir = std::env::temp_dir().join(format!(
        "rebound-pg-health-{}-{}-{name}",
        db.name,
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("rebound.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nstore = \"{}?sslmode=require\"\nstore_ca_file = \"{}\"\nstore_password_env = \"REBOUND_TEST_PGPASSWORD\"\n\
             [[candidate]]\nid = \"p\"\nprotocol = \"openai\"\nbase_url = \"http://{primary}/v1\"\n\
             [[candidate]]\nid = \"f\"\nprotocol = \"openai\"\nbase_url = \"http://{fallback}/v1\"\n\
             [[route]]\nid = \"solo\"\nmodels = [\"solo-*\"]\ncandidates = [\"p\"]\n\
             [[route]]\nid = \"r\"\nmodels = [\"*\"]\ncandidates = [\"p\", \"f\"]\n",
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
    std::fs::remove_dir_all(&dir).unwrap();
    gateway
}

const CHAT: &str = r#"{"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}"#;

/// Candidate `id` as an instance's `GET /v1/rebound/health` shows it.
fn health_of(gateway: &Proc, id: &str) -> Value {
    let page = get(&gateway.1, "/v1/rebound/health");
    page["candidates"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == id).cloned())
        .unwrap_or(Value::Null)
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_a_cooldown_learned_by_one_instance_is_honoured_by_another_within_a_second() {
    let db = Database::new();
    // The primary answers its first request with a 429 and a reset ten minutes away.
    let primary = chaos("429+retry-after:600");
    let fallback = chaos("ok");
    let a = instance(&db, &primary.1, &fallback.1, "a");
    let b = instance(&db, &primary.1, &fallback.1, "b");
    assert_eq!(health_of(&b, "p")["state"], "closed");

    // A meets the 429 and cools `p` down (S1); its request goes on in the background (it
    // waits out its policy's cap on the hint before it skips to the fallback).
    let a_addr = a.1.clone();
    let through_a = std::thread::spawn(move || post(&a_addr, "/v1/chat/completions", CHAT));
    poll(
        "A's attempt reaching the primary",
        Duration::from_secs(5),
        || attempts(&primary.1),
        |n| *n == 1,
    );
    // From the moment the provider saw the attempt (before it answered the 429), B honours
    // the cooldown within one second (X3): same state, deadline and failure as A's.
    let seen_at = Instant::now();
    let on_b = poll(
        "B learning A's cooldown",
        Duration::from_secs(5),
        || health_of(&b, "p"),
        |p| p["state"] == "cooling",
    );
    let took = seen_at.elapsed();
    assert!(took < Duration::from_secs(1), "B learned it after {took:?}");
    let on_a = health_of(&a, "p");
    assert_eq!(on_a["state"], "cooling", "{on_a}");
    assert_eq!(on_b["until_ms"], on_a["until_ms"], "{on_b} vs {on_a}");
    assert_eq!(on_b["code"], on_a["code"]);
    assert_eq!(on_b["class"], "rate_limit");

    // B skips `p` without an attempt: the fallback serves.
    let answered = post(&b.1, "/v1/chat/completions", CHAT);
    assert!(answered["choices"].is_array(), "{answered}");
    assert_eq!(
        (attempts(&primary.1), attempts(&fallback.1)),
        (1, 1),
        "zero attempts on the cooling candidate through B"
    );

    // A job through B on the route with `p` alone meets the same rest: with no attempt, it
    // ends at once, as its policy accepts no ten-minute wait, naming the cooldown (S2).
    let job = JOB.replace("gpt-x", "solo-x");
    let id = post(&b.1, "/v1/rebound/jobs", &job)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ended = wait_for(&b.1, &id, "failed", Duration::from_secs(5));
    assert_eq!(
        ended["attempts"].as_array().map(Vec::len),
        Some(0),
        "{ended}"
    );
    assert_eq!(ended["error"]["reason"], "resting", "{ended}");
    assert_eq!(ended["error"]["code"], on_a["code"], "{ended}");
    assert!(
        ended["error"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("`p` is cooling")),
        "{ended}"
    );
    assert_eq!(attempts(&primary.1), 1, "still only A's one attempt");

    // A's request ends on the fallback too, with its one attempt on the primary.
    let answered = through_a.join().unwrap();
    assert!(answered["choices"].is_array(), "{answered}");
    assert_eq!((attempts(&primary.1), attempts(&fallback.1)), (1, 2));
}

#[test]
#[ignore = "needs PostgreSQL: run by .ci/run with --ignored"]
fn postgres_an_instance_started_later_honours_a_cooldown_still_running() {
    let db = Database::new();
    let primary = chaos("429+retry-after:600");
    let fallback = chaos("ok");
    let a = instance(&db, &primary.1, &fallback.1, "a");
    let answered = post(&a.1, "/v1/chat/completions", CHAT);
    assert!(answered["choices"].is_array(), "{answered}");
    let until = health_of(&a, "p")["until_ms"].clone();
    assert!(until.is_u64(), "{until}");
    // The table has A's deadline once its writer wrote it; B starts after that.
    poll(
        "A's deadline in the table",
        Duration::from_secs(5),
        || {
            let mut client = db.client();
            client
                .query_opt("SELECT until_ms FROM health WHERE candidate = 'p'", &[])
                .unwrap()
                .map(|row| row.get::<_, i64>(0))
        },
        |row| row.is_some(),
    );
    let b = instance(&db, &primary.1, &fallback.1, "b");
    let on_b = health_of(&b, "p");
    assert_eq!(on_b["state"], "cooling", "{on_b}");
    assert_eq!(on_b["until_ms"], until);
    let answered = post(&b.1, "/v1/chat/completions", CHAT);
    assert!(answered["choices"].is_array(), "{answered}");
    assert_eq!((attempts(&primary.1), attempts(&fallback.1)), (1, 2));
}
