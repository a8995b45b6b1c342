//! Listening: the accept loop, the connection cap, and hyper serving each connection with the
//! router (`router.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use crate::router::handle;
use crate::state::Gateway;

/// Keeps one timer due within a second for as long as the server runs.
///
/// Every request arms timers (the first-byte and idle timeouts, hyper's header read timeout)
/// due seconds or minutes later. tokio wakes its driver with a system call whenever a new
/// timer is due before every timer the driver last parked for, which, with no other timer
/// armed, is every request: two extra system calls each. A timer that is always nearer
/// avoids that for one wake-up a second.
async fn timer_anchor(mut stopped: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            _ = stopped.changed() => return,
        }
    }
}

/// How long the accept loop pauses after a failed accept (out of file descriptors).
const ACCEPT_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// A listener on `addr` whose system queue holds `backlog` connections not yet accepted.
fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As std's and tokio's `bind` do on Unix: a restart need not wait out TIME_WAIT.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// A running gateway.
pub struct Server {
    addr: SocketAddr,
    gateway: Arc<Gateway>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds the configured address (or `listen`, when given) and serves.
    pub async fn start(gateway: Gateway, listen: Option<SocketAddr>) -> std::io::Result<Server> {
        let listener = bind(
            listen.unwrap_or(gateway.config.listen),
            gateway.config.listen_backlog,
        )?;
        let addr = listener.local_addr()?;
        let gateway = Arc::new(gateway);
        let (stop, mut stopped) = watch::channel(false);
        let served = Arc::clone(&gateway);
        let header_timeout = gateway.config.header_read_timeout;
        let slots = Arc::new(Semaphore::new(gateway.config.connection_cap()));
        tokio::spawn(timer_anchor(stopped.clone()));
        let task = tokio::spawn(async move {
            loop {
                // At the connection cap, stop accepting: new clients wait in the listen
                // backlog while every open connection keeps being served.
                let slot = tokio::select! {
                    slot = Arc::clone(&slots).acquire_owned() => slot,
                    _ = stopped.changed() => break,
                };
                let Ok(slot) = slot else { break };
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = stopped.changed() => break,
                };
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors (or a similar resource): accepting again at
                        // once would spin. Pause, and let closing connections free some.
                        tracing::warn!(event = "accept_failed", error = %e);
                        tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let gateway = Arc::clone(&served);
                let mut stopped = stopped.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    let service = service_fn(move |req| handle(Arc::clone(&gateway), req));
                    // Slow clients cannot hold a connection: the whole request head must
                    // arrive within the configured time, and may not exceed 64 KiB.
                    let conn = hyper::server::conn::http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(header_timeout)
                        .max_buf_size(1 << 20)
                        .max_header_size(64 << 10)
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = conn => {}
                        _ = stopped.changed() => {}
                    }
                });
            }
        });
        Ok(Server {
            addr,
            gateway,
            stop,
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The shared state (metrics, config).
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Stops accepting and closes connections.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
