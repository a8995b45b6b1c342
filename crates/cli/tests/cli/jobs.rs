//! Durable jobs across crashes: SIGKILL the gateway while a job waits, and while an attempt
//! is in flight (P1, P3), with `rebound chaos` counting every request.
//!
//! The gateway and chaos are other processes: the tests wait for what they can observe (a
//! banner line, a job's state, chaos's request count), checked in a loop under a deadline.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::http;

/// A process, its address, and the lines of its banner read so far.
pub(crate) struct Proc(pub(crate) Child, pub(crate) String, pub(crate) Vec<String>);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `rebound` with `args` and reads its banner up to the first line containing
/// `until` (the first line when `until` is empty).
pub(crate) fn start(args: &[&str], until: &str) -> Proc {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rebound"));
    command.args(args);
    start_command(command, until)
}

/// Starts `command` and reads its banner up to the first line containing `until`.
pub(crate) fn start_command(mut command: Command, until: &str) -> Proc {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut banner = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let done = line.contains(until);
        banner.push(line);
        if done {
            break;
        }
    }
    // Keep draining the banner so the process never meets a closed pipe.
    std::thread::spawn(move || for _ in lines {});
    let addr = banner[0].trim().rsplit(' ').next().unwrap().to_owned();
    Proc(child, addr, banner)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rebound-jobs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn serve(dir: &Path, chaos: &str) -> Proc {
    let config = dir.join("rebound.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nstore_path = \"{}\"\n[[candidate]]\nid = \"c\"\nprotocol = \"openai\"\nbase_url = \"http://{chaos}/v1\"\n[[route]]\nid = \"r\"\nmodels = [\"*\"]\ncandidates = [\"c\"]\n",
            dir.join("jobs.db").display()
        ),
    )
    .unwrap();
    // The banner's jobs line comes after the restart rule has run: it counts what it found.
    start(
        &["serve", "--config", config.to_str().unwrap()],
        " resumed, ",
    )
}

/// The banner's count of jobs resumed and of jobs that need action.
fn reconciled(gateway: &Proc) -> (u64, u64) {
    let line = gateway.2.last().unwrap();
    let counts = line.split('(').nth(1).unwrap();
    let number = |word: &str| -> u64 {
        let before = counts.split(word).next().unwrap();
        before
            .rsplit([' ', ','])
            .find(|w| !w.is_empty())
            .unwrap()
            .parse()
            .unwrap()
    };
    (number(" resumed"), number(" need action"))
}

fn body_of(response: &str) -> Value {
    serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap_or("null")).unwrap_or(Value::Null)
}

pub(crate) fn post(addr: &str, path: &str, body: &str) -> Value {
    body_of(&http(
        addr,
        &format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    ))
}

pub(crate) fn get(addr: &str, path: &str) -> Value {
    body_of(&http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"),
    ))
}

/// How long between two looks at another process's state.
const POLL: Duration = Duration::from_millis(25);

/// Looks at `observe()` until `done` holds of it, for at most `within`; the last observation.
pub(crate) fn poll<T: std::fmt::Debug>(
    what: &str,
    within: Duration,
    observe: impl Fn() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let seen = observe();
        if done(&seen) {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {within:?}; last seen: {seen:?}"
        );
        std::thread::sleep(POLL);
    }
}

pub(crate) fn wait_for(addr: &str, id: &str, state: &str, within: Duration) -> Value {
    poll(
        &format!("job {id} reaching {state}"),
        within,
        || get(addr, &format!("/v1/rebound/jobs/{id}")),
        |job| job["state"] == state,
    )
}

pub(crate) fn attempts(chaos: &str) -> u64 {
    get(chaos, "/chaos/attempts")["default"]
        .as_u64()
        .unwrap_or(0)
}

pub(crate) const JOB: &str = r#"{"protocol": "openai", "request": {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}}"#;

#[test]
fn a_job_waiting_on_a_deadline_survives_sigkill_and_resumes_at_its_deadline() {
    let dir = temp_dir("wait");
    let chaos = start(
        &[
            "chaos",
            "--listen",
            "127.0.0.1:0",
            "--chunk-delay-ms",
            "0",
            "--script",
            "default=429+retry-after:2, ok",
        ],
        "",
    );
    let gateway = serve(&dir, &chaos.1);
    let id = post(&gateway.1, "/v1/rebound/jobs", JOB)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let waiting = wait_for(&gateway.1, &id, "waiting", Duration::from_secs(5));
    let deadline = waiting["deadline_ms"].as_u64().unwrap();
    drop(gateway); // SIGKILL
    let gateway = serve(&dir, &chaos.1);
    assert_eq!(reconciled(&gateway), (1, 0), "{:?}", gateway.2);
    let done = wait_for(&gateway.1, &id, "succeeded", Duration::from_secs(10));
    let attempts_on_record = done["attempts"].as_array().unwrap();
    assert_eq!(attempts_on_record.len(), 2, "{done}");
    assert!(
        attempts_on_record[1]["started_ms"].as_u64().unwrap() >= deadline,
        "resumed before its deadline: {done}"
    );
    assert_eq!(attempts(&chaos.1), 2, "no extra attempt after the restart");
    drop(gateway);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_job_killed_with_an_attempt_in_flight_needs_action_and_is_not_resent() {
    let dir = temp_dir("flight");
    let chaos = start(
        &[
            "chaos",
            "--listen",
            "127.0.0.1:0",
            "--chunk-delay-ms",
            "0",
            "--script",
            "default=stall:3000, ok",
        ],
        "",
    );
    let gateway = serve(&dir, &chaos.1);
    let id = post(&gateway.1, "/v1/rebound/jobs", JOB)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for(&gateway.1, &id, "dispatching", Duration::from_secs(5));
    // The attempt has reached the provider (chaos holds it, stalled).
    poll(
        "the attempt reaching chaos",
        Duration::from_secs(5),
        || attempts(&chaos.1),
        |n| *n == 1,
    );
    drop(gateway); // SIGKILL while the attempt is out
    let gateway = serve(&dir, &chaos.1);
    // The restart rule ran before the banner: nothing to resume, so no driver was started
    // that could re-send; one job held for a human.
    assert_eq!(reconciled(&gateway), (0, 1), "{:?}", gateway.2);
    let job = get(&gateway.1, &format!("/v1/rebound/jobs/{id}"));
    assert_eq!(job["state"], "action_required", "{job}");
    assert_eq!(job["error"]["reason"], "attempt_may_have_been_sent");
    assert_eq!(job["attempts"][0]["outcome"], "unknown");
    assert_eq!(
        attempts(&chaos.1),
        1,
        "the attempt that may have been sent was not re-sent"
    );

    // A human decides: retry now. The CLI fences the action by the generation it read.
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args([
            "jobs",
            "retry",
            &id,
            "--gateway",
            &format!("http://{}", gateway.1),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(&gateway.1, &id, "succeeded", Duration::from_secs(5));
    // Exactly one more request in all: the human's retry, and no blind re-send before it.
    assert_eq!(attempts(&chaos.1), 2);
    let list = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args([
            "jobs",
            "list",
            "--gateway",
            &format!("http://{}", gateway.1),
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&list.stdout).contains(&id));
    drop(gateway);
    std::fs::remove_dir_all(dir).unwrap();
}
