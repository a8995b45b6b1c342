use std::time::Duration;

use rebound_core::policy::{Exhausted, Limit};

use super::*;

fn load_text(text: &str) -> Result<Config, ConfigError> {
    load_env(text, [("OPENAI_API_KEY", "sk-test-key")])
}

/// `text` as `rebound.toml`, without overrides, in the environment `env`.
fn load_env<const N: usize>(text: &str, env: [(&str, &str); N]) -> Result<Config, ConfigError> {
    load("rebound.toml", text, &Overrides::default(), &env)
}

#[test]
fn the_embedded_default_loads() {
    let c = load(
        "embedded default",
        DEFAULT_CONFIG,
        &Overrides::default(),
        &[("X", "y")],
    )
    .unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
    let openai = c.route("gpt-4o", Protocol::OpenAi).unwrap();
    assert_eq!(openai.candidates[0].base_url, "https://api.openai.com/v1");
    assert!(openai.candidates[0].api_key.is_none());
    let anthropic = c.route("claude-x", Protocol::Anthropic).unwrap();
    assert_eq!(anthropic.candidates[0].id, "anthropic");
}

#[test]
fn overrides_apply() {
    let o = Overrides {
        listen: Some("127.0.0.1:9".parse().unwrap()),
        openai_upstream: Some("http://127.0.0.1:7/v1".into()),
        anthropic_upstream: None,
        upstream_http2: false,
    };
    let c = load(
        "embedded default",
        DEFAULT_CONFIG,
        &o,
        &[("OPENAI_API_KEY", "sk-test-key")],
    )
    .unwrap();
    assert_eq!(c.listen.port(), 9);
    let route = c.route("m", Protocol::OpenAi).unwrap();
    assert_eq!(route.candidates[0].base_url, "http://127.0.0.1:7/v1");
    assert_eq!(route.candidates[0].api_key.as_deref(), Some("sk-test-key"));
}

