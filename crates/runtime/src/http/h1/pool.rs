//! Idle HTTP/1.1 connections, kept per upstream for the next request.
//!
//! The most recently used connection goes out first (it is the likeliest to be open). A
//! connection is checked before it is handed out: if the peer closed it, or sent bytes nobody
//! asked for, it is dropped. A peer may still close it between that check and the request;
//! the attempt then fails, and the runtime decides what follows (B5).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::Uri;
use http::uri::{Authority, Scheme};

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

/// The idle connections.
pub(crate) struct Pool {
    idle: Mutex<HashMap<Key, VecDeque<Idle>>>,
    /// How long a connection may wait unused before it is closed.
    timeout: Duration,
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
            idle: Mutex::new(HashMap::new()),
            timeout,
        }
    }

    /// An open idle connection for `key`, if there is one.
    pub(crate) fn take(&self, key: &Key) -> Option<Box<Connection>> {
        loop {
            let idle = {
                let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                let list = idle.get_mut(key)?;
                let newest = list.pop_back();
                if newest
                    .as_ref()
                    .is_none_or(|i| i.since.elapsed() >= self.timeout)
                {
                    // The newest is the youngest: when it is too old, so are all the others.
                    idle.remove(key);
                    return None;
                }
                newest
            };
            let mut conn = idle?.conn;
            if conn.is_open() {
                return Some(conn);
            }
        }
    }

    /// Keeps `conn` for the next request to `key`, and closes what has waited too long.
    pub(crate) fn put(&self, key: Key, conn: Box<Connection>) {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let list = idle.entry(key).or_default();
        while list
            .front()
            .is_some_and(|i| now.duration_since(i.since) >= self.timeout)
        {
            list.pop_front();
        }
        list.push_back(Idle { conn, since: now });
    }

    /// How many connections wait.
    pub(crate) fn idle_count(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(VecDeque::len)
            .sum()
    }
}
