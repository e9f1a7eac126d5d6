//! Which transport a broker address names: `kafka://host:port[,…]` the
//! Kafka client (`crate::kafka`), `flume://host:port` or `host:port` Flume's
//! own protocol (`crate::flume`), `inproc://name` Flume's protocol to a broker
//! in this same process, without TCP (`Broker::in_process_address`,
//! `EmbeddedBroker::address` in `flume-broker`).

use crate::error::{Error, Result};

/// What a broker address given to the SDK names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// A Flume broker, by its own protocol: "host:port", or "inproc://name"
    /// for one in this process.
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
        Some("inproc") => {
            if rest.is_empty() {
                return Err(bad("an in-process address needs a name (inproc://NAME)".into()));
            }
            Ok(Endpoint::Flume(format!("inproc://{rest}")))
        }
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
            "unknown scheme {other}:// (kafka:// for a Kafka cluster, inproc:// for a broker in this process, or host:port for Flume)"
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
            endpoint("inproc://flume-1-2").unwrap(),
            Endpoint::Flume("inproc://flume-1-2".into())
        );
        assert!(endpoint("inproc://").is_err());
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
