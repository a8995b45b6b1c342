//! Durable jobs through the API: persistence before action, fenced manual actions, events
//! (P1–P3, D2).

use std::sync::Arc;
use std::time::Duration;

use rebound_chaos::{Chaos, ChaosConfig, parse_script};
use rebound_core::Catalogue;
use rebound_gateway::{Gateway, NoLog, Overrides, Server, load};
use rebound_runtime::{HttpClient, SystemClock, TokioSleeper, VirtualTime};
use rebound_store::{RouteStore, SqliteStore};
use serde_json::{Value, json};

use crate::{send, timeouts};

const JSON: (&str, &str) = ("content-type", "application/json");

async fn upstream(script: &str) -> Chaos {
    let chaos = Chaos::start("127.0.0.1:0".parse().unwrap(), ChaosConfig::default())
        .await
        .unwrap();
    chaos.set_script("default", parse_script(script).unwrap());
    chaos
}

fn two_candidates(first: &Chaos, second: &Chaos) -> String {
    format!(
        r#"
[[candidate]]
id = "first"
protocol = "openai"
base_url = "{}"
policy = {{ rate_limit = {{ retries = 0, reset_wait_max_ms = 600000, exhausted = "skip" }} }}

[[candidate]]
id = "second"
protocol = "openai"
base_url = "{}"

[[route]]
id = "jobs"
models = ["*"]
candidates = ["first", "second"]
"#,
        first.openai_base_url(),
        second.openai_base_url()
    )
}

async fn gateway(config: &str, virtual_time: bool) -> (Server, Arc<SqliteStore>) {
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    (gateway_on(config, store.clone(), virtual_time).await, store)
}

