//! `flume-cli transactions`: list.

use anyhow::Result;

use crate::args::client::BrokerAddr;
use crate::args::transactions::TransactionsCommand;
use crate::common::{connect, describe};

pub async fn run(cmd: TransactionsCommand) -> Result<()> {
    let TransactionsCommand::List {
        states,
        min_age_ms,
        broker,
    } = cmd;
    list_transactions(&broker, &states, min_age_ms).await
}

/// `transactions list`.
async fn list_transactions(
    broker: &BrokerAddr,
    states: &[String],
    min_age_ms: Option<u64>,
) -> Result<()> {
    let admin = connect(broker).await?;
    let states: Vec<&str> = states.iter().map(String::as_str).collect();
    let listed = admin
        .list_transactions(&states, min_age_ms.map(std::time::Duration::from_millis))
        .await
        .map_err(describe)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    println!(
        "{:<32} {:>12} {:>6} {:<15} {:>9} {:>8} PARTITIONS",
        "TRANSACTIONAL_ID", "PRODUCER_ID", "EPOCH", "STATE", "OPEN_FOR", "TIMEOUT"
    );
    for t in listed {
        let open_for = if t.started_ms < 0 {
            "-".to_owned()
        } else {
            seconds(now.saturating_sub(t.started_ms).max(0))
        };
        let partitions = if t.partitions.is_empty() {
            "-".to_owned()
        } else {
            t.partitions
                .iter()
                .map(|tp| {
                    let ps: Vec<String> = tp.partitions.iter().map(i32::to_string).collect();
                    format!("{}/{}", tp.topic, ps.join(","))
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "{:<32} {:>12} {:>6} {:<15} {:>9} {:>8} {partitions}",
            t.transactional_id,
            t.producer_id,
            t.producer_epoch,
            t.state,
            open_for,
            seconds(i64::from(t.timeout_ms)),
        );
    }
    Ok(())
}

/// Milliseconds as seconds with one decimal: `12.3s` (a negative count, which
/// only a confused broker would send, as `0.0s`).
fn seconds(ms: i64) -> String {
    let ms = ms.max(0);
    format!("{}.{}s", ms / 1000, (ms % 1000) / 100)
}
