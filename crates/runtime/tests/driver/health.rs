//! A runtime's turns share one health ledger when given one (S1, S2): a provider that told
//! one turn to come back in two minutes is passed over by the next, with no attempt.

use std::sync::Arc;

use rebound_core::{HealthSettings, Policy};
use rebound_runtime::SharedHealth;

use crate::{body, chaos, provider, run, runtime, timeouts};

#[tokio::test]
async fn turns_of_one_runtime_share_its_ledger() {
    let primary = chaos("429+retry-after:120").await;
    let backup = chaos("ok").await;
    let (runtime, _time) = runtime(Policy::interactive(), timeouts());
    let runtime = runtime.with_health(Arc::new(SharedHealth::new(HealthSettings::default())));
    let route = || {
        let mut second = provider(&backup, rebound_runtime::Protocol::OpenAi);
        second.name = "backup".into();
        vec![
            provider(&primary, rebound_runtime::Protocol::OpenAi),
            second,
        ]
    };
    // The first turn waits its capped hint (30 s), finds the primary resting, falls back.
    let mut turn = runtime.session(route());
    let (answer, _) = run(&mut turn, &body("hi"), false).await;
    assert!(answer.is_ok(), "{answer:?}");
    assert_eq!(primary.attempts("default"), 1);
    assert_eq!(backup.attempts("default"), 1);
    // The next turn passes the primary over without an attempt.
    let mut turn = runtime.session(route());
    let (answer, _) = run(&mut turn, &body("again"), false).await;
    assert!(answer.is_ok(), "{answer:?}");
    assert_eq!(
        primary.attempts("default"),
        1,
        "no attempt on a resting provider"
    );
    assert_eq!(backup.attempts("default"), 2);
}
