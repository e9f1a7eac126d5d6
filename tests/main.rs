//! Flume's end-to-end tests: every file beside this one is a module of this
//! one test binary (`cargo test --test e2e`; one file: `cargo test --test e2e
//! e2e_kafka::`), with the shared helpers in `common/`.

mod common;

mod e2e_acl;
mod e2e_admin;
mod e2e_auth;
mod e2e_compaction;
mod e2e_dead_peer;
mod e2e_fairness;
mod e2e_groups;
mod e2e_hostile;
mod e2e_in_process;
mod e2e_kafka;
mod e2e_kafka_admin;
mod e2e_kafka_batches;
mod e2e_kafka_client;
mod e2e_kafka_client_security;
mod e2e_kafka_configs;
mod e2e_kafka_conformance;
mod e2e_kafka_consumer_protocol;
mod e2e_kafka_groups;
mod e2e_kafka_idempotent;
mod e2e_kafka_mock;
mod e2e_kafka_one_broker;
mod e2e_kafka_sasl;
mod e2e_kafka_sdk_consumer_protocol;
mod e2e_kafka_share;
mod e2e_kafka_share_sdk;
mod e2e_kafka_topic_ids;
mod e2e_kafka_txn;
mod e2e_produce_fetch;
mod e2e_protocol_edges;
mod e2e_quota;
mod e2e_rebalance;
mod e2e_share;
mod e2e_tls;
mod e2e_upgrade;
mod imports;
mod observability;
mod scale_limits;