#[test]
fn errors_name_the_key() {
    let cases = [
        ("listen = \"nowhere\"\n", "listen"),
        ("lissen = \"x\"\n", "lissen"),
        (
            "[[candidate]]\nid = \"a\"\nprotocol = \"opneai\"\nbase_url = \"http://x\"\n[[route]]\nid=\"r\"\nmodels=[\"*\"]\ncandidates=[\"a\"]\n",
            "candidate.a.protocol",
        ),
        (
            "[[candidate]]\nid = \"a\"\nprotocol = \"openai\"\nbase_url = \"ftp://x\"\n",
            "candidate.a.base_url",
        ),
        (
            "[[candidate]]\nid = \"a\"\nprotocol = \"openai\"\nbase_url = \"http://x\"\n[[route]]\nid=\"r\"\nmodels=[\"*\"]\ncandidates=[\"b\"]\n",
            "route.r.candidates",
        ),
        (
            "[policy.rate_limit]\nexhausted = \"later\"\n",
            "policy.rate_limit.exhausted",
        ),
        (
            "[policy.transient]\nretries = \"lots\"\n",
            "policy.transient.retries",
        ),
        ("listen = \"0.0.0.0:8080\"\n", "listen"),
        (
            "[[candidate]]\nid = \"a b\"\nprotocol = \"openai\"\nbase_url = \"http://x\"\n",
            "candidate.a b.id",
        ),
    ];
    for (text, key) in cases {
        let e = load_text(text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{text}: {e}");
        assert!(e.to_string().starts_with("rebound.toml: "), "{e}");
        assert!(!e.to_string().contains('\n'));
    }
}

#[test]
fn per_candidate_overrides_merge_over_the_default() {
    let text = r#"
[policy.rate_limit]
retries = 3

[[candidate]]
id = "a"
protocol = "openai"
base_url = "http://127.0.0.1:1/v1"
policy = { rate_limit = { exhausted = "skip", reset_wait_max_ms = 60000 } }

[[candidate]]
id = "b"
protocol = "openai"
base_url = "http://127.0.0.1:2/v1"
policy = { preset = "skip" }

[[route]]
id = "r"
models = ["gpt-*"]
candidates = ["a", "b"]
"#;
    let c = load_text(text).unwrap();
    let route = c.route("gpt-4o", Protocol::OpenAi).unwrap();
    let a = &route.candidates[0].policy.rate_limit;
    assert_eq!(a.retry.map(|r| r.limit), Some(Limit::Count(3)));
    assert_eq!(a.exhausted, Exhausted::Skip);
    assert_eq!(a.reset_wait.map(|r| r.max), Some(Duration::from_secs(60)));
    assert_eq!(*route.candidates[1].policy, Policy::immediate_skip());
    assert!(c.route("claude", Protocol::OpenAi).is_none());
}

#[test]
fn the_example_config_loads() {
    let text = include_str!("../../../../examples/rebound.toml");
    let c = load(
        "examples/rebound.toml",
        text,
        &Overrides::default(),
        &[("X", "y")],
    )
    .unwrap();
    let gpt = c.route("gpt-4o", Protocol::OpenAi).unwrap();
    assert_eq!(gpt.candidates.len(), 2);
    assert_eq!(
        gpt.candidates[1].model.as_deref(),
        Some("openai/gpt-4o-mini")
    );
    // The route defaults (D3): openai falls back after two retries, openrouter is patient.
    let policies = gpt.policies();
    assert_eq!(*policies[0], Policy::before_fallback());
    assert_eq!(*policies[1], Policy::interactive());
    assert!(c.route("claude-sonnet-4-5", Protocol::Anthropic).is_some());
    assert!(c.route("llama", Protocol::OpenAi).is_none());
}

#[test]
fn policy_documents_and_legacy_maps_in_the_config() {
    let text = r#"
[[candidate]]
id = "versioned"
protocol = "openai"
base_url = "http://127.0.0.1:1/v1"
policy = { version = 1, rate_limit = { retries = 2, initial_ms = 500, cap_ms = 4000, exhausted = "skip" }, hard = { reset_wait_max_ms = 60000, exhausted = "skip" } }

[[candidate]]
id = "legacy"
protocol = "openai"
base_url = "http://127.0.0.1:2/v1"
policy = { action = "try_next" }

[[candidate]]
id = "per-code"
protocol = "openai"
base_url = "http://127.0.0.1:3/v1"
policy = { rules = { overloaded = "retry_same" } }

[[route]]
id = "r"
models = ["*"]
candidates = ["versioned", "legacy", "per-code"]
"#;
    let c = load_text(text).unwrap();
    let route = c.route("m", Protocol::OpenAi).unwrap();
    let versioned = &route.candidates[0].policy;
    assert_eq!(
        versioned.rate_limit.retry.map(|r| r.limit),
        Some(Limit::Count(2))
    );
    assert_eq!(
        versioned.hard.reset_wait.map(|r| r.max),
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        versioned.transient,
        Policy::interactive().transient,
        "left out: the default"
    );
    assert_eq!(*route.candidates[1].policy, Policy::immediate_skip());
    assert_eq!(
        route.candidates[2].policy.transient.retry.map(|r| r.limit),
        Some(Limit::Count(1))
    );

    let conflict = text.replace(
        "rules = { overloaded = \"retry_same\" }",
        "rules = { overloaded = \"retry_same\", bad_gateway = \"stop\" }",
    );
    let e = load_text(&conflict).unwrap_err();
    assert_eq!(
        e.key.as_deref(),
        Some("candidate.per-code.policy.rules.overloaded"),
        "{e}"
    );
    assert!(e.message.contains("bad_gateway"), "{e}");
}

#[test]
fn patterns() {
    assert!(matches_pattern("*", "anything"));
    assert!(matches_pattern("gpt-*", "gpt-4o"));
    assert!(matches_pattern("*-mini", "gpt-4o-mini"));
    assert!(matches_pattern("claude-*-4*", "claude-sonnet-4-5"));
    assert!(!matches_pattern("gpt-*", "o3"));
    assert!(matches_pattern("o3", "o3"));
    assert!(!matches_pattern("a*a", "a"));
    assert!(matches_pattern("a**b", "ab"));
    assert!(matches_pattern("a*b*c", "a-b-c"));
    assert!(!matches_pattern("a*b*c", "a-c-b"));
    assert!(matches_pattern("*b*", "b"));
}

#[test]
fn non_loopback_needs_gateway_keys_and_upstream_keys() {
    let text = "listen = \"0.0.0.0:8080\"\ngateway_key_envs = [\"GW\"]\n[[candidate]]\nid=\"a\"\nprotocol=\"openai\"\nbase_url=\"http://x/v1\"\napi_key_env=\"MISSING\"\n[[route]]\nid=\"r\"\nmodels=[\"*\"]\ncandidates=[\"a\"]\n";
    let e = load_env(text, [("GW", "gw-key-1,gw-key-2")]).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("candidate.a.api_key_env"));
    let ok = text.replace("api_key_env=\"MISSING\"\n", "");
    let c = load_env(&ok, [("GW", "gw-key-1, gw-key-2")]).unwrap();
    assert_eq!(c.gateway_keys, ["gw-key-1", "gw-key-2"]);
}

