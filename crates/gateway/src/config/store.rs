//! Where durable jobs live: a SQLite file (`store_path`, the default, P4) or a PostgreSQL
//! database shared by several instances (`store`, X1).
//!
//! The PostgreSQL URL names the server, the role and the database; its password never
//! appears in the file: `store_password_env` names the environment variable that holds it,
//! and the password is a secret from then on (redacted by value wherever text leaves).

use std::time::Duration;

use super::Env;

/// How long an instance's hold on a job lasts unless renewed, by default (X2).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// The PostgreSQL database that several instances share.
#[derive(Clone)]
pub struct SharedStore {
    /// `postgres://user@host:port/database`, without a password.
    pub url: String,
    /// The password, read from the variable `store_password_env` names.
    pub password: Option<String>,
    /// A PEM file of CA certificates to trust besides the public roots: `store_ca_file`.
    pub ca_file: Option<std::path::PathBuf>,
    /// How long an instance's hold on a job lasts unless renewed: `store_lease_ms`.
    pub lease: Duration,
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore")
            .field("url", &self.url)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("ca_file", &self.ca_file)
            .field("lease", &self.lease)
            .finish()
    }
}

/// The store settings as written.
pub(super) struct StoreFile<'a> {
    pub(super) store: Option<&'a str>,
    pub(super) store_path: Option<&'a str>,
    pub(super) store_password_env: Option<&'a str>,
    pub(super) store_ca_file: Option<&'a str>,
    pub(super) store_lease_ms: Option<u64>,
}

/// The shared store the settings name, if any; an error is `(field, message)`.
pub(super) fn compile(
    file: &StoreFile<'_>,
    env: &dyn Env,
) -> Result<Option<SharedStore>, (String, String)> {
    let fail = |field: &str, message: &str| Err((field.to_owned(), message.to_owned()));
    let Some(url) = file.store else {
        for (field, set) in [
            ("store_password_env", file.store_password_env.is_some()),
            ("store_ca_file", file.store_ca_file.is_some()),
            ("store_lease_ms", file.store_lease_ms.is_some()),
        ] {
            if set {
                return fail(
                    field,
                    "applies to a PostgreSQL `store` only, and none is set",
                );
            }
        }
        return Ok(None);
    };
    if file.store_path.is_some() {
        return fail(
            "store",
            "set either `store` (PostgreSQL) or `store_path` (SQLite), not both",
        );
    }
    let url = url.trim();
    let Some(rest) = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
    else {
        return fail(
            "store",
            "must be a PostgreSQL URL, postgres://user@host:port/database (for SQLite, set `store_path`)",
        );
    };
    // The part before the host: `user` or `user:password`. The password belongs in the
    // environment, and the message does not repeat the URL.
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    if authority
        .rsplit_once('@')
        .is_some_and(|(user, _)| user.contains(':'))
        || url.contains("password=")
    {
        return fail(
            "store",
            "the URL carries a password; put it in an environment variable and name that variable in `store_password_env`",
        );
    }
    if authority.is_empty() || authority.ends_with('@') {
        return fail("store", "names no host: postgres://user@host:port/database");
    }
    let password = match file.store_password_env {
        Some(name) => match env.var(name) {
            Some(value) if !value.is_empty() => Some(value),
            _ => {
                return Err((
                    "store_password_env".to_owned(),
                    format!("the environment variable {name} is not set"),
                ));
            }
        },
        None => None,
    };
    let ca_file = match file.store_ca_file {
        Some(path) if path.trim().is_empty() => return fail("store_ca_file", "is empty"),
        Some(path) => Some(std::path::PathBuf::from(path)),
        None => None,
    };
    let lease = match file.store_lease_ms {
        Some(0) => return fail("store_lease_ms", "must be more than 0"),
        Some(ms) => Duration::from_millis(ms),
        None => DEFAULT_LEASE,
    };
    Ok(Some(SharedStore {
        url: url.to_owned(),
        password,
        ca_file,
        lease,
    }))
}
