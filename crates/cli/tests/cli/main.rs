//! The `rebound` binary, run as a user runs it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

mod chaos;
mod classify;
mod serve;