/// What every request needs from a candidate is built at load, so what cannot be built is a
/// load error naming the key, never a failure on each request.
#[test]
fn header_values_are_checked_at_load() {
    let text = "[[candidate]]\nid=\"a\"\nprotocol=\"openai\"\nbase_url=\"http://x/v1\"\napi_key_env=\"KEY\"\n[[route]]\nid=\"r\"\nmodels=[\"*\"]\ncandidates=[\"a\"]\n";
    let e = load_env(text, [("KEY", "sk-line\nbreak")]).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("candidate.a.api_key_env"), "{e}");
    assert!(e.to_string().contains("`KEY`"), "{e}");
    assert!(!e.to_string().contains("sk-line"), "the key leaked: {e}");

    let e = load_text(&text.replace("id=\"r\"", "id=\"r\\u0001\"")).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("route.r\u{1}.id"), "{e}");

    let c = load_env(text, [("KEY", "sk-fine-key")]).unwrap();
    let route = c.route("m", Protocol::OpenAi).unwrap();
    let candidate = &route.candidates[0];
    assert_eq!(candidate.endpoint(), "http://x/v1/chat/completions");
    let mut headers = http::HeaderMap::new();
    candidate.authorize(&mut headers);
    assert_eq!(headers["authorization"], "Bearer sk-fine-key");
    assert!(headers["authorization"].is_sensitive());
    assert_eq!(route.id_header(), "r");
    assert_eq!(candidate.id_header(), "a");
}

/// Lookups share the per-protocol views made at load.
#[test]
fn routes_are_found_by_model_and_by_id_per_protocol() {
    let text = "[[candidate]]\nid=\"o\"\nprotocol=\"openai\"\nbase_url=\"http://x/v1\"\n[[candidate]]\nid=\"a\"\nprotocol=\"anthropic\"\nbase_url=\"http://y\"\n[[route]]\nid=\"claude\"\nmodels=[\"claude-*\"]\ncandidates=[\"a\"]\n[[route]]\nid=\"mixed\"\nmodels=[\"*\"]\ncandidates=[\"o\", \"a\"]\n";
    let c = load_text(text).unwrap();
    // The first route matches the model but has no OpenAI candidate: the next one serves.
    let r = c.route("claude-x", Protocol::OpenAi).unwrap();
    assert_eq!((r.id.as_str(), r.candidates.len()), ("mixed", 1));
    assert_eq!(r.candidates[0].id, "o");
    let r = c.route("claude-x", Protocol::Anthropic).unwrap();
    assert_eq!(r.id, "claude");
    assert!(Arc::ptr_eq(
        &r,
        &c.route("claude-y", Protocol::Anthropic).unwrap()
    ));
    let r = c.routes.by_id("mixed", Protocol::Anthropic).unwrap();
    assert_eq!(
        r.candidates
            .iter()
            .map(|c| c.id.as_str())
            .collect::<Vec<_>>(),
        ["a"]
    );
    assert!(c.routes.by_id("claude", Protocol::OpenAi).is_none());
    assert!(c.routes.by_id("nope", Protocol::OpenAi).is_none());
    assert_eq!(c.routes.len(), 2);
}

