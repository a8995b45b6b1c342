//! TLS to the database, with rustls: the server's certificate is always verified, against the
//! web's public roots (a managed PostgreSQL with a publicly trusted certificate) plus, when
//! given, the certificates of a CA file (a provider's own CA, such as Amazon RDS's bundle).
//!
//! Whether TLS is used is the URL's `sslmode`: `disable` never, `prefer` (the default) when
//! the server offers it, `require` always. Unlike libpq's, `prefer` and `require` never accept
//! a certificate that does not verify.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::model::StoreError;

/// The connector: the public roots, and the certificates in `ca_file` if given.
pub(super) fn connector(ca_file: Option<&Path>) -> Result<MakeRustlsConnect, StoreError> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let bad = |message: String| {
            StoreError::Database(format!("the CA file {}: {message}", path.display()))
        };
        let mut added = 0;
        for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(e.to_string()))? {
            let cert = cert.map_err(|e| bad(e.to_string()))?;
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
            added += 1;
        }
        if added == 0 {
            return Err(bad("holds no PEM certificate".into()));
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| StoreError::Database(format!("TLS: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}
