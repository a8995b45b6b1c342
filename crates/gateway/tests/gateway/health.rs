//! The shared health ledger (#18, S1–S3, S6) on real sockets: requests and jobs learn an
//! outage once, rest without attempts, and one probe per window finds the recovery. Time is
//! moved by hand ([`ManualTime`]): a crowd of waits ends exactly when the test says.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use rebound_chaos::{Chaos, parse_script};
use rebound_core::Catalogue;
use rebound_gateway::{Gateway, Overrides, Server, load};
use rebound_runtime::{HttpClient, ManualTime};
use rebound_store::SqliteStore;
use serde_json::Value;

use crate::{CANARY, Logs, Reply, chaos, openai_body, send, timeouts};

/// The clock's start, in Unix seconds.
const ORIGIN: u64 = 1_796_050_800;

/// Bounds only a broken build: in a working one every wait below is reached at once.
const LIMIT: Duration = Duration::from_secs(10);

struct Manual {
    server: Server,
    time: Arc<ManualTime>,
    log: Logs,
}

impl Manual {
    async fn start(config: &str) -> Manual {
        Self::start_with(config, &[("CANARY_KEY", CANARY)]).await
    }

    async fn start_with<const N: usize>(config: &str, env: &[(&str, &str); N]) -> Manual {
        let config = load("test.toml", config, &Overrides::default(), env).unwrap();
        let time = ManualTime::starting_at(UNIX_EPOCH + Duration::from_secs(ORIGIN));
        let log = Logs::capture();
        let gateway = Gateway::new(
            config,
            HttpClient::new(timeouts()).unwrap(),
            Arc::new(Catalogue::shipped().unwrap()),
        )
        .with_jobs(Arc::new(SqliteStore::in_memory().unwrap()))
        .with_time(time.clone(), time.clone())
        .with_jitter_seed(3);
        let server = Server::start(gateway, Some("127.0.0.1:0".parse().unwrap()))
            .await
            .unwrap();
        Manual { server, time, log }
    }

    fn post(&self, stream: bool) -> tokio::task::JoinHandle<Reply> {
        let addr = self.server.addr();
        tokio::spawn(async move {
            send(
                addr,
                "POST",
                "/v1/chat/completions",
                &[("content-type", "application/json")],
                &openai_body(stream),
            )
            .await
        })
    }

    /// Runs one request to its end, moving the clock to each wait's end as it begins.
    async fn drive(&self, stream: bool) -> Reply {
        self.finish(self.post(stream)).await
    }

    /// Runs `request` to its end, moving the clock to each wait's end as it begins.
    async fn finish(&self, mut request: tokio::task::JoinHandle<Reply>) -> Reply {
        loop {
            tokio::select! {
                reply = &mut request => return reply.unwrap(),
                reached = self.time.until_sleeping(1, LIMIT) => {
                    assert!(reached, "the request neither ended nor waited");
                    let next = self.time.next_wake().unwrap();
                    self.time.advance(next);
                }
            }
        }
    }

    async fn health(&self) -> Value {
        let reply = send(self.server.addr(), "GET", "/v1/rebound/health", &[], "").await;
        assert_eq!(reply.status, 200);
        serde_json::from_slice(&reply.body).unwrap()
    }

    async fn candidate(&self, id: &str) -> Value {
        let health = self.health().await;
        health["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no candidate {id} in {health}"))
    }
}

fn candidate(id: &str, upstream: &Chaos) -> String {
    format!(
        "[[candidate]]\nid = \"{id}\"\nprotocol = \"openai\"\nbase_url = \"{}\"\napi_key_env = \"CANARY_KEY\"\n",
        upstream.openai_base_url()
    )
}

fn route(candidates: &[&str]) -> String {
    let list = candidates
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!("[[route]]\nid = \"main\"\nmodels = [\"*\"]\ncandidates = [{list}]\n")
}

fn sole(upstream: &Chaos) -> String {
    format!("{}\n{}", candidate("sole", upstream), route(&["sole"]))
}

fn pair(primary: &Chaos, fallback: &Chaos) -> String {
    format!(
        "{}\n{}\n{}",
        candidate("primary", primary),
        candidate("fallback", fallback),
        route(&["primary", "fallback"])
    )
}

