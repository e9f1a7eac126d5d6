//! ElectLeaders (v0-2), answered as a one-broker Kafka cluster does: every
//! partition's one replica, this broker, already leads it, so a preferred
//! or an unclean election of a partition that exists is ELECTION_NOT_NEEDED
//! (84), one that does not UNKNOWN_TOPIC_OR_PARTITION. Null partitions ask
//! for every partition: as Kafka's controller, each topic is answered with
//! no partitions (those that needed no election are left out). ALTER on the
//! cluster, else CLUSTER_AUTHORIZATION_FAILED for the request (v1+) and each
//! partition named; an unknown election type is INVALID_REQUEST likewise.

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::super::map::TopicBrief;
use super::super::{errors, Ctx};

pub(super) fn handle(ctx: &Ctx, req: ElectLeadersRequest, version: i16) -> ElectLeadersResponse {
    if !ctx.with_subject(|s| s.place_replicas()) {
        return refused(
            req,
            errors::CLUSTER_AUTHORIZATION_FAILED,
            "electing leaders needs ALTER on the cluster",
        );
    }
    // v0 elects preferred leaders; v1+ says which: 0 preferred, 1 unclean.
    if version >= 1 && !(0..=1).contains(&req.election_type) {
        let why = format!("unknown election type {}", req.election_type);
        return refused(req, errors::INVALID_REQUEST, &why);
    }
    let mut resp = ElectLeadersResponse::default();
    let Some(topics) = req.topic_partitions else {
        resp.replica_election_results = ctx
            .engine
            .records()
            .topics()
            .iter()
            .map(|t| {
                let mut r = ReplicaElectionResult::default();
                r.topic = TopicName(StrBytes::from_string(t.name.clone()));
                r
            })
            .collect();
        return resp;
    };
    for t in topics {
        let count = ctx
            .engine
            .records()
            .topic(t.topic.0.as_str())
            .map(|b| TopicBrief::of(&b).partitions);
        let mut r = ReplicaElectionResult::default();
        r.partition_result = t
            .partitions
            .iter()
            .map(|&p| {
                let mut out = PartitionResult::default();
                out.partition_id = p;
                if count.is_some_and(|n| (0..n).contains(&p)) {
                    out.error_code = errors::ELECTION_NOT_NEEDED;
                    out.error_message = Some(StrBytes::from_static_str(
                        "Leader election not needed for topic partition.",
                    ));
                } else {
                    out.error_code = errors::UNKNOWN_TOPIC_OR_PARTITION;
                    out.error_message = Some(StrBytes::from_string(format!(
                        "No such partition as {}-{p}",
                        t.topic.0.as_str()
                    )));
                }
                out
            })
            .collect();
        r.topic = t.topic;
        resp.replica_election_results.push(r);
    }
    resp
}

/// The whole request refused: `code` for it and for each partition named.
fn refused(req: ElectLeadersRequest, code: i16, why: &str) -> ElectLeadersResponse {
    let mut resp = ElectLeadersResponse::default();
    resp.error_code = code;
    resp.replica_election_results = req
        .topic_partitions
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let mut r = ReplicaElectionResult::default();
            r.topic = t.topic;
            r.partition_result = t
                .partitions
                .into_iter()
                .map(|p| {
                    let mut out = PartitionResult::default();
                    out.partition_id = p;
                    out.error_code = code;
                    out.error_message = Some(StrBytes::from_string(why.to_owned()));
                    out
                })
                .collect();
            r
        })
        .collect();
    resp
}
