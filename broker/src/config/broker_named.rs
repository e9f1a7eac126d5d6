//! The broker's own settings by Kafka's names (`listeners`, `log.dirs`,
//! `num.partitions`, `group.min.session.timeout.ms`, ...), as DescribeConfigs
//! of a broker resource reports them beside the broker's defaults for topics
//! ([`super::named::describe_broker`]).
//!
//! Every [`BrokerConfig`] setting with a Kafka equivalent is here. Its source
//! is STATIC_BROKER_CONFIG when it differs from the built-in default
//! ([`BrokerConfig::new`]: what a bare `flume-cli broker` runs with), and for
//! the settings that have no default (`listeners`, `log.dirs`); otherwise
//! DEFAULT_CONFIG. Its synonyms are the set value, then the default, as for
//! the topic defaults.

use std::time::Duration;

use super::named::{ConfigDef, ConfigSource, ConfigType, Described, Support, Synonym};
use super::{BrokerConfig, TopicConfig};

/// The Kafka listener as Kafka's `listeners` and `advertised.listeners`
/// name it: `PROTOCOL://host:port`, the protocol PLAINTEXT, SSL,
/// SASL_PLAINTEXT or SASL_SSL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaListeners {
    /// The bound address (`listeners`).
    pub listeners: String,
    /// What Metadata tells clients to connect to (`advertised.listeners`).
    pub advertised_listeners: String,
}

impl KafkaListeners {
    /// The names of a listener bound to `bound` that advertises
    /// `host:port`, with TLS or not and requiring SASL or not.
    pub fn new(bound: std::net::SocketAddr, host: &str, port: u16, tls: bool, sasl: bool) -> Self {
        let protocol = match (sasl, tls) {
            (false, false) => "PLAINTEXT",
            (false, true) => "SSL",
            (true, false) => "SASL_PLAINTEXT",
            (true, true) => "SASL_SSL",
        };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        KafkaListeners {
            listeners: format!("{protocol}://{bound}"),
            advertised_listeners: format!("{protocol}://{host}:{port}"),
        }
    }
}

const fn setting(name: &'static str, kind: ConfigType) -> ConfigDef {
    ConfigDef {
        name,
        broker_name: Some(name),
        kind,
        support: Support::Served,
    }
}

use ConfigType::{Boolean, Double, Int, Long};

/// The broker settings reported by Kafka's names, sorted by name.
pub const BROKER_SETTINGS: &[ConfigDef] = &[
    setting("advertised.listeners", ConfigType::String),
    setting("auto.create.topics.enable", Boolean),
    setting("connections.max.idle.ms", Long),
    setting("group.initial.rebalance.delay.ms", Int),
    setting("group.max.session.timeout.ms", Int),
    setting("group.max.size", Int),
    setting("group.min.session.timeout.ms", Int),
    setting("listeners", ConfigType::String),
    setting("log.cleaner.dedupe.buffer.size", Long),
    setting("log.cleaner.io.max.bytes.per.second", Double),
    setting("log.dirs", ConfigType::String),
    setting("log.retention.check.interval.ms", Long),
    setting("max.connections", Int),
    setting("num.partitions", Int),
    setting("producer.id.expiration.ms", Int),
    setting("queued.max.request.bytes", Long),
    setting("socket.request.max.bytes", Int),
    setting("transaction.max.timeout.ms", Int),
    setting("transactional.id.expiration.ms", Int),
];

/// The settings that have no built-in default: always the operator's.
const ALWAYS_SET: [&str; 2] = ["listeners", "log.dirs"];

/// The broker's settings, its defaults for topics now (a SIGHUP changes
/// them) and its Kafka listener.
type Sources<'a> = (
    &'a BrokerConfig,
    &'a TopicConfig,
    Option<&'a KafkaListeners>,
);

/// A setting's value by its Kafka name (`listeners` and
/// `advertised.listeners` empty without a Kafka listener).
fn value((c, defaults, kafka): Sources<'_>, name: &str) -> String {
    let ms = |d: Duration| d.as_millis().to_string();
    match name {
        "advertised.listeners" => {
            kafka.map_or_else(String::new, |k| k.advertised_listeners.clone())
        }
        "auto.create.topics.enable" => c.auto_create_topics.to_string(),
        "connections.max.idle.ms" => ms(c.connections_max_idle),
        "group.initial.rebalance.delay.ms" => ms(c.group_initial_rebalance_delay),
        "group.max.session.timeout.ms" => ms(c.group_max_session_timeout),
        "group.max.size" => c.max_members_per_group.to_string(),
        "group.min.session.timeout.ms" => ms(c.group_min_session_timeout),
        "listeners" => kafka.map_or_else(String::new, |k| k.listeners.clone()),
        "log.cleaner.dedupe.buffer.size" => c.cleaner.key_map_bytes.to_string(),
        // Kafka's "no limit" is the largest double.
        "log.cleaner.io.max.bytes.per.second" => c
            .cleaner
            .io_bytes_per_sec
            .map_or_else(|| "1.7976931348623157E308".to_owned(), |v| v.to_string()),
        "log.dirs" => c.data_dir.display().to_string(),
        "log.retention.check.interval.ms" => ms(c.maintenance_interval),
        "max.connections" => c.max_connections.to_string(),
        "num.partitions" => defaults.partitions.to_string(),
        "producer.id.expiration.ms" => ms(c.producer_expiry),
        "queued.max.request.bytes" => c.max_request_memory.to_string(),
        "socket.request.max.bytes" => c.max_frame_bytes.to_string(),
        "transaction.max.timeout.ms" => ms(c.transactions.max_timeout),
        "transactional.id.expiration.ms" => ms(c.transactions.id_expiration),
        _ => String::new(),
    }
}

