//! Outbound proxies: the HTTP proxy (or SOCKS5 proxy) an upstream is reached through, as
//! `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` say, the way curl reads them. Without
//! it, a machine that reaches the internet only through a proxy reaches no provider at all, and
//! each attempt fails as a connection that could not be made.
//!
//! Which upstream goes through which proxy is hyper-util's matcher (curl's rules). An upstream
//! on the loopback interface never does: a proxy's loopback is not this machine's. Through an
//! HTTP proxy an `https://` upstream is reached by a `CONNECT` tunnel, so the proxy sees the
//! host and port and nothing of the request (TLS runs end to end). A plain `http://` request
//! over HTTP/1.1 is sent to the proxy itself, its target in absolute form
//! (`POST http://host:port/path`), as curl and the HTTP libraries do: proxies commonly allow
//! `CONNECT` to port 443 only (squid's and tinyproxy's defaults), and a plain request hides
//! nothing from them anyway. Through a SOCKS5 proxy it is hyper-util's SOCKS5 handshake.
//!
//! The tunnel's `CONNECT` is sent here rather than by hyper-util's `Tunnel`, which reports a
//! refusal without its status: a proxy's 403 (its policy forbids the host) and 407 (it wants
//! credentials) need a person, while its 502 or 504 (it could not reach the host) may pass,
//! and recovery must tell them apart.

use std::error::Error as StdError;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::Scheme;
use http::{HeaderMap, HeaderValue, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::SocksV5;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

type BoxError = Box<dyn StdError + Send + Sync>;

/// The variables read, in the order a value is taken: the lower-case spelling only when the
/// upper-case one is not set, as curl does.
const VARIABLES: [(&str, &str); 4] = [
    ("HTTPS_PROXY", "https_proxy"),
    ("HTTP_PROXY", "http_proxy"),
    ("ALL_PROXY", "all_proxy"),
    ("NO_PROXY", "no_proxy"),
];

/// Where upstreams are reached through, if anywhere.
#[derive(Clone, Default)]
pub struct Proxies {
    matcher: Option<Arc<Matcher>>,
    /// One line per proxy for a banner, without credentials.
    described: Vec<String>,
    /// The proxies' passwords, as written and percent-decoded: secrets to redact.
    passwords: Vec<String>,
}

impl std::fmt::Debug for Proxies {
    /// The proxies without their credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.described).finish()
    }
}

impl Proxies {
    /// None: every upstream is reached directly.
    pub fn none() -> Self {
        Proxies::default()
    }

    /// The proxies the process's environment names.
    pub fn from_env() -> Result<Self, String> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// The proxies that `var` names (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, or
    /// their lower-case spellings). A value that is no proxy URL is an error naming the
    /// variable; an empty one counts as not set.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let [https, http, all, no] = VARIABLES.map(|(upper, lower)| {
            [upper, lower].into_iter().find_map(|name| {
                var(name)
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| (name, v))
            })
        });
        let mut builder = Matcher::builder();
        let (mut described, mut passwords) = (Vec::new(), Vec::new());
        for (value, upstreams) in [
            (&https, "https://"),
            (&http, "http://"),
            (&all, "the other"),
        ] {
            let Some((name, value)) = value else {
                continue;
            };
            let checked = check(value).map_err(|why| format!("{name}: {why}"))?;
            passwords.extend(checked.secret);
            described.push(format!(
                "{} for {upstreams} upstreams ({name})",
                checked.shown
            ));
            builder = match upstreams {
                "https://" => builder.https(value.trim()),
                "http://" => builder.http(value.trim()),
                _ => builder.all(value.trim()),
            };
        }
        if described.is_empty() {
            return Ok(Proxies::none());
        }
        if let Some((name, value)) = &no {
            described.push(format!("not for {} ({name})", value.trim()));
            builder = builder.no(value.trim());
        }
        Ok(Proxies {
            matcher: Some(Arc::new(builder.build())),
            described,
            passwords,
        })
    }

    /// One proxy for every upstream (a configuration's `upstream_proxy`), except the hosts of
    /// `no_proxy` (`NO_PROXY`'s syntax) and loopback ones. The error says what is wrong with
    /// the URL, never what its credentials are.
    pub fn fixed(url: &str, no_proxy: Option<&str>) -> Result<Self, String> {
        let checked = check(url)?;
        let mut described = vec![format!("{} for every upstream", checked.shown)];
        let mut builder = Matcher::builder().all(url.trim());
        if let Some(no) = no_proxy.filter(|n| !n.trim().is_empty()) {
            described.push(format!("not for {}", no.trim()));
            builder = builder.no(no.trim());
        }
        Ok(Proxies {
            matcher: Some(Arc::new(builder.build())),
            described,
            passwords: checked.secret,
        })
    }

    /// Whether no upstream goes through a proxy.
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// The proxies' passwords long enough to be redacted by value wherever text leaves rebound
    /// (rebound never writes a proxy's credentials; a shorter password redacted by value would
    /// also blank ordinary words that contain it).
    pub fn secrets(&self) -> &[String] {
        &self.passwords
    }

    /// What goes where, one line each, without credentials.
    pub fn describe(&self) -> &[String] {
        &self.described
    }

    /// The HTTP proxy a plain `http://` request to `dst` is handed to, in absolute form, if
    /// one is to be used (over HTTP/1.1; an `https://` upstream, or one behind a SOCKS5 proxy,
    /// is reached through a tunnel instead).
    pub(crate) fn forward(&self, dst: &Uri) -> Option<Forward> {
        if dst.scheme() != Some(&Scheme::HTTP) {
            return None;
        }
        match self.route(dst)? {
            Route::Tunnel { proxy, auth } => Some(Forward {
                proxy: shown(&proxy),
                auth,
            }),
            Route::Socks { .. } => None,
        }
    }

    /// The proxy for `dst`, if one is to be used.
    fn route(&self, dst: &Uri) -> Option<Route> {
        // Without proxies, nothing more to look at (every request asks).
        let matcher = self.matcher.as_ref()?;
        if is_loopback(dst.host()?) {
            return None;
        }
        let intercept = matcher.intercept(dst)?;
        let proxy = intercept.uri().clone();
        match proxy.scheme_str() {
            Some("socks5" | "socks5h") => Some(Route::Socks {
                remote_dns: proxy.scheme_str() == Some("socks5h"),
                auth: intercept
                    .raw_auth()
                    .map(|(user, pass)| (user.to_owned(), pass.to_owned())),
                proxy,
            }),
            _ => Some(Route::Tunnel {
                auth: intercept.basic_auth().cloned(),
                proxy,
            }),
        }
    }
}

