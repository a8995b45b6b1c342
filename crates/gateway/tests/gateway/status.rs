//! The status page (#20, G5, G6, R3, S6) over real sockets: its page and event stream behind
//! the gateway key or the cookie its login sets, its job actions guarded against cross-site
//! requests, and its snapshots showing an outage, a wait while it lasts, and the redacted
//! failure. Recovery time is moved by hand ([`ManualTime`]); the stream's own cadence is the
//! wall clock's, and every read of it is bounded.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::BodyExt;
use rebound_chaos::Chaos;
use rebound_core::Catalogue;
use rebound_gateway::{Gateway, Overrides, Server, load};
use rebound_runtime::{HttpClient, ManualTime};
use rebound_store::SqliteStore;
use serde_json::{Value, json};

use crate::{CANARY, Reply, chaos, openai_body, send, timeouts};

/// The gateway key of these tests.
const GW: &str = "gw-status-key-3141";

/// Bounds only a broken build.
const LIMIT: Duration = Duration::from_secs(10);

struct Page {
    server: Server,
    time: Arc<ManualTime>,
}

impl Page {
    async fn start(config: &str) -> Page {
        let config = load(
            "test.toml",
            &format!("gateway_key_envs = [\"GW_KEY\"]\n{config}"),
            &Overrides::default(),
            &[("CANARY_KEY", CANARY), ("GW_KEY", GW)],
        )
        .unwrap();
        let time = ManualTime::starting_at(UNIX_EPOCH + Duration::from_secs(1_796_050_800));
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
        Page { server, time }
    }

    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        send(self.server.addr(), "GET", path, headers, "").await
    }

    /// Reads the event stream with `headers` until a snapshot satisfies `wanted`; that one.
    async fn snapshot_until(
        &self,
        headers: &[(&str, &str)],
        wanted: impl Fn(&Value) -> bool,
    ) -> Value {
        let client = HttpClient::new(timeouts()).unwrap();
        let mut request = http::Request::get(format!(
            "http://{}/v1/rebound/status/events",
            self.server.addr()
        ));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = client
            .send(request.body(Bytes::new()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let mut body = response.into_body();
        let mut text = String::new();
        let mut seen = Vec::new();
        let found = tokio::time::timeout(LIMIT, async {
            while let Some(Ok(frame)) = body.frame().await {
                if let Ok(data) = frame.into_data() {
                    text.push_str(&String::from_utf8_lossy(&data));
                }
                while let Some(end) = text.find("\n\n") {
                    let event: String = text.drain(..end + 2).collect();
                    let data = event
                        .strip_prefix("event: snapshot\ndata: ")
                        .unwrap_or_else(|| panic!("not a snapshot event: {event:?}"));
                    assert!(!data.contains(CANARY) && !data.contains(GW), "{data}");
                    let snapshot: Value = serde_json::from_str(data.trim_end()).unwrap();
                    if wanted(&snapshot) {
                        return Some(snapshot);
                    }
                    seen.push(snapshot);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(snapshot)) => snapshot,
            _ => panic!("no snapshot as wanted; the last seen: {:?}", seen.last()),
        }
    }
}

fn sole(upstream: &Chaos) -> String {
    format!(
        "[[candidate]]\nid = \"sole\"\nprotocol = \"openai\"\nbase_url = \"{}\"\napi_key_env = \"CANARY_KEY\"\n\n[[route]]\nid = \"main\"\nmodels = [\"*\"]\ncandidates = [\"sole\"]\n",
        upstream.openai_base_url()
    )
}

const BEARER: &str = "Bearer gw-status-key-3141";

#[tokio::test]
async fn the_page_and_its_stream_need_the_gateway_key_or_the_cookie_its_login_sets() {
    // G5: a browser cannot send `authorization` when it navigates; the login turns the key
    // into an HttpOnly, SameSite=Strict cookie that the page and its stream accept.
    let upstream = chaos("ok").await;
    let page = Page::start(&sole(&upstream)).await;
    for path in ["/", "/status"] {
        let refused = page.get(path, &[]).await;
        assert_eq!(refused.status, 401, "{path}");
        assert!(
            refused.text().contains("action=\"/status/login\""),
            "{}",
            refused.text()
        );
        assert!(!refused.text().contains(GW));
        let opened = page.get(path, &[("authorization", BEARER)]).await;
        assert_eq!(opened.status, 200, "{path}");
        assert!(opened.header("content-type").starts_with("text/html"));
        assert!(
            opened
                .header("content-security-policy")
                .contains("default-src 'none'")
        );
        assert!(
            opened
                .header("content-security-policy")
                .contains("frame-ancestors 'none'")
        );
        assert!(opened.text().contains("src=\"/status/page.js\""));
    }
    let events = page.get("/v1/rebound/status/events", &[]).await;
    assert_eq!(events.status, 401);
    let wrong = page.get("/status?key=gw-status-key-314", &[]).await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_empty());

    // `?key=` is exchanged for the cookie and a page address that holds no key.
    let exchanged = page.get("/status?key=gw-status-key-3141", &[]).await;
    assert_eq!(exchanged.status, 303);
    assert_eq!(exchanged.header("location"), "/status");
    let cookie = exchanged.header("set-cookie");
    assert!(
        cookie.starts_with("rebound_key=gw%2Dstatus%2Dkey%2D3141;")
            && cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict")
            && cookie.contains("Path=/"),
        "{cookie}"
    );
    let jar = cookie.split(';').next().unwrap().to_owned();
    let opened = page.get("/status", &[("cookie", &jar)]).await;
    assert_eq!(opened.status, 200);
    let first = page.snapshot_until(&[("cookie", &jar)], |_| true).await;
    assert_eq!(first["health"]["candidates"][0]["id"], "sole");
    assert_eq!(first["routes"][0]["id"], "main");
    // The cookie opens the page only: the API still wants the key itself.
    let api = page.get("/v1/rebound/health", &[("cookie", &jar)]).await;
    assert_eq!(api.status, 401);

    // The login form does the same; a cross-site one is refused.
    let login = |headers: Vec<(&'static str, &'static str)>, form: &'static str| {
        let addr = page.server.addr();
        async move {
            let mut all = vec![("content-type", "application/x-www-form-urlencoded")];
            all.extend(headers);
            send(addr, "POST", "/status/login", &all, form).await
        }
    };
    let signed_in = login(
        vec![("sec-fetch-site", "same-origin")],
        "key=gw-status-key-3141",
    )
    .await;
    assert_eq!(signed_in.status, 303);
    assert!(signed_in.header("set-cookie").starts_with("rebound_key="));
    let forged = login(
        vec![("sec-fetch-site", "cross-site")],
        "key=gw-status-key-3141",
    )
    .await;
    assert_eq!(forged.status, 403);
    assert!(forged.header("set-cookie").is_empty());
    let bad = login(vec![], "key=nope").await;
    assert_eq!(bad.status, 401);
    assert!(bad.text().contains("not a gateway key"));
}

#[tokio::test]
async fn a_page_action_needs_its_header_and_the_page_origin_and_is_fenced_like_the_api() {
    // P2 through the page: a job waiting for an announced reset is skipped from the page; the
    // same request without `x-rebound-action`, or from another site, changes nothing.
    let first = chaos("429+retry-after:300").await;
    let second = chaos("ok").await;
    let config = format!(
        "[[candidate]]\nid = \"first\"\nprotocol = \"openai\"\nbase_url = \"{}\"\npolicy = {{ rate_limit = {{ retries = 0, reset_wait_max_ms = 600000, exhausted = \"skip\" }} }}\n\n[[candidate]]\nid = \"second\"\nprotocol = \"openai\"\nbase_url = \"{}\"\n\n[[route]]\nid = \"jobs\"\nmodels = [\"*\"]\ncandidates = [\"first\", \"second\"]\n",
        first.openai_base_url(),
        second.openai_base_url()
    );
    let page = Page::start(&config).await;
    let submitted = send(
        page.server.addr(),
        "POST",
        "/v1/rebound/jobs",
        &[("content-type", "application/json"), ("authorization", BEARER)],
        &json!({"protocol": "openai", "request": {"model": "gpt-x", "messages": [{"role": "user", "content": "secret prompt text"}]}}).to_string(),
    )
    .await;
    assert_eq!(submitted.status, 202, "{}", submitted.text());
    let id = serde_json::from_slice::<Value>(&submitted.body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let auth = [("authorization", BEARER)];
    let waiting = page
        .snapshot_until(&auth, |s| s["jobs"]["list"][0]["state"] == "waiting")
        .await;
    let job = &waiting["jobs"]["list"][0];
    assert_eq!(job["id"], id.as_str());
    assert_eq!(job["pending_outcome"], "reset_wait");
    let api = page
        .get(
            &format!("/v1/rebound/jobs/{id}"),
            &[("authorization", BEARER)],
        )
        .await;
    let api: Value = serde_json::from_slice(&api.body).unwrap();
    assert_eq!(job["attempts"], api["turn"]["attempts"], "{api}");
    assert_eq!(job["deadline_ms"], 1_796_050_800_000_u64 + 300_000);
    assert!(
        !waiting.to_string().contains("secret prompt text"),
        "{waiting}"
    );
    let generation = job["generation"].as_u64().unwrap();

    let path = format!("/v1/rebound/status/jobs/{id}/skip");
    let body = json!({"generation": generation}).to_string();
    let act = |headers: Vec<(&'static str, &'static str)>| {
        let (addr, path, body) = (page.server.addr(), path.clone(), body.clone());
        async move {
            let mut all = vec![("content-type", "application/json")];
            all.extend(headers);
            send(addr, "POST", &path, &all, &body).await
        }
    };
    let unkeyed = act(vec![("x-rebound-action", "1")]).await;
    assert_eq!(unkeyed.status, 401, "{}", unkeyed.text());
    let no_header = act(vec![("authorization", BEARER)]).await;
    assert_eq!(no_header.status, 403, "{}", no_header.text());
    assert!(no_header.text().contains("x-rebound-action"));
    let cross_site = act(vec![
        ("authorization", BEARER),
        ("x-rebound-action", "1"),
        ("sec-fetch-site", "cross-site"),
    ])
    .await;
    assert_eq!(cross_site.status, 403, "{}", cross_site.text());
    let other_origin = act(vec![
        ("authorization", BEARER),
        ("x-rebound-action", "1"),
        ("origin", "https://elsewhere.example"),
    ])
    .await;
    assert_eq!(other_origin.status, 403, "{}", other_origin.text());
    let unchanged = page.get(&format!("/v1/rebound/jobs/{id}"), &auth).await;
    let unchanged: Value = serde_json::from_slice(&unchanged.body).unwrap();
    assert_eq!(
        unchanged["generation"], generation,
        "a refused action moved the job"
    );

    let cookie = "rebound_key=gw-status-key-3141";
    let skipped = act(vec![
        ("cookie", cookie),
        ("x-rebound-action", "1"),
        ("sec-fetch-site", "same-origin"),
    ])
    .await;
    assert_eq!(skipped.status, 200, "{}", skipped.text());
    let done = page
        .snapshot_until(&[("cookie", cookie)], |s| {
            s["jobs"]["list"][0]["state"] == "succeeded"
        })
        .await;
    assert_eq!(done["jobs"]["list"][0]["candidate"], "second");
    assert_eq!(second.attempts("default"), 1);
    // The same skip again is stale: fenced by generation (P2).
    let stale = act(vec![("cookie", cookie), ("x-rebound-action", "1")]).await;
    assert_eq!(stale.status, 409, "{}", stale.text());
}

#[tokio::test]
async fn the_stream_shows_the_outage_the_wait_while_it_lasts_and_the_failure_redacted() {
    // S6, R3, G6: a 503 with `retry-after: 5` that echoes the provider key; while the request
    // waits, the candidate cools down with its deadline and rule, the wait is listed with its
    // countdown text, and the failure is kept with its evidence redacted (S4).
    let upstream = chaos("503+retry-after:5+echo-key, ok").await;
    let page = Page::start(&sole(&upstream)).await;
    let auth = [("authorization", BEARER)];
    let addr = page.server.addr();
    let request = tokio::spawn(async move {
        send(
            addr,
            "POST",
            "/v1/chat/completions",
            &[
                ("content-type", "application/json"),
                ("authorization", BEARER),
            ],
            &openai_body(false),
        )
        .await
    });
    assert!(
        page.time.until_sleeping(1, LIMIT).await,
        "the request never waited"
    );
    let during = page
        .snapshot_until(&auth, |s| {
            s["waiting"].as_array().is_some_and(|w| !w.is_empty())
        })
        .await;
    let candidate = &during["health"]["candidates"][0];
    assert_eq!(candidate["id"], "sole");
    assert_eq!(candidate["state"], "cooling", "{during}");
    assert_eq!(candidate["until_ms"], 1_796_050_805_000_u64);
    assert_eq!(candidate["remaining_ms"], 5_000);
    assert!(
        candidate["rule_id"].as_str().is_some_and(|r| !r.is_empty()),
        "{candidate}"
    );
    let wait = &during["waiting"][0];
    assert_eq!(wait["route"], "main");
    assert_eq!(wait["candidate"], "sole");
    assert_eq!(wait["remaining_ms"], 5_000);
    assert!(
        wait["text"]
            .as_str()
            .unwrap()
            .starts_with("Retrying in 5s · attempt 1"),
        "{wait}"
    );
    let failure = &during["failures"][0];
    assert_eq!(failure["status"], 503);
    assert_eq!(failure["candidate"], "sole");
    assert_eq!(failure["class"], "transient");
    let excerpt = failure["excerpt"].as_str().unwrap();
    assert!(
        !excerpt.is_empty() && !excerpt.contains(CANARY),
        "{excerpt}"
    );
    assert_eq!(
        during["wait_counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .sum::<u64>(),
        1
    );
    let classes = &during["attempts_per_minute"][0]["counts"];
    assert_eq!(classes["transient"], 1, "{during}");

    // The countdown sleeps a second at a time (R3): move the clock to each step's end.
    let mut request = request;
    let reply = loop {
        tokio::select! {
            reply = &mut request => break reply.unwrap(),
            reached = page.time.until_sleeping(1, LIMIT) => {
                assert!(reached, "the request neither ended nor waited");
                page.time.advance(page.time.next_wake().unwrap());
            }
        }
    };
    assert_eq!(reply.status, 200, "{}", reply.text());
    let after = page
        .snapshot_until(&auth, |s| {
            s["waiting"].as_array().is_some_and(Vec::is_empty)
        })
        .await;
    assert_eq!(
        after["health"]["candidates"][0]["state"], "closed",
        "{after}"
    );
    assert_eq!(
        after["attempts_per_minute"][0]["counts"]["ok"], 1,
        "{after}"
    );
    assert_eq!(after["failures"].as_array().unwrap().len(), 1);
}
