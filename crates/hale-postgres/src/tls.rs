//! TLS between hosts: `sslmode` and `sslrootcert` as libpq means them,
//! for hale's own sessions (tokio-postgres over rustls, no OpenSSL) and,
//! written into their connection strings, for PostgreSQL's programs and a
//! standby's WAL receiver.
//!
//! | `sslmode` | TLS | server certificate |
//! | --- | --- | --- |
//! | `disable` | never | - |
//! | `prefer` (default, as libpq's) | when the server offers it | not checked, unless `sslrootcert` is set: then signed by it |
//! | `require` | always | not checked, unless `sslrootcert` is set: then signed by it |
//! | `verify-ca` | always | signed by `sslrootcert` |
//! | `verify-full` | always | signed by `sslrootcert` and naming the host connected to |
//!
//! A unix socket never uses TLS, whatever `sslmode` says (as libpq).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::{Deserialize, Serialize};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::PostgresConfig;

/// Whether and how connections between hosts use TLS: libpq's `sslmode`
/// values, meaning what they mean to libpq (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, else without (libpq's default).
    #[default]
    Prefer,
    /// Always TLS; the certificate is checked only against `sslrootcert`,
    /// when set.
    Require,
    /// Always TLS, with a certificate signed by `sslrootcert`.
    VerifyCa,
    /// Always TLS, with a certificate signed by `sslrootcert` that names
    /// the host connected to (its name, or its address as an IP address
    /// subject alternative name).
    VerifyFull,
}

impl SslMode {
    /// The value as libpq spells it: `disable`, `prefer`, `require`,
    /// `verify-ca`, `verify-full`.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether the server's certificate must be signed by `sslrootcert`
    /// (`verify-ca`, `verify-full`).
    pub fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// Why hale could not ready TLS for a session; nothing was connected to.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// `sslrootcert` could not be read, or holds no certificate.
    #[error("role.postgres.sslrootcert: {path}: {reason}")]
    RootCert {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// rustls refused the settings (no protocol version or verifier could
    /// be made from them).
    #[error("readying TLS: {0}")]
    Setup(String),
}

/// tokio-postgres's `sslmode` for `mode`: it knows no verification levels
/// (the verifier does the checking), only whether TLS is required.
pub(crate) fn session_mode(mode: SslMode) -> tokio_postgres::config::SslMode {
    match mode {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            tokio_postgres::config::SslMode::Require
        }
    }
}

/// The TLS connector of hale's sessions over TCP: rustls with *ring*,
/// checking the server's certificate as `cfg.sslmode` and `cfg.sslrootcert`
/// say. `sslrootcert` is read at each call (a renewed CA takes effect
/// without restarting hale).
pub(crate) fn connector(cfg: &PostgresConfig) -> Result<MakeRustlsConnect, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match &cfg.sslrootcert {
        Some(path) => {
            let webpki = WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(path)?),
                provider.clone(),
            )
            .build()
            .map_err(|err| TlsError::RootCert {
                path: path.clone(),
                reason: err.to_string(),
            })?;
            if cfg.sslmode == SslMode::VerifyFull {
                webpki
            } else {
                Arc::new(AnyName(webpki))
            }
        }
        // `validate` refuses verify-ca and verify-full without a CA.
        None => Arc::new(Unchecked(provider.clone())),
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| TlsError::Setup(err.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The certificates in the PEM file `path`.
fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let failed = |reason: String| TlsError::RootCert {
        path: path.to_owned(),
        reason,
    };
    let mut store = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|err| failed(err.to_string()))?;
    for cert in certs {
        let cert = cert.map_err(|err| failed(err.to_string()))?;
        store
            .add(cert)
            .map_err(|err| failed(format!("a certificate rustls cannot use: {err}")))?;
    }
    if store.is_empty() {
        return Err(failed("no PEM certificate in it".to_owned()));
    }
    Ok(store)
}

/// `verify-ca` (and `prefer`/`require` with `sslrootcert`): the chain must
/// lead to `sslrootcert`; the name is not checked.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require` without `sslrootcert`: encrypted, the server's
/// certificate taken as it comes (libpq's meaning of those modes); the
/// handshake's signatures are still checked.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_spelled_as_libpq_spells_them() {
        for mode in [
            SslMode::Disable,
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ] {
            let json = serde_json::to_string(&mode).expect("serializes");
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
        }
        assert_eq!(SslMode::default(), SslMode::Prefer);
    }

    #[test]
    fn a_root_certificate_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").expect("write");
        let mut cfg = PostgresConfig::new("/d");
        cfg.sslmode = SslMode::VerifyFull;
        cfg.sslrootcert = Some(path);
        assert!(matches!(connector(&cfg), Err(TlsError::RootCert { .. })));
        cfg.sslrootcert = Some(dir.path().join("missing.pem"));
        assert!(matches!(connector(&cfg), Err(TlsError::RootCert { .. })));
    }
}