/// A proxy URL rebound can use: as shown, without its credentials, and its password.
struct Checked {
    shown: String,
    /// The password as written and percent-decoded, each if long enough to redact by value.
    secret: Vec<String>,
}

/// A proxy URL rebound can use; or why not, never naming its credentials.
fn check(value: &str) -> Result<Checked, String> {
    let uri: Uri = value
        .trim()
        .parse()
        .map_err(|_| "is not a URL (expected http://host:port or socks5://host:port)".to_owned())?;
    let scheme = uri.scheme_str().unwrap_or("http");
    match scheme {
        "http" | "socks5" | "socks5h" => {}
        "https" => {
            return Err(
                "a proxy reached over TLS (https://) is not supported: a proxy that also takes \
                 plain connections can be named http://host:port (the tunnel through it still \
                 carries TLS to the upstream)"
                    .to_owned(),
            );
        }
        other => {
            return Err(format!(
                "the scheme {other}:// is not supported (http:// or socks5:// or socks5h://)"
            ));
        }
    }
    let authority = uri
        .authority()
        .filter(|a| !a.host().is_empty())
        .ok_or_else(|| "names no host (expected http://host:port)".to_owned())?;
    let (userinfo, host_port) = match authority.as_str().rsplit_once('@') {
        Some((userinfo, host_port)) => (Some(userinfo), host_port),
        None => (None, authority.as_str()),
    };
    let credentials = if userinfo.is_some() {
        " (with credentials)"
    } else {
        ""
    };
    let written = userinfo.and_then(|u| u.split_once(':')).map(|(_, p)| p);
    let secret = written
        .into_iter()
        .flat_map(|written| {
            let decoded = percent_encoding::percent_decode_str(written)
                .decode_utf8_lossy()
                .into_owned();
            [written.to_owned(), decoded]
        })
        .filter(|p| rebound_core::redact::secrets::check(p).is_ok())
        .fold(Vec::new(), |mut out, p| {
            if !out.contains(&p) {
                out.push(p);
            }
            out
        });
    Ok(Checked {
        shown: format!("{scheme}://{host_port}{credentials}"),
        secret,
    })
}

/// Whether a URI's host is this machine's loopback interface.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A plain `http://` request handed to an HTTP proxy.
pub(crate) struct Forward {
    /// The proxy, as shown in messages.
    pub(crate) proxy: String,
    /// Its `Proxy-Authorization`, sent with each request.
    pub(crate) auth: Option<HeaderValue>,
}

impl Forward {
    /// The proxy's own refusal of a request it was handed, as text for recovery, or `None`
    /// for an answer that may be the provider's. Only a proxy answers 407; a 401 is the
    /// proxy's when it names itself as the server (tinyproxy answers 401 for wrong proxy
    /// credentials), and the provider's otherwise.
    pub(crate) fn refused(
        &self,
        dst: &Uri,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Option<String> {
        let own = match status {
            StatusCode::PROXY_AUTHENTICATION_REQUIRED => true,
            StatusCode::UNAUTHORIZED => headers
                .get(http::header::SERVER)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|server| {
                    let server = server.trim_start().to_ascii_lowercase();
                    PROXY_SERVERS.iter().any(|name| server.starts_with(name))
                }),
            _ => false,
        };
        own.then(|| {
            Refused {
                proxy: self.proxy.clone(),
                target: target(dst),
                status: status.as_u16(),
                reason: status.canonical_reason().unwrap_or("").to_owned(),
                forwarded: true,
            }
            .to_string()
        })
    }
}

