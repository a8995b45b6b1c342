//! Certificate authorities an upstream may be trusted by besides the public roots: a company's
//! own CA, or the one a TLS-inspecting proxy signs with. Without them such an upstream fails on
//! its certificate (`tls_certificate`, hard), and nothing but trusting its CA mends that.

use std::path::Path;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// CA certificates read from PEM, each already added (so checked) as a trust anchor.
#[derive(Clone, Debug)]
pub struct ExtraRoots(RootCertStore);

impl Default for ExtraRoots {
    /// None: the public roots alone.
    fn default() -> Self {
        ExtraRoots(RootCertStore::empty())
    }
}

impl ExtraRoots {
    /// The certificates of a PEM file; the message names the file and what is wrong with it.
    pub fn from_pem_file(path: &Path) -> Result<Self, String> {
        let pem =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::from_pem(&pem).map_err(|message| format!("{}: {message}", path.display()))
    }

    /// The certificates of a PEM text: at least one, each usable as a trust anchor.
    pub fn from_pem(pem: &[u8]) -> Result<Self, String> {
        let mut store = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("not a PEM certificate file ({e})"))?;
            store
                .add(cert)
                .map_err(|e| format!("a certificate cannot be a trust anchor ({e})"))?;
        }
        if store.is_empty() {
            return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned());
        }
        Ok(ExtraRoots(store))
    }

    /// How many certificates.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// These and the public (webpki) roots.
    pub(super) fn with_public_roots(&self) -> RootCertStore {
        let mut store = self.0.clone();
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        store
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &[u8] = include_bytes!("h1/testdata/ca.crt");

    #[test]
    fn a_pem_file_gives_its_certificates_and_a_bad_one_says_why() {
        assert_eq!(ExtraRoots::from_pem(CA).map(|r| r.len()), Ok(1));
        let public = ExtraRoots::default().with_public_roots().len();
        assert_eq!(
            ExtraRoots::from_pem(CA).unwrap().with_public_roots().len(),
            public + 1
        );
        assert_eq!(
            ExtraRoots::from_pem(b"just text\n").err().as_deref(),
            Some("holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
        );
        let cut = &CA[..CA.len() / 2];
        assert!(
            ExtraRoots::from_pem(cut).is_err_and(|m| m.starts_with("not a PEM certificate file")),
            "a certificate cut in half"
        );
        let missing = ExtraRoots::from_pem_file(Path::new("no-such-dir/ca.pem")).unwrap_err();
        assert!(
            missing.starts_with("cannot read no-such-dir/ca.pem: "),
            "{missing}"
        );
    }
}
