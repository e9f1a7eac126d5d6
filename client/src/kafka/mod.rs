//! The SDK's Kafka client: what `Producer`, `GroupConsumer`,
//! `PartitionConsumer` and `Admin` use behind a `kafka://host:port[,host:port…]`
//! address. A plain `host:port` is Flume's own protocol (`crate::conn`).
//!
//! It speaks Apache Kafka's protocol to any cluster of brokers that do
//! (Apache Kafka, Redpanda, Flume's own Kafka listener), with the message
//! codec the broker's Kafka listener uses (`kafka-protocol`, patched in
//! `third_party/`) and the record-batch codec of `flume-protocol`, on the
//! runtime seam (`flume-rt`) like the rest of the SDK.
//!
//! Layout:
//! - `conn`: one connection to one broker (pipelined requests matched by
//!   correlation id, a reader task that fails every pending request when
//!   the connection breaks, version negotiation, SASL).
//! - `cluster`: bootstrap, the metadata cache (leaders and their epochs),
//!   one connection per broker, refresh with backoff, group coordinators.
//! - `errors`: Kafka's error codes as the SDK's `Error`.
//! - `offsets`: ListOffsets at each leader, a group's commits and committed
//!   offsets at its coordinator (shared by the admin and the consumers).
//! - `admin`: `Admin`'s calls over Kafka.
//! - `producer` (routing, batching per partition, idempotence, retries) and
//!   `partitioner` (FNV-1a, murmur2).
//! - `fetch`: one Fetch in flight per leader, shared by `consumer` (the
//!   partition consumer) and `group` (the classic group protocol), whose
//!   leader runs the pure assignors of `assignor`.
//! - `group_consumer`: the same consumer with Kafka 4's consumer group
//!   protocol (KIP-848): ConsumerGroupHeartbeat membership and a pure
//!   reconciler; fetching, positions and commits stay `group`'s.
//! - `share`: `ShareConsumer` over Kafka's share APIs (KIP-932):
//!   ShareGroupHeartbeat at the coordinator, share sessions and ShareFetch
//!   at each leader, ShareAcknowledge.
//!
//! docs/kafka-client.md lists the APIs and versions.

pub(crate) mod admin;
pub(crate) mod assignor;
pub(crate) mod cluster;
pub(crate) mod conn;
pub(crate) mod consumer;
pub(crate) mod errors;
pub(crate) mod fetch;
pub(crate) mod group;
pub(crate) mod group_consumer;
pub(crate) mod offsets;
pub(crate) mod partitioner;
pub(crate) mod producer;
pub(crate) mod share;

use crate::error::{Error, Result};

/// A pause before asking again after a refusal that says "not now" (a
/// coordinator loading or moving): the connection's first backoff.
pub(crate) async fn backoff(cluster: &cluster::Cluster) {
    flume_rt::sleep(
        cluster
            .config()
            .backoff_initial
            .max(std::time::Duration::from_millis(10)),
    )
    .await;
}

/// What a broker address given to the SDK names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// A Flume broker, by its own protocol: "host:port".
    Flume(String),
    /// A Kafka cluster: its bootstrap brokers, "host:port" each.
    Kafka(Vec<String>),
}

/// Reads a broker address: `kafka://host:port[,host:port…]` is a Kafka
/// cluster, `flume://host:port` or a plain `host:port` a Flume broker.
///
/// # Errors
/// [`Error::InvalidArgument`] for another scheme, an empty list, or an
/// entry without a port.
pub(crate) fn endpoint(addr: &str) -> Result<Endpoint> {
    let addr = addr.trim();
    let bad = |why: String| Error::InvalidArgument(format!("broker address {addr:?}: {why}"));
    let (scheme, rest) = match addr.split_once("://") {
        Some((s, r)) => (Some(s.to_ascii_lowercase()), r),
        None => (None, addr),
    };
    let rest = rest.trim_end_matches('/');
    match scheme.as_deref() {
        None | Some("flume") => {
            if rest.is_empty() {
                return Err(bad("empty".into()));
            }
            Ok(Endpoint::Flume(rest.to_owned()))
        }
        Some("kafka") => {
            let mut brokers = Vec::new();
            for b in rest.split(',') {
                let b = b.trim();
                let port = b.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>()));
                match port {
                    Some((h, Ok(_))) if !h.is_empty() => brokers.push(b.to_owned()),
                    _ => return Err(bad(format!("{b:?} is not host:port"))),
                }
            }
            Ok(Endpoint::Kafka(brokers))
        }
        Some(other) => Err(bad(format!(
            "unknown scheme {other}:// (kafka:// for a Kafka cluster, or host:port for Flume)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_select_the_protocol() {
        assert_eq!(
            endpoint("127.0.0.1:9092").unwrap(),
            Endpoint::Flume("127.0.0.1:9092".into())
        );
        assert_eq!(
            endpoint("flume://b:1").unwrap(),
            Endpoint::Flume("b:1".into())
        );
        assert_eq!(
            endpoint("kafka://a:9092, b:9093,[::1]:9094").unwrap(),
            Endpoint::Kafka(vec!["a:9092".into(), "b:9093".into(), "[::1]:9094".into()])
        );
        assert_eq!(
            endpoint("KAFKA://a:1/").unwrap(),
            Endpoint::Kafka(vec!["a:1".into()])
        );
        for bad in [
            "kafka://",
            "kafka://a",
            "kafka://a:1,",
            "kafka://:1",
            "http://a:1",
            "",
        ] {
            assert!(
                matches!(endpoint(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }
}
