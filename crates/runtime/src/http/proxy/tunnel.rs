//! The `CONNECT` tunnel through an HTTP proxy, and how a proxy's refusal reads: with its status
//! and what a person does about it, so recovery can tell a proxy that wants credentials or
//! forbids the host (a person must act) from one that could not reach it (it may pass).

use std::error::Error as StdError;

use http::uri::Scheme;
use http::{HeaderValue, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{BoxError, Unreached};

/// The proxy answered the `CONNECT` with something other than 200, or a request it was handed
/// with 407.
#[derive(Debug)]
pub(super) struct Refused {
    pub(super) proxy: String,
    pub(super) target: String,
    pub(super) status: u16,
    pub(super) reason: String,
    /// A request handed to the proxy, not a tunnel.
    pub(super) forwarded: bool,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, asked) = if self.forwarded {
            ("request", "")
        } else {
            ("tunnel", "CONNECT ")
        };
        write!(
            f,
            "the proxy {} refused the {what} to {}: {asked}answered {} {}",
            self.proxy, self.target, self.status, self.reason
        )?;
        match self.status {
            401 | 407 => f.write_str(" (the proxy wants credentials, or other ones: put them in its URL, http://user:password@host:port)"),
            403 => f.write_str(" (the proxy's policy does not allow this host or port)"),
            _ => Ok(()),
        }
    }
}

impl StdError for Refused {}

/// `host:port` of an upstream, its port the scheme's default when the URL names none. An IPv6
/// host comes bracketed (`[::1]`), as `CONNECT` wants it.
pub(super) fn target(dst: &Uri) -> String {
    let port = dst
        .port_u16()
        .unwrap_or(if dst.scheme() == Some(&Scheme::HTTP) {
            80
        } else {
            443
        });
    format!("{}:{port}", dst.host().unwrap_or(""))
}

/// The longest answer to a `CONNECT` read: a status line and headers.
const MAX_CONNECT_ANSWER: usize = 8 * 1024;

/// Opens a `CONNECT` tunnel to `dst` over `stream`, a connection to the proxy.
pub(super) async fn tunnel(
    stream: TokioIo<TcpStream>,
    dst: &Uri,
    auth: Option<&HeaderValue>,
    proxy: &str,
) -> Result<TokioIo<TcpStream>, BoxError> {
    let mut stream = stream.into_inner();
    if dst.host().is_none() {
        return Err("the upstream URL names no host".into());
    }
    let target = target(dst);
    let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n").into_bytes();
    if let Some(auth) = auth {
        head.extend_from_slice(b"Proxy-Authorization: ");
        head.extend_from_slice(auth.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    let unreached = |cause: BoxError| -> BoxError {
        Box::new(Unreached {
            proxy: proxy.to_owned(),
            cause,
        })
    };
    stream
        .write_all(&head)
        .await
        .map_err(|e| unreached(e.into()))?;
    let mut answer = Vec::with_capacity(512);
    loop {
        let mut chunk = [0u8; 1024];
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| unreached(e.into()))?;
        if n == 0 {
            return Err(unreached(
                "the proxy closed the connection before answering CONNECT".into(),
            ));
        }
        answer.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&answer) {
            Ok(httparse::Status::Complete(_)) => {
                let status = response.code.unwrap_or(0);
                if (200..300).contains(&status) {
                    return Ok(TokioIo::new(stream));
                }
                return Err(Box::new(Refused {
                    proxy: proxy.to_owned(),
                    target,
                    status,
                    reason: response.reason.unwrap_or("").to_owned(),
                    forwarded: false,
                }));
            }
            Ok(httparse::Status::Partial) if answer.len() < MAX_CONNECT_ANSWER => {}
            Ok(httparse::Status::Partial) => {
                return Err(unreached(
                    "the proxy's answer to CONNECT is longer than 8 KiB".into(),
                ));
            }
            Err(e) => {
                return Err(unreached(
                    format!("the proxy's answer to CONNECT is no HTTP ({e})").into(),
                ));
            }
        }
    }
}
