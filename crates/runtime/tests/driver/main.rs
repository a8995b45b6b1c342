//! The driver against `rebound chaos` over real loopback sockets. Waits run in virtual time
//! (recorded, not slept); a test that acts during a wait holds it open (`held`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

mod faults;
mod health;
mod responses;
mod schedules;
mod thinking;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rebound_chaos::{Chaos, ChaosConfig, parse_script};
use rebound_core::{Catalogue, Policy};
use rebound_runtime::{
    Event, HttpClient, Protocol, Provider, Runtime, Timeouts, TurnDriver, TurnError, VirtualTime,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub(crate) fn origin() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_796_050_800)
}

/// A chaos upstream with one script for requests without a key.
pub(crate) async fn chaos(script: &str) -> Chaos {
    let chaos = Chaos::start("127.0.0.1:0".parse().unwrap(), ChaosConfig::default())
        .await
        .unwrap();
    chaos.set_script("default", parse_script(script).unwrap());
    chaos
}

/// A provider of `protocol` at `chaos`.
pub(crate) fn provider(chaos: &Chaos, protocol: Protocol) -> Provider {
    Provider {
        api: rebound_runtime::Api::native(protocol),
        base_url: match protocol {
            Protocol::OpenAi => chaos.openai_base_url(),
            Protocol::Anthropic => chaos.anthropic_base_url(),
        },
        api_key: Some("sk-test-key".into()),
        model: "chaos-1".into(),
        name: match protocol {
            Protocol::OpenAi => "openai".into(),
            Protocol::Anthropic => "anthropic".into(),
        },
    }
}

pub(crate) fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        first_byte: Duration::from_secs(5),
        stream_first_byte: Duration::from_secs(5),
        idle: Duration::from_secs(5),
        first_content: Duration::from_secs(5),
    }
}

/// A runtime on virtual time with the interactive policy.
pub(crate) fn runtime(policy: Policy, timeouts: Timeouts) -> (Runtime, Arc<VirtualTime>) {
    let time = VirtualTime::starting_at(origin());
    let runtime = Runtime::new(
        HttpClient::new(timeouts).unwrap(),
        Arc::new(Catalogue::shipped().unwrap()),
        Arc::new(policy),
    )
    .with_time(time.clone(), time.clone())
    .with_jitter_seed(7);
    (runtime, time)
}

/// A chat body.
pub(crate) fn body(text: &str) -> Value {
    json!({"messages": [{"role": "user", "content": text}]})
}

/// Runs one request and returns its events.
pub(crate) async fn run(
    turn: &mut TurnDriver<'_>,
    body: &Value,
    stream: bool,
) -> (
    Result<rebound_runtime::ModelResponse, TurnError>,
    Vec<Event>,
) {
    let mut events = Vec::new();
    let result = turn
        .request(body, stream, &mut events, &CancellationToken::new())
        .await;
    (result, events)
}

pub(crate) fn count(events: &[Event], f: impl Fn(&Event) -> bool) -> usize {
    events.iter().filter(|e| f(e)).count()
}

pub(crate) fn ends(events: &[Event]) -> usize {
    count(events, |e| matches!(e, Event::End { .. }))
}

pub(crate) fn errors(events: &[Event]) -> usize {
    count(events, |e| matches!(e, Event::Error { .. }))
}

/// The text a consumer shows: text events, with `Discard` dropping what came before.
pub(crate) fn visible_text(events: &[Event]) -> String {
    let mut text = String::new();
    for event in events {
        match event {
            Event::Text { text: t, .. } => text.push_str(t),
            Event::Discard { .. } => text.clear(),
            _ => {}
        }
    }
    text
}
