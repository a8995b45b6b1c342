//! The `[health]` table: how the shared health ledger turns failures into rests (S1–S3).

use std::time::Duration;

use rebound_core::HealthSettings;
use serde::Deserialize;

/// `[health]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HealthFile {
    /// `false` turns the ledger off: every request discovers every outage on its own.
    enabled: Option<bool>,
    /// Consecutive `transient` failures without a hint that open a circuit.
    circuit_after: Option<u32>,
    /// The first circuit window; each failed probe doubles it.
    window_ms: Option<u64>,
    /// The longest circuit window.
    window_cap_ms: Option<u64>,
    /// The longest cooldown a server's hint may set.
    hint_cap_ms: Option<u64>,
    /// How long a probe may run before another request may probe instead.
    probe_lease_ms: Option<u64>,
}

/// The ledger's settings, or `None` when `[health] enabled = false`. Errors name the key.
pub(super) fn settings(file: &HealthFile) -> Result<Option<HealthSettings>, (String, String)> {
    if file.enabled == Some(false) {
        return Ok(None);
    }
    let defaults = HealthSettings::default();
    let positive = |value: Option<u64>, key: &str, default: Duration| match value {
        Some(0) => Err((format!("health.{key}"), "must be more than 0".to_owned())),
        Some(ms) => Ok(Duration::from_millis(ms)),
        None => Ok(default),
    };
    let window = positive(file.window_ms, "window_ms", defaults.window)?;
    let window_cap = positive(file.window_cap_ms, "window_cap_ms", defaults.window_cap)?;
    if window_cap < window {
        return Err((
            "health.window_cap_ms".to_owned(),
            format!(
                "{} ms is shorter than window_ms ({} ms)",
                window_cap.as_millis(),
                window.as_millis()
            ),
        ));
    }
    let circuit_after = match file.circuit_after {
        Some(0) => {
            return Err((
                "health.circuit_after".to_owned(),
                "must be at least 1".to_owned(),
            ));
        }
        Some(n) => n,
        None => defaults.circuit_after,
    };
    Ok(Some(HealthSettings {
        circuit_after,
        window,
        window_cap,
        hint_cap: positive(file.hint_cap_ms, "hint_cap_ms", defaults.hint_cap)?,
        probe_lease: positive(file.probe_lease_ms, "probe_lease_ms", defaults.probe_lease)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Option<HealthSettings>, (String, String)> {
        settings(&toml::from_str::<HealthFile>(text).unwrap())
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(parse("").unwrap(), Some(HealthSettings::default()));
        assert_eq!(parse("enabled = false").unwrap(), None);
        let s = parse("circuit_after = 5\nwindow_ms = 500\nwindow_cap_ms = 4000")
            .unwrap()
            .unwrap();
        assert_eq!(s.circuit_after, 5);
        assert_eq!(s.window, Duration::from_millis(500));
        assert_eq!(s.window_cap, Duration::from_secs(4));
    }

    #[test]
    fn bad_values_name_their_key() {
        assert_eq!(parse("window_ms = 0").unwrap_err().0, "health.window_ms");
        assert_eq!(
            parse("window_ms = 2000\nwindow_cap_ms = 1000")
                .unwrap_err()
                .0,
            "health.window_cap_ms"
        );
        assert_eq!(
            parse("circuit_after = 0").unwrap_err().0,
            "health.circuit_after"
        );
    }
}
