//! rebound-runtime: the async driver (in progress).
