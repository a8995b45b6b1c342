//! How rebound reaches its upstreams: the CA certificates it trusts besides the public roots
//! (`upstream_ca_file`), and the proxy it goes through (`upstream_proxy` and
//! `upstream_no_proxy`, or else the environment's `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and
//! `NO_PROXY`, read as curl reads them).

use rebound_runtime::http::{ExtraRoots, Proxies};

use super::Env;

/// What a key's value cannot be: the key (if a key of the file) and why.
type Refusal = (Option<String>, String);

/// The value of `upstream_proxy` that reaches every upstream directly, whatever the
/// environment says.
const DIRECT: &str = "none";

/// `upstream_ca_file`: the certificates of its PEM file, or none.
pub(super) fn roots(ca_file: Option<&str>) -> Result<ExtraRoots, Refusal> {
    let key = || Some("upstream_ca_file".to_owned());
    match ca_file {
        Some(path) if path.trim().is_empty() => Err((key(), "is empty".into())),
        Some(path) => ExtraRoots::from_pem_file(std::path::Path::new(path))
            .map_err(|message| (key(), message)),
        None => Ok(ExtraRoots::default()),
    }
}

/// `upstream_proxy` (a URL, or `"none"`) with `upstream_no_proxy`; without it, the
/// environment's variables. A variable that holds no usable proxy stops rebound too: its
/// requests would otherwise leave by a way nobody chose.
pub(super) fn proxies(
    proxy: Option<&str>,
    no_proxy: Option<&str>,
    env: &dyn Env,
) -> Result<Proxies, Refusal> {
    match proxy.map(str::trim) {
        Some("") => Err((Some("upstream_proxy".into()), "is empty".into())),
        Some(DIRECT) if no_proxy.is_some() => Err((
            Some("upstream_no_proxy".into()),
            "has no use with upstream_proxy = \"none\"".into(),
        )),
        Some(DIRECT) => Ok(Proxies::none()),
        Some(url) => {
            Proxies::fixed(url, no_proxy).map_err(|why| (Some("upstream_proxy".into()), why))
        }
        None if no_proxy.is_some() => Err((
            Some("upstream_no_proxy".into()),
            "needs upstream_proxy (the environment's proxies take NO_PROXY)".into(),
        )),
        None => Proxies::from_vars(|name| env.var(name)).map_err(|why| {
            (
                None,
                format!(
                    "the environment variable {why}; set upstream_proxy = \"none\" to reach \
                     upstreams directly, or upstream_proxy to the proxy to use"
                ),
            )
        }),
    }
}

#[cfg(test)]
mod tests;
