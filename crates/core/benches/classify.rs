//! Classification and delay micro-benchmarks against the full shipped catalogue.
//!
//! Run: `cargo bench -p rebound-core --bench classify`. Divan prints time per call and
//! items per second; the target is ≥ 200,000 classifications per second on one core for a
//! 1 KiB body. A closing line measures that body again next to a reference taken in the same
//! run: a `serde_json` parse of the same bytes, the least a gateway does with an error body.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "benchmark code"
)]

use std::hint::black_box;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use divan::Bencher;
use divan::counter::{BytesCount, ItemsCount};
use rebound_core::backoff::Jitter;
use rebound_core::retry_after::header_hint;
use rebound_core::{Caller, Catalogue, Evidence, Headers, Policy};

fn main() {
    divan::main();
    summary();
}

/// Calls per second of `f` over one window of 200 ms.
#[expect(clippy::disallowed_methods, reason = "a benchmark measures wall time")]
fn window(f: &mut impl FnMut()) -> f64 {
    let mut calls = 0u64;
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(200) {
        for _ in 0..256 {
            f();
        }
        calls += 256;
    }
    calls as f64 / started.elapsed().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[expect(clippy::print_stdout, reason = "the benchmark's closing figures")]
fn summary() {
    let catalogue = &*CATALOGUE;
    let evidence = &BODIES.iter().find(|(n, _)| *n == "openai_429").unwrap().1;
    let text = evidence.bounded_text();
    let mut classify = || {
        black_box(catalogue.classify(black_box(evidence), now()));
    };
    let mut parse = || {
        black_box(serde_json::from_slice::<serde_json::Value>(black_box(text.as_bytes())).ok());
    };
    // Windows of the two alternate, so a busy machine slows both alike and their ratio holds
    // even when the rates do not; one window of each warms up first.
    window(&mut classify);
    window(&mut parse);
    let pairs: Vec<(f64, f64)> = (0..7)
        .map(|_| (window(&mut classify), window(&mut parse)))
        .collect();
    let rate = median(pairs.iter().map(|p| p.0).collect());
    let reference = median(pairs.iter().map(|p| p.1).collect());
    let ratio = median(pairs.iter().map(|p| p.0 / p.1).collect());
    println!(
        "1 KiB body ({} bytes): {rate:.0} classifications per second on one core (target 200000, {:.2} of it); \
         a serde_json parse of the same body in the same run: {reference:.0} per second; \
         ratio classify/parse {ratio:.2} (median of 7 alternating windows)",
        text.len(),
        rate / 200_000.0,
    );
    status_less(catalogue);
    corpus_in_turn(catalogue);
}

/// The same 1 KiB body as an SDK prints it, with its status only in the text: the text-status
/// patterns are scanned too (C8).
#[expect(clippy::print_stdout, reason = "the benchmark's closing figures")]
fn status_less(catalogue: &Catalogue) {
    let mut evidence = BODIES
        .iter()
        .find(|(n, _)| *n == "openai_429")
        .unwrap()
        .1
        .clone();
    let body = evidence.body.take().unwrap_or_default();
    evidence.body = Some(format!("openai.RateLimitError: Error code: 429 - {body}"));
    evidence.status = None;
    evidence.headers = Headers::default();
    let mut classify = || {
        black_box(catalogue.classify(black_box(&evidence), now()));
    };
    window(&mut classify);
    let rate = median((0..7).map(|_| window(&mut classify)).collect());
    println!(
        "the same body with its status only in its text ({} bytes): {rate:.0} classifications per second",
        evidence.bounded_text().len()
    );
}

/// Every tenth text of the corpus (real errors from public threads), each classified once in
/// turn, then another tenth: what a gateway meets when the errors vary, where the bodies above
/// are classified again and again.
#[expect(clippy::print_stdout, reason = "the benchmark's closing figures")]
#[expect(
    clippy::disallowed_methods,
    reason = "a benchmark measures wall time and reads the repository's corpus"
)]
fn corpus_in_turn(catalogue: &Catalogue) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../catalogue/corpus");
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let mut texts: Vec<Evidence> = Vec::new();
    for path in paths {
        let table: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
        for item in table["item"].as_array().unwrap() {
            texts.push(Evidence {
                status: item
                    .get("status")
                    .and_then(toml::Value::as_integer)
                    .and_then(|s| u16::try_from(s).ok()),
                body: item
                    .get("body")
                    .and_then(toml::Value::as_str)
                    .map(str::to_owned),
                ..Evidence::default()
            });
        }
    }
    // The first tenth meets the lazy DFA's cache while it fills; the second, other texts,
    // meets it full, as a long-running gateway does.
    for (pass, offset) in [("first", 0), ("then", 5)] {
        let sample: Vec<&Evidence> = texts.iter().skip(offset).step_by(10).collect();
        let bytes: usize = sample.iter().map(|e| e.bounded_text().len()).sum();
        let started = std::time::Instant::now();
        for evidence in &sample {
            black_box(catalogue.classify(black_box(evidence), now()));
        }
        let elapsed = started.elapsed().as_secs_f64();
        println!(
            "{pass}: {} corpus texts in turn (mean {} bytes): {:.0} classifications per second, {:.0} µs each",
            sample.len(),
            bytes / sample.len().max(1),
            sample.len() as f64 / elapsed,
            elapsed * 1e6 / sample.len().max(1) as f64
        );
    }
}

