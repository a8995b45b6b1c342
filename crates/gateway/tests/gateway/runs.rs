//! Durable agent runs through the API with fake agent CLIs (`tests/agents/fake_agent.py` in the repository)
//! that replay what Claude Code and Codex CLI print: every branch of D4 for agents, each
//! with the exact invocations of each profile (fresh or resumed, which session). Waits run in
//! virtual time; a test waits on the run's event stream, never on the clock.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use rebound_core::Catalogue;
use rebound_gateway::{Gateway, Overrides, Server, load};
use rebound_runtime::{HttpClient, Timeouts, VirtualTime};
use rebound_store::runs::SqliteRunStore;
use serde_json::{Value, json};

/// The virtual clock's start: 2026-11-30T15:00:00Z.
const START: u64 = 1_796_050_800;

const BASE: &str = r#"
[[candidate]]
id = "openai"
protocol = "openai"
base_url = "http://127.0.0.1:9/v1"

[[route]]
id = "default"
models = ["*"]
candidates = ["openai"]
"#;

/// A hard wall within 5 hours is waited for; transient failures retry twice (1 s, 2 s);
/// both then skip to the next profile.
const POLICY: &str = r#"{ hard = { reset_wait_max_ms = 18000000, exhausted = "skip" }, transient = { retries = 2, initial_ms = 1000, cap_ms = 2000, exhausted = "skip" }, rate_limit = { retries = 0, exhausted = "skip" } }"#;

/// One test's fake agents: their plan, their call log, a working directory.
struct Agents {
    dir: PathBuf,
}

impl Agents {
    fn new(plan: &Value) -> Agents {
        let dir = std::env::temp_dir().join(format!("rebound-runs-{:016x}", fastrand::u64(..)));
        std::fs::create_dir_all(dir.join("work")).unwrap();
        std::fs::write(dir.join("plan.json"), plan.to_string()).unwrap();
        Agents { dir }
    }

    fn script() -> String {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/agents/fake_agent.py")
            .display()
            .to_string()
    }

