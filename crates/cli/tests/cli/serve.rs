//! `rebound serve` and `rebound demo` as a user starts them.

use std::process::Command;

#[test]
fn serve_refuses_a_bad_config_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("rebound-serve-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rebound.toml");
    std::fs::write(
        &file,
        "[[candidate]]\nid = \"a\"\nprotocol = \"opneai\"\nbase_url = \"http://127.0.0.1:1\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(["serve", "--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("rebound.toml") && stderr.contains("candidate.a.protocol"),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env_remove("REBOUND_GATEWAY_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_demo_runs_offline_and_prints_its_table() {
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(["demo", "--requests", "10", "--concurrency", "10"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Retrying in"),
        "the countdown is shown: {stdout}"
    );
    let table = stdout
        .lines()
        .skip_while(|l| !l.contains("ok first try"))
        .nth(1)
        .unwrap();
    let numbers: Vec<u64> = table
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    // requests, ok first try, recovered, terminal errors, upstream attempts
    assert_eq!(numbers[..4], [10, 1, 7, 2], "{stdout}");
    assert_eq!(numbers[4], 18, "{stdout}");
}

#[test]
fn the_demo_keeps_its_gateway_and_status_page_up_with_keep() {
    // #20: `--keep` prints the page's address and serves it after the table, until stopped.
    let demo = crate::jobs::start(
        &["demo", "--requests", "4", "--concurrency", "4", "--keep"],
        "Ctrl-C to stop",
    );
    let url = demo
        .2
        .iter()
        .find_map(|l| l.strip_prefix("status page: http://"))
        .unwrap_or_else(|| panic!("no status page line: {:?}", demo.2));
    let addr = url.split('/').next().unwrap();
    assert!(
        demo.2
            .last()
            .unwrap()
            .contains(&format!("http://{addr}/status"))
    );
    let page = crate::http(
        addr,
        "GET /status HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("/status/page.js"), "{page}");
}

/// Starts `rebound` with `args`; its address (the banner's first line's last word) and stderr.
fn start(args: &[&str]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(args)
        .env(
            "XDG_DATA_HOME",
            std::env::temp_dir().join(format!("rebound-serve-log-{}", std::process::id())),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    std::thread::spawn(move || for _ in reader.lines() {});
    let addr = first.trim().rsplit(' ').next().unwrap().to_owned();
    (child, addr)
}

/// `child`'s standard error, line by line, as the lines come.
fn stderr_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// A chat completion request, answered.
fn complete(addr: &str) -> String {
    let body = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
    crate::http(
        addr,
        &format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

#[test]
fn served_requests_are_logged_while_the_gateway_runs() {
    let (mut chaos, upstream) = start(&["chaos", "--listen", "127.0.0.1:0"]);
    let openai = format!("http://{upstream}/v1");
    let (mut serve, addr) = start(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--openai-upstream",
        &openai,
    ]);
    let reply = complete(&addr);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    // The line is written while the gateway runs, not at exit.
    let lines = stderr_lines(&mut serve);
    let line = lines
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("a log line while the gateway runs");
    assert!(
        line.contains(" INFO rebound::attempt: ") && line.ends_with(" attempt=1 outcome=ok"),
        "{line}"
    );
    assert!(
        serve.try_wait().unwrap().is_none(),
        "the gateway is still running"
    );
    for child in [&mut serve, &mut chaos] {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn json_logs_are_one_object_a_line_with_the_fields_and_no_key() {
    let key = "sk-proj-CliLogCanary0123456789abcdefghij";
    let (mut chaos, upstream) = start(&[
        "chaos",
        "--listen",
        "127.0.0.1:0",
        "--script",
        "default=502, ok",
    ]);
    let dir = std::env::temp_dir().join(format!("rebound-serve-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("rebound.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\n[policy.transient]\nretries = 3\ninitial_ms = 10\ncap_ms = 10\n[[candidate]]\nid = \"c\"\nprotocol = \"openai\"\nbase_url = \"http://{upstream}/v1\"\napi_key_env = \"REBOUND_TEST_KEY\"\n[[route]]\nid = \"r\"\nmodels = [\"*\"]\ncandidates = [\"c\"]\n"
        ),
    )
    .unwrap();
    let mut serve = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(["serve", "--log-format", "json", "--config"])
        .arg(&config)
        .env("REBOUND_TEST_KEY", key)
        .env_remove("REBOUND_LOG")
        .env("XDG_DATA_HOME", &dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let addr = {
        use std::io::BufRead;
        let mut reader = std::io::BufReader::new(serve.stdout.take().unwrap());
        let mut first = String::new();
        reader.read_line(&mut first).unwrap();
        std::thread::spawn(move || for _ in reader.lines() {});
        first.trim().rsplit(' ').next().unwrap().to_owned()
    };
    let reply = complete(&addr);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let lines = stderr_lines(&mut serve);
    let mut events = Vec::new();
    for _ in 0..2 {
        let line = lines
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("two log lines while the gateway runs");
        assert!(!line.contains("CliLogCanary"), "the key leaked: {line}");
        let event: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        events.push(event);
    }
    for (event, attempt, outcome) in [(&events[0], 1, "failed"), (&events[1], 2, "ok")] {
        assert_eq!(event["level"], "INFO", "{event}");
        assert_eq!(event["target"], "rebound::attempt", "{event}");
        assert_eq!(event["route"], "r", "{event}");
        assert_eq!(event["candidate"], "c", "{event}");
        assert_eq!(event["attempt"], attempt, "{event}");
        assert_eq!(event["outcome"], outcome, "{event}");
    }
    assert_eq!(events[0]["status"], 502, "{}", events[0]);
    assert_eq!(events[0]["action"], "retry", "{}", events[0]);
    assert_eq!(events[0]["class"], "transient", "{}", events[0]);
    assert!(events[0]["delay_ms"].is_u64(), "{}", events[0]);
    for child in [&mut serve, &mut chaos] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `rebound serve --config <text>` in `env`, expected to refuse to start: its one stderr line.
fn refused(config: &str, env: &[(&str, &str)]) -> String {
    let dir = std::env::temp_dir().join(format!(
        "rebound-serve-keys-{}-{}",
        std::process::id(),
        env.len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rebound.toml");
    std::fs::write(&file, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(["serve", "--config", file.to_str().unwrap()])
        .envs(env.iter().copied())
        .env("XDG_DATA_HOME", &dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(dir);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{config} started: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn serve_refuses_key_settings_that_open_the_door_or_cannot_be_redacted() {
    let candidate = "[[candidate]]\nid = \"c\"\nprotocol = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"REBOUND_TEST_PROVIDER_KEY\"\n[[route]]\nid = \"r\"\nmodels = [\"*\"]\ncandidates = [\"c\"]\n";
    let provider = (
        "REBOUND_TEST_PROVIDER_KEY",
        "3f9c0a7be21d4c58a6f0e1b2c3d4e5f6",
    );
    // The port is taken: a gateway that wrongly accepted the keys would stop at listening
    // with another message instead of serving forever.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    for listen in [format!("127.0.0.1:{port}"), format!("0.0.0.0:{port}")] {
        let gated =
            format!("listen = \"{listen}\"\ngateway_key_envs = [\"REBOUND_TEST_GW\"]\n{candidate}");
        for empty in [",", " , ", " "] {
            let stderr = refused(&gated, &[("REBOUND_TEST_GW", empty), provider]);
            assert!(
                stderr.contains("gateway_key_envs[0]")
                    && stderr.contains("`REBOUND_TEST_GW` holds no key"),
                "{listen} {empty:?}: {stderr}"
            );
        }
        let stderr = refused(&gated, &[("REBOUND_TEST_GW", ""), provider]);
        assert!(
            stderr.contains("`REBOUND_TEST_GW` is not set or is empty"),
            "{listen}: {stderr}"
        );
        let stderr = refused(
            &gated,
            &[("REBOUND_TEST_GW", "gw-7f3e9a1c-door,short"), provider],
        );
        assert!(
            stderr.contains("`REBOUND_TEST_GW` holds a key of 5 characters"),
            "{stderr}"
        );
        let stderr = refused(
            &gated,
            &[
                ("REBOUND_TEST_GW", "gw-7f3e9a1c-door"),
                ("REBOUND_TEST_PROVIDER_KEY", "k-12345"),
            ],
        );
        assert!(
            stderr.contains("candidate.c.api_key_env")
                && stderr.contains("`REBOUND_TEST_PROVIDER_KEY` holds a key of 7 characters")
                && !stderr.contains("k-12345"),
            "{stderr}"
        );
    }
}

#[test]
fn an_echoed_key_of_unknown_shape_is_in_no_log_line_and_the_banner_says_where_keys_come_from() {
    use std::io::BufRead;
    let key = "3f9c0a7be21d4c58a6f0e1b2c3d4e5f6";
    let (mut chaos, upstream) = start(&[
        "chaos",
        "--listen",
        "127.0.0.1:0",
        "--script",
        "default=401+echo-key",
    ]);
    let dir = std::env::temp_dir().join(format!("rebound-serve-echo-{}", std::process::id()));
    // The bad key ends the request at its candidate (a fallback would answer instead), so the
    // client sees the upstream's echo.
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("rebound.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ngateway_key_envs = [\"REBOUND_TEST_GW\"]\n[[candidate]]\nid = \"azure\"\nprotocol = \"openai\"\nbase_url = \"http://{upstream}/v1\"\napi_key_env = \"REBOUND_TEST_AZURE_KEY\"\npolicy = {{ hard = {{ exhausted = \"stop\" }} }}\n[[candidate]]\nid = \"keyless\"\nprotocol = \"openai\"\nbase_url = \"http://{upstream}/v1\"\n[[route]]\nid = \"r\"\nmodels = [\"*\"]\ncandidates = [\"azure\", \"keyless\"]\n"
        ),
    )
    .unwrap();
    let mut serve = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(["serve", "--config"])
        .arg(&config)
        .env("REBOUND_TEST_AZURE_KEY", key)
        .env("REBOUND_TEST_GW", "gw-7f3e9a1c-door")
        .env("REBOUND_LOG", "info")
        .env("XDG_DATA_HOME", &dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = std::io::BufReader::new(serve.stdout.take().unwrap());
    let mut banner = String::new();
    while !banner.contains("route r") {
        assert_ne!(reader.read_line(&mut banner).unwrap(), 0, "{banner}");
    }
    let addr = banner
        .lines()
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_owned();
    assert!(
        banner.contains("azure → ") && banner.contains("(key from $REBOUND_TEST_AZURE_KEY)"),
        "{banner}"
    );
    assert!(
        banner.contains("(no key: client keys stay with rebound under gateway keys)"),
        "{banner}"
    );
    assert!(banner.contains("listen backlog"), "{banner}");
    let body = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
    let reply = crate::http(
        &addr,
        &format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer gw-7f3e9a1c-door\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert!(
        reply.contains("[redacted]"),
        "the echo is not there: {reply}"
    );
    assert!(!reply.contains(key), "the key leaked: {reply}");
    // The attempt's line and the request's line (the log writer's redaction by value is
    // checked line by line in its unit tests).
    let lines = stderr_lines(&mut serve);
    for _ in 0..2 {
        let line = lines
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("two log lines while the gateway runs");
        assert!(!line.contains(key), "the key leaked: {line}");
    }
    for child in [&mut serve, &mut chaos] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn serve_help_names_every_timeout_and_health_setting_with_its_default() {
    // S5, S6: the settings a user tunes during an outage are one `--help` away.
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for (key, default) in [
        ("connect_ms", "10000"),
        ("first_byte_ms", "600000"),
        ("stream_first_byte_ms", "60000"),
        ("first_content_ms", "120000"),
        ("stream_idle_ms", "60000"),
        ("circuit_after", "3"),
        ("window_ms", "1000"),
        ("probe_lease_ms", "60000"),
    ] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{key} "))
                    && l.split_whitespace().nth(1) == Some(default)),
            "{key} {default}:\n{help}"
        );
    }
}
