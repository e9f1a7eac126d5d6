//! `flume-cli broker`: runs a broker until Ctrl-C or SIGTERM; SIGHUP reloads
//! its TLS certificates and the settings that can change while it runs.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use flume_broker::{Broker, BrokerConfig, TopicConfig};
use futures::FutureExt;

use crate::args::broker::BrokerArgs;
use crate::common::config_pair;

pub async fn run(a: BrokerArgs, mut settings: crate::settings::Effective) -> Result<()> {
    if a.print_config {
        print!("{}", settings.to_toml());
        std::io::stdout().flush().ok();
        return Ok(());
    }
    if a.data.exists() && !a.data.is_dir() {
        bail!(
            "data path {} is not a directory (pass --data a directory, or a path to create one)",
            a.data.display()
        );
    }
    let c = broker_config(&a)?;
    // Raised before the broker opens its topics; reported once it has started.
    let fds = flume_broker::server::ensure_fd_limit(&c);
    let (stop, hup) = broker_signals()?;
    let broker = Broker::start(c)
        .await
        .with_context(|| format!("cannot start the broker on {}:{}", a.host, a.port))?;
    println!(
        "flume broker listening on {} (data {})",
        broker.local_addr(),
        a.data.display()
    );
    if let Some(http) = broker.http_addr() {
        println!("flume broker dashboard on http://{http}/ (metrics at /metrics)");
    }
    if let Some(kafka) = broker.kafka_addr() {
        println!("flume broker serving Kafka clients on {kafka}");
    }
    if let Some(file) = &settings.file {
        tracing::info!(file = %file.display(), "settings read from the configuration file (SIGHUP reads it again)");
    }
    if !fds.is_enough() {
        tracing::warn!(
            "{fds}: raise it (ulimit -n {}, LimitNOFILE= in a systemd unit) or lower --max-open-files/--max-connections, or opens and accepts will fail with EMFILE under load",
            fds.needed
        );
    }
    if broker.is_tls() {
        tracing::info!("TLS on every port (SIGHUP reloads the certificates)");
    }
    std::io::stdout().flush().ok();
    loop {
        futures::select! {
            _ = stop.recv().fuse() => break,
            r = hup.recv().fuse() => {
                if r.is_err() {
                    break;
                }
                match broker.reload_tls().await {
                    Ok(()) if broker.is_tls() => tracing::info!("SIGHUP: TLS certificates reloaded"),
                    Ok(()) => tracing::info!("SIGHUP: no TLS configured, nothing to reload"),
                    Err(e) => tracing::error!("SIGHUP: TLS reload failed, keeping the certificates in use: {e}"),
                }
                reload(&broker, &a, &mut settings);
            }
        }
    }
    tracing::info!("shutting down: draining queues to disk");
    broker.shutdown().await;
    Ok(())
}

/// SIGHUP: reads the settings again (the configuration file as it is now;
/// the command line and environment are the process's) and applies what can
/// change while running ([`crate::settings::RELOADABLE`]); every other change
/// is logged as needing a restart, and keeps its value until then.
fn reload(broker: &Broker, started: &BrokerArgs, settings: &mut crate::settings::Effective) {
    use crate::settings::{ParseError, RELOADABLE};
    let (new_args, new) = match settings.reread() {
        Ok(r) => r,
        Err(ParseError::Config(e)) => {
            tracing::error!("SIGHUP: {e}; keeping the settings in use");
            return;
        }
        Err(ParseError::Flags(e)) => {
            tracing::error!(
                "SIGHUP: {}; keeping the settings in use",
                e.render()
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or("invalid settings")
            );
            return;
        }
    };
    let changes = settings.changes(&new);
    if changes.is_empty() {
        tracing::info!("SIGHUP: settings unchanged");
        return;
    }
    let engine = broker.engine();
    let (reloadable, restart): (Vec<_>, Vec<_>) = changes
        .into_iter()
        .partition(|(k, _, _)| RELOADABLE.contains(&k.as_str()));
    let changed = |key: &str| reloadable.iter().any(|(k, _, _)| k == key);
    let topic_keys = [
        "partitions",
        "retention-bytes",
        "retention-ms",
        "segment-bytes",
        "topic-config",
        "max-pending",
        "backpressure",
    ];
    let mut applied: Vec<&str> = Vec::new();
    if topic_keys.iter().any(|k| changed(k)) {
        match topic_defaults(&new_args)
            .map_err(|e| e.to_string())
            .and_then(|tc| {
                engine
                    .records()
                    .set_default_topic(tc)
                    .map_err(|e| e.to_string())
            }) {
            Ok(()) => applied.extend(topic_keys.iter().filter(|k| changed(k))),
            Err(e) => tracing::error!("SIGHUP: topic defaults not changed: {e}"),
        }
    }
    if changed("max-connections-per-principal") || changed("produce-quota-bytes-per-sec") {
        let per_principal = new_args
            .max_connections_per_principal
            .unwrap_or(usize::try_from(started.max_connections).unwrap_or(usize::MAX));
        engine
            .quotas()
            .set_limits(per_principal, new_args.produce_quota_bytes_per_sec);
        applied.extend(
            [
                "max-connections-per-principal",
                "produce-quota-bytes-per-sec",
            ]
            .iter()
            .filter(|k| changed(k)),
        );
    }
    if changed("log-level") {
        match crate::logging::set_level(new_args.log_level.as_deref()) {
            Ok(()) => applied.push("log-level"),
            Err(e) => tracing::error!("SIGHUP: log level not changed: {e}"),
        }
    }
    for (key, old, now) in &reloadable {
        if applied.contains(&key.as_str()) {
            settings.take(key, &new);
            let scope = if topic_keys.contains(&key.as_str()) {
                " (topics created from now on; existing topics keep theirs: flume-cli topics alter)"
            } else {
                ""
            };
            tracing::info!(setting = %key, "SIGHUP: {key} changed from {old} to {now}{scope}");
        }
    }
    for (key, old, now) in &restart {
        tracing::warn!(setting = %key, "SIGHUP: {key} changed from {old} to {now}: needs a restart, keeping {old} until then");
    }
}

