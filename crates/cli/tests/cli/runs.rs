//! Durable agent runs across a crash (P1, P3): SIGKILL `rebound serve` while a run waits for
//! a usage reset; the restarted gateway waits out the rest of the persisted deadline and
//! resumes the agent's session exactly once. The agent is the fake CLI of
//! `tests/agents/fake_agent.py`, replaying Codex's `exec --json` output.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::http;

/// `rebound serve`, its address, and its banner.
struct Serve(Child, String, Vec<String>);

impl Drop for Serve {
    fn drop(&mut self) {
        // SIGKILL: nothing of the gateway runs after it.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(config: &Path) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut banner = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let done = line.contains("agent runs");
        banner.push(line);
        if done {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let addr = banner[0].trim().rsplit(' ').next().unwrap().to_owned();
    Serve(child, addr, banner)
}

fn body_of(response: &str) -> Value {
    serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap_or("null")).unwrap_or(Value::Null)
}

fn get(addr: &str, path: &str) -> Value {
    body_of(&http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"),
    ))
}

/// Looks at the run until it is in `state`, for at most `within`.
fn wait_for(addr: &str, id: &str, state: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let run = get(addr, &format!("/v1/rebound/runs/{id}"));
        if run["state"] == state {
            return run;
        }
        assert!(
            Instant::now() < deadline,
            "run {id} reaching {state}; last seen: {run}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn fake_agent() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/agents/fake_agent.py")
}

fn codex(lines: &[Value], exit: i32) -> Value {
    json!({"stdout": lines.iter().map(Value::to_string).collect::<Vec<_>>(), "exit": exit})
}

/// A fresh directory with the fake Codex's `plan` and a config whose one agent route runs it;
/// the directory and the config's path.
fn setup(name: &str, plan_json: &Value) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("rebound-runs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (log, plan) = (dir.join("calls.log"), dir.join("plan.json"));
    std::fs::write(&plan, plan_json.to_string()).unwrap();
    let head = json!([
        fake_agent().display().to_string(),
        "codex",
        log.display().to_string(),
        plan.display().to_string()
    ]);
    let head: Vec<String> = head
        .as_array()
        .unwrap()
        .iter()
        .map(Value::to_string)
        .collect();
    let head = head.join(", ");
    let config = dir.join("rebound.toml");
    std::fs::write(
        &config,
        format!(
            r#"listen = "127.0.0.1:0"
store_path = "{db}"
[[candidate]]
id = "c"
protocol = "openai"
base_url = "http://127.0.0.1:9/v1"
[[route]]
id = "r"
models = ["*"]
candidates = ["c"]

[[agent]]
id = "codex"
command = "python3"
args = [{head}, "{{prompt}}"]
resume_args = [{head}, "--resume", "{{session}}", "{{prompt}}"]
output = "codex-json"
policy = {{ hard = {{ reset_wait_max_ms = 60000, exhausted = "stop" }} }}

[[agent_route]]
id = "agents"
agents = ["codex"]
"#,
            db = dir.join("jobs.db").display()
        ),
    )
    .unwrap();
    (dir, config)
}

/// Submits a run in `dir`; its id.
fn submit(gateway: &Serve, dir: &Path) -> String {
    let body = json!({"prompt": "fix the build", "cwd": dir.display().to_string()}).to_string();
    let submitted = body_of(&http(
        &gateway.1,
        &format!(
            "POST /v1/rebound/runs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    ));
    submitted["id"].as_str().unwrap().to_owned()
}

/// The fake agent's calls: (mode, session) each.
fn calls(dir: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(dir.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let c: Value = serde_json::from_str(l).unwrap();
            (
                c["mode"].as_str().unwrap().to_owned(),
                c["session"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn thread() -> Value {
    json!({"type": "thread.started", "thread_id": "{session}"})
}

#[test]
fn a_run_waiting_for_a_usage_reset_survives_sigkill_and_resumes_its_session_once() {
    let limit = "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try again in 3 seconds.";
    let (dir, config) = setup(
        "sigkill-wait",
        &json!({"codex": [
            codex(&[thread(), json!({"type": "turn.failed", "error": {"message": limit}})], 1),
            codex(&[thread(), json!({"type": "item.completed", "item": {"id": "i", "type": "agent_message", "text": "resumed and done"}}), json!({"type": "turn.completed"})], 0),
        ]}),
    );
    let log = dir.join("calls.log");

    let gateway = serve(&config);
    let id = submit(&gateway, &dir);
    let waiting = wait_for(&gateway.1, &id, "waiting", Duration::from_secs(10));
    assert_eq!(waiting["pending_outcome"], "resume", "{waiting}");
    let deadline_ms = waiting["deadline_ms"].as_u64().unwrap();
    drop(gateway); // SIGKILL during the reset wait

    let gateway = serve(&config);
    let runs_line = gateway.2.last().unwrap();
    assert!(
        runs_line.contains("(1 resumed, 0 need action)"),
        "{:?}",
        gateway.2
    );
    let done = wait_for(&gateway.1, &id, "succeeded", Duration::from_secs(20));
    assert_eq!(done["result"], "resumed and done");
    let calls: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let modes: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c["mode"].as_str().unwrap(), c["session"].as_str().unwrap()))
        .collect();
    assert_eq!(
        modes,
        vec![("fresh", "sess-codex-1"), ("resume", "sess-codex-1")]
    );
    let resumed_ms = (calls[1]["time"].as_f64().unwrap() * 1000.0) as u64;
    assert!(
        resumed_ms >= deadline_ms,
        "resumed at {resumed_ms}, before its deadline {deadline_ms}"
    );
    drop(gateway);
    std::fs::remove_dir_all(dir).unwrap();
}

/// P3: a run whose agent was running when rebound was killed may have acted; after the
/// restart it waits for a human, and the agent is not started again.
#[test]
fn a_run_killed_while_its_agent_runs_needs_action_and_is_not_started_again() {
    let mut working = codex(&[thread()], 0);
    working["sleep"] = json!(2);
    let (dir, config) = setup("sigkill-running", &json!({"codex": [working]}));
    let gateway = serve(&config);
    let id = submit(&gateway, &dir);
    wait_for(&gateway.1, &id, "running", Duration::from_secs(10));
    // The agent has begun (its interpreter may take a while to start on a loaded machine):
    // it wrote its call before it works.
    let begun = std::time::Instant::now();
    while calls(&dir).is_empty() {
        assert!(
            begun.elapsed() < Duration::from_secs(10),
            "the agent never began"
        );
        std::thread::yield_now();
    }
    drop(gateway); // SIGKILL while the agent works

    let gateway = serve(&config);
    let runs_line = gateway.2.last().unwrap();
    assert!(
        runs_line.contains("(0 resumed, 1 need action)"),
        "{:?}",
        gateway.2
    );
    let held = wait_for(&gateway.1, &id, "action_required", Duration::from_secs(5));
    assert_eq!(held["error"]["reason"], "invocation_may_have_run", "{held}");
    assert_eq!(held["invocations"][0]["outcome"], "unknown", "{held}");
    assert_eq!(
        calls(&dir),
        vec![("fresh".to_owned(), "sess-codex-1".to_owned())]
    );
    drop(gateway);
    std::fs::remove_dir_all(dir).unwrap();
}