/// `Host` is made once per candidate, as the HTTP client would make it on each request.
#[test]
fn the_host_header_is_made_once_as_the_client_would() {
    for (base, http2, host) in [
        ("http://x/v1", false, Some("x")),
        ("http://x:80/v1", false, Some("x")),
        ("http://x:8080/v1", false, Some("x:8080")),
        ("https://y:443", false, Some("y")),
        ("https://y:80", false, Some("y:80")),
        ("https://y:8443", false, Some("y:8443")),
        ("http://x:8080/v1", true, None),
    ] {
        let text = format!(
            "[[candidate]]\nid=\"a\"\nprotocol=\"openai\"\nbase_url=\"{base}\"\nhttp2={http2}\n[[route]]\nid=\"r\"\nmodels=[\"*\"]\ncandidates=[\"a\"]\n"
        );
        let c = load_text(&text).unwrap();
        let route = c.route("m", Protocol::OpenAi).unwrap();
        let made = route.candidates[0].host();
        assert_eq!(made.as_ref().map(|h| h.to_str().unwrap()), host, "{base}");
    }
}

/// One name for durable state: a new installation keeps its jobs in `jobs.db`; one whose jobs
/// file still has the old name keeps using it rather than starting empty.
#[test]
fn the_default_jobs_file_is_jobs_db_unless_an_older_routes_db_is_there() {
    struct Data(String);
    impl Env for Data {
        fn var(&self, name: &str) -> Option<String> {
            (name == "XDG_DATA_HOME").then(|| self.0.clone())
        }
    }
    let data = std::env::temp_dir().join(format!("rebound-store-path-{}", std::process::id()));
    let dir = data.join("rebound");
    std::fs::create_dir_all(&dir).unwrap();
    let env = Data(data.to_str().unwrap().to_owned());
    assert_eq!(default_store_path(&env), dir.join("jobs.db"));
    std::fs::write(dir.join("routes.db"), b"").unwrap();
    assert_eq!(default_store_path(&env), dir.join("routes.db"));
    std::fs::write(dir.join("jobs.db"), b"").unwrap();
    assert_eq!(default_store_path(&env), dir.join("jobs.db"));
    std::fs::remove_dir_all(&data).unwrap();
}

#[test]
fn the_listen_backlog_and_stripped_headers_are_configured() {
    let text =
        format!("listen_backlog = 64\nstrip_headers = [\"X-Tenant-Token\"]\n{DEFAULT_CONFIG}");
    let c = load_text(&text).unwrap();
    assert_eq!(c.listen_backlog, 64);
    assert_eq!(
        c.strip_headers,
        [http::HeaderName::from_static("x-tenant-token")]
    );
    let e = load_text(&format!("listen_backlog = 0\n{DEFAULT_CONFIG}")).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("listen_backlog"), "{e}");
    let e = load_text(&format!(
        "strip_headers = [\"bad header\"]\n{DEFAULT_CONFIG}"
    ))
    .unwrap_err();
    assert_eq!(e.key.as_deref(), Some("strip_headers[0]"), "{e}");
    assert!(load_text(DEFAULT_CONFIG).unwrap().listen_backlog <= super::DEFAULT_LISTEN_BACKLOG);
}

#[test]
fn the_banner_tells_where_each_key_comes_from() {
    let text = "[[candidate]]\nid=\"keyed\"\nprotocol=\"openai\"\nbase_url=\"http://x/v1\"\napi_key_env=\"KEY\"\n[[candidate]]\nid=\"unset\"\nprotocol=\"openai\"\nbase_url=\"http://x/v1\"\napi_key_env=\"UNSET\"\n[[candidate]]\nid=\"keyless\"\nprotocol=\"openai\"\nbase_url=\"http://x/v1\"\n[[route]]\nid=\"r\"\nmodels=[\"*\"]\ncandidates=[\"keyed\", \"unset\", \"keyless\"]\n";
    let c = load_env(text, [("KEY", "sk-fine-key")]).unwrap();
    let sources: Vec<String> = c
        .routes
        .iter()
        .next()
        .unwrap()
        .candidates
        .iter()
        .map(|c| c.key_source(false))
        .collect();
    assert_eq!(
        sources,
        [
            "key from $KEY",
            "$UNSET unset: the client's key",
            "the client's key"
        ]
    );
    let keyless = &c.routes.iter().next().unwrap().candidates[2];
    assert_eq!(
        keyless.key_source(true),
        "no key: client keys stay with rebound under gateway keys"
    );
}

const TWO_OPENAI: &str = r#"
[[candidate]]
id = "a"
protocol = "openai"
base_url = "http://127.0.0.1:1/v1"