/// The `Server` names of HTTP proxies, as they send it: an answer that carries one is the
/// proxy's own.
const PROXY_SERVERS: [&str; 2] = ["tinyproxy", "squid"];

/// How one connection reaches its upstream through a proxy.
enum Route {
    Tunnel {
        proxy: Uri,
        auth: Option<HeaderValue>,
    },
    Socks {
        proxy: Uri,
        auth: Option<(String, String)>,
        remote_dns: bool,
    },
}

/// The TCP connector under the TLS one: straight to the upstream, or through its proxy.
#[derive(Clone)]
pub(crate) struct Connector {
    tcp: HttpConnector,
    proxies: Proxies,
    /// How long a proxy may take to open the way (its `CONNECT` answer, its SOCKS handshake):
    /// the connect timeout, as it is part of connecting.
    handshake: Duration,
    /// Whether a plain `http://` upstream's connection is one to its HTTP proxy, to be handed
    /// requests in absolute form (HTTP/1.1), rather than a tunnel (HTTP/2, which no proxy
    /// forwards in the clear).
    forwards: bool,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("proxies", &self.proxies)
            .finish_non_exhaustive()
    }
}

impl Connector {
    pub(crate) fn new(
        tcp: HttpConnector,
        proxies: Proxies,
        handshake: Duration,
        forwards: bool,
    ) -> Self {
        Connector {
            tcp,
            proxies,
            handshake,
            forwards,
        }
    }
}

impl Service<Uri> for Connector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let mut tcp = self.tcp.clone();
        let handshake = self.handshake;
        match self.proxies.route(&dst) {
            None => Box::pin(async move { tcp.call(dst).await.map_err(Into::into) }),
            Some(Route::Tunnel { proxy, .. })
                if self.forwards && dst.scheme() == Some(&Scheme::HTTP) =>
            {
                Box::pin(async move {
                    let shown = shown(&proxy);
                    tcp.call(proxy).await.map_err(|e| -> BoxError {
                        Box::new(Unreached {
                            proxy: shown,
                            cause: e.into(),
                        })
                    })
                })
            }
            Some(Route::Tunnel { proxy, auth }) => Box::pin(async move {
                let shown = shown(&proxy);
                let stream = tcp.call(proxy).await.map_err(|e| Unreached {
                    proxy: shown.clone(),
                    cause: e.into(),
                })?;
                within(
                    handshake,
                    &shown,
                    tunnel(stream, &dst, auth.as_ref(), &shown),
                )
                .await
            }),
            Some(Route::Socks {
                proxy,
                auth,
                remote_dns,
            }) => {
                let shown = shown(&proxy);
                // The TCP connector dials the proxy's address; it knows only http:// URIs.
                let dial = Uri::builder()
                    .scheme("http")
                    .authority(proxy.authority().map_or("", |a| a.as_str()))
                    .path_and_query("/")
                    .build()
                    .unwrap_or(proxy);
                let mut socks = SocksV5::new(dial, tcp).local_dns(!remote_dns);
                if let Some((user, pass)) = auth {
                    socks = socks.with_auth(user, pass);
                }
                let connecting = socks.call(dst);
                Box::pin(async move {
                    let connecting = async {
                        connecting.await.map_err(|e| -> BoxError {
                            Box::new(Unreached {
                                proxy: shown.clone(),
                                cause: Box::new(e),
                            })
                        })
                    };
                    within(handshake, &shown, connecting).await
                })
            }
        }
    }
}

/// `opening`, or a timeout naming the proxy if it takes longer than `limit` (a proxy that
/// accepts the connection and never answers would otherwise hold the attempt until its
/// first-byte timeout).
async fn within(
    limit: Duration,
    proxy: &str,
    opening: impl Future<Output = Result<TokioIo<TcpStream>, BoxError>>,
) -> Result<TokioIo<TcpStream>, BoxError> {
    match tokio::time::timeout(limit, opening).await {
        Ok(result) => result,
        Err(_) => Err(Box::new(Unreached {
            proxy: proxy.to_owned(),
            cause: Box::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the proxy did not open the way within {} s",
                    limit.as_secs_f64()
                ),
            )),
        })),
    }
}

/// A proxy URI as shown in messages: scheme, host and port (the matcher keeps credentials
/// apart, so the URI holds none).
fn shown(proxy: &Uri) -> String {
    format!(
        "{}://{}",
        proxy.scheme_str().unwrap_or("http"),
        proxy.authority().map_or("", |a| a.as_str())
    )
}

/// The proxy could not be reached, or its SOCKS handshake failed.
#[derive(Debug)]
struct Unreached {
    proxy: String,
    cause: BoxError,
}

impl std::fmt::Display for Unreached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "through the proxy {}", self.proxy)
    }
}

impl StdError for Unreached {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.cause)
    }
}

mod tunnel;

use self::tunnel::{Refused, target, tunnel};

#[cfg(test)]
mod tests;