#[tokio::test]
async fn fifty_requests_behind_a_429_with_retry_after_make_no_attempt_before_its_deadline() {
    // S1, S2, S3: the first request learns `retry-after: 2`; the 49 that come while it rests
    // wait for the same deadline with no attempt of their own; then one probe, then all.
    let upstream = chaos("429+retry-after:2").await;
    let g = Manual::start(&sole(&upstream)).await;
    let first = g.post(false);
    assert!(g.time.until_sleeping(1, LIMIT).await);
    assert_eq!(upstream.attempts("default"), 1);
    let crowd: Vec<_> = (0..49).map(|i| g.post(i % 2 == 0)).collect();
    assert!(g.time.until_sleeping(50, LIMIT).await);
    assert_eq!(
        upstream.attempts("default"),
        1,
        "the crowd rests without attempts"
    );
    let sole = g.candidate("sole").await;
    assert_eq!(sole["state"], "cooling", "{sole}");
    assert_eq!(sole["remaining_ms"], 2000, "{sole}");
    assert_eq!(sole["code"], "rate_limited", "{sole}");
    // The countdown goes a second at a time: two steps to the deadline.
    g.time.advance(Duration::from_secs(1));
    assert!(g.time.until_sleeping(50, LIMIT).await);
    assert_eq!(upstream.attempts("default"), 1);
    g.time.advance(Duration::from_secs(1));
    let mut replies = vec![first.await.unwrap()];
    for request in crowd {
        replies.push(request.await.unwrap());
    }
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    // One attempt before the deadline, then each request's own (the first of them the
    // probe): 1 + 50, not 50 × the retry schedule.
    assert_eq!(upstream.attempts("default"), 51);
    assert_eq!(g.candidate("sole").await["state"], "closed");
    let changes: Vec<String> = g
        .log
        .lines()
        .into_iter()
        .filter(|l| l.contains("rebound::health"))
        .collect();
    assert_eq!(changes.len(), 3, "cooling, probing, closed: {changes:#?}");
    assert!(changes[0].contains("to=cooling") && changes[0].contains("code=rate_limited"));
    assert!(changes[2].contains("from=probing") && changes[2].contains("to=closed"));
}

