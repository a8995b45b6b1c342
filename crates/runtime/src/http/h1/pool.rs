//! Idle HTTP/1.1 connections, kept per upstream for the next request.
//!
//! The most recently used connection goes out first (it is the likeliest to be open). The
//! caller checks a connection before it uses it: if the peer closed it, or sent bytes nobody
//! asked for, it is dropped. A peer may still close it between that check and the request;
//! the attempt then fails, and the runtime decides what follows (B5).
//!
//! A connection unused for the idle timeout is closed by a reaper task, which runs while the
//! pool holds connections and ends when it is empty (or the client is gone).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use http::Uri;
use http::uri::{Authority, Scheme};
use tokio::time::Instant;

use super::Connection;

/// Which connections can serve a request: the same scheme and authority.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    https: bool,
    authority: Authority,
}

impl Key {
    /// The key of a request's URI; `None` for a URI without an authority.
    pub(crate) fn of(uri: &Uri) -> Option<Key> {
        Some(Key {
            https: uri.scheme() == Some(&Scheme::HTTPS),
            authority: uri.authority()?.clone(),
        })
    }
}

struct Idle {
    conn: Box<Connection>,
    since: Instant,
}

#[derive(Default)]
struct Inner {
    /// Per upstream, oldest first.
    idle: HashMap<Key, VecDeque<Idle>>,
    /// Whether a reaper task is running.
    reaping: bool,
}

/// The idle connections.
pub(crate) struct Pool {
    inner: Mutex<Inner>,
    /// How long a connection may wait unused before it is closed.
    timeout: Duration,
    /// How many connections were put back, for tests to wait on.
    #[cfg(test)]
    puts: tokio::sync::watch::Sender<usize>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("idle", &self.idle_count())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Pool {
    pub(crate) fn new(timeout: Duration) -> Self {
        Pool {
            inner: Mutex::new(Inner::default()),
            timeout,
            #[cfg(test)]
            puts: tokio::sync::watch::Sender::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The newest idle connection for `key` that has not waited too long, if there is one.
    pub(crate) fn take(&self, key: &Key) -> Option<Box<Connection>> {
        let (taken, _expired) = {
            let mut inner = self.lock();
            let list = inner.idle.get_mut(key)?;
            let newest = list.pop_back();
            match newest {
                Some(idle) if idle.since.elapsed() < self.timeout => {
                    if list.is_empty() {
                        inner.idle.remove(key);
                    }
                    (Some(idle.conn), None)
                }
                // The newest is the youngest: when it is too old, so are all the others.
                newest => (None, Some((newest, inner.idle.remove(key)))),
            }
        };
        // Expired connections are closed outside the lock.
        taken
    }

    /// Keeps `conn` for the next request to `key`.
    pub(crate) fn put(self: &Arc<Self>, key: Key, conn: Box<Connection>) {
        let start_reaper = {
            let mut inner = self.lock();
            inner.idle.entry(key).or_default().push_back(Idle {
                conn,
                since: Instant::now(),
            });
            !std::mem::replace(&mut inner.reaping, true)
        };
        #[cfg(test)]
        self.puts.send_modify(|n| *n += 1);
        if start_reaper {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(reap(Arc::downgrade(self)))),
                // No runtime to reap on: expiry is still checked when a connection is taken.
                Err(_) => self.lock().reaping = false,
            }
        }
    }

    /// Closes the connections that have waited too long: when the next one will have, or `None`
    /// when the pool is empty (the reaper then ends).
    fn expire(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut expired = Vec::new();
        let next = {
            let mut inner = self.lock();
            inner.idle.retain(|_, list| {
                while list
                    .front()
                    .is_some_and(|i| now.duration_since(i.since) >= self.timeout)
                {
                    expired.extend(list.pop_front());
                }
                !list.is_empty()
            });
            let oldest = inner
                .idle
                .values()
                .filter_map(VecDeque::front)
                .map(|i| i.since)
                .min();
            if oldest.is_none() {
                inner.reaping = false;
            }
            oldest.map(|since| since + self.timeout)
        };
        drop(expired);
        next
    }

    /// How many connections wait.
    pub(crate) fn idle_count(&self) -> usize {
        self.lock().idle.values().map(VecDeque::len).sum()
    }

    /// Waits until `n` connections in all have been put back.
    #[cfg(test)]
    pub(crate) async fn put_back(&self, n: usize) {
        let mut puts = self.puts.subscribe();
        let _ = puts.wait_for(|&puts| puts >= n).await;
    }
}

/// Closes idle connections as they pass the timeout, while the pool has any.
async fn reap(pool: Weak<Pool>) {
    loop {
        let Some(next) = pool.upgrade().and_then(|pool| pool.expire()) else {
            return;
        };
        tokio::time::sleep_until(next).await;
    }
}
