//! What the commands share: connecting to the broker (`--broker` and its
//! TLS and login flags), the producer flags a Kafka cluster takes, error
//! messages that say what to do, Ctrl-C, passwords, `NAME=VALUE` pairs.
//! Below `crate::cmd` and `crate::perf`; never imports them.

use anyhow::{Context, Result};
use flume_client::{Admin, ConnectionConfig, TlsConfig};
use flume_protocol::ErrorCode;

use crate::args::client::{BrokerAddr, CompressionArg, KafkaProduceFlags};

/// A password from `file` (its first line), or else from the environment variable `var`.
pub fn read_password(file: Option<&std::path::Path>, var: &str) -> Result<String> {
    match file {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("cannot read the password file {}", f.display()))?;
            Ok(text.lines().next().unwrap_or_default().to_owned())
        }
        None => std::env::var(var)
            .with_context(|| format!("no password: pass --password-file or set {var}")),
    }
}

impl BrokerAddr {
    /// Whether --broker names a Kafka cluster (kafka://...).
    pub fn is_kafka(&self) -> bool {
        self.addr
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("kafka://")
    }

    /// Connection settings from the flags: TLS when asked for, a login with --user.
    pub fn connection(&self) -> Result<ConnectionConfig> {
        let mut config = ConnectionConfig::default();
        if let Some(user) = &self.user {
            let password = read_password(self.password_file.as_deref(), "FLUME_PASSWORD")?;
            config.credentials =
                Some(flume_client::Credentials::new(user, password).mechanism(self.sasl_mechanism));
        }
        if !self.tls && self.tls_ca.is_none() && self.tls_cert.is_none() {
            return Ok(config);
        }
        let mut tls = TlsConfig::new();
        if let Some(ca) = &self.tls_ca {
            tls = tls.ca_file(ca);
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            tls = tls.client_cert(cert, key);
        }
        Ok(config.tls(tls))
    }
}

impl KafkaProduceFlags {
    /// `config` with these settings.
    pub fn apply(&self, config: flume_client::ProducerConfig) -> flume_client::ProducerConfig {
        use flume_client::Compression;
        let c = match self.compression {
            CompressionArg::None => Compression::None,
            CompressionArg::Gzip => Compression::Gzip,
            CompressionArg::Snappy => Compression::Snappy,
            CompressionArg::Lz4 => Compression::Lz4,
            CompressionArg::Zstd => Compression::Zstd,
        };
        config
            .compression(c)
            .acks(self.acks)
            .idempotence(!self.no_idempotence)
            .partitioner(self.partitioner)
    }
}

pub async fn connect(broker: &BrokerAddr) -> Result<Admin> {
    Admin::connect_with(&broker.addr, broker.connection()?)
        .await
        .context("cannot reach the broker")
}

/// The `(name, value)` of a checked `NAME=VALUE` pair.
pub fn config_pair(s: &str) -> (&str, &str) {
    s.split_once('=').map_or((s, ""), |(n, v)| (n.trim(), v))
}

/// A channel that closes on Ctrl-C or SIGTERM; a second one exits at once (status 130,
/// as a shell reports an interrupted command).
pub fn interrupt() -> Result<async_channel::Receiver<()>> {
    let (tx, rx) = async_channel::bounded::<()>(1);
    let tx = std::sync::Mutex::new(Some(tx));
    ctrlc::set_handler(move || {
        let first = tx.lock().map(|mut g| g.take().is_some()).unwrap_or(true);
        if !first {
            std::process::exit(130);
        }
    })
    .context("cannot install the Ctrl-C handler")?;
    Ok(rx)
}

/// Turns a client error into a message that says what to do.
pub fn describe(e: flume_client::Error) -> anyhow::Error {
    let code = e.code();
    // "for topic/-1" means "no partition chosen": name the topic alone.
    let e = match e {
        flume_client::Error::Broker {
            code,
            context: Some(c),
            ..
        } if c.ends_with("/-1") => anyhow::anyhow!(
            "broker error {code} for topic {}",
            c.trim_end_matches("/-1")
        ),
        e => anyhow::Error::new(e),
    };
    let hint = match code {
        Some(ErrorCode::UnknownTopic) => "the topic does not exist: create it with `flume-cli topics create`",
        Some(ErrorCode::QueueFull) => {
            "the broker is in reject mode and its partition queue is full; retry later"
        }
        // Said only when the error does not state the limit itself.
        Some(ErrorCode::RecordTooLarge)
            if !format!("{e:#}").contains("max_record_bytes") =>
        {
            "larger than the broker's --max-record-bytes, which is 1 MiB unless the broker was started with another value"
        }
        Some(ErrorCode::AuthorizationFailed) => {
            "the broker's ACLs do not allow this principal to do that: an admin can grant it with `flume-cli acls add`"
        }
        Some(ErrorCode::SecurityDisabled) => {
            "the broker runs with --authorizer off, so ACLs are not in use: only an admin (--admin-user) may list or stage them, and they apply once the broker runs with --authorizer on"
        }
        Some(ErrorCode::InvalidName) => {
            "topic names are 1 to 249 characters of A-Z a-z 0-9 . _ -, not `.` or `..`, and do not start with `__`; group ids are 1 to 1024 bytes"
        }
        _ => return e,
    };
    anyhow::anyhow!("{e:#} ({hint})")
}