/// Every broker setting of [`BROKER_SETTINGS`] with its value, source and
/// synonyms: `c` the broker's settings, `defaults` its defaults for topics
/// now, `kafka` the Kafka listener serving the request.
pub fn describe_settings(
    c: &BrokerConfig,
    defaults: &TopicConfig,
    kafka: Option<&KafkaListeners>,
) -> Vec<Described> {
    let builtin = BrokerConfig::new(&c.data_dir);
    let builtin_topic = TopicConfig::default();
    BROKER_SETTINGS
        .iter()
        .map(|d| {
            let v = value((c, defaults, kafka), d.name);
            let set = |value: String| Synonym {
                name: d.name.to_owned(),
                value,
                source: ConfigSource::StaticBroker,
            };
            let synonyms = if ALWAYS_SET.contains(&d.name)
                || (d.name == "advertised.listeners" && c.kafka_advertised.is_some())
            {
                vec![set(v.clone())]
            } else if d.name == "advertised.listeners" {
                // Not set: the listener's own address, as Kafka does.
                vec![Synonym {
                    name: d.name.to_owned(),
                    value: v.clone(),
                    source: ConfigSource::Default,
                }]
            } else {
                let default = value((&builtin, &builtin_topic, kafka), d.name);
                let mut s = Vec::with_capacity(2);
                if v != default {
                    s.push(set(v.clone()));
                }
                s.push(Synonym {
                    name: d.name.to_owned(),
                    value: default,
                    source: ConfigSource::Default,
                });
                s
            };
            Described {
                def: *d,
                name: d.name,
                value: v,
                source: synonyms.first().map_or(ConfigSource::Default, |s| s.source),
                synonyms,
            }
        })
        .collect()
}

/// What DescribeConfigs answers for the broker: its settings
/// ([`describe_settings`]) and its defaults for topics
/// ([`super::named::describe_broker`]), sorted by name.
pub fn describe_broker_all(
    c: &BrokerConfig,
    defaults: &TopicConfig,
    kafka: Option<&KafkaListeners>,
) -> Vec<Described> {
    let mut all = describe_settings(c, defaults, kafka);
    all.extend(super::named::describe_broker(defaults));
    all.sort_by(|a, b| a.name.cmp(b.name));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_no_name_is_a_topic_defaults_name() {
        for w in BROKER_SETTINGS.windows(2) {
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
        let c = BrokerConfig::new("/data");
        let all = describe_broker_all(&c, &c.default_topic, None);
        for w in all.windows(2) {
            assert!(w[0].name < w[1].name, "{} twice", w[0].name);
        }
        for d in BROKER_SETTINGS {
            let v = value((&c, &c.default_topic, None), d.name);
            assert!(!v.is_empty() || d.name.contains("listeners"), "{}", d.name);
        }
    }

    #[test]
    fn a_setting_is_static_when_it_differs_from_the_default() {
        let mut c = BrokerConfig::new("/data");
        c.group_min_session_timeout = Duration::from_millis(3000);
        c.kafka_listen = Some("127.0.0.1:0".into());
        let bound = "127.0.0.1:9093".parse().unwrap();
        let k = KafkaListeners::new(bound, "kafka.example", 9093, true, false);
        let d = describe_settings(&c, &c.default_topic, Some(&k));
        let get = |n: &str| d.iter().find(|x| x.name == n).unwrap().clone();
        let min = get("group.min.session.timeout.ms");
        assert_eq!(
            (min.value.as_str(), min.source),
            ("3000", ConfigSource::StaticBroker)
        );
        assert_eq!(min.synonyms.len(), 2);
        assert_eq!(min.synonyms[1].value, "6000");
        let max = get("group.max.session.timeout.ms");
        assert_eq!(
            (max.value.as_str(), max.source),
            ("1800000", ConfigSource::Default)
        );
        assert_eq!(get("listeners").value, "SSL://127.0.0.1:9093");
        assert_eq!(get("listeners").source, ConfigSource::StaticBroker);
        let adv = get("advertised.listeners");
        assert_eq!(adv.value, "SSL://kafka.example:9093");
        assert_eq!(adv.source, ConfigSource::Default);
        c.kafka_advertised = Some("kafka.example:9093".into());
        let d = describe_settings(&c, &c.default_topic, Some(&k));
        let adv = d.iter().find(|x| x.name == "advertised.listeners").unwrap();
        assert_eq!(adv.source, ConfigSource::StaticBroker);
        assert_eq!(get("log.dirs").value, "/data");
        assert_eq!(get("num.partitions").value, "3");
        let v6 = KafkaListeners::new("[::1]:9092".parse().unwrap(), "::1", 9092, false, true);
        assert_eq!(v6.listeners, "SASL_PLAINTEXT://[::1]:9092");
        assert_eq!(v6.advertised_listeners, "SASL_PLAINTEXT://[::1]:9092");
    }
}