#[tokio::test]
async fn an_outage_with_a_fallback_is_served_by_the_fallback_and_probed_once_per_window() {
    // S2, S3: the primary answers 503 until it recovers. The first request learns it (three
    // attempts open the circuit); the next ones skip it with no attempt; each window ends
    // with one probe; after the recovery the first probe closes it and traffic returns.
    let primary = chaos("").await;
    let fallback = chaos("").await;
    primary.set_script(
        "default",
        parse_script(&vec!["503"; 200].join(",")).unwrap(),
    );
    let g = Manual::start(&pair(&primary, &fallback)).await;
    let mut served_by_fallback = 0;
    let mut probes = Vec::new();
    let started = g.time.elapsed();
    // Ten seconds of outage, a request every 250 ms (and the waits of those that probe).
    while g.time.elapsed() - started < Duration::from_secs(10) {
        let before = primary.attempts("default");
        let reply = g.drive(false).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.header("x-rebound-candidate"), "fallback");
        served_by_fallback += 1;
        let made = primary.attempts("default") - before;
        if before == 0 {
            assert_eq!(made, 3, "the first request makes the attempts that open it");
        } else if made > 0 {
            assert_eq!(made, 1, "a probe is one attempt");
            probes.push(g.time.elapsed() - started);
        } else {
            assert_eq!(reply.header("x-rebound-skipped"), "primary");
        }
        g.time.advance(Duration::from_millis(250));
    }
    assert!(served_by_fallback >= 10, "{served_by_fallback} requests");
    // Windows of 1 s, 2 s, 4 s, 8 s: at most one probe per window.
    assert!(
        (2..=4).contains(&probes.len()),
        "probes at {probes:?} in a 10 s outage"
    );
    for pair in probes.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_secs(2), "{probes:?}");
    }
    // The primary recovers: within one window (8 s at most, the cap) a probe finds it, and
    // the request after it is the primary's.
    primary.set_script("default", vec![]);
    let recovered = g.time.elapsed();
    loop {
        let reply = g.drive(false).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        if reply.header("x-rebound-candidate") == "primary" {
            break;
        }
        assert!(
            g.time.elapsed() - recovered <= Duration::from_secs(8),
            "the primary was not tried within a window of its recovery"
        );
        g.time.advance(Duration::from_millis(250));
    }
    assert_eq!(
        primary.attempts("default"),
        1,
        "one probe found the recovery"
    );
    assert_eq!(g.candidate("primary").await["state"], "closed");
    let reply = g.drive(false).await;
    assert_eq!(reply.header("x-rebound-candidate"), "primary");
    let metrics = send(g.server.addr(), "GET", "/metrics", &[], "")
        .await
        .text();
    assert!(
        metrics.contains("rebound_health_rests_total{candidate=\"primary\",outcome=\"skipped\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("rebound_candidate_health{candidate=\"primary\",state=\"closed\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_reset_hours_away_fails_the_next_request_at_once_with_its_deadline() {
    // S2: a reset hours away is more than an interactive policy waits: the next request is
    // told at once, with no attempt, when to come back.
    let upstream = chaos("429+retry-after:7200").await;
    let g = Manual::start(&sole(&upstream)).await;
    let first = g.drive(false).await;
    assert_eq!(first.status, 429, "{}", first.text());
    let attempts = upstream.attempts("default");
    let reply = g.post(false).await.unwrap();
    assert_eq!(reply.status, 429, "{}", reply.text());
    assert_eq!(upstream.attempts("default"), attempts, "no attempt");
    let left = 7200 - g.time.elapsed().as_secs();
    assert_eq!(reply.header("retry-after"), left.to_string());
    assert_eq!(reply.header("x-should-retry"), "false");
    assert_eq!(reply.header("x-rebound-attempts"), "0");
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["rebound"]["reason"], "resting", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("until"), "{message}");
    assert!(!reply.text().contains(CANARY));
}

#[tokio::test]
async fn a_later_nearer_deadline_never_shortens_a_farther_one() {
    // S1: a 429 with `retry-after: 30`, then (through a request that probes it after a
    // manual wait) nothing shortens it; a farther one extends it.
    let upstream = chaos("429+retry-after:30, 429+retry-after:2").await;
    let g = Manual::start(&sole(&upstream)).await;
    let first = g.post(false);
    assert!(g.time.until_sleeping(1, LIMIT).await);
    assert_eq!(g.candidate("sole").await["remaining_ms"], 30_000);
    // A second request at the same moment rests (no attempt); the 2 s answer comes only
    // to the probe after 30 s, and then cools it for 2 s from then, which is later.
    let second = g.post(false);
    assert!(g.time.until_sleeping(2, LIMIT).await);
    assert_eq!(upstream.attempts("default"), 1);
    for _ in 0..30 {
        g.time.advance(Duration::from_secs(1));
        if upstream.attempts("default") > 1 {
            break;
        }
        assert!(g.time.until_sleeping(2, LIMIT).await);
    }
    assert!(g.time.until_sleeping(2, LIMIT).await);
    assert_eq!(upstream.attempts("default"), 2, "one probe after 30 s");
    let sole = g.candidate("sole").await;
    assert_eq!(sole["state"], "cooling");
    assert_eq!(sole["remaining_ms"], 2000, "{sole}");
    g.time.advance(Duration::from_secs(1));
    assert!(g.time.until_sleeping(2, LIMIT).await);
    g.time.advance(Duration::from_secs(1));
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(second.await.unwrap().status, 200);
}

#[tokio::test]
async fn jobs_and_live_requests_share_one_ledger() {
    // S1: a cooldown a live request learned makes a job rest with no attempt, its deadline
    // the ledger's; when the probe of a live request closes it, the job goes on.
    let upstream = chaos("429+retry-after:20").await;
    let g = Manual::start(&sole(&upstream)).await;
    let live = g.post(false);
    assert!(g.time.until_sleeping(1, LIMIT).await);
    let id = crate::jobs::submit(&g.server).await;
    let job = crate::jobs::until(&g.server, &id, "waiting").await;
    assert_eq!(job["pending_outcome"], "cooldown", "{job}");
    assert_eq!(job["attempts"].as_array().map(Vec::len), Some(0), "{job}");
    assert_eq!(upstream.attempts("default"), 1);
    let deadline = job["deadline_ms"].as_u64().unwrap();
    let now = (ORIGIN + g.time.elapsed().as_secs()) * 1000;
    assert_eq!(deadline - now, 20_000, "{job}");
    // The live request's countdown and the job's wait, to the deadline.
    for _ in 0..19 {
        g.time.advance(Duration::from_secs(1));
        assert!(g.time.until_sleeping(2, LIMIT).await);
    }
    assert_eq!(upstream.attempts("default"), 1);
    g.time.advance(Duration::from_secs(1));
    assert_eq!(live.await.unwrap().status, 200);
    let job = crate::jobs::until(&g.server, &id, "succeeded").await;
    assert_eq!(job["attempts"].as_array().map(Vec::len), Some(1), "{job}");
    // The 429, the live request's probe, the job's one attempt.
    assert_eq!(upstream.attempts("default"), 3);
}

const POOL_A: &str = "sk-proj-PoolKeyAlpha0123456789abcdef";
const POOL_B: &str = "sk-proj-PoolKeyBravo0123456789abcdef";

/// One candidate with a pool of two keys.
fn pooled(upstream: &Chaos) -> String {
    format!(
        "[[candidate]]\nid = \"pooled\"\nprotocol = \"openai\"\nbase_url = \"{}\"\napi_key_envs = [\"POOL_A\", \"POOL_B\"]\n\n{}",
        upstream.openai_base_url(),
        route(&["pooled"])
    )
}

#[tokio::test]
async fn a_job_whose_key_is_rate_limited_goes_on_with_the_next_key_at_once() {
    // S4 for durable jobs: the retry after key 1's 429 is on record with no wait, and key 2
    // answers it.
    let upstream = chaos("429+retry-after:20").await;
    let g = Manual::start_with(
        &pooled(&upstream),
        &[("POOL_A", POOL_A), ("POOL_B", POOL_B)],
    )
    .await;
    let id = crate::jobs::submit(&g.server).await;
    let job = crate::jobs::until(&g.server, &id, "succeeded").await;
    assert_eq!(job["attempts"].as_array().map(Vec::len), Some(2), "{job}");
    assert_eq!(
        g.time.elapsed(),
        Duration::ZERO,
        "the job waited for nothing"
    );
    let used: Vec<String> = upstream
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        used,
        [format!("Bearer {POOL_A}"), format!("Bearer {POOL_B}")]
    );
}

