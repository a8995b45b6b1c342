//! The status page's HTTP side (G5, G6): the page and its assets, the login that turns a
//! gateway key into an HttpOnly, SameSite=Strict cookie, the server-sent event stream of
//! snapshots, and the page's job actions, which take the cookie only with a header no
//! cross-site form can send.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;

use super::page;
use crate::auth::{KEY_COOKIE, accepted, authorized_page};
use crate::limit::read_body;
use crate::reply::{Body, full};
use crate::state::Gateway;

/// The event stream's path.
pub(crate) const EVENTS: &str = "/v1/rebound/status/events";
/// The prefix of the page's job actions: `{prefix}{id}/{retry|skip|stop}`.
const ACTIONS: &str = "/v1/rebound/status/jobs/";
/// The header every page action carries: a cross-site form cannot send it, and a cross-site
/// script cannot send it without a CORS preflight that rebound never grants.
pub(crate) const ACTION_HEADER: &str = "x-rebound-action";
/// At most this many snapshots a second reach one watcher.
const THROTTLE: Duration = Duration::from_millis(250);
/// A snapshot at least this often while someone watches, so countdowns move.
const TICK: Duration = Duration::from_secs(1);

/// Whether the status page serves `method` `path` (it checks the gateway key itself).
pub(crate) fn serves(method: &Method, path: &str) -> bool {
    match (method, path) {
        (&Method::GET | &Method::HEAD, "/" | "/status") => true,
        (&Method::GET, page::SCRIPT_PATH | page::STYLE_PATH | EVENTS) => true,
        (&Method::POST, "/status/login") => true,
        (&Method::POST, p) => p.starts_with(ACTIONS),
        _ => false,
    }
}

/// Answers one request the status page serves.
pub(crate) async fn handle(gateway: Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    let keys = &gateway.config.gateway_keys;
    let path = req.uri().path().to_owned();
    match (req.method().clone(), path.as_str()) {
        (_, page::SCRIPT_PATH) => asset("text/javascript; charset=utf-8", page::SCRIPT),
        (_, page::STYLE_PATH) => asset("text/css; charset=utf-8", page::STYLE),
        (Method::POST, "/status/login") => {
            if !same_origin(req.headers()) {
                return refused(
                    StatusCode::FORBIDDEN,
                    "rebound: a cross-site login is refused",
                );
            }
            let (parts, body) = req.into_parts();
            let Ok(body) = read_body(parts.headers.get(header::CONTENT_LENGTH), body, 4096).await
            else {
                return refused(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "rebound: the login is too large",
                );
            };
            login(keys, form_value(&String::from_utf8_lossy(&body), "key"))
        }
        (Method::POST, _) => {
            if !authorized_page(keys, req.headers()) {
                return refused(
                    StatusCode::UNAUTHORIZED,
                    "rebound: a valid gateway key is required",
                );
            }
            if req.headers().get(ACTION_HEADER).is_none_or(|v| v != "1")
                || !same_origin(req.headers())
            {
                return refused(
                    StatusCode::FORBIDDEN,
                    "rebound: a status-page action needs the header `x-rebound-action: 1` and the page's own origin",
                );
            }
            let jobs_path = format!("/v1/rebound/jobs/{}", &path[ACTIONS.len()..]);
            let (parts, body) = req.into_parts();
            let limit = gateway.config.body_limit;
            let Ok(body) = read_body(parts.headers.get(header::CONTENT_LENGTH), body, limit).await
            else {
                return refused(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "rebound: the action is too large",
                );
            };
            crate::jobs::handle(gateway, &Method::POST, &jobs_path, body).await
        }
        (_, EVENTS) => {
            if !authorized_page(keys, req.headers()) {
                return refused(
                    StatusCode::UNAUTHORIZED,
                    "rebound: a valid gateway key is required",
                );
            }
            events(gateway)
        }
        _ => {
            if let Some(key) = req.uri().query().and_then(|q| form_value(q, "key")) {
                return login(keys, Some(key));
            }
            if !authorized_page(keys, req.headers()) {
                return html(StatusCode::UNAUTHORIZED, page::login_page(None));
            }
            html(StatusCode::OK, page::PAGE.to_owned())
        }
    }
}

