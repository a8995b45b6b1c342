//! Exact schedules and budgets in virtual time (B1–B6, R3, R4, T3, T4).

use std::time::Duration;

use rebound_core::Policy;
use rebound_runtime::{Event, Outcome, Protocol, TurnError};

use crate::{body, chaos, count, ends, errors, provider, run, runtime, timeouts, visible_text};

fn repeat(step: &str, n: usize) -> String {
    vec![step; n].join(", ")
}

#[tokio::test]
async fn ten_502s_then_success_waits_exactly_the_transient_schedule() {
    let chaos = chaos(&format!("{}, ok", repeat("502", 10))).await;
    let (runtime, time) = runtime(Policy::interactive(), timeouts());
    let mut turn = runtime.session(vec![provider(&chaos, Protocol::OpenAi)]);
    let (result, events) = run(&mut turn, &body("hi"), false).await;
    let response = result.unwrap();
    assert_eq!(response.text, "Hello from rebound chaos. You said: hi");
    let waits: Vec<u128> = time.waits().iter().map(Duration::as_millis).collect();
    assert_eq!(
        waits,
        [1000, 2000, 4000, 8000, 8000, 8000, 8000, 8000, 8000, 8000]
    );
    assert_eq!(chaos.attempts("default"), 11);
    // Silent retries: ten statuses, no error, one end (R3).
    assert_eq!(count(&events, |e| matches!(e, Event::Retrying { .. })), 10);
    assert_eq!(errors(&events), 0);
    assert_eq!(ends(&events), 1);
    assert!(matches!(
        events.last(),
        Some(Event::End {
            outcome: Outcome::Complete,
            ..
        })
    ));
}

#[tokio::test]
async fn exhaustion_after_ten_retries_is_one_error_with_retry_attempt_10() {
    let chaos = chaos(&repeat("502", 12)).await;
    let (runtime, _) = runtime(Policy::interactive(), timeouts());
    let mut turn = runtime.session(vec![provider(&chaos, Protocol::Anthropic)]);
    let (result, events) = run(&mut turn, &body("hi"), true).await;
    let Err(TurnError::Failed(d)) = result else {
        panic!("{result:?}")
    };
    assert_eq!(d.retry_attempt, 10);
    assert_eq!(d.attempts, 11);
    assert_eq!(d.provider_status, Some(502));
    assert_eq!(chaos.attempts("default"), 11);
    assert_eq!(errors(&events), 1);
    assert_eq!(ends(&events), 1);
    let Some(Event::Error { diagnostics, .. }) =
        events.iter().find(|e| matches!(e, Event::Error { .. }))
    else {
        panic!()
    };
    assert_eq!(
        serde_json::to_value(diagnostics).unwrap()["retryAttempt"],
        10
    );
}

#[tokio::test]
async fn the_status_counts_down_with_the_budget() {
    let chaos = chaos("502, 502, ok").await;
    let (runtime, _) = runtime(Policy::interactive(), timeouts());
    let mut turn = runtime.session(vec![provider(&chaos, Protocol::OpenAi)]);
    let (result, events) = run(&mut turn, &body("hi"), true).await;
    result.unwrap();
    let texts: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Retrying { status, .. } => Some(status.text(status.since)),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        [
            "Retrying in 1s · attempt 1/10",
            "Retrying in 2s · attempt 2/10"
        ]
    );
}

#[tokio::test]
async fn rate_limits_and_transient_failures_draw_from_separate_budgets() {
    let script = format!(
        "{}, {}, ok",
        repeat("429+retry-after-ms:10", 10),
        repeat("503", 10)
    );
    let chaos = chaos(&script).await;
    let (runtime, _) = runtime(Policy::interactive(), timeouts());
    let mut turn = runtime.session(vec![provider(&chaos, Protocol::OpenAi)]);
    let (result, _) = run(&mut turn, &body("hi"), false).await;
    result.unwrap();
    assert_eq!(chaos.attempts("default"), 21);
}

#[tokio::test]
async fn a_complete_response_resets_the_budget_for_the_next_request() {
    let chaos = chaos(&format!(
        "{}, ok, {}, ok",
        repeat("502", 10),
        repeat("502", 10)
    ))
    .await;
    let (runtime, _) = runtime(Policy::interactive(), timeouts());
    let mut turn = runtime.session(vec![provider(&chaos, Protocol::OpenAi)]);
    run(&mut turn, &body("first"), false).await.0.unwrap();
    run(&mut turn, &body("second"), false).await.0.unwrap();
    assert_eq!(chaos.attempts("default"), 22);
}

#[tokio::test]
async fn infinite_for_a_session_but_bounded_for_one_shot() {
    let chaos = chaos(&format!("{}, ok", repeat("502", 15))).await;
    let (runtime, _) = runtime(Policy::interactive().with_infinite_retries(), timeouts());
    let mut session = runtime.session(vec![provider(&chaos, Protocol::OpenAi)]);
    run(&mut session, &body("hi"), false).await.0.unwrap();
    assert_eq!(chaos.attempts("default"), 16);

    let chaos = crate::chaos(&format!("{}, ok", repeat("502", 15))).await;
    let mut one_shot = runtime.one_shot(vec![provider(&chaos, Protocol::OpenAi)]);
    let (result, _) = run(&mut one_shot, &body("hi"), false).await;
    let Err(TurnError::Failed(d)) = result else {
        panic!("{result:?}")
    };
    assert_eq!(d.retry_attempt, 10);
    assert_eq!(chaos.attempts("default"), 11);
}

#[tokio::test]
async fn terminal_and_hard_failures_are_never_retried() {
    for (script, protocol) in [
        ("401", Protocol::OpenAi),
        ("context", Protocol::OpenAi),
        ("401", Protocol::Anthropic),
        ("context", Protocol::Anthropic),
    ] {
        let chaos = chaos(&format!("{script}, ok")).await;
        let (runtime, time) = runtime(Policy::interactive(), timeouts());
        let mut turn = runtime.subagent(vec![provider(&chaos, protocol)]);
        let (result, events) = run(&mut turn, &body("hi"), true).await;
        assert!(
            matches!(result, Err(TurnError::Failed(_))),
            "{script}: {result:?}"
        );
        assert_eq!(chaos.attempts("default"), 1, "{script} {protocol:?}");
        assert!(time.waits().is_empty());
        assert_eq!((errors(&events), ends(&events)), (1, 1));
        assert_eq!(visible_text(&events), "");
    }
}
