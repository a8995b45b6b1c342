//! rebound-core's integration tests, one binary: the catalogue's fixtures, the turn's
//! schedules in virtual time, and property tests of the budget and timing invariants.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods,
    reason = "test code reads fixture files and fails loudly"
)]

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rebound_core::Catalogue;

mod corpus;
mod fixtures;
mod independent;
mod properties;
mod reprints;
mod rests;
mod turns;

/// The fixed "now" of every test: 2026-11-30T15:00:00Z.
pub(crate) fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_796_050_800)
}

/// The shipped catalogue, compiled once for the whole binary.
pub(crate) static CATALOGUE: LazyLock<Catalogue> =
    LazyLock::new(|| Catalogue::shipped().expect("the shipped catalogue compiles"));
