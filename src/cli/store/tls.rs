//! The rustls client configuration (ring provider): the CA of `--tls-ca`
//! (else the Mozilla roots) and the client certificate of `--tls-cert` /
//! `--tls-key`, if given.

use super::address::Tls;
use super::StoreError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

pub fn client_config(files: &Tls) -> Result<Arc<rustls::ClientConfig>, StoreError> {
    let bad =
        |what: &str, path: &std::path::Path, e: String| StoreError::Usage(format!("{what} {}: {e}", path.display()));
    let mut roots = rustls::RootCertStore::empty();
    match &files.ca {
        Some(path) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad("--tls-ca", path, e.to_string()))?
                .collect::<Result<_, _>>()
                .map_err(|e| bad("--tls-ca", path, e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("--tls-ca", path, "no PEM certificate in it".to_owned()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| bad("--tls-ca", path, e.to_string()))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Usage(format!("TLS: {e}")))?
        .with_root_certificates(roots);
    let config = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .map_err(|e| bad("--tls-cert", cert, e.to_string()))?
                .collect::<Result<_, _>>()
                .map_err(|e| bad("--tls-cert", cert, e.to_string()))?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("--tls-key", key, e.to_string()))?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| bad("--tls-cert", cert, e.to_string()))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}