    /// A profile `id` replaying plan entry `id` in `output` format.
    fn profile(&self, id: &str, output: &str, policy: &str) -> String {
        let (log, plan) = (self.dir.join("calls.log"), self.dir.join("plan.json"));
        let head = json!([
            Self::script(),
            id,
            log.display().to_string(),
            plan.display().to_string()
        ]);
        let head = head
            .as_array()
            .unwrap()
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let resume = if output == "text" {
            String::new()
        } else {
            format!(r#"resume_args = [{head}, "--resume", "{{session}}", "{{prompt}}"]"#)
        };
        format!(
            r#"
[[agent]]
id = "{id}"
command = "python3"
args = [{head}, "{{prompt}}"]
{resume}
output = "{output}"
policy = {policy}
"#
        )
    }

    /// Every call so far: (profile, mode, session).
    fn calls(&self) -> Vec<(String, String, String)> {
        let Ok(text) = std::fs::read_to_string(self.dir.join("calls.log")) else {
            return Vec::new();
        };
        text.lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                let s = |k: &str| v[k].as_str().unwrap().to_owned();
                (s("name"), s("mode"), s("session"))
            })
            .collect()
    }

    fn cwd(&self) -> String {
        self.dir.join("work").display().to_string()
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn call(name: &str, mode: &str, session: &str) -> (String, String, String) {
    (name.into(), mode.into(), session.into())
}

// ── What the real CLIs print ────────────────────────────────────────────────────────────────

fn claude_init() -> String {
    json!({"type": "system", "subtype": "init", "session_id": "{session}", "tools": ["Bash"]})
        .to_string()
}

fn claude_text(text: &str) -> String {
    json!({"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}, "session_id": "{session}"}).to_string()
}

fn claude_tool_use() -> String {
    json!({"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "git commit -am wip"}}]}, "session_id": "{session}"}).to_string()
}

fn claude_result(is_error: bool, text: &str) -> String {
    json!({"type": "result", "subtype": "success", "is_error": is_error, "result": text, "session_id": "{session}"}).to_string()
}

fn claude_ok() -> Value {
    json!({"stdout": [claude_init(), claude_text("done"), claude_result(false, "done")]})
}

/// A Claude Code run that stops on `text` before acting, exit 1.
fn claude_fails(text: &str) -> Value {
    json!({"stdout": [claude_init(), claude_result(true, text)], "exit": 1})
}

fn codex_ok() -> Value {
    json!({"stdout": [
        json!({"type": "thread.started", "thread_id": "{session}"}).to_string(),
        json!({"type": "turn.started"}).to_string(),
        json!({"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": "codex done"}}).to_string(),
        json!({"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}}).to_string(),
    ]})
}

fn codex_fails(text: &str) -> Value {
    json!({"stdout": [
        json!({"type": "thread.started", "thread_id": "{session}"}).to_string(),
        json!({"type": "turn.started"}).to_string(),
        json!({"type": "error", "message": text}).to_string(),
        json!({"type": "turn.failed", "error": {"message": text}}).to_string(),
    ], "exit": 1})
}

// ── The gateway ─────────────────────────────────────────────────────────────────────────────

async fn gateway(profiles: &str, route: &str) -> (Server, Arc<VirtualTime>) {
    let text = format!("{BASE}\n{profiles}\n{route}");
    let config = load("test.toml", &text, &Overrides::default(), &[("X", "y")]).unwrap();
    let time = VirtualTime::starting_at(UNIX_EPOCH + Duration::from_secs(START));
    let gateway = Gateway::new(
        config,
        HttpClient::new(Timeouts::default()).unwrap(),
        Arc::new(Catalogue::shipped().unwrap()),
    )
    .with_runs(Arc::new(SqliteRunStore::in_memory().unwrap()))
    .with_time(time.clone(), time.clone());
    let server = Server::start(gateway, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    (server, time)
}

async fn http(server: &Server, method: &str, path: &str, body: &str) -> (u16, Bytes) {
    let client = HttpClient::new(Timeouts {
        idle: Duration::from_secs(30),
        ..Timeouts::default()
    })
    .unwrap();
    let request = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", server.addr()))
        .header("content-type", "application/json")
        .body(Bytes::from(body.to_owned()))
        .unwrap();
    let answer = async {
        let response = client.send(request).await.unwrap();
        let status = response.status().as_u16();
        (
            status,
            response.into_body().collect().await.unwrap().to_bytes(),
        )
    };
    tokio::time::timeout(Duration::from_secs(60), answer)
        .await
        .expect("the gateway answered within a minute")
}

/// Submits a streamed run and reads its events to the end: the events, and the run as
/// `GET /v1/rebound/runs/{id}` shows it then.
async fn run(server: &Server, agents: &Agents) -> (Vec<Value>, Value) {
    let body = json!({"prompt": "fix the build", "cwd": agents.cwd(), "stream": true});
    let (status, bytes) = http(server, "POST", "/v1/rebound/runs", &body.to_string()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let events: Vec<Value> = String::from_utf8_lossy(&bytes)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let id = events[0]["id"].as_str().unwrap().to_owned();
    let (status, bytes) = http(server, "GET", &format!("/v1/rebound/runs/{id}"), "").await;
    assert_eq!(status, 200);
    (events, serde_json::from_slice(&bytes).unwrap())
}

fn states(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "state")
        .map(|e| e["state"].as_str().unwrap().to_owned())
        .collect()
}

fn two(first: &str, second: &str, handoff: bool) -> String {
    format!(
        "[[agent_route]]\nid = \"agents\"\nagents = [\"{first}\", \"{second}\"]\nhandoff = {handoff}\n"
    )
}

/// The output format each fake agent prints.
fn output(id: &str) -> &'static str {
    if id == "codex" {
        "codex-json"
    } else {
        "claude-stream-json"
    }
}

/// A gateway with two profiles, each `(id, policy)`, on one route in that order.
async fn pair(
    agents: &Agents,
    first: (&str, &str),
    second: (&str, &str),
    handoff: bool,
) -> (Server, Arc<VirtualTime>) {
    let profiles = agents.profile(first.0, output(first.0), first.1)
        + &agents.profile(second.0, output(second.0), second.1);
    gateway(&profiles, &two(first.0, second.0, handoff)).await
}

// ── The branches ────────────────────────────────────────────────────────────────────────────

/// C9, D2, D4: a usage limit whose reset the CLI names is waited for, once, and the same
/// session is resumed after it; the other profile never runs.
#[tokio::test]
async fn a_usage_limit_with_a_reset_waits_then_resumes_the_same_session() {
    let reset = START + 7200;
    let agents = Agents::new(&json!({
        "claude": [claude_fails(&format!("Claude AI usage limit reached|{reset}")), claude_ok()],
        "codex": [codex_ok()],
    }));
    let (server, time) = pair(&agents, ("claude", POLICY), ("codex", POLICY), false).await;
    let (events, run) = run(&server, &agents).await;
    assert_eq!(
        agents.calls(),
        vec![
            call("claude", "fresh", "sess-claude-1"),
            call("claude", "resume", "sess-claude-1"),
        ]
    );
    assert_eq!(time.waits(), vec![Duration::from_secs(7200)]);
    assert!(
        states(&events).contains(&"waiting".to_owned()),
        "{events:?}"
    );
    let waiting = events.iter().find(|e| e["state"] == "waiting").unwrap();
    assert_eq!(waiting["deadline_ms"], (reset * 1000));
    assert_eq!(waiting["pending_outcome"], "resume");
    assert_eq!(
        waiting["classification"]["rule_id"],
        "anthropic.subscription_limit_epoch"
    );
    assert_eq!(run["state"], "succeeded");
    assert_eq!(run["result"], "done");
    assert_eq!(
        run["session"],
        json!({"profile": "claude", "id": "sess-claude-1"})
    );
    let invocations = run["invocations"].as_array().unwrap();
    assert_eq!(invocations.len(), 2);
    assert_eq!(invocations[0]["code"], "quota_exhausted");
    assert_eq!(invocations[0]["exit_code"], 1);
    assert_eq!(invocations[1]["mode"], "resume");
    // The caller saw the agent's own output, streamed.
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "output" && e["line"].as_str().unwrap().contains("\"done\""))
    );
    server.shutdown().await;
}

/// C9, D2: Claude Code names its plan's reset as a time of day in the user's own zone; the run
/// waits until that moment there (11am in Los Angeles is 19:00 UTC on this November day, four
/// hours after the start) and resumes the same session. A zone abbreviation names no moment:
/// no wait, the next profile.
#[tokio::test]
async fn a_usage_limit_reset_in_a_named_zone_is_waited_for_and_an_abbreviation_is_not() {
    let agents = Agents::new(&json!({
        "claude": [claude_fails("You've hit your limit · resets 11am (America/Los_Angeles)"), claude_ok()],
        "codex": [codex_ok()],
    }));
    let (server, time) = pair(&agents, ("claude", POLICY), ("codex", POLICY), false).await;
    let (events, record) = run(&server, &agents).await;
    assert_eq!(
        agents.calls(),
        vec![
            call("claude", "fresh", "sess-claude-1"),
            call("claude", "resume", "sess-claude-1"),
        ]
    );
    assert_eq!(time.waits(), vec![Duration::from_secs(4 * 3600)]);
    let waiting = events.iter().find(|e| e["state"] == "waiting").unwrap();
    assert_eq!(waiting["deadline_ms"], (START + 4 * 3600) * 1000);
    assert_eq!(
        waiting["classification"]["rule_id"],
        "anthropic.subscription_limit_clock"
    );
    assert_eq!(record["state"], "succeeded");
    server.shutdown().await;

    let agents = Agents::new(&json!({
        "claude": [claude_fails("You've hit your limit · resets 11am (PST)")],
        "codex": [codex_ok()],
    }));
    let (server, time) = pair(&agents, ("claude", POLICY), ("codex", POLICY), false).await;
    let (_, run) = run(&server, &agents).await;
    assert_eq!(
        agents.calls(),
        vec![
            call("claude", "fresh", "sess-claude-1"),
            call("codex", "fresh", "sess-codex-1"),
        ]
    );
    assert!(time.waits().is_empty());
    assert_eq!(run["state"], "succeeded");
    server.shutdown().await;
}

/// C9, D2: a reset beyond the profile's maximum wait skips to the next profile, afresh —
/// nothing had acted.
#[tokio::test]
async fn a_reset_beyond_the_maximum_switches_to_the_next_profile() {
    let agents = Agents::new(&json!({
        "codex": [codex_fails("You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try again in 4 days 2 hours 46 minutes.")],
        "claude": [claude_ok()],
    }));
    let (server, time) = pair(&agents, ("codex", POLICY), ("claude", POLICY), false).await;
    let (_, run) = run(&server, &agents).await;
    assert_eq!(
        agents.calls(),
        vec![
            call("codex", "fresh", "sess-codex-1"),
            call("claude", "fresh", "sess-claude-1")
        ]
    );
    assert!(time.waits().is_empty());
    assert_eq!(run["state"], "succeeded");
    assert_eq!(run["invocations"][0]["rule_id"], "agent.codex_usage_limit");
    server.shutdown().await;
}

/// C3, D1: an overload retries the same profile on its backoff — resuming the session it
/// reported — and after the budget skips to the next.
#[tokio::test]
async fn an_overload_retries_the_same_session_then_switches() {
    let overload = r#"API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let agents = Agents::new(&json!({
        "claude": [claude_fails(overload)],
        "codex": [codex_ok()],
    }));
    let (server, time) = pair(&agents, ("claude", POLICY), ("codex", POLICY), false).await;
    let (_, run) = run(&server, &agents).await;
    assert_eq!(
        agents.calls(),
        vec![
            call("claude", "fresh", "sess-claude-1"),
            call("claude", "resume", "sess-claude-1"),
            call("claude", "resume", "sess-claude-1"),
            call("codex", "fresh", "sess-codex-1"),
        ]
    );
    assert_eq!(
        time.waits(),
        vec![Duration::from_secs(1), Duration::from_secs(2)]
    );
    assert_eq!(run["state"], "succeeded");
    assert_eq!(run["result"], "codex done");
    assert_eq!(
        run["session"],
        json!({"profile": "codex", "id": "sess-codex-1"})
    );
    server.shutdown().await;
}

/// C3: an auth failure is hard without a reset: no wait, no retry; the policy's `skip` moves
/// on, its `stop` fails the run.
#[tokio::test]
async fn an_auth_failure_skips_or_stops_by_policy_without_retrying() {
    let plan = json!({
        "claude": [claude_fails("Invalid API key · Please run /login")],
        "codex": [codex_ok()],
    });
    let agents = Agents::new(&plan);
    let (server, time) = pair(&agents, ("claude", POLICY), ("codex", POLICY), false).await;
    let (_, run_skip) = run(&server, &agents).await;
    assert_eq!(
        agents.calls(),
        vec![
            call("claude", "fresh", "sess-claude-1"),
            call("codex", "fresh", "sess-codex-1")
        ]
    );
    assert!(time.waits().is_empty());
    assert_eq!(run_skip["state"], "succeeded");
    assert_eq!(
        run_skip["invocations"][0]["rule_id"],
        "agent.login_required"
    );
    server.shutdown().await;

    let agents = Agents::new(&plan);
    let stop = r#"{ hard = { exhausted = "stop" } }"#;
    let (server, _) = pair(&agents, ("claude", stop), ("codex", POLICY), false).await;
    let (events, run) = run(&server, &agents).await;
    assert_eq!(
        agents.calls(),
        vec![call("claude", "fresh", "sess-claude-1")]
    );
    assert_eq!(run["state"], "failed");
    assert_eq!(run["error"]["reason"], "exhausted");
    assert_eq!(states(&events).last().unwrap(), "failed");
    server.shutdown().await;
}

/// D4: a crash after a tool call resumes the same session, never a fresh one.
#[tokio::test]
async fn a_crash_after_a_tool_effect_resumes_the_session() {
    let crash = json!({
        "stdout": [claude_init(), claude_tool_use()],
        "stderr": ["Error: read ECONNRESET"],
        "exit": 1,
    });
    let agents = Agents::new(&json!({"claude": [crash, claude_ok()], "codex": [codex_ok()]}));
    let (server, time) = pair(&agents, ("claude", POLICY), ("codex", POLICY), false).await;
    let (_, run) = run(&server, &agents).await;
    assert_eq!(
        agents.calls(),
        vec![
            call("claude", "fresh", "sess-claude-1"),
            call("claude", "resume", "sess-claude-1")
        ]
    );
    assert_eq!(time.waits(), vec![Duration::from_secs(1)]);
    assert_eq!(run["state"], "succeeded");
    assert_eq!(run["acted"], true);
    assert_eq!(run["invocations"][0]["acted"], true);
    assert_eq!(run["invocations"][0]["code"], "connection_reset");
    server.shutdown().await;
}

/// D4: a run that acted is not handed to another profile unless the route allows it: it
/// waits for a human, with the evidence; with `handoff = true` the next profile starts.
#[tokio::test]
async fn a_run_that_acted_switches_only_when_the_route_allows_a_handoff() {
    let crash = json!({
        "stdout": [claude_init(), claude_tool_use()],
        "stderr": ["Error: read ECONNRESET"],
        "exit": 1,
    });
    let no_retry = r#"{ transient = { retries = 0, exhausted = "skip" } }"#;
    let plan = json!({"claude": [crash], "codex": [codex_ok()]});

    let agents = Agents::new(&plan);
    let (server, _) = pair(&agents, ("claude", no_retry), ("codex", POLICY), false).await;
    let (_, run_held) = run(&server, &agents).await;
    assert_eq!(
        agents.calls(),
        vec![call("claude", "fresh", "sess-claude-1")]
    );
    assert_eq!(run_held["state"], "action_required");
    assert_eq!(run_held["error"]["reason"], "acted_without_handoff");
    assert_eq!(run_held["evidence"]["acted"], true);
    assert!(
        run_held["evidence"]["text"]
            .as_str()
            .unwrap()
            .contains("ECONNRESET")
    );
    server.shutdown().await;

    let agents = Agents::new(&plan);
    let (server, _) = pair(&agents, ("claude", no_retry), ("codex", POLICY), true).await;
    let (_, run) = run(&server, &agents).await;
    assert_eq!(
        agents.calls(),
        vec![
            call("claude", "fresh", "sess-claude-1"),
            call("codex", "fresh", "sess-codex-1")
        ]
    );
    assert_eq!(run["state"], "succeeded");
    server.shutdown().await;
}

/// D4: an agent that acted and reported no session (plain text output) cannot be resumed;
/// neither a retry nor a switch is safe.
#[tokio::test]
async fn an_effect_without_a_session_to_resume_waits_for_a_human() {
    let agents = Agents::new(&json!({
        "plain": [{"stdout": [claude_tool_use()], "stderr": ["Error: read ECONNRESET"], "exit": 1}],
        "codex": [codex_ok()],
    }));
    let plain = agents
        .profile("plain", "claude-stream-json", POLICY)
        .replace("resume_args", "# resume_args");
    let profiles = plain + &agents.profile("codex", "codex-json", POLICY);
    let (server, _) = gateway(&profiles, &two("plain", "codex", false)).await;
    let (_, run) = run(&server, &agents).await;
    assert_eq!(agents.calls(), vec![call("plain", "fresh", "sess-plain-1")]);
    assert_eq!(run["state"], "action_required");
    assert_eq!(run["error"]["reason"], "unsafe");
    server.shutdown().await;
}

/// C4: text the catalogue does not know fails closed; C3: a context overflow is terminal.
#[tokio::test]
async fn unknown_text_waits_for_a_human_and_a_context_overflow_fails() {
    for (text, state, reason) in [
        (
            "Segmentation fault in the frobnicator",
            "action_required",
            "unclassified",
        ),
        ("Prompt is too long", "failed", "terminal"),
    ] {
        let agents = Agents::new(&json!({"claude": [claude_fails(text)], "codex": [codex_ok()]}));
        let (server, time) = pair(&agents, ("claude", POLICY), ("codex", POLICY), false).await;
        let (_, run) = run(&server, &agents).await;
        assert_eq!(
            agents.calls(),
            vec![call("claude", "fresh", "sess-claude-1")],
            "{text}"
        );
        assert!(time.waits().is_empty());
        assert_eq!(run["state"], state, "{text}");
        assert_eq!(run["error"]["reason"], reason, "{text}: {run}");
        server.shutdown().await;
    }
}

/// Bad submissions are refused with the field named.
#[tokio::test]
async fn bad_runs_are_refused() {
    let agents = Agents::new(&json!({"claude": [claude_ok()]}));
    let profiles = agents.profile("claude", "claude-stream-json", POLICY);
    let route = "[[agent_route]]\nid = \"agents\"\nagents = [\"claude\"]\n";
    let (server, _) = gateway(&profiles, route).await;
    for (body, want) in [
        (json!({"prompt": " "}), "`prompt` is empty"),
        (
            json!({"prompt": "x", "route": "nope"}),
            "no agent route `nope`",
        ),
        (json!({"prompt": "x", "cwd": "/nonexistent/dir"}), "`cwd`"),
        (
            json!({"prompt": "x", "model": "y"}),
            "unknown field `model`",
        ),
    ] {
        let (status, bytes) = http(&server, "POST", "/v1/rebound/runs", &body.to_string()).await;
        assert_eq!(status, 400);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains(want), "{text}");
    }
    let (status, _) = http(&server, "GET", "/v1/rebound/runs/run_nope", "").await;
    assert_eq!(status, 404);
    assert!(agents.calls().is_empty());
    server.shutdown().await;
}