/// A gateway whose jobs live in `store`.
async fn gateway_on(config: &str, store: Arc<dyn RouteStore>, virtual_time: bool) -> Server {
    let config = load("test.toml", config, &Overrides::default(), &[("X", "y")]).unwrap();
    let mut gateway = Gateway::new(
        config,
        HttpClient::new(timeouts()).unwrap(),
        Arc::new(Catalogue::shipped().unwrap()),
    )
    .with_log(Arc::new(NoLog))
    .with_jobs(store);
    if virtual_time {
        let time =
            VirtualTime::starting_at(std::time::UNIX_EPOCH + Duration::from_secs(1_796_050_800));
        gateway = gateway.with_time(time.clone(), time);
    } else {
        gateway = gateway.with_time(Arc::new(SystemClock), Arc::new(TokioSleeper));
    }
    Server::start(gateway, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap()
}

fn job_body() -> String {
    json!({"protocol": "openai", "request": {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}}).to_string()
}

/// Submits the standard job; its id.
async fn submit(server: &Server) -> String {
    let reply = send(
        server.addr(),
        "POST",
        "/v1/rebound/jobs",
        &[JSON],
        &job_body(),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    serde_json::from_slice::<Value>(&reply.body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn get(server: &Server, id: &str) -> Value {
    let reply = send(
        server.addr(),
        "GET",
        &format!("/v1/rebound/jobs/{id}"),
        &[],
        "",
    )
    .await;
    serde_json::from_slice(&reply.body).unwrap()
}

async fn until(server: &Server, id: &str, state: &str) -> Value {
    for _ in 0..200 {
        let job = get(server, id).await;
        if job["state"] == state {
            return job;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("job {id} never reached {state}: {}", get(server, id).await);
}

#[tokio::test]
async fn a_job_waits_for_an_announced_reset_then_succeeds_with_its_attempts_on_record() {
    let first = upstream("429+retry-after:120, ok").await;
    let second = upstream("ok").await;
    let (server, _) = gateway(&two_candidates(&first, &second), true).await;
    let reply = send(
        server.addr(),
        "POST",
        "/v1/rebound/jobs",
        &[JSON],
        &job_body(),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    let id = serde_json::from_slice::<Value>(&reply.body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let job = until(&server, &id, "succeeded").await;
    assert_eq!(
        job["response"]["choices"][0]["message"]["content"],
        "Hello from rebound chaos. You said: hi"
    );
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{job}");
    assert_eq!(attempts[0]["code"], "rate_limited");
    assert_eq!(attempts[0]["rule_id"], "openai.rate_limit_exceeded");
    assert_eq!(attempts[0]["catalogue_version"], "2026.11.30");
    assert_eq!(attempts[1]["outcome"], "succeeded");
    assert_eq!(
        job["candidate"], "first",
        "the reset wait kept the candidate"
    );
    assert_eq!(
        (first.attempts("default"), second.attempts("default")),
        (2, 0)
    );
}

#[tokio::test]
async fn a_reset_beyond_the_maximum_skips_to_the_next_candidate() {
    let first = upstream("429+retry-after:3600").await;
    let second = upstream("ok").await;
    let (server, _) = gateway(&two_candidates(&first, &second), true).await;
    let id = submit(&server).await;
    let job = until(&server, &id, "succeeded").await;
    assert_eq!(job["candidate"], "second");
    assert_eq!(
        (first.attempts("default"), second.attempts("default")),
        (1, 1)
    );
}

#[tokio::test]
async fn manual_actions_are_fenced_by_generation() {
    let first = upstream("429+retry-after:300").await;
    let second = upstream("ok").await;
    // Real time: the job really waits, so a manual action can overtake its timer.
    let (server, store) = gateway(&two_candidates(&first, &second), false).await;
    let id = submit(&server).await;
    let waiting = until(&server, &id, "waiting").await;
    assert_eq!(waiting["pending_outcome"], "reset_wait");
    assert!(waiting["deadline_ms"].as_u64().unwrap() > 0);
    let generation = waiting["generation"].as_u64().unwrap();
    // A skip decided against an older generation changes nothing.
    let stale = send(
        server.addr(),
        "POST",
        &format!("/v1/rebound/jobs/{id}/skip"),
        &[JSON],
        &json!({"generation": generation - 1}).to_string(),
    )
    .await;
    assert_eq!(stale.status, 409, "{}", stale.text());
    assert_eq!(store.get(&id).unwrap().generation, generation);
    // The current generation's skip moves the job on at once.
    let skip = send(
        server.addr(),
        "POST",
        &format!("/v1/rebound/jobs/{id}/skip"),
        &[JSON],
        &json!({"generation": generation}).to_string(),
    )
    .await;
    assert_eq!(skip.status, 200, "{}", skip.text());
    let done = until(&server, &id, "succeeded").await;
    assert_eq!(done["candidate"], "second");
    assert_eq!(second.attempts("default"), 1);
}

#[tokio::test]
async fn unclassified_failures_wait_for_a_human_and_stop_is_final() {
    let first = upstream("418").await;
    let second = upstream("ok").await;
    let (server, _) = gateway(&two_candidates(&first, &second), true).await;
    let id = submit(&server).await;
    let job = until(&server, &id, "action_required").await;
    assert_eq!(job["error"]["reason"], "unclassified");
    let generation = job["generation"].as_u64().unwrap();
    let stop = send(
        server.addr(),
        "POST",
        &format!("/v1/rebound/jobs/{id}/stop"),
        &[JSON],
        &json!({"generation": generation}).to_string(),
    )
    .await;
    assert_eq!(stop.status, 200);
    assert_eq!(get(&server, &id).await["state"], "stopped");
    assert_eq!(
        second.attempts("default"),
        0,
        "nothing automatic after an unclassified failure"
    );
}

#[tokio::test]
async fn events_stream_state_changes_until_the_end() {
    let first = upstream("502, ok").await;
    let second = upstream("ok").await;
    let (server, _) = gateway(&two_candidates(&first, &second), true).await;
    let id = submit(&server).await;
    until(&server, &id, "succeeded").await;
    let events = send(
        server.addr(),
        "GET",
        &format!("/v1/rebound/jobs/{id}/events"),
        &[],
        "",
    )
    .await;
    assert_eq!(events.header("content-type"), "text/event-stream");
    assert!(
        events.text().starts_with("event: state\ndata: {"),
        "{}",
        events.text()
    );
    assert!(
        events.text().contains("\"state\":\"succeeded\""),
        "{}",
        events.text()
    );
}

#[tokio::test]
async fn bad_jobs_are_refused() {
    let first = upstream("ok").await;
    let second = upstream("ok").await;
    let (server, _) = gateway(&two_candidates(&first, &second), true).await;
    // Nesting is walked without recursion: 100,000 levels that never close are refused (and
    // balanced ones are kept byte for byte, like any request).
    let deep = format!(
        r#"{{"protocol": "openai", "request": {{"model": "m", "x": {}}}}}"#,
        "[".repeat(100_000)
    );
    for (body, status) in [
        ("{not json", 400),
        (deep.as_str(), 400),
        (r#"{"protocol": "openai", "request": [1, 2]}"#, 400),
        (
            r#"{"protocol": "openai", "request": {"model": "m", "stream": true}}"#,
            400,
        ),
        (r#"{"protocol": "carrier", "request": {"model": "m"}}"#, 400),
        (r#"{"protocol": "openai", "request": {}}"#, 400),
        (
            r#"{"protocol": "openai", "request": {"model": "m"}, "priority": 1}"#,
            400,
        ),
        (
            r#"{"protocol": "openai", "route": "nope", "request": {"model": "m"}}"#,
            404,
        ),
    ] {
        let reply = send(server.addr(), "POST", "/v1/rebound/jobs", &[JSON], body).await;
        assert_eq!(reply.status, status, "{body}: {}", reply.text());
    }
    assert_eq!(
        send(server.addr(), "GET", "/v1/rebound/jobs/job_nope", &[], "")
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn policies_are_served_as_version_1_documents() {
    let first = upstream("ok").await;
    let second = upstream("ok").await;
    let (server, _) = gateway(&two_candidates(&first, &second), true).await;
    let reply = send(server.addr(), "GET", "/v1/rebound/policies", &[], "").await;
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    let first = &body["candidates"]["first"];
    assert_eq!(first["version"], 1);
    assert_eq!(first["rate_limit"]["exhausted"], "skip");
    assert_eq!(first["rate_limit"]["reset_wait"]["max_ms"], 600000);
    assert_eq!(
        body["candidates"]["second"]["transient"]["retry"]["max"],
        10
    );
    // The document compiles back to the same policy.
    let doc =
        rebound_core::policy::document::PolicyDocument::from_json(&first.to_string()).unwrap();
    assert!(
        doc.compile(
            &rebound_core::Policy::immediate_skip(),
            &Catalogue::shipped().unwrap()
        )
        .is_ok()
    );
}

#[tokio::test]
async fn a_key_the_upstream_echoes_never_reaches_a_job_record() {
    let upstream = upstream("401").await;
    let config = format!(
        "[[candidate]]\nid = \"keyed\"\nprotocol = \"openai\"\nbase_url = \"{}\"\napi_key_env = \"CANARY_KEY\"\n[[route]]\nid = \"jobs\"\nmodels = [\"*\"]\ncandidates = [\"keyed\"]\n",
        upstream.openai_base_url()
    );
    let config = load(
        "test.toml",
        &config,
        &Overrides::default(),
        &[("CANARY_KEY", crate::CANARY)],
    )
    .unwrap();
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let gateway = Gateway::new(
        config,
        HttpClient::new(timeouts()).unwrap(),
        Arc::new(Catalogue::shipped().unwrap()),
    )
    .with_log(Arc::new(NoLog))
    .with_jobs(store.clone());
    let server = Server::start(gateway, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let id = submit(&server).await;
    let job = until(&server, &id, "failed").await;
    assert_eq!(job["error"]["code"], "auth_failed", "{job}");
    let mut everything = job.to_string();
    everything.push_str(&format!("{:?}", store.get(&id).unwrap()));
    everything.push_str(&format!("{:?}", store.attempts(&id).unwrap()));
    everything.push_str(
        &send(
            server.addr(),
            "GET",
            &format!("/v1/rebound/jobs/{id}/events"),
            &[],
            "",
        )
        .await
        .text(),
    );
    everything.push_str(
        &send(server.addr(), "GET", "/v1/rebound/jobs", &[], "")
            .await
            .text(),
    );
    assert!(
        !everything.contains("GatewayCanary"),
        "the provider key reached a job record:\n{everything}"
    );
}

/// A store whose every write takes as long as a slow disk's fsync.
struct SlowDisk(SqliteStore);

const FSYNC: Duration = Duration::from_millis(400);

impl RouteStore for SlowDisk {
    fn create(
        &self,
        job: rebound_store::NewJob,
        now_ms: u64,
    ) -> Result<rebound_store::JobRecord, rebound_store::StoreError> {
        std::thread::sleep(FSYNC);
        self.0.create(job, now_ms)
    }
    fn get(&self, id: &str) -> Result<rebound_store::JobRecord, rebound_store::StoreError> {
        self.0.get(id)
    }
    fn list(
        &self,
        limit: usize,
    ) -> Result<Vec<rebound_store::JobRecord>, rebound_store::StoreError> {
        self.0.list(limit)
    }
    fn attempts(
        &self,
        id: &str,
    ) -> Result<Vec<rebound_store::AttemptRecord>, rebound_store::StoreError> {
        self.0.attempts(id)
    }
    fn transition(
        &self,
        id: &str,
        expected_generation: u64,
        now_ms: u64,
        change: &mut dyn FnMut(&mut rebound_store::JobRecord) -> Vec<rebound_store::AttemptOp>,
    ) -> Result<rebound_store::JobRecord, rebound_store::StoreError> {
        std::thread::sleep(FSYNC);
        self.0.transition(id, expected_generation, now_ms, change)
    }
    fn reconcile(
        &self,
        now_ms: u64,
    ) -> Result<rebound_store::Reconciliation, rebound_store::StoreError> {
        self.0.reconcile(now_ms)
    }
}

#[tokio::test]
async fn a_slow_disk_under_jobs_never_stalls_live_requests() {
    // One async thread (this test's runtime), as `rebound serve` runs: a store write that
    // blocked it would hold every live request behind the disk.
    let upstream = upstream("ok").await;
    let slow = Arc::new(SlowDisk(SqliteStore::in_memory().unwrap()));
    let server = gateway_on(&two_candidates(&upstream, &upstream), slow, false).await;
    let addr = server.addr();
    let submitting =
        tokio::spawn(
            async move { send(addr, "POST", "/v1/rebound/jobs", &[JSON], &job_body()).await },
        );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = std::time::Instant::now();
    let live = send(
        addr,
        "POST",
        "/v1/chat/completions",
        &[JSON],
        &crate::openai_body(false),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(live.status, 200, "{}", live.text());
    assert!(
        took < FSYNC / 2,
        "a live request waited {took:?} behind the job store"
    );
    assert_eq!(submitting.await.unwrap().status, 202);
}
