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