[[candidate]]
id = "b"
protocol = "openai"
base_url = "http://127.0.0.1:2/v1"

[[route]]
id = "r"
models = ["gpt-*"]
candidates = ["a", "b"]

[[route]]
id = "solo"
models = ["o3"]
candidates = ["a"]
"#;

#[test]
fn a_candidate_with_a_fallback_after_it_defaults_to_the_short_pipeline_and_the_last_to_patience() {
    let c = load_text(TWO_OPENAI).unwrap();
    let route = c.route("gpt-4o", Protocol::OpenAi).unwrap();
    let policies = route.policies();
    assert_eq!(*policies[0], Policy::before_fallback());
    assert_eq!(*policies[1], Policy::interactive());
    // The same candidate alone on a route keeps the interactive preset.
    let solo = c.route("o3", Protocol::OpenAi).unwrap();
    assert_eq!(*solo.policies()[0], Policy::interactive());
    // A route's view of one protocol has its own last candidate.
    let mixed = TWO_OPENAI.replacen(
        "protocol = \"openai\"\nbase_url = \"http://127.0.0.1:2/v1\"",
        "protocol = \"anthropic\"\nbase_url = \"http://127.0.0.1:2\"",
        1,
    );
    let c = load_text(&mixed).unwrap();
    let openai = c.route("gpt-4o", Protocol::OpenAi).unwrap();
    assert_eq!(*openai.policies()[0], Policy::interactive());
}

#[test]
fn a_configured_policy_overrides_the_route_defaults() {
    let own = TWO_OPENAI.replacen(
        "base_url = \"http://127.0.0.1:1/v1\"",
        "base_url = \"http://127.0.0.1:1/v1\"\npolicy = { preset = \"interactive\" }",
        1,
    );
    let c = load_text(&own).unwrap();
    let route = c.route("gpt-4o", Protocol::OpenAi).unwrap();
    assert_eq!(*route.policies()[0], Policy::interactive());
    // A policy for every candidate is a choice too.
    let every = format!("[policy.transient]\nretries = 1\n{TWO_OPENAI}");
    let c = load_text(&every).unwrap();
    let route = c.route("gpt-4o", Protocol::OpenAi).unwrap();
    let policies = route.policies();
    assert_eq!(policies[0], policies[1]);
    assert_eq!(
        policies[0].transient.retry.map(|r| r.limit),
        Some(Limit::Count(1))
    );
}

#[test]
fn a_switch_names_a_repairable_code_and_a_candidate_of_its_route() {
    let with = |switch: &str, window: &str| {
        TWO_OPENAI
            .replacen(
                "candidates = [\"a\", \"b\"]",
                &format!("candidates = [\"a\", \"b\"]\nswitch = {{ {switch} }}"),
                1,
            )
            .replacen(
                "base_url = \"http://127.0.0.1:2/v1\"",
                &format!("base_url = \"http://127.0.0.1:2/v1\"\n{window}"),
                1,
            )
    };
    let c = load_text(&with(
        "context_overflow = \"b\"",
        "context_window = 1000000",
    ))
    .unwrap();
    let route = c.route("gpt-4o", Protocol::OpenAi).unwrap();
    let switches = route.switches();
    assert_eq!(switches.windows, [None, Some(1_000_000)]);
    assert_eq!(
        switches.target(&rebound_core::Code::new("context_overflow"), 0, 2),
        Some(1)
    );
    for (switch, window, key, says) in [
        (
            "invalid_request = \"b\"",
            "",
            "route.r.switch.invalid_request",
            "not a failure another model can repair",
        ),
        (
            "content_filter = \"b\"",
            "",
            "route.r.switch.content_filter",
            "not a failure another model can repair",
        ),
        (
            "context_overflow = \"c\"",
            "",
            "route.r.switch.context_overflow",
            "`c` is not one of the route's candidates",
        ),
        (
            "context_overflow = []",
            "",
            "route.r.switch.context_overflow",
            "names no candidate",
        ),
        (
            "context_overflow = \"b\"",
            "context_window = 0",
            "candidate.b.context_window",
            "more than 0",
        ),
    ] {
        let e = load_text(&with(switch, window)).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{e}");
        assert!(e.to_string().contains(says), "{e}");
        assert!(e.to_string().starts_with("rebound.toml: "), "{e}");
    }
}