/// The broker's signals: a channel that closes on Ctrl-C or SIGTERM, and
/// one that gets a message on each SIGHUP (at most one waits; more SIGHUPs
/// meanwhile ask for the same reload).
fn broker_signals() -> Result<(async_channel::Receiver<()>, async_channel::Receiver<()>)> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("cannot install the signal handlers")?;
    let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
    let (hup_tx, hup_rx) = async_channel::bounded::<()>(1);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if sig == SIGHUP {
                    let _ = hup_tx.try_send(());
                } else {
                    stop_tx.close();
                    return;
                }
            }
        })
        .context("cannot start the signal thread")?;
    Ok((stop_rx, hup_rx))
}

/// The settings of topics created without explicit ones.
fn topic_defaults(a: &BrokerArgs) -> Result<TopicConfig> {
    let mut tc = TopicConfig {
        partitions: u32::try_from(a.partitions)?,
        retention_bytes: a.retention_bytes,
        retention_ms: a.retention_ms,
        segment_bytes: a.segment_bytes,
        max_pending: usize::try_from(a.max_pending)?,
        backpressure: a.backpressure,
        ..TopicConfig::default()
    };
    for pair in &a.topic_config {
        let (name, value) = config_pair(pair);
        tc.set_named(name, value)
            .with_context(|| format!("--topic-config {pair}"))?;
    }
    tc.check()
        .map_err(|e| anyhow::anyhow!("--topic-config: {e}"))?;
    Ok(tc)
}

fn broker_config(a: &BrokerArgs) -> Result<BrokerConfig> {
    let mut c = BrokerConfig::new(&a.data);
    c.listen = format!("{}:{}", a.host, a.port);
    c.default_topic = topic_defaults(a)?;
    c.fsync = a.fsync;
    c.max_frame_bytes = usize::try_from(a.max_frame_bytes)?;
    c.max_record_bytes = match a.max_record_bytes {
        Some(n) => usize::try_from(n)?,
        None => c.max_record_bytes.min(c.max_frame_bytes - 1024),
    };
    c.max_connections = usize::try_from(a.max_connections)?;
    c.max_partitions = a.max_partitions;
    c.max_groups = usize::try_from(a.max_groups)?;
    c.max_members_per_group = usize::try_from(a.max_members_per_group)?;
    c.group_initial_rebalance_delay = Duration::from_millis(a.group_initial_rebalance_delay_ms);
    c.group_min_session_timeout = Duration::from_millis(a.group_min_session_timeout_ms);
    c.group_max_session_timeout = Duration::from_millis(a.group_max_session_timeout_ms);
    c.share.partition.lock_duration_ms = a.share_record_lock_duration_ms;
    c.share.partition.delivery_count_limit = u16::try_from(a.share_delivery_count_limit)?;
    c.share.partition.max_in_flight = usize::try_from(a.share_partition_max_record_locks)?;
    c.share.auto_offset_reset = a
        .share_auto_offset_reset
        .parse()
        .map_err(anyhow::Error::msg)?;
    c.share.groups.session_timeout_ms = a.share_session_timeout_ms;
    c.share.groups.heartbeat_interval_ms = (a.share_session_timeout_ms / 9).clamp(500, 5_000);
    c.consumer_groups.session_timeout_ms = a.consumer_session_timeout_ms;
    c.consumer_groups.heartbeat_interval_ms = (a.consumer_session_timeout_ms / 9).clamp(500, 5_000);
    c.share.groups.max_groups = c.max_groups;
    c.connections_max_idle = Duration::from_millis(a.connections_max_idle_ms);
    c.max_open_files = usize::try_from(a.max_open_files)?;
    c.max_request_memory = match a.max_request_memory {
        Some(n) => usize::try_from(n)?,
        None => c.max_request_memory.max(c.max_frame_bytes),
    };
    c.auto_create_topics = !a.no_auto_create;
    c.verify_on_open = a.verify;
    c.busy_poll = a.busy_poll_us;
    c.allow_foreign_data_dir = a.allow_foreign_data_dir;
    c.http_listen = a.http_port.map(|p| format!("{}:{p}", a.host));
    c.kafka_listen = a.kafka_port.map(|p| format!("{}:{p}", a.host));
    c.kafka_advertised = a.kafka_advertised.clone();
    c.tls_cert = a.tls_cert.clone();
    c.tls_key = a.tls_key.clone();
    c.tls_client_ca = a.tls_client_ca.clone();
    c.auth = a.auth;
    c.admin_users = a.admin_user.clone();
    c.authorizer = a.authorizer == "on";
    c.max_connections_per_principal = a.max_connections_per_principal;
    c.produce_quota_bytes_per_sec = a.produce_quota_bytes_per_sec;
    c.cleaner = flume_broker::storage::CleanerLimits {
        key_map_bytes: usize::try_from(a.cleaner_key_map_bytes).unwrap_or(usize::MAX),
        io_bytes_per_sec: a.cleaner_io_bytes_per_sec,
    };
    Ok(c)
}
