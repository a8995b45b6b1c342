//! `rebound classify`: the issue's examples, bad input, user rules, and secrets (C2, C4, T3).

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// A canary credential: it must never appear in anything rebound prints.
const CANARY: &str = "sk-proj-CanaryCanary0123456789CANARY";

fn rebound(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rebound starts");
    {
        let mut pipe = child.stdin.take().unwrap();
        if let Some(input) = stdin {
            pipe.write_all(input.as_bytes()).unwrap();
        }
    }
    child.wait_with_output().unwrap()
}

fn json(args: &[&str]) -> Value {
    let out = rebound(args, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn rate_limit_delays_from_the_issue() {
    let base = ["classify", "--status", "429", "--json", "--attempt"];
    let v = json(&[&base[..], &["1", "--jitter", "0"]].concat());
    assert_eq!(v["class"], "rate_limit");
    assert_eq!(v["code"], "rate_limited");
    assert_eq!(v["hint_ms"], Value::Null);
    assert_eq!(v["delay_ms"], 2000);
    assert_eq!(
        json(&[&base[..], &["1", "--jitter", "1"]].concat())["delay_ms"],
        2500
    );
    assert_eq!(
        json(&[&base[..], &["11", "--jitter", "1"]].concat())["delay_ms"],
        Value::Null
    );
    assert_eq!(
        json(&[&base[..], &["10", "--jitter", "0"]].concat())["delay_ms"],
        30_000
    );
}

#[test]
fn the_json_object_has_every_documented_field() {
    let v = json(&[
        "classify",
        "--provider",
        "openai",
        "--status",
        "429",
        "--header",
        "Retry-After: 7",
        "--body",
        r#"{"error":{"message":"Rate limit reached for gpt-4o. Please try again in 20s.","code":"rate_limit_exceeded"}}"#,
        "--attempt",
        "2",
        "--jitter",
        "0.5",
        "--json",
    ]);
    for field in [
        "code",
        "class",
        "confidence",
        "rule_id",
        "catalogue_version",
        "hint_ms",
        "delay_ms",
    ] {
        assert!(v.get(field).is_some(), "missing {field}: {v}");
    }
    assert_eq!(v["rule_id"], "openai.rate_limit_exceeded");
    assert_eq!(v["hint_ms"], 7000);
    assert_eq!(v["hint_source"], "retry_after_seconds");
    assert_eq!(v["delay_ms"], 7000);
}

#[test]
fn hints_are_capped_in_the_delay_but_shown_whole() {
    let v = json(&[
        "classify",
        "--status",
        "503",
        "--header",
        "retry-after: 120",
        "--attempt",
        "1",
        "--json",
    ]);
    assert_eq!(
        (
            v["class"].as_str(),
            v["hint_ms"].as_u64(),
            v["delay_ms"].as_u64()
        ),
        (Some("transient"), Some(120_000), Some(8000))
    );
}

#[test]
fn terminal_and_unclassified_never_get_a_delay() {
    let v = json(&[
        "classify",
        "--status",
        "400",
        "--body",
        r#"{"error":{"code":"context_length_exceeded"}}"#,
        "--attempt",
        "1",
        "--json",
    ]);
    assert_eq!(
        (v["class"].as_str(), &v["delay_ms"]),
        (Some("terminal"), &Value::Null)
    );
    let v = json(&["classify", "--status", "418", "--attempt", "1", "--json"]);
    assert_eq!(v["class"], "unclassified");
    assert_eq!(v["unclassified_reason"], "no_rule");
    assert_eq!(v["delay_ms"], Value::Null);
}

#[test]
fn transport_and_stream_flags() {
    let v = json(&[
        "classify",
        "--transport",
        "connection_reset",
        "--phase",
        "stream",
        "--json",
    ]);
    assert_eq!(
        (v["class"].as_str(), v["phase"].as_str()),
        (Some("transient"), Some("stream"))
    );
    let v = json(&[
        "classify",
        "--provider",
        "anthropic",
        "--sse-event",
        "overloaded_error",
        "--phase",
        "stream",
        "--json",
    ]);
    assert_eq!(v["rule_id"], "anthropic.stream_overloaded");
}

#[test]
fn evidence_json_on_stdin() {
    let doc = r#"{"provider":"gemini","status":429,"headers":{"X-Goog-Api-Key":"AIzaSyCanary0123456789abcdefghijkl"},
        "body":"{\"error\":{\"code\":429,\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{\"retryDelay\":\"17s\"}]}}"}"#;
    let out = rebound(&["classify", "--json", "--attempt", "1"], Some(doc));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rule_id"], "gemini.resource_exhausted");
    assert_eq!(v["hint_ms"], 17_000);
    assert_eq!(v["delay_ms"], 17_000);
    assert!(!text(&out.stdout).contains("AIzaSyCanary"));
}

#[test]
fn human_output_explains() {
    let out = rebound(
        &[
            "classify",
            "--status",
            "529",
            "--provider",
            "anthropic",
            "--body",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            "--attempt",
            "3",
        ],
        None,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success());
    assert!(stdout.starts_with("transient · overloaded\n"), "{stdout}");
    assert!(stdout.contains("anthropic.overloaded"), "{stdout}");
    assert!(stdout.contains("after attempt 3: wait 4000 ms"), "{stdout}");
    assert!(stdout.contains("retries silently"), "{stdout}");
}

fn refused(args: &[&str], stdin: Option<&str>) -> String {
    let out = rebound(args, stdin);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: {}",
        text(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "{args:?} printed {}",
        text(&out.stdout)
    );
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.lines().count(),
        1,
        "{args:?}: not one line: {stderr}"
    );
    stderr
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    assert!(
        refused(
            &[
                "classify",
                "--status",
                "429",
                "--jitter",
                "2",
                "--attempt",
                "1"
            ],
            None
        )
        .contains("--jitter")
    );
    assert!(
        refused(&["classify", "--status", "429", "--attempt", "0"], None).contains("--attempt")
    );
    assert!(refused(&["classify", "--status", "9999"], None).contains("--status"));
    assert!(refused(&["classify", "--transport", "pigeon"], None).contains("pigeon"));
    assert!(
        refused(&["classify", "--phase", "later", "--status", "500"], None).contains("--phase")
    );
    assert!(refused(&["classify", "--body", "x", "--body-file", "y"], None).contains("--body"));
    assert!(
        refused(
            &["classify", "--body-file", "/nonexistent/rebound-body"],
            None
        )
        .contains("--body-file")
    );
    assert!(refused(&["classify", "--stauts", "429"], None).contains("--stauts"));
    assert!(refused(&["classify"], Some("")).contains("no evidence"));
    assert!(refused(&["classify"], Some("{not json")).contains("evidence JSON"));
    assert!(refused(&["classify"], Some(r#"{"status":"429"}"#)).contains("evidence JSON"));
    assert!(refused(&["classify"], Some(r#"{"stauts":429}"#)).contains("stauts"));
    assert!(refused(&["classify"], Some(r#"{"transport":"pigeon"}"#)).contains("unknown variant"));
    assert!(
        refused(
            &[
                "classify",
                "--catalogue",
                "/nonexistent/rebound-rules",
                "--status",
                "1"
            ],
            None
        )
        .contains("--catalogue")
    );
}

#[test]
fn secrets_never_reach_any_output() {
    let header = format!("Authorization: Bearer {CANARY}");
    let body = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {CANARY}","code":"invalid_api_key"}}}}"#
    );
    let with_flags = |extra: &[&str]| -> Vec<String> {
        [
            "classify", "--status", "401", "--header", &header, "--body", &body,
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
    };
    let plain = |args: &[&str]| -> Vec<String> { args.iter().map(|s| s.to_string()).collect() };
    let key_header = format!("Bearer {CANARY}");
    let bad_name = format!("bad name: {CANARY}");
    let stdin_doc = format!(
        r#"{{"status":401,"headers":{{"x-api-key":"{CANARY}"}},"body":{}}}"#,
        serde_json::to_string(&body).unwrap()
    );
    let runs: Vec<(Vec<String>, Option<String>)> = vec![
        (with_flags(&[]), None),
        (with_flags(&["--json"]), None),
        // Error paths: a malformed header carrying the key, a bad flag next to it.
        (plain(&["classify", "--header", &key_header]), None),
        (plain(&["classify", "--header", &bad_name]), None),
        (with_flags(&["--jitter", "7", "--attempt", "1"]), None),
        (plain(&["classify", "--status", CANARY]), None),
        (
            plain(&[
                "classify",
                "--jitter",
                "CanaryCanary-plain",
                "--attempt",
                "1",
            ]),
            None,
        ),
        (plain(&["classify", "--json"]), Some(stdin_doc)),
        (
            plain(&["classify"]),
            Some(format!(r#"{{"status":401,"key":"{CANARY}"}}"#)),
        ),
        (
            plain(&["classify"]),
            Some(format!(r#"{{"status":401,"body":"{CANARY}"#)),
        ),
        (
            plain(&["classify"]),
            Some(format!(r#"{{"status":"{CANARY}"}}"#)),
        ),
        (
            plain(&["classify"]),
            Some(r#"{"status":401,"phase":"CanaryCanary-not-a-key-shape"}"#.to_string()),
        ),
        (
            plain(&["classify"]),
            Some(r#"{"status":["CanaryCanary-hex-0123"]}"#.to_string()),
        ),
    ];
    for (args, stdin) in runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = rebound(&args, stdin.as_deref());
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(!all.contains("CanaryCanary"), "{args:?} leaked:\n{all}");
    }
}

fn rule_dir(name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rebound-cli-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (file, text) in files {
        std::fs::write(dir.join(file), text).unwrap();
    }
    dir
}

#[test]
fn user_rules_extend_the_catalogue() {
    let dir = rule_dir(
        "ok",
        &[(
            "local.toml",
            r#"
[codes.gpu_oom]
class = "transient"
description = "The local inference server ran out of GPU memory."

[[rule]]
id = "local.gpu_oom"
priority = 90
status = [500]
body = '(?i)CUDA out of memory'
code = "gpu_oom"
"#,
        )],
    );
    let dir_arg = dir.to_str().unwrap();
    let v = json(&[
        "classify",
        "--catalogue",
        dir_arg,
        "--status",
        "500",
        "--body",
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "--json",
    ]);
    assert_eq!(v["rule_id"], "local.gpu_oom");
    assert_eq!(v["code"], "gpu_oom");
    assert_eq!(v["class"], "transient");
    assert!(
        v["catalogue_version"]
            .as_str()
            .unwrap()
            .starts_with("2026.11.30+user.")
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A user rule file the catalogue cannot take is refused on one line that says where: the
/// file, rule and field of a bad rule; the file and line of text that is not TOML.
#[test]
fn a_bad_user_rule_file_is_refused_on_one_line_naming_where() {
    let cases: [(&str, &str, &[&str]); 2] = [
        (
            "broken.toml",
            "[[rule]]\nid = \"mine.broken\"\npriority = 1\nbody = \"(oops\"\ncode = \"rate_limited\"\n",
            &["broken.toml", "mine.broken", "`body`"],
        ),
        (
            "unclosed.toml",
            "[[rule]]\nid = \"mine.unclosed\"\ncode = \"rate_limited\"\n\nbody = \"(?i)slow down\n",
            &["unclosed.toml: line 5: "],
        ),
    ];
    for (file, text, words) in cases {
        let dir = rule_dir(file, &[(file, text)]);
        let stderr = refused(
            &[
                "classify",
                "--catalogue",
                dir.to_str().unwrap(),
                "--status",
                "429",
            ],
            None,
        );
        for word in words {
            assert!(stderr.contains(word), "{word}: {stderr}");
        }
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

fn json_stdin(args: &[&str], stdin: &str) -> Value {
    let out = rebound(args, Some(stdin));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn aws_event_stream_pseudo_headers_are_accepted() {
    let v = json(&[
        "classify",
        "--provider",
        "bedrock",
        "--header",
        ":exception-type: throttlingException",
        "--header",
        ":message-type: exception",
        "--body",
        r#"{"message":"Too many requests, please wait before trying again."}"#,
        "--json",
    ]);
    assert_eq!(
        (v["rule_id"].as_str(), v["class"].as_str()),
        (Some("bedrock.frame_throttling"), Some("rate_limit"))
    );
    // A name is still checked.
    assert!(refused(&["classify", "--header", ":: x"], None).contains("--header #1"));
    assert!(refused(&["classify", "--header", ":bad name: x"], None).contains("--header #1"));
}

#[test]
fn free_text_on_stdin_or_a_body_file_needs_no_status() {
    let line = "Error: 429 Too Many Requests";
    let from_stdin = json_stdin(&["classify", "--json"], line);
    assert_eq!(from_stdin["evidence_excerpt"].as_str(), Some(line));
    // The text embeds its status (C8): it is used, and a 429 is a rate limit.
    assert_eq!(
        (from_stdin["status"].as_u64(), from_stdin["class"].as_str()),
        (Some(429), Some("rate_limit"))
    );
    let dir = std::env::temp_dir().join(format!("rebound-text-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("error.txt");
    std::fs::write(&file, line).unwrap();
    let from_file = json(&["classify", "--body-file", file.to_str().unwrap(), "--json"]);
    assert_eq!(from_file["evidence_excerpt"].as_str(), Some(line));
    std::fs::remove_dir_all(&dir).unwrap();
    // A raw JSON body reads through --body-file -; provider and phase describe text evidence.
    let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let raw = json_stdin(
        &[
            "classify",
            "--body-file",
            "-",
            "--provider",
            "anthropic",
            "--phase",
            "stream",
            "--json",
        ],
        body,
    );
    assert_eq!(raw["evidence_excerpt"].as_str(), Some(body));
    let described = json_stdin(
        &["classify", "--provider", "anthropic", "--json"],
        "overloaded_error: Overloaded",
    );
    assert!(described["evidence_excerpt"].is_string());
    // A status after non-ASCII words is still read from the text (C8).
    let translated = r#"翻译失败: 400: {"error":{"message":"Invalid value for temperature"}}"#;
    let v = json_stdin(&["classify", "--json"], translated);
    assert_eq!(
        (v["status"].as_u64(), v["code"].as_str()),
        (Some(400), Some("invalid_request"))
    );
}

#[test]
fn absurd_hints_are_capped_at_the_class_cap_not_dropped() {
    // T2: 999999999999 ms is well-formed and excessive: the wait is the class cap, not backoff.
    let v = json(&[
        "classify",
        "--status",
        "429",
        "--header",
        "retry-after-ms: 999999999999",
        "--attempt",
        "1",
        "--jitter",
        "0",
        "--json",
    ]);
    assert_eq!(
        (
            v["class"].as_str(),
            v["hint_source"].as_str(),
            v["hint_capped_ms"].as_u64(),
            v["delay_ms"].as_u64()
        ),
        (
            Some("rate_limit"),
            Some("retry_after_ms"),
            Some(30_000),
            Some(30_000)
        )
    );
    let out = rebound(
        &[
            "classify",
            "--status",
            "429",
            "--header",
            "retry-after-ms: 999999999999",
        ],
        None,
    );
    assert!(text(&out.stdout).contains("capped at 30000 ms by the class cap"));
}

#[test]
fn a_batch_of_evidence_lines_gets_one_verdict_per_line() {
    let input = concat!(
        r#"{"status": 429, "headers": {"retry-after": "20"}}"#,
        "\n\n",
        r#"{"body": "java.net.SocketTimeoutException: Read timed out"}"#,
        "\n",
        r#"{"status": 400, "body": "{\"error\":{\"code\":\"context_length_exceeded\"}}"}"#,
        "\n"
    );
    let out = rebound(&["classify", "--batch"], Some(input));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let verdicts: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let codes: Vec<_> = verdicts.iter().map(|v| v["code"].as_str()).collect();
    assert_eq!(
        codes,
        [
            Some("rate_limited"),
            Some("response_timeout"),
            Some("context_overflow")
        ]
    );
    assert_eq!(verdicts[0]["hint_ms"], 20_000);

    // A bad line names its number; the verdicts before it stand, nothing after it is read.
    let out = rebound(
        &["classify", "--batch"],
        Some("{\"status\": 503}\n{\"status\": \"x\"}\n{\"status\": 429}\n"),
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stdout).lines().count(), 1);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("stdin line 2: evidence JSON"), "{stderr}");
    assert!(!stderr.contains("\"x\""), "{stderr}");

    let out = rebound(&["classify", "--batch", "--status", "429"], Some(""));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}
