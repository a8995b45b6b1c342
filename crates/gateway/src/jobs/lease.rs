//! Holding jobs on a store several instances share (X2): every third of a lease (at most a
//! second) this instance renews the leases of the jobs it drives, then takes over the jobs whose holder's
//! lease ran out, under the restart rule (P3): a waiting job resumes at its deadline, a
//! pending one at once, and one whose attempt may have been sent needs a human.
//!
//! A job this instance stopped driving (its driver ended on a store error, say) is not
//! renewed: its lease runs out and whichever instance looks first takes it over, this one
//! included. Renewal and takeover read the database's clock, never this instance's.

use std::sync::Arc;
use std::time::Duration;

use super::{Jobs, take_over};
use crate::state::Gateway;

/// The longest time between two looks for jobs to take over: an instance that stops
/// cleanly lets its jobs go at once, and they should not wait a long lease's third.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Renews and takes over, every third of `lease` or every second if that is sooner, for as
/// long as the gateway runs.
pub(super) async fn hold(gateway: Arc<Gateway>, lease: Duration) {
    let Some(jobs) = gateway.jobs.as_ref() else {
        return;
    };
    let every = (lease / 3).clamp(Duration::from_millis(10), LOOK_EVERY);
    loop {
        gateway.sleeper().sleep(every).await;
        round(&gateway, jobs).await;
    }
}

/// One renewal and one look for jobs to take over; a failure is logged and the next round
/// tries again.
async fn round(gateway: &Arc<Gateway>, jobs: &Jobs) {
    let driving = jobs.driving();
    let asked = driving.len();
    match jobs.off_thread(move |store| store.renew(&driving)).await {
        Ok(held) if held < asked => {
            tracing::info!(
                event = "job_leases_lost",
                renewed = held,
                lost = asked - held
            );
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(event = "job_lease_renewal_failed", error = %e),
    }
    match take_over(gateway, jobs).await {
        Ok(taken) if !taken.due.is_empty() || !taken.action_required.is_empty() => {
            tracing::info!(
                event = "jobs_taken_over",
                resumed = taken.due.len(),
                need_action = taken.action_required.len()
            );
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(event = "job_takeover_failed", error = %e),
    }
}