/// Secrets never leave in a run's output, evidence or events: a profile's key, by value, and
/// any key by its shape.
#[tokio::test]
async fn a_key_the_agent_prints_never_reaches_the_run_record_or_its_events() {
    let by_value = "profile-secret-value-7f3a9c";
    let by_shape = "sk-ant-api03-RunCanary0123456789abcdefghij";
    let agents = Agents::new(&json!({
        "claude": [{"stdout": [claude_init(), claude_result(true, &format!("Invalid API key · Please run /login ({by_shape})"))], "stderr": [format!("using token {by_value}")], "exit": 1}],
    }));
    let profiles = agents
        .profile(
            "claude",
            "claude-stream-json",
            r#"{ hard = { exhausted = "stop" } }"#,
        )
        .replace(
            "output = ",
            &format!("env = {{ AGENT_TOKEN = \"{by_value}\" }}\noutput = "),
        );
    let route = "[[agent_route]]\nid = \"agents\"\nagents = [\"claude\"]\n";
    let (server, _) = gateway(&profiles, route).await;
    let (events, run) = run(&server, &agents).await;
    assert_eq!(run["state"], "failed");
    assert_eq!(run["invocations"][0]["rule_id"], "agent.login_required");
    let seen = format!("{events:?}\n{run}");
    assert!(
        !seen.contains(by_value) && !seen.contains(by_shape),
        "{seen}"
    );
    assert!(seen.contains("using token [redacted]"), "{seen}");
    server.shutdown().await;
}
