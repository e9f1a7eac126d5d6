//! The leaf: transport-neutral types, the same whichever protocol carries
//! them. Records and their acknowledgements, settings and builders' settings,
//! offsets, rebalance events, broker addresses. Nothing here imports a
//! facade (`producer`, `consumer`, `group`, `share`, `admin`) or a transport
//! (`flume`, `kafka`); `client/tests/layers.rs` checks it.
//!
//! - `connection`: [`ConnectionConfig`](crate::ConnectionConfig),
//!   [`Credentials`](crate::Credentials), [`SaslMechanism`](crate::SaslMechanism).
//! - `endpoint`: which transport an address names.
//! - `producer`: [`ProducerConfig`](crate::ProducerConfig),
//!   [`ProducerRecord`](crate::ProducerRecord), [`RecordMetadata`](crate::RecordMetadata),
//!   [`RequiredAcks`](crate::RequiredAcks), and `partitioner`'s
//!   [`Partitioner`](crate::Partitioner).
//! - `delivery`: [`Delivery`](crate::Delivery) and the batch acknowledgement behind it.
//! - `consumer`: [`StartOffset`](crate::StartOffset), [`FetchConfig`](crate::FetchConfig).
//! - `group`: [`ConsumerRecord`](crate::ConsumerRecord), [`RebalanceEvent`](crate::RebalanceEvent)s,
//!   [`GroupConsumerBuilder`](crate::GroupConsumerBuilder)'s settings.
//! - `share`: [`ShareRecord`](crate::ShareRecord), [`AckMode`](crate::AckMode),
//!   [`AckOutcome`](crate::AckOutcome), [`ShareConsumerBuilder`](crate::ShareConsumerBuilder)'s
//!   settings, what a share fetch brings back.

pub(crate) mod connection;
pub(crate) mod consumer;
pub(crate) mod delivery;
pub(crate) mod endpoint;
pub(crate) mod group;
pub(crate) mod partitioner;
pub(crate) mod producer;
pub(crate) mod share;
