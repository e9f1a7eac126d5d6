//! Request dispatch: the header, the version check, one module per API.
//!
//! Every request that names an API and version this listener serves is
//! decoded with `kafka-protocol` and answered; an unknown API key or an
//! unserved version is answered with UNSUPPORTED_VERSION (for ApiVersions in
//! its v0 format with the list of what is served, as Kafka does, so clients
//! retry lower), never by closing the connection or by silence. A body that
//! does not decode closes the connection, as Kafka does.

mod acls;
mod add_offsets_to_txn;
mod add_partitions_to_txn;
mod alter_configs;
mod alter_replica_log_dirs;
mod alter_user_scram_credentials;
mod api_versions;
mod consumer_group_describe;
mod consumer_group_heartbeat;
mod create_partitions;
mod create_topics;
mod delete_groups;
mod delete_records;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod describe_groups;
mod describe_log_dirs;
mod describe_producers;
mod describe_topic_partitions;
mod describe_transactions;
mod describe_user_scram_credentials;
mod elect_leaders;
mod end_txn;
mod fetch;
mod find_coordinator;
mod heartbeat;
mod init_producer_id;
mod join_group;
mod leave_group;
mod list_groups;
mod list_offsets;
mod list_transactions;
mod metadata;
mod offset_commit;
mod offset_delete;
mod offset_fetch;
mod partition_reassignments;
mod produce;
mod share_acknowledge;
mod share_fetch;
mod share_group_describe;
mod share_group_heartbeat;
mod share_group_offsets;
mod sync_group;
mod txn_offset_commit;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::errors;
use super::Ctx;

/// The APIs this listener serves and their version ranges (what ApiVersions
/// advertises, and nothing else).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 13),
    // v13+ names topics by id (KIP-516); v14-18 add nothing a consumer sends.
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::InitProducerId, 0, 5),
    // Consumer groups (client-assigned, Kafka's classic protocol).
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    // Administration beyond topics: partitions, groups, log directories.
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    // Replica placement, answered as a one-broker cluster (the only
    // replica leads; nothing to reassign; one log directory).
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::AlterReplicaLogDirs, 1, 2),
    // Transactions (KIP-98, KIP-447): the coordinator's side (markers wait
    // for the log format: EndTxn of a transaction with partitions is refused).
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::AddOffsetsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 3),
    (ApiKey::TxnOffsetCommit, 0, 3),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::DescribeProducers, 0, 0),
    // The users of SCRAM logins (the store `flume-cli users` manages).
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    // Consumer-protocol groups (KIP-848, group.protocol=consumer).
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    // Share groups (KIP-932, queues) at the versions librdkafka 2.15+ sends.
    (ApiKey::ShareGroupHeartbeat, 1, 1),
    (ApiKey::ShareGroupDescribe, 1, 1),
    (ApiKey::ShareFetch, 1, 1),
    (ApiKey::ShareAcknowledge, 1, 1),
    (ApiKey::DescribeShareGroupOffsets, 0, 0),
    (ApiKey::AlterShareGroupOffsets, 0, 0),
    (ApiKey::DeleteShareGroupOffsets, 0, 0),
    // Answered by the connection loop (crate::kafka::sasl), not here.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
];

/// The served version range of an API key, if served.
pub fn served(key: i16) -> Option<(ApiKey, i16, i16)> {
    SUPPORTED.iter().copied().find(|(k, _, _)| *k as i16 == key)
}

/// Why a request could not be answered (the connection is closed).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Shorter than the fixed header fields.
    #[error("request of {0} bytes is shorter than a request header (8)")]
    Short(usize),
    /// The header or body does not decode at the version given.
    #[error("{api:?} v{version}: malformed request: {detail}")]
    Malformed {
        /// API.
        api: ApiKey,
        /// Version.
        version: i16,
        /// What the decoder said.
        detail: String,
    },
    /// The response could not be encoded (a bug, logged).
    #[error("{api:?} v{version}: response does not encode: {detail}")]
    Encode {
        /// API.
        api: ApiKey,
        /// Version.
        version: i16,
        /// What the encoder said.
        detail: String,
    },
}

