//! The listen backlog: how many new connections the system queues before rebound accepts
//! them. A burst of agents opening connections at once (a fleet starting, a client pool
//! refilling) on busy cores outruns the accept loop for a moment; a short queue drops SYNs
//! there and each dropped one costs its client a second before it tries again.

/// The backlog asked for when the configuration names none.
pub const DEFAULT_LISTEN_BACKLOG: u32 = 1024;

/// Where Linux says the most it will queue; a larger request is silently cut to it.
const SOMAXCONN: &str = "/proc/sys/net/core/somaxconn";

/// [`DEFAULT_LISTEN_BACKLOG`], capped by the system's limit where it can be read.
pub(super) fn default_backlog() -> u32 {
    let limit = std::fs::read_to_string(SOMAXCONN)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok());
    capped(limit)
}

/// [`DEFAULT_LISTEN_BACKLOG`] under the system's `limit`, when known and positive.
fn capped(limit: Option<u32>) -> u32 {
    match limit {
        Some(limit) if limit > 0 => DEFAULT_LISTEN_BACKLOG.min(limit),
        _ => DEFAULT_LISTEN_BACKLOG,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_capped_by_the_system() {
        assert_eq!(capped(None), 1024);
        assert_eq!(capped(Some(0)), 1024);
        assert_eq!(capped(Some(4096)), 1024);
        assert_eq!(capped(Some(128)), 128);
    }
}