#[tokio::test]
async fn a_rate_limited_key_of_a_pool_rests_while_the_others_serve() {
    // S4: key 1 answers 429 with `retry-after: 20`; the retry goes to key 2 at once, and so
    // does every later request until key 1's deadline. No key appears in the ledger's page,
    // the metrics or the log.
    let upstream = chaos("429+retry-after:20").await;
    let config = pooled(&upstream);
    let g = Manual::start_with(&config, &[("POOL_A", POOL_A), ("POOL_B", POOL_B)]).await;
    for _ in 0..3 {
        let reply = g.post(false).await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    assert_eq!(g.time.elapsed(), Duration::ZERO, "no request waited");
    let used: Vec<String> = upstream
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap_or_default().to_owned())
        .collect();
    let a = format!("Bearer {POOL_A}");
    let b = format!("Bearer {POOL_B}");
    assert_eq!(
        used,
        [a.clone(), b.clone(), b.clone(), b],
        "key 1 once, then key 2"
    );
    let pooled = g.candidate("pooled").await;
    assert_eq!(pooled["state"], "closed", "{pooled}");
    assert_eq!(pooled["keys"][0]["state"], "cooling", "{pooled}");
    assert_eq!(pooled["keys"][0]["remaining_ms"], 20_000, "{pooled}");
    assert_eq!(pooled["keys"][1]["state"], "closed", "{pooled}");
    let page = g.health().await.to_string();
    let metrics = send(g.server.addr(), "GET", "/metrics", &[], "")
        .await
        .text();
    for text in [page, metrics, g.log.lines().join("\n")] {
        assert!(!text.contains(POOL_A) && !text.contains(POOL_B), "{text}");
        assert!(!text.contains("PoolKey"), "{text}");
    }
    // After its deadline key 1 serves again: its probe succeeds.
    g.time.advance(Duration::from_secs(20));
    let reply = g.post(false).await.unwrap();
    assert_eq!(reply.status, 200);
    let last = upstream
        .requests()
        .last()
        .unwrap()
        .header("authorization")
        .unwrap()
        .to_owned();
    assert_eq!(last, a);
    assert_eq!(g.candidate("pooled").await["keys"][0]["state"], "closed");
}

#[tokio::test]
async fn a_request_waiting_on_a_candidate_that_others_find_down_passes_it_over_at_once() {
    // S2: request A waits out its own backoff after a 503; request B's 503 opens the
    // circuit. A does not wait on a candidate now known to rest: the fallback serves it at
    // once, while B (whose own failure opened it) keeps its schedule.
    let primary = chaos("").await;
    let fallback = chaos("").await;
    primary.set_script("default", parse_script(&vec!["503"; 20].join(",")).unwrap());
    let config = format!(
        "[health]\ncircuit_after = 2\n\n{}policy = {{ transient = {{ retries = 5, initial_ms = 1000, cap_ms = 1000, exhausted = \"skip\" }} }}\n\n{}\n{}",
        candidate("primary", &primary),
        candidate("fallback", &fallback),
        route(&["primary", "fallback"])
    );
    let g = Manual::start(&config).await;
    let a = g.post(false);
    assert!(g.time.until_sleeping(1, LIMIT).await);
    let b = g.post(false);
    let reply = tokio::time::timeout(LIMIT, a)
        .await
        .expect("A still waits on a candidate known to rest")
        .unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-rebound-candidate"), "fallback");
    assert_eq!(reply.header("x-rebound-skipped"), "primary");
    assert_eq!(g.time.elapsed(), Duration::ZERO, "A waited no longer");
    assert_eq!(primary.attempts("default"), 2);
    assert!(!b.is_finished());
    assert_eq!(g.finish(b).await.status, 200);
}
