//! Durable jobs through the API: persistence before action, fenced manual actions, events,
//! policy snapshots (P1–P3, D2). The tests wait on what a client can observe, the job's event
//! stream, never on the clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::BodyExt;
use rebound_chaos::{Chaos, ChaosConfig, parse_script};
use rebound_core::Catalogue;
use rebound_core::policy::document::PolicyDocument;
use rebound_gateway::{Gateway, Overrides, Server, load};
use rebound_runtime::{HttpClient, SystemClock, TokioSleeper, VirtualTime};
use rebound_store::{
    AttemptOp, AttemptRecord, JobRecord, JobState, JobStore, NewJob, SqliteStore, StoreError,
};
use serde_json::{Value, json};

use crate::{send, timeouts};

const JSON: (&str, &str) = ("content-type", "application/json");

pub(crate) async fn upstream(script: &str) -> Chaos {
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
pub(crate) async fn gateway_on(
    config: &str,
    store: Arc<dyn JobStore>,
    virtual_time: bool,
) -> Server {
    let config = load("test.toml", config, &Overrides::default(), &[("X", "y")]).unwrap();
    let mut gateway = Gateway::new(
        config,
        HttpClient::new(timeouts()).unwrap(),
        Arc::new(Catalogue::shipped().unwrap()),
    )
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
pub(crate) async fn submit(server: &Server) -> String {
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

/// `POST /v1/rebound/jobs/{id}/{action}` fenced by `generation`.
async fn act(
    server: &Server,
    id: &str,
    action: &str,
    generation: impl serde::Serialize,
) -> crate::Reply {
    send(
        server.addr(),
        "POST",
        &format!("/v1/rebound/jobs/{id}/{action}"),
        &[JSON],
        &json!({"generation": generation}).to_string(),
    )
    .await
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

/// Follows the job's event stream until it shows `state`; then the whole job, with its
/// attempts. The stream ends by itself once the job is done or needs action, and a bound on
/// the whole wait turns a hang into a failure that lists the states seen.
pub(crate) async fn until(server: &Server, id: &str, state: &str) -> Value {
    let mut seen = Vec::new();
    let reached = tokio::time::timeout(
        Duration::from_secs(10),
        follow(server, id, state, &mut seen),
    )
    .await;
    assert!(
        matches!(reached, Ok(true)),
        "job {id} never reached {state}; its events showed {seen:?}"
    );
    let job = get(server, id).await;
    assert_eq!(job["state"], state, "{job}");
    job
}

/// Reads `GET /v1/rebound/jobs/{id}/events` until an event shows `state` (`true`) or the
/// stream ends (`false`), noting every state in `seen`.
async fn follow(server: &Server, id: &str, state: &str, seen: &mut Vec<String>) -> bool {
    let request = http::Request::get(format!(
        "http://{}/v1/rebound/jobs/{id}/events",
        server.addr()
    ))
    .body(Bytes::new())
    .unwrap();
    let response = HttpClient::new(timeouts())
        .unwrap()
        .send(request)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut buffered = String::new();
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(bytes) = frame.into_data() else {
            continue;
        };
        buffered.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = buffered.find("\n\n") {
            let event: String = buffered.drain(..end + 2).collect();
            let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            let job: Value = serde_json::from_str(data).unwrap();
            seen.push(job["state"].as_str().unwrap_or("?").to_owned());
            if job["state"] == state {
                return true;
            }
        }
    }
    false
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
    let stale = act(&server, &id, "skip", generation - 1).await;
    assert_eq!(stale.status, 409, "{}", stale.text());
    assert_eq!(store.get(&id).unwrap().generation, generation);
    // The current generation's skip moves the job on at once.
    let skip = act(&server, &id, "skip", generation).await;
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
    let stop = act(&server, &id, "stop", generation).await;
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

/// A gate that store writes wait at until the test opens it: a disk exactly as slow as the
/// test needs, with no clock involved.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    /// Notified when a write reaches the gate.
    reached: tokio::sync::Notify,
    /// A write gave up waiting: nothing opened the gate in time.
    gave_up: AtomicBool,
}

/// How long a write waits at a closed gate before it gives up: only a broken gateway (one
/// that waits for its store on the async thread) ever lets it run out.
const GATE_LIMIT: Duration = Duration::from_secs(5);

impl Gate {
    fn pass(&self) {
        self.reached.notify_one();
        let open = self.open.lock().unwrap();
        let (mut open, waited) = self
            .opened
            .wait_timeout_while(open, GATE_LIMIT, |open| !*open)
            .unwrap();
        if waited.timed_out() {
            // One write that gave up is the verdict; later ones pass, so the test ends.
            self.gave_up.store(true, Ordering::SeqCst);
            *open = true;
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

/// A store whose writes wait at a [`Gate`].
struct GatedDisk {
    store: SqliteStore,
    gate: Gate,
}

impl JobStore for GatedDisk {
    fn create(&self, job: NewJob, now: SystemTime) -> Result<JobRecord, StoreError> {
        self.gate.pass();
        self.store.create(job, now)
    }
    fn get(&self, id: &str) -> Result<JobRecord, StoreError> {
        self.store.get(id)
    }
    fn list(&self, limit: usize) -> Result<Vec<JobRecord>, StoreError> {
        self.store.list(limit)
    }
    fn in_states(&self, states: &[JobState]) -> Result<Vec<JobRecord>, StoreError> {
        self.store.in_states(states)
    }
    fn attempts(&self, id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        self.store.attempts(id)
    }
    fn transition(
        &self,
        id: &str,
        expected_generation: u64,
        now: SystemTime,
        change: &mut dyn FnMut(&mut JobRecord) -> Vec<AttemptOp>,
    ) -> Result<JobRecord, StoreError> {
        self.gate.pass();
        self.store.transition(id, expected_generation, now, change)
    }
}

#[tokio::test]
async fn a_slow_disk_under_jobs_never_stalls_live_requests() {
    // One async thread (this test's runtime), as `rebound serve` runs: a store write that
    // blocked it would hold every live request behind the disk.
    let upstream = upstream("ok").await;
    let disk = Arc::new(GatedDisk {
        store: SqliteStore::in_memory().unwrap(),
        gate: Gate::default(),
    });
    let server = gateway_on(&two_candidates(&upstream, &upstream), disk.clone(), false).await;
    let addr = server.addr();
    let submitting =
        tokio::spawn(
            async move { send(addr, "POST", "/v1/rebound/jobs", &[JSON], &job_body()).await },
        );
    // The job's first write is now held at the gate, as long as the test likes.
    disk.gate.reached.notified().await;
    let live = send(
        addr,
        "POST",
        "/v1/chat/completions",
        &[JSON],
        &crate::openai_body(false),
    )
    .await;
    assert_eq!(live.status, 200, "{}", live.text());
    assert!(
        !disk.gate.gave_up.load(Ordering::SeqCst),
        "the live request was served only once the held store write gave up: it waited behind the job store"
    );
    disk.gate.open();
    assert_eq!(submitting.await.unwrap().status, 202);
}

/// A snapshot whose second document names a code no catalogue has: it parses, and does not
/// compile.
fn stale_snapshot() -> Vec<PolicyDocument> {
    vec![
        PolicyDocument::of(&rebound_core::Policy::immediate_skip()),
        PolicyDocument::from_json(r#"{"rules": {"no_such_code": "try_next"}}"#).unwrap(),
    ]
}

#[tokio::test]
async fn a_policy_snapshot_that_does_not_compile_waits_for_a_human_who_is_told_why() {
    let first = upstream("ok").await;
    let second = upstream("ok").await;
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let id = store
        .create(
            NewJob {
                protocol: "openai".into(),
                route_id: "jobs".into(),
                candidates: vec!["first".into(), "second".into()],
                policies: stale_snapshot(),
                request: br#"{"model":"gpt-x","messages":[]}"#.to_vec(),
            },
            SystemTime::UNIX_EPOCH,
        )
        .unwrap()
        .id;
    let server = gateway_on(&two_candidates(&first, &second), store.clone(), true).await;
    let resumed = rebound_gateway::jobs::resume(server.gateway())
        .await
        .unwrap();
    assert_eq!(resumed.due.len(), 1);

    let job = until(&server, &id, "action_required").await;
    let error = &job["error"];
    assert_eq!(error["reason"], "policy_snapshot_invalid", "{job}");
    assert_eq!(
        (&error["candidate"], &error["field"]),
        (&json!("second"), &json!("rules.no_such_code"))
    );
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(&id), "{message}");
    assert_eq!(
        (first.attempts("default"), second.attempts("default")),
        (0, 0),
        "nothing is sent that the snapshot could not decide about"
    );

    // A manual action that needs the snapshot is refused, says why, and commits nothing.
    let generation = job["generation"].as_u64().unwrap();
    let skip = act(&server, &id, "skip", generation).await;
    assert_eq!(skip.status, 409, "{}", skip.text());
    assert!(
        skip.text().contains("rules.no_such_code") && skip.text().contains(&id),
        "{}",
        skip.text()
    );
    assert_eq!(store.get(&id).unwrap().generation, generation);
    // Stopping needs no policy.
    let stop = act(&server, &id, "stop", generation).await;
    assert_eq!(stop.status, 200, "{}", stop.text());
    assert_eq!(store.get(&id).unwrap().state, JobState::Stopped);
}

#[tokio::test]
async fn a_refused_manual_action_moves_no_generation_on() {
    let first = upstream("ok").await;
    let second = upstream("ok").await;
    let (server, store) = gateway(&two_candidates(&first, &second), true).await;
    let id = submit(&server).await;
    let done = until(&server, &id, "succeeded").await;
    let generation = done["generation"].as_u64().unwrap();
    let retry = act(&server, &id, "retry", generation).await;
    assert_eq!(retry.status, 409, "{}", retry.text());
    assert!(
        retry.text().contains("the job succeeded"),
        "{}",
        retry.text()
    );
    assert_eq!(store.get(&id).unwrap().generation, generation);
}

/// G6: a job's attempts are counted and logged by the same loop as a live request's, so
/// `/metrics` and the log tell the same story for both.
#[tokio::test]
async fn a_job_is_counted_and_logged_like_a_live_request() {
    let log = crate::Logs::capture();
    let first = upstream("502, ok").await;
    let second = upstream("ok").await;
    let (server, _) = gateway(&two_candidates(&first, &second), true).await;
    let id = submit(&server).await;
    until(&server, &id, "succeeded").await;
    let metrics = send(server.addr(), "GET", "/metrics", &[], "").await.text();
    crate::assert_told_a_502_then_ok(&metrics, &log, "jobs", "first");
}