/// Answers one request frame (without its length prefix). `Ok(None)`: no
/// response is due (Produce with acks 0).
///
/// # Errors
/// [`RequestError`]: the connection is to be closed.
pub async fn handle(ctx: &Ctx, frame: Bytes) -> Result<Option<Vec<u8>>, RequestError> {
    if frame.len() < 8 {
        return Err(RequestError::Short(frame.len()));
    }
    let mut fixed = &frame[..8];
    let key = fixed.get_i16();
    let version = fixed.get_i16();
    let correlation = fixed.get_i32();
    let Some((api, min, max)) = served(key) else {
        tracing::debug!(key, version, "kafka: unknown API key; UNSUPPORTED_VERSION");
        return Ok(Some(unsupported(correlation, None)));
    };
    if version < min || version > max {
        tracing::debug!(
            ?api,
            version,
            "kafka: version not served; UNSUPPORTED_VERSION"
        );
        return Ok(Some(unsupported(correlation, Some(api))));
    }
    let mut buf = frame;
    let malformed = |e: anyhow_like::E| RequestError::Malformed {
        api,
        version,
        detail: e.0,
    };
    let header = RequestHeader::decode(&mut buf, api.request_header_version(version))
        .map_err(|e| malformed(e.into()))?;
    let client_id = header.client_id.as_ref().map_or("", |c| c.as_str());
    let mut out = BytesMut::new();
    out.put_i32(0); // size, patched below
    ResponseHeader::default()
        .with_correlation_id(correlation)
        .encode(&mut out, api.response_header_version(version))
        .map_err(|e| RequestError::Encode {
            api,
            version,
            detail: format!("{e:#}"),
        })?;
    // Each API: decode the request at its version, answer it, encode the answer.
    macro_rules! answer {
        ($req:ident => $answer:expr) => {{
            let $req = decode(&mut buf, version).map_err(malformed)?;
            encode(&$answer, &mut out, version)
        }};
    }
    let encoded = match api {
        ApiKey::ApiVersions => answer!(req => api_versions::handle(&req)),
        ApiKey::Metadata => answer!(req => metadata::handle(ctx, req, version).await),
        ApiKey::Produce => {
            let req = decode(&mut buf, version).map_err(malformed)?;
            match produce::handle(ctx, req, version).await {
                Some(resp) => encode(&resp, &mut out, version),
                None => return Ok(None),
            }
        }
        ApiKey::Fetch => answer!(req => fetch::handle(ctx, req, version).await),
        ApiKey::ListOffsets => answer!(req => list_offsets::handle(ctx, req, version).await),
        ApiKey::FindCoordinator => answer!(req => find_coordinator::handle(ctx, req, version)),
        ApiKey::CreateTopics => answer!(req => create_topics::handle(ctx, req, version).await),
        ApiKey::DescribeConfigs => answer!(req => describe_configs::handle(ctx, req, version)),
        ApiKey::AlterConfigs => answer!(req => alter_configs::replace(ctx, req).await),
        ApiKey::IncrementalAlterConfigs => {
            answer!(req => alter_configs::incremental(ctx, req).await)
        }
        ApiKey::DeleteTopics => answer!(req => delete_topics::handle(ctx, req, version).await),
        ApiKey::DeleteRecords => answer!(req => delete_records::handle(ctx, req).await),
        ApiKey::InitProducerId => {
            answer!(req => init_producer_id::handle(ctx, req, version).await)
        }
        ApiKey::AddPartitionsToTxn => {
            answer!(req => add_partitions_to_txn::handle(ctx, req, version).await)
        }
        ApiKey::AddOffsetsToTxn => {
            answer!(req => add_offsets_to_txn::handle(ctx, req, version).await)
        }
        ApiKey::EndTxn => answer!(req => end_txn::handle(ctx, req, version).await),
        ApiKey::TxnOffsetCommit => {
            answer!(req => txn_offset_commit::handle(ctx, req, version).await)
        }
        ApiKey::ListTransactions => answer!(req => list_transactions::handle(ctx, req, version)),
        ApiKey::DescribeProducers => answer!(req => describe_producers::handle(ctx, req)),
        ApiKey::DescribeTransactions => {
            answer!(req => describe_transactions::handle(ctx, req, version))
        }
        ApiKey::JoinGroup => answer!(req => join_group::handle(ctx, client_id, req, version).await),
        ApiKey::SyncGroup => answer!(req => sync_group::handle(ctx, req, version).await),
        ApiKey::Heartbeat => answer!(req => heartbeat::handle(ctx, req, version)),
        ApiKey::LeaveGroup => answer!(req => leave_group::handle(ctx, req, version)),
        ApiKey::OffsetCommit => answer!(req => offset_commit::handle(ctx, req, version).await),
        ApiKey::OffsetFetch => answer!(req => offset_fetch::handle(ctx, req, version)),
        ApiKey::DescribeGroups => answer!(req => describe_groups::handle(ctx, req, version)),
        ApiKey::ListGroups => answer!(req => list_groups::handle(ctx, req, version)),
        ApiKey::DescribeCluster => answer!(req => describe_cluster::handle(ctx, req, version)),
        ApiKey::DescribeAcls => answer!(req => acls::describe(ctx, req, version)),
        ApiKey::CreateAcls => answer!(req => acls::create(ctx, req, version).await),
        ApiKey::DeleteAcls => answer!(req => acls::delete(ctx, req, version).await),
        ApiKey::CreatePartitions => {
            answer!(req => create_partitions::handle(ctx, req, version).await)
        }
        ApiKey::DeleteGroups => answer!(req => delete_groups::handle(ctx, req, version).await),
        ApiKey::OffsetDelete => answer!(req => offset_delete::handle(ctx, req, version).await),
        ApiKey::DescribeLogDirs => answer!(req => describe_log_dirs::handle(ctx, req, version)),
        ApiKey::DescribeUserScramCredentials => {
            answer!(req => describe_user_scram_credentials::handle(ctx, req))
        }
        ApiKey::AlterUserScramCredentials => {
            answer!(req => alter_user_scram_credentials::handle(ctx, req).await)
        }
        ApiKey::DescribeTopicPartitions => {
            answer!(req => describe_topic_partitions::handle(ctx, req))
        }
        ApiKey::ElectLeaders => answer!(req => elect_leaders::handle(ctx, req, version)),
        ApiKey::AlterPartitionReassignments => {
            answer!(req => partition_reassignments::alter(ctx, req))
        }
        ApiKey::ListPartitionReassignments => {
            answer!(req => partition_reassignments::list(ctx, req))
        }
        ApiKey::AlterReplicaLogDirs => answer!(req => alter_replica_log_dirs::handle(ctx, req)),
        ApiKey::ConsumerGroupHeartbeat => {
            answer!(req => consumer_group_heartbeat::handle(ctx, client_id, req))
        }
        ApiKey::ConsumerGroupDescribe => answer!(req => consumer_group_describe::handle(ctx, req)),
        ApiKey::ShareGroupHeartbeat => {
            answer!(req => share_group_heartbeat::handle(ctx, client_id, req).await)
        }
        ApiKey::ShareGroupDescribe => answer!(req => share_group_describe::handle(ctx, req)),
        ApiKey::ShareFetch => answer!(req => share_fetch::handle(ctx, req).await),
        ApiKey::ShareAcknowledge => answer!(req => share_acknowledge::handle(ctx, req).await),
        ApiKey::DescribeShareGroupOffsets => {
            answer!(req => share_group_offsets::describe(ctx, req))
        }
        ApiKey::AlterShareGroupOffsets => {
            answer!(req => share_group_offsets::alter(ctx, req).await)
        }
        ApiKey::DeleteShareGroupOffsets => {
            answer!(req => share_group_offsets::delete(ctx, req).await)
        }
        _ => return Ok(Some(unsupported(correlation, Some(api)))),
    };
    encoded.map_err(|detail| RequestError::Encode {
        api,
        version,
        detail,
    })?;
    let size = i32::try_from(out.len() - 4).unwrap_or(i32::MAX);
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(Some(out.to_vec()))
}

