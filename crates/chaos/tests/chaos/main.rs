//! Loopback tests of `rebound chaos`: real HTTP against a real listener.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

mod record;
mod responses;
mod thinking;
mod tokens;
mod tools;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rebound_chaos::{Chaos, ChaosConfig, parse_script};
use serde_json::Value;

/// A chaos server with `script` for key `k`.
pub(crate) async fn chaos(script: &str) -> Chaos {
    let chaos = Chaos::start("127.0.0.1:0".parse().unwrap(), ChaosConfig::default())
        .await
        .unwrap();
    chaos.set_script("k", parse_script(script).unwrap());
    chaos
}

/// What came back.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: http::HeaderMap,
    pub(crate) body: String,
    /// The body ended with an error (a cut connection) rather than cleanly.
    pub(crate) broken: bool,
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The SSE events: `(event name, data)`; the name is `None` for data-only frames.
    pub(crate) fn events(&self) -> Vec<(Option<String>, Value)> {
        self.body
            .split("\n\n")
            .filter(|f| !f.trim().is_empty())
            .filter_map(|frame| {
                let mut name = None;
                let mut data = None;
                for line in frame.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = Some(n.to_owned());
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data = Some(d.to_owned());
                    }
                }
                let data = data?;
                if data == "[DONE]" {
                    return Some((name, Value::String(data)));
                }
                Some((name, serde_json::from_str(&data).ok()?))
            })
            .collect()
    }

    /// The `type` of each event's data.
    pub(crate) fn types(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|(_, d)| d["type"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// Sends a request with `x-chaos-key: k` and reads the whole answer, even a broken one.
pub(crate) async fn send(
    chaos: &Chaos,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", chaos.addr()))
        .header("x-chaos-key", "k");
    if !body.is_empty() {
        request = request.header("content-type", "application/json");
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    let mut broken = false;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    bytes.extend_from_slice(data);
                }
            }
            Err(_) => {
                broken = true;
                break;
            }
        }
    }
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
        broken,
    }
}

/// `POST` of a JSON body.
pub(crate) async fn post(chaos: &Chaos, path: &str, body: &Value) -> Reply {
    send(chaos, "POST", path, &[], &body.to_string()).await
}
