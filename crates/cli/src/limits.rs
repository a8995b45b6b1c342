//! Process limits: the open-files limit bounds how many connections `rebound serve` can hold.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The soft limit asked for when the hard one is unlimited.
const UNLIMITED_TARGET: u64 = 1 << 20;

/// Raises the soft open-files limit to the hard one (as many servers do at start: the soft
/// default, often 1,024, would cap the gateway near 500 streams); returns the limit now in
/// force, `None` when it is unlimited.
pub(crate) fn raise_open_files() -> Option<u64> {
    let limit = getrlimit(Resource::Nofile);
    let target = limit.maximum.unwrap_or(UNLIMITED_TARGET);
    if limit.current.is_some_and(|current| current < target) {
        // Refused (a container that forbids it): the current limit stays, and is reported.
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(target),
                maximum: limit.maximum,
            },
        );
    }
    getrlimit(Resource::Nofile).current
}