static CATALOGUE: LazyLock<Catalogue> = LazyLock::new(|| Catalogue::shipped().unwrap());

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_796_050_800)
}

fn evidence(provider: &str, status: u16, headers: &[(&str, &str)], body: String) -> Evidence {
    Evidence {
        provider: Some(provider.to_owned()),
        status: Some(status),
        headers: headers.iter().copied().collect(),
        body: Some(body),
        ..Evidence::default()
    }
}

fn gemini_429() -> Evidence {
    let violations: Vec<String> = (0..6)
        .map(|i| format!(r#"{{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count","quotaId":"GenerateContentInputTokensPerModelPerMinute-FreeTier","quotaDimensions":{{"location":"global","model":"gemini-2.5-flash-{i}"}},"quotaValue":"250000"}}"#))
        .collect();
    let body = format!(
        r#"{{"error":{{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[{{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{}]}},{{"@type":"type.googleapis.com/google.rpc.Help","links":[{{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}}]}},{{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"17s"}}]}}}}"#,
        violations.join(",")
    );
    evidence(
        "gemini",
        429,
        &[("content-type", "application/json; charset=UTF-8")],
        body,
    )
}

fn cloudflare_524() -> Evidence {
    let style = "body{margin:0;padding:0}#cf-wrapper{font-family:system-ui,-apple-system,BlinkMacSystemFont,\"Segoe UI\",Roboto,\"Helvetica Neue\",Arial,sans-serif}".repeat(12);
    let body = format!(
        r#"<!DOCTYPE html>
<html class="no-js" lang="en-US"><head>
<title>api.example-relay.com | 524: A timeout occurred</title>
<meta charset="UTF-8" /><meta http-equiv="Content-Type" content="text/html; charset=UTF-8" />
<meta name="viewport" content="width=device-width,initial-scale=1" />
<style>{style}</style></head>
<body><div id="cf-wrapper"><div id="cf-error-details" class="p-0">
<header class="mx-auto pt-10 lg:pt-6 lg:px-8 w-240 lg:w-full mb-8">
<h1 class="inline-block sm:block sm:mb-2 font-light text-60 lg:text-4xl text-black-dark leading-tight mr-2">A timeout occurred</h1>
<span class="inline-block">Error code 524</span>
<div class="clearfix md:text-center">Visit <a href="https://www.cloudflare.com/5xx-error-landing?utm_source=errorcode_524">cloudflare.com</a> for more information.</div>
</header>
<div class="my-8 bg-gradient-gray"><div class="w-240 lg:w-full mx-auto"><div class="clearfix md:px-8">
<p>The origin web server timed out responding to this request.</p>
<p>The likely cause is an overloaded background task, database or application, stressing the resources on your web server.</p>
</div></div></div>
<div class="cf-error-footer cf-wrapper w-240 lg:w-full py-10 sm:py-4 sm:px-8 mx-auto text-center sm:text-left border-solid border-0 border-t border-gray-300">
<p class="text-13"><span class="cf-footer-item sm:block sm:mb-1">Cloudflare Ray ID: <strong class="font-semibold">8f1a2b3c4d5e6f70</strong></span>
<span class="cf-footer-item sm:block sm:mb-1">Performance &amp; security by Cloudflare</span></p>
</div></div></div></body></html>"#
    );
    evidence(
        "relay",
        524,
        &[("server", "cloudflare"), ("cf-ray", "8f1a2b3c4d5e6f70-FRA")],
        body,
    )
}

fn litellm_traceback() -> Evidence {
    let frames: String = (0..14)
        .map(|i| format!("  File \"/usr/lib/python3.11/site-packages/litellm/llms/custom_httpx/http_handler.py\", line {}, in post\\n    response.raise_for_status()\\n", 160 + i))
        .collect();
    let body = format!(
        r#"{{"error":{{"message":"litellm.ServiceUnavailableError: AnthropicException - Overloaded. Handle with `litellm.ServiceUnavailableError`.\nTraceback (most recent call last):\n{frames}httpx.HTTPStatusError: Server error '529 ' for url 'https://api.anthropic.com/v1/messages'","type":null,"param":null,"code":"503"}}}}"#
    );
    evidence("relay", 503, &[], body)
}

fn openai_429_pretty() -> Evidence {
    let body = format!(
        "{{\n    \"error\": {{\n        \"message\": \"Rate limit reached for gpt-4o in organization org-AbCdEf123 on tokens per min (TPM): Limit 30000, Used 29802, Requested 1290. Please try again in 2.184s. Visit https://platform.openai.com/account/rate-limits to learn more.\",\n        \"type\": \"tokens\",\n        \"param\": null,\n        \"code\": \"rate_limit_exceeded\"\n    }}\n}}\n{}",
        " ".repeat(640)
    );
    evidence(
        "openai",
        429,
        &[
            ("x-ratelimit-limit-tokens", "30000"),
            ("x-ratelimit-reset-tokens", "2.184s"),
            ("x-request-id", "req_abc"),
        ],
        body,
    )
}

fn unknown_html_503() -> Evidence {
    let para = "<p>The service is temporarily unable to service your request due to maintenance downtime or capacity problems. Please try again later.</p>\n";
    let body = format!(
        "<!DOCTYPE html><html><head><title>Maintenance</title></head><body>{}</body></html>",
        para.repeat(28)
    );
    evidence("relay", 503, &[("server", "envoy")], body)
}

static BODIES: LazyLock<Vec<(&'static str, Evidence)>> = LazyLock::new(|| {
    vec![
        ("gemini_429", gemini_429()),
        ("cloudflare_524", cloudflare_524()),
        ("litellm_503", litellm_traceback()),
        ("openai_429", openai_429_pretty()),
        ("unknown_503", unknown_html_503()),
    ]
});

#[divan::bench(args = ["gemini_429", "cloudflare_524", "litellm_503", "openai_429", "unknown_503"])]
fn classify(bencher: Bencher<'_, '_>, name: &str) {
    let catalogue = &*CATALOGUE;
    let evidence = &BODIES.iter().find(|(n, _)| *n == name).unwrap().1;
    let len = evidence.bounded_text().len();
    bencher
        .counter(ItemsCount::new(1usize))
        .counter(BytesCount::new(len))
        .bench(|| catalogue.classify(black_box(evidence), black_box(now())));
}

/// The five bodies in turn: the mixed workload the target is stated for.
#[divan::bench]
fn classify_mix(bencher: Bencher<'_, '_>) {
    let catalogue = &*CATALOGUE;
    let bodies = &*BODIES;
    let sizes: Vec<usize> = bodies.iter().map(|(_, e)| e.bounded_text().len()).collect();
    assert!(
        sizes.iter().all(|&n| (900..=4096).contains(&n)),
        "{sizes:?}"
    );
    bencher.counter(ItemsCount::new(bodies.len())).bench(|| {
        for (_, evidence) in bodies {
            black_box(catalogue.classify(black_box(evidence), now()));
        }
    });
}

#[divan::bench]
fn retry_delay(bencher: Bencher<'_, '_>) {
    let policy = Policy::interactive();
    let classification = CATALOGUE.classify(&BODIES[3].1, now());
    bencher.counter(ItemsCount::new(1usize)).bench(|| {
        policy.retry_delay(
            black_box(&classification),
            Caller::Session,
            black_box(4),
            Jitter::new(0.5),
        )
    });
}

#[divan::bench]
fn header_hint_http_date(bencher: Bencher<'_, '_>) {
    let headers: Headers = [("retry-after", "Mon, 30 Nov 2026 15:00:45 GMT")]
        .into_iter()
        .collect();
    bencher
        .counter(ItemsCount::new(1usize))
        .bench(|| header_hint(black_box(Some(503)), black_box(&headers), now()));
}

#[divan::bench]
fn compile_shipped_catalogue(bencher: Bencher<'_, '_>) {
    bencher.bench(|| Catalogue::shipped().unwrap());
}
