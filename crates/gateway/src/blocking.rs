//! Durable-store calls on tokio's blocking pool. A store commit waits for the disk (SQLite's
//! `synchronous=FULL`, a PostgreSQL round trip), and the gateway's async threads meanwhile
//! serve every live request and stream: they must never wait for a disk. The jobs and the
//! agent runs ledgers both call their stores through here.

use std::sync::Arc;

/// Runs `work` against `store` on the blocking pool. A task that panicked or was cancelled
/// comes back as `lost(reason)`, an error of the store's own type.
pub(crate) async fn off_thread<S, T, E>(
    store: &Arc<S>,
    work: impl FnOnce(&S) -> Result<T, E> + Send + 'static,
    lost: impl FnOnce(String) -> E,
) -> Result<T, E>
where
    S: ?Sized + Send + Sync + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || work(store.as_ref()))
        .await
        .unwrap_or_else(|e| Err(lost(format!("a store call failed: {e}"))))
}
