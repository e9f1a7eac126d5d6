//! Certificates made in the tests with rcgen: a CA, certificates it signs,
//! and a temp dir with the CA's file and a server certificate for localhost
//! and 127.0.0.1 (TLS tests of both listeners and of the SDK).

use std::path::{Path, PathBuf};

use anyhow::Result;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// A CA that signs certificates for the tests.
pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    pub fn new(name: &str) -> Result<Ca> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key)?;
        Ok(Ca { cert, key })
    }

    /// A certificate for `names` (DNS names or IP addresses) with subject
    /// `CN=cn,O=Flume Tests`: (certificate PEM, key PEM).
    pub fn issue(&self, cn: &str, names: &[&str]) -> Result<(String, String)> {
        let key = KeyPair::generate()?;
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(names)?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Flume Tests");
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// Writes the CA's certificate to `dir/name`.
    pub fn write(&self, dir: &Path, name: &str) -> Result<PathBuf> {
        let path = dir.join(name);
        std::fs::write(&path, self.cert.pem())?;
        Ok(path)
    }
}

/// The files of one party: certificate and key.
pub struct Files {
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub fn write_pair(dir: &Path, name: &str, (cert, key): (String, String)) -> Result<Files> {
    let files = Files {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    };
    std::fs::write(&files.cert, cert)?;
    std::fs::write(&files.key, key)?;
    Ok(files)
}

/// A temp dir with a CA, a server certificate for localhost and 127.0.0.1,
/// and the CA's file.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: Ca,
    pub ca_file: PathBuf,
    pub server: Files,
}

pub fn pki() -> Result<Pki> {
    let dir = tempfile::tempdir()?;
    let ca = Ca::new("Flume Test CA")?;
    let ca_file = ca.write(dir.path(), "ca.pem")?;
    let server = write_pair(
        dir.path(),
        "server",
        ca.issue("broker", &["localhost", "127.0.0.1"])?,
    )?;
    Ok(Pki {
        dir,
        ca,
        ca_file,
        server,
    })
}
