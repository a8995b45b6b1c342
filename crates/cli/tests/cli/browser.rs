//! The status page in a real browser (#20, G5, G6, R3, S4, S6): headless Chromium, driven
//! through chromedriver, against `rebound serve` and `rebound chaos` as a user runs them. An
//! outage shows as a candidate cooling down with its countdown, a waiting request appears
//! and goes, a job's skip button moves it on, and neither the provider key nor the gateway
//! key is anywhere in the page. A screenshot is kept at `target/status-page.png`.
//!
//! It needs `chromium` and `chromedriver` (Debian: `apt-get install chromium chromium-driver`),
//! so it is ignored by default; CI runs it with `--ignored browser`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::jobs::{Proc, start};

/// The provider key the upstream echoes in its error bodies.
const CANARY: &str = "sk-proj-BrowserCanary0123456789abcdefXYZ";
/// The gateway key.
const GATEWAY_KEY: &str = "gw-browser-key-2718281828";
/// How long the page may take to show what the gateway does (it renders each snapshot).
const WITHIN: Duration = Duration::from_secs(20);

/// chromedriver on a free loopback port, stopped when dropped.
struct Driver(Child, u16);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn chromedriver() -> Driver {
    let port = crate::free_port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver is required (apt-get install chromium chromium-driver)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen");
        std::thread::sleep(Duration::from_millis(25));
    }
    Driver(child, port)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    )
}