/// The commented-out `[health]` and `[timeouts]` blocks of the example, uncommented: the
/// defaults they show are the defaults (S1, S5).
#[test]
fn the_example_shows_the_true_health_and_timeout_defaults() {
    let text = include_str!("../../../../examples/rebound.toml");
    let block = |table: &str| -> String {
        let mut lines = text
            .lines()
            .skip_while(|l| *l != format!("# [{table}]"))
            .take_while(|l| l.starts_with('#'));
        lines
            .by_ref()
            .map(|l| l.trim_start_matches('#').trim_start())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let uncommented = format!(
        "{}\n{}\n[[candidate]]\nid = \"a\"\nprotocol = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\n[[route]]\nid = \"r\"\nmodels = [\"*\"]\ncandidates = [\"a\"]\n",
        block("health"),
        block("timeouts")
    );
    assert!(uncommented.contains("[health]") && uncommented.contains("[timeouts]"));
    let c = load(
        "example",
        &uncommented,
        &Overrides::default(),
        &[("X", "y")],
    )
    .unwrap();
    assert_eq!(c.health, Some(rebound_core::HealthSettings::default()));
    assert_eq!(c.client_timeouts(), rebound_runtime::Timeouts::default());
}

#[test]
fn a_candidates_timeouts_stand_over_the_gateways() {
    let text = r#"
[timeouts]
first_content_ms = 30000
stream_idle_ms = 20000

[[candidate]]
id = "slow"
protocol = "openai"
base_url = "http://127.0.0.1:1/v1"
timeouts = { first_content_ms = 600000 }

[[route]]
id = "r"
models = ["*"]
candidates = ["slow"]
"#;
    let c = load("t.toml", text, &Overrides::default(), &[("X", "y")]).unwrap();
    let route = c.route("m", Protocol::OpenAi).unwrap();
    let t = route.candidates[0]
        .timeouts
        .resolve(rebound_runtime::Timeouts::default());
    assert_eq!(t.first_content, Duration::from_secs(600));
    assert_eq!(t.idle, Duration::from_secs(20));
    assert_eq!(t.first_byte, Duration::from_secs(600));
    let bad = text.replace("first_content_ms = 600000", "stream_idle_ms = 0");
    let e = load("t.toml", &bad, &Overrides::default(), &[("X", "y")]).unwrap_err();
    assert_eq!(
        e.key.as_deref(),
        Some("candidate.slow.timeouts.stream_idle_ms")
    );
}

#[test]
fn a_key_pool_is_checked_and_every_key_is_a_secret() {
    let text = |keys: &str| {
        format!(
            "[[candidate]]\nid = \"p\"\nprotocol = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n{keys}\n\n[[route]]\nid = \"r\"\nmodels = [\"*\"]\ncandidates = [\"p\"]\n"
        )
    };
    let env = [
        ("K1", "sk-pool-key-one-0123456789"),
        ("K2", "sk-pool-key-two-0123456789"),
    ];
    let c = load(
        "t.toml",
        &text("api_key_envs = [\"K1\", \"K2\"]"),
        &Overrides::default(),
        &env,
    )
    .unwrap();
    let route = c.route("m", Protocol::OpenAi).unwrap();
    assert_eq!(route.candidates[0].keys(), 2);
    assert_eq!(route.candidates[0].key_source(false), "a pool of 2 keys");
    let secrets = c.secrets();
    assert!(secrets.contains(&env[0].1.to_owned()) && secrets.contains(&env[1].1.to_owned()));
    let mut headers = http::HeaderMap::new();
    route.candidates[0].authorize_with(&mut headers, 1);
    assert_eq!(
        headers["authorization"],
        "Bearer sk-pool-key-two-0123456789"
    );
    for (keys, message) in [
        (
            "api_key_env = \"K1\"\napi_key_envs = [\"K1\", \"K2\"]",
            "not both",
        ),
        ("api_key_envs = [\"K1\"]", "two keys or more"),
        ("api_key_envs = [\"K1\", \"UNSET\"]", "`UNSET` is not set"),
    ] {
        let e = load("t.toml", &text(keys), &Overrides::default(), &env).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("candidate.p.api_key_envs"), "{keys}");
        assert!(e.message.contains(message), "{keys}: {}", e.message);
        assert!(!e.to_string().contains("sk-pool"), "{e}");
    }
}