/// Error text from the decoder, kept as a string.
mod anyhow_like {
    pub struct E(pub String);
    impl<T: std::fmt::Display> From<T> for E {
        fn from(e: T) -> Self {
            E(format!("{e:#}"))
        }
    }
}

fn decode<T: Decodable>(buf: &mut Bytes, version: i16) -> Result<T, anyhow_like::E> {
    T::decode(buf, version).map_err(|e| anyhow_like::E(format!("{e:#}")))
}

fn encode<T: Encodable>(msg: &T, out: &mut BytesMut, version: i16) -> Result<(), String> {
    msg.encode(out, version).map_err(|e| format!("{e:#}"))
}

/// UNSUPPORTED_VERSION for an unknown API or version, as a whole frame: the
/// correlation id (response header v0) and, for ApiVersions, its v0 body
/// with the served ranges; for any other API just the error code.
pub fn unsupported(correlation: i32, api: Option<ApiKey>) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + SUPPORTED.len() * 6);
    out.put_i32(0);
    out.put_i32(correlation);
    out.put_i16(errors::UNSUPPORTED_VERSION);
    if api == Some(ApiKey::ApiVersions) {
        out.put_i32(i32::try_from(SUPPORTED.len()).unwrap_or(0)); // ok: a short constant list
        for (k, min, max) in SUPPORTED {
            out.put_i16(*k as i16);
            out.put_i16(*min);
            out.put_i16(*max);
        }
    }
    let size = i32::try_from(out.len() - 4).unwrap_or(i32::MAX);
    out[..4].copy_from_slice(&size.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_ranges_are_within_the_codec_and_never_api_71() {
        for (k, min, max) in SUPPORTED {
            let v = k.valid_versions();
            assert!(v.min <= *min && *max <= v.max, "{k:?} {min}..{max} vs {v}");
            assert_ne!(*k as i16, 71);
        }
        // Topics by id: Fetch to v18 and Produce to v13 (the codec's newest).
        assert!(served(ApiKey::Fetch as i16).is_some_and(|(_, _, max)| max == 18));
        assert!(served(ApiKey::Produce as i16).is_some_and(|(_, _, max)| max == 13));
    }
}