/// Exchanges a gateway key for the page's cookie, and sends the browser to the page, whose
/// address then holds no key.
fn login(keys: &[String], key: Option<String>) -> Response<Body> {
    let Some(key) = key.filter(|k| keys.is_empty() || accepted(keys, k.as_bytes())) else {
        return html(
            StatusCode::UNAUTHORIZED,
            page::login_page(Some("That is not a gateway key of this gateway.")),
        );
    };
    let mut response = full(StatusCode::SEE_OTHER, "text/plain", "");
    let encoded = percent_encoding::utf8_percent_encode(&key, percent_encoding::NON_ALPHANUMERIC);
    let cookie = format!("{KEY_COOKIE}={encoded}; Path=/; HttpOnly; SameSite=Strict");
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, HeaderValue::from_static("/status"));
    if !keys.is_empty()
        && let Ok(cookie) = HeaderValue::from_str(&cookie)
    {
        headers.insert(header::SET_COOKIE, cookie);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// The value of `name` in a query string or an urlencoded form.
fn form_value(form: &str, name: &str) -> Option<String> {
    form.split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| {
            percent_encoding::percent_decode_str(&v.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
        .filter(|v| !v.is_empty())
}

/// Whether a browser says the request comes from this gateway's own pages: `Sec-Fetch-Site`
/// when it sends one, else `Origin` against `Host`. A client that is no browser sends
/// neither.
fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return site == "same-origin" || site == "none";
    }
    match (headers.get(header::ORIGIN), headers.get(header::HOST)) {
        (None, _) => true,
        (Some(origin), Some(host)) => origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .is_some_and(|(_, authority)| authority.as_bytes() == host.as_bytes()),
        (Some(_), None) => false,
    }
}

/// The page's headers: nothing from elsewhere, no framing, nothing cached.
fn protect(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

fn html(status: StatusCode, body: String) -> Response<Body> {
    let mut response = full(status, "text/html; charset=utf-8", body);
    protect(response.headers_mut());
    response
}

fn asset(content_type: &'static str, body: &'static str) -> Response<Body> {
    let mut response = full(StatusCode::OK, content_type, body);
    protect(response.headers_mut());
    response
}

fn refused(status: StatusCode, message: &str) -> Response<Body> {
    let value = serde_json::json!({"error": {"message": message, "type": "authentication_error"}});
    full(status, "application/json", value.to_string())
}

/// The event stream: a snapshot at once, then one on every change of the health ledger, the
/// status ledger or the jobs — at most one per [`THROTTLE`] — and one each [`TICK`] anyway.
/// It ends when the watcher goes away.
fn events(gateway: Arc<Gateway>) -> Response<Body> {
    let (tx, body_rx) = crate::reply::pipe::pipe();
    tokio::spawn(async move {
        let mut health = gateway.engine.health().map(|h| h.subscribe());
        let mut status = gateway.status.subscribe();
        let mut jobs = gateway.jobs.as_ref().map(|j| j.subscribe_changes());
        loop {
            // Take the changes seen so far before the snapshot that shows them.
            if let Some(rx) = health.as_mut() {
                rx.borrow_and_update();
            }
            status.borrow_and_update();
            if let Some(rx) = jobs.as_mut() {
                rx.borrow_and_update();
            }
            let data = super::snapshot::snapshot(&gateway).await;
            if !tx
                .send(Bytes::from(format!("event: snapshot\ndata: {data}\n\n")))
                .await
            {
                return;
            }
            // The page's cadence is the watcher's wall clock, not the gateway's recovery
            // time: a snapshot's contents are read at the gateway's `now`.
            tokio::time::sleep(THROTTLE).await;
            let tick = tokio::time::sleep(TICK.saturating_sub(THROTTLE));
            tokio::select! {
                _ = tick => {}
                _ = status.changed() => {}
                _ = changed(health.as_mut()) => {}
                _ = changed(jobs.as_mut()) => {}
            }
        }
    });
    let mut response = Response::new(Body::Stream(body_rx));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Resolves on the receiver's next change; never, without one.
async fn changed(rx: Option<&mut tokio::sync::watch::Receiver<u64>>) {
    if let Some(rx) = rx
        && rx.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_value_is_decoded() {
        assert_eq!(
            form_value("a=1&key=gw%20k%2By+z", "key").as_deref(),
            Some("gw k+y z")
        );
        assert_eq!(form_value("key=", "key"), None);
        assert_eq!(form_value("keys=1", "key"), None);
    }

    #[test]
    fn a_cross_site_request_is_refused() {
        let mut h = HeaderMap::new();
        assert!(same_origin(&h), "a client that is no browser");
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert!(same_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(!same_origin(&h));
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&h));
        h.insert("sec-fetch-site", HeaderValue::from_static("same-site"));
        assert!(!same_origin(&h));
        h.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(same_origin(&h));
    }
}