/// One HTTP/1.1 exchange with the gateway key; the status line and the JSON body.
fn call(addr: &str, method: &str, path: &str, headers: &str, body: &str) -> (String, Value) {
    let answer = crate::http(
        addr,
        &format!(
            "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {GATEWAY_KEY}\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// The text of the first element `css` finds, or `None` when there is none.
async fn text(client: &Client, css: &str) -> Option<String> {
    match client.find(Locator::Css(css)).await {
        Ok(element) => element.text().await.ok(),
        Err(_) => None,
    }
}

/// Looks at `css`'s text until `done` holds of it, for at most [`WITHIN`]; that text.
async fn until(client: &Client, what: &str, css: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + WITHIN;
    loop {
        let seen = text(client, css).await;
        if let Some(seen) = seen.as_deref().filter(|s| done(s)) {
            return seen.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {WITHIN:?}: `{css}` showed {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
#[ignore = "needs chromium and chromedriver; CI runs it"]
fn browser_the_status_page_shows_an_outage_a_wait_and_a_job_and_no_key() {
    let dir = std::env::temp_dir().join(format!("rebound-browser-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // `primary` meets the outage (a 503 with retry-after that echoes its key) on the live
    // route; on the jobs route `slow` announces a reset five minutes away and `primary`
    // answers once the job is skipped on.
    let upstream = start(
        &[
            "chaos",
            "--listen",
            "127.0.0.1:0",
            "--chunk-delay-ms",
            "0",
            "--script",
            "outage=503+retry-after:6+echo-key, ok",
        ],
        "",
    );
    let reset = start(
        &[
            "chaos",
            "--listen",
            "127.0.0.1:0",
            "--chunk-delay-ms",
            "0",
            "--script",
            "default=429+retry-after:300",
        ],
        "",
    );
    let config = dir.join("rebound.toml");
    std::fs::write(
        &config,
        format!(
            r#"listen = "127.0.0.1:0"
store_path = "{}"
gateway_key_envs = ["REBOUND_BROWSER_GATEWAY_KEY"]

[[candidate]]
id = "primary"
protocol = "openai"
base_url = "http://{}/v1"
api_key_env = "REBOUND_BROWSER_PROVIDER_KEY"

[[candidate]]
id = "slow"
protocol = "openai"
base_url = "http://{}/v1"
api_key_env = "REBOUND_BROWSER_PROVIDER_KEY"
policy = {{ rate_limit = {{ retries = 0, reset_wait_max_ms = 600000, exhausted = "skip" }} }}

[[route]]
id = "live"
models = ["live-*"]
candidates = ["primary"]

[[route]]
id = "jobs"
models = ["job-*"]
candidates = ["slow", "primary"]
"#,
            dir.join("jobs.db").display(),
            upstream.1,
            reset.1
        ),
    )
    .unwrap();
    let gateway = serve_with_keys(&config);
    let addr = gateway.1.clone();
    let driver = chromedriver();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1100"]}),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", driver.1))
            .await
            .expect("a Chromium session through chromedriver");
        let outcome = drive(&client, &addr).await;
        let _ = client.close().await;
        outcome
    });
    drop(gateway);
    drop(upstream);
    drop(reset);
    let _ = std::fs::remove_dir_all(&dir);
}

fn serve_with_keys(config: &std::path::Path) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rebound"));
    child
        .args(["serve", "--config", config.to_str().unwrap()])
        .env("REBOUND_BROWSER_GATEWAY_KEY", GATEWAY_KEY)
        .env("REBOUND_BROWSER_PROVIDER_KEY", CANARY);
    crate::jobs::start_command(child, " resumed, ")
}

async fn drive(client: &Client, addr: &str) {
    // Without the key the page is a login form; `?key=` becomes the HttpOnly cookie and the
    // address the page then has holds no key (G5).
    client.goto(&format!("http://{addr}/status")).await.unwrap();
    until(
        client,
        "the sign-in form",
        "form[action=\"/status/login\"] button",
        |t| t == "Open the status page",
    )
    .await;
    client
        .goto(&format!("http://{addr}/status?key={GATEWAY_KEY}"))
        .await
        .unwrap();
    let url = client.current_url().await.unwrap();
    assert_eq!(url.path(), "/status");
    assert!(url.query().is_none(), "{url}");
    until(client, "the stream connected", "#connection", |t| {
        t == "live"
    })
    .await;
    until(
        client,
        "the candidates listed",
        "tr[data-candidate=\"primary\"] td.state",
        |t| t == "healthy",
    )
    .await;

    // The outage: a live request meets the 503 and waits out its retry-after.
    let gateway = addr.to_owned();
    let request = std::thread::spawn(move || {
        call(
            &gateway,
            "POST",
            "/v1/chat/completions",
            "x-chaos-key: outage\r\n",
            r#"{"model":"live-1","messages":[{"role":"user","content":"a prompt the page never shows"}]}"#,
        )
    });
    until(
        client,
        "the candidate cooling down",
        "tr[data-candidate=\"primary\"] td.state",
        |t| t == "cooling down",
    )
    .await;
    let left = until(
        client,
        "its countdown",
        "tr[data-candidate=\"primary\"] td.left",
        |t| t.ends_with('s') && t != "0s",
    )
    .await;
    assert!(
        left.trim_end_matches('s')
            .parse::<u64>()
            .is_ok_and(|s| (1..=6).contains(&s)),
        "{left}"
    );
    let countdown = until(
        client,
        "the waiting request",
        "#waiting tbody tr.wait td.countdown",
        |t| t.starts_with("Retrying in "),
    )
    .await;
    assert!(countdown.contains("attempt 1"), "{countdown}");
    until(
        client,
        "the failure listed",
        "#failures tbody tr td:nth-child(4)",
        |t| t == "503",
    )
    .await;
    let screenshot = client.screenshot().await.unwrap();
    let path = target_dir().join("status-page.png");
    std::fs::write(&path, &screenshot).unwrap();
    assert!(screenshot.starts_with(b"\x89PNG"), "not a PNG");
    assert_no_key(client).await;

    let (status, _) = request.join().unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    until(client, "the wait gone", "#waiting-count", |t| t == "0").await;
    assert!(text(client, "#waiting tbody tr.wait").await.is_none());

    // A job waits for its announced reset; the page's skip button moves it on (P2).
    let (status, job) = call(
        addr,
        "POST",
        "/v1/rebound/jobs",
        "",
        r#"{"protocol":"openai","request":{"model":"job-1","messages":[{"role":"user","content":"a job prompt the page never shows"}]}}"#,
    );
    assert!(status.starts_with("HTTP/1.1 202"), "{status} {job}");
    let id = job["id"].as_str().unwrap().to_owned();
    let row = format!("tr[data-job=\"{id}\"]");
    until(client, "the job waiting", &format!("{row} td.state"), |t| {
        t == "waiting"
    })
    .await;
    client
        .find(Locator::Css(&format!("{row} button[data-action=\"skip\"]")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        client,
        "the job skipped on and done",
        &format!("{row} td.state"),
        |t| t == "succeeded",
    )
    .await;
    let result = until(client, "the action's answer", "#action-result", |t| {
        t.starts_with("skip:")
    })
    .await;
    assert!(result.contains(&id), "{result}");
    assert_no_key(client).await;
}

/// Neither key, nor a prompt, is anywhere in the rendered page (S4).
async fn assert_no_key(client: &Client) {
    let source = client.source().await.unwrap();
    for secret in [CANARY, GATEWAY_KEY, "never shows"] {
        assert!(
            !source.contains(secret),
            "{secret} is in the page:\n{source}"
        );
    }
    let cookies = client
        .execute("return document.cookie", vec![])
        .await
        .unwrap();
    assert_eq!(cookies, json!(""), "the key cookie is HttpOnly");
}