#[test]
fn a_shared_postgres_store_takes_its_password_from_the_environment() {
    let text = format!(
        "store = \"postgres://rebound@db.internal:5432/rebound?sslmode=require\"\nstore_password_env = \"REBOUND_PG\"\nstore_ca_file = \"/etc/rebound/db-ca.pem\"\nstore_lease_ms = 4000\n{DEFAULT_CONFIG}"
    );
    let c = load_env(&text, [("REBOUND_PG", "pg-secret-9d2e")]).unwrap();
    let shared = c.shared_store.as_ref().unwrap();
    assert_eq!(
        shared.url,
        "postgres://rebound@db.internal:5432/rebound?sslmode=require"
    );
    assert_eq!(
        shared.ca_file.as_deref(),
        Some(std::path::Path::new("/etc/rebound/db-ca.pem"))
    );
    assert_eq!(shared.password.as_deref(), Some("pg-secret-9d2e"));
    assert_eq!(shared.lease, std::time::Duration::from_millis(4000));
    // A secret from now on, and never in a debug print.
    assert!(c.secrets().contains(&"pg-secret-9d2e".to_owned()));
    assert!(!format!("{c:?}").contains("pg-secret-9d2e"));
    // SQLite stays the default.
    assert!(load_text(DEFAULT_CONFIG).unwrap().shared_store.is_none());
    let c = load_text(&format!(
        "store = \"postgresql://rebound@127.0.0.1/jobs\"\n{DEFAULT_CONFIG}"
    ))
    .unwrap();
    assert_eq!(c.shared_store.unwrap().lease, DEFAULT_LEASE);
}

#[test]
fn a_bad_store_setting_names_the_field_and_never_echoes_a_password() {
    for (settings, field, says) in [
        (
            "store = \"mysql://u@h/db\"",
            "store",
            "must be a PostgreSQL URL",
        ),
        (
            "store = \"postgres://rebound:hunter2-secret@h/db\"",
            "store",
            "carries a password",
        ),
        (
            "store = \"postgres://h/db?password=hunter2-secret\"",
            "store",
            "carries a password",
        ),
        (
            "store = \"postgres://u@h/db\"\nstore_path = \"jobs.db\"",
            "store",
            "not both",
        ),
        (
            "store = \"postgres://u@h/db\"\nstore_password_env = \"NOPE_UNSET\"",
            "store_password_env",
            "NOPE_UNSET is not set",
        ),
        (
            "store = \"postgres://u@h/db\"\nstore_lease_ms = 0",
            "store_lease_ms",
            "more than 0",
        ),
        (
            "store_lease_ms = 5000",
            "store_lease_ms",
            "PostgreSQL `store` only",
        ),
        (
            "store_ca_file = \"ca.pem\"",
            "store_ca_file",
            "PostgreSQL `store` only",
        ),
        ("store = \"postgres:///db\"", "store", "names no host"),
    ] {
        let e = load_text(&format!("{settings}\n{DEFAULT_CONFIG}")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(field), "{settings}: {e}");
        assert!(e.message.contains(says), "{settings}: {e}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}

#[test]
fn upstream_ca_file_is_read_at_load_and_a_bad_one_names_the_key_and_the_file() {
    let ca = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../runtime/src/http/h1/testdata/ca.crt"
    );
    let config = load_text(&format!("upstream_ca_file = \"{ca}\"\n{DEFAULT_CONFIG}")).unwrap();
    assert_eq!(config.upstream_roots.len(), 1);
    assert!(load_text(DEFAULT_CONFIG).unwrap().upstream_roots.is_empty());
    let not_pem = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    for (value, says) in [
        (String::new(), "is empty".to_owned()),
        (
            "no-such-dir/ca.pem".to_owned(),
            "cannot read no-such-dir/ca.pem".to_owned(),
        ),
        (
            not_pem.to_owned(),
            format!("{not_pem}: holds no PEM certificate"),
        ),
    ] {
        let e =
            load_text(&format!("upstream_ca_file = \"{value}\"\n{DEFAULT_CONFIG}")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("upstream_ca_file"), "{e}");
        assert!(e.message.contains(&says), "{e}");
    }
}
