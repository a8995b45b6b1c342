use crate::config::{Config, ConfigError, DEFAULT_CONFIG, Overrides, load};

/// The default configuration under `head` (top-level keys), in the environment `env`.
fn load_env<const N: usize>(head: &str, env: [(&str, &str); N]) -> Result<Config, ConfigError> {
    let text = format!("{head}\n{DEFAULT_CONFIG}");
    load("rebound.toml", &text, &Overrides::default(), &env)
}

#[test]
fn the_environments_proxies_are_used_without_upstream_proxy_and_their_password_is_a_secret() {
    let config = load_env(
        "",
        [
            ("HTTPS_PROXY", "http://svc:p%40ss-word@proxy.corp:3128"),
            ("NO_PROXY", "internal.corp"),
        ],
    )
    .unwrap();
    assert_eq!(
        config.upstream_proxies.describe(),
        [
            "http://proxy.corp:3128 (with credentials) for https:// upstreams (HTTPS_PROXY)",
            "not for internal.corp (NO_PROXY)"
        ]
    );
    let secrets = config.secrets();
    for password in ["p%40ss-word", "p@ss-word"] {
        assert!(secrets.iter().any(|s| s == password), "{password}");
    }
    assert!(load_env("", []).unwrap().upstream_proxies.is_empty());
}

#[test]
fn upstream_proxy_overrides_the_environment_and_none_reaches_upstreams_directly() {
    let env = [("HTTPS_PROXY", "http://env-proxy:3128")];
    let config = load_env(
        "upstream_proxy = \"socks5h://127.0.0.1:1080\"\nupstream_no_proxy = \"internal.corp\"",
        env,
    )
    .unwrap();
    assert_eq!(
        config.upstream_proxies.describe(),
        [
            "socks5h://127.0.0.1:1080 for every upstream",
            "not for internal.corp"
        ]
    );
    let direct = load_env("upstream_proxy = \"none\"", env).unwrap();
    assert!(direct.upstream_proxies.is_empty());
}

#[test]
fn a_proxy_that_cannot_be_used_stops_rebound_naming_the_key_or_the_variable() {
    for (head, env, key, says) in [
        (
            "upstream_proxy = \"https://user:hunter2@proxy.corp:3128\"",
            None,
            Some("upstream_proxy"),
            "a proxy reached over TLS (https://) is not supported",
        ),
        (
            "upstream_proxy = \" \"",
            None,
            Some("upstream_proxy"),
            "is empty",
        ),
        (
            "upstream_no_proxy = \"internal.corp\"",
            None,
            Some("upstream_no_proxy"),
            "needs upstream_proxy",
        ),
        (
            "upstream_proxy = \"none\"\nupstream_no_proxy = \"internal.corp\"",
            None,
            Some("upstream_no_proxy"),
            "has no use with upstream_proxy = \"none\"",
        ),
        (
            "",
            Some(("https_proxy", "socks4://user:hunter2@proxy.corp:1080")),
            None,
            "the environment variable https_proxy: the scheme socks4:// is not supported",
        ),
    ] {
        let e = match env {
            Some(pair) => load_env(head, [pair]),
            None => load_env(head, []),
        }
        .unwrap_err();
        assert_eq!(e.key.as_deref(), key, "{e}");
        assert!(e.message.contains(says), "{e}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
