//! ListPartitionReassignments (v0) and AlterPartitionReassignments (v0-1),
//! answered as a one-broker Kafka cluster does: no reassignment is ever in
//! progress, so a list names none (of the topics asked for, or of every
//! topic) and cancelling one (null replicas) is NO_REASSIGNMENT_IN_PROGRESS
//! (85); a target of `[this broker]` is the assignment a partition already
//! has, done at once; any other is INVALID_REPLICA_ASSIGNMENT (39) with
//! Kafka's reason (an empty list, a broker that is not registered, a broker
//! named twice). A partition that does not exist is
//! UNKNOWN_TOPIC_OR_PARTITION. Listing needs DESCRIBE on the cluster,
//! altering ALTER on it (else CLUSTER_AUTHORIZATION_FAILED for the request
//! and, when altering, for each partition).

use kafka_protocol::messages::alter_partition_reassignments_request::ReassignablePartition;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::super::map::TopicBrief;
use super::super::{errors, Ctx};

pub(super) fn list(
    ctx: &Ctx,
    _req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let mut resp = ListPartitionReassignmentsResponse::default();
    if !ctx.with_subject(|s| s.describe_placement()) {
        resp.error_code = errors::CLUSTER_AUTHORIZATION_FAILED;
        resp.error_message = Some(StrBytes::from_static_str(
            "listing partition reassignments needs DESCRIBE on the cluster",
        ));
    }
    resp
}

pub(super) fn alter(
    ctx: &Ctx,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let mut resp = AlterPartitionReassignmentsResponse::default();
    resp.allow_replication_factor_change = req.allow_replication_factor_change;
    let allowed = ctx.with_subject(|s| s.place_replicas());
    if !allowed {
        resp.error_code = errors::CLUSTER_AUTHORIZATION_FAILED;
        resp.error_message = Some(StrBytes::from_static_str(
            "reassigning partitions needs ALTER on the cluster",
        ));
    }
    for t in req.topics {
        let count = ctx
            .engine
            .records()
            .topic(t.name.0.as_str())
            .map(|b| TopicBrief::of(&b).partitions);
        let mut out = ReassignableTopicResponse::default();
        out.partitions = t
            .partitions
            .iter()
            .map(|p| {
                let outcome = if allowed {
                    reassign(ctx.node_id, t.name.0.as_str(), count, p)
                } else {
                    Err((
                        errors::CLUSTER_AUTHORIZATION_FAILED,
                        "reassigning partitions needs ALTER on the cluster".to_owned(),
                    ))
                };
                let mut r = ReassignablePartitionResponse::default();
                r.partition_index = p.partition_index;
                if let Err((code, message)) = outcome {
                    r.error_code = code;
                    r.error_message = Some(StrBytes::from_string(message));
                }
                r
            })
            .collect();
        out.name = t.name;
        resp.responses.push(out);
    }
    resp
}

/// One partition's reassignment on a cluster of one broker, `node_id`, for
/// a topic of `count` partitions (`None`: no such topic).
fn reassign(
    node_id: i32,
    topic: &str,
    count: Option<i32>,
    target: &ReassignablePartition,
) -> Result<(), (i16, String)> {
    let p = target.partition_index;
    if !count.is_some_and(|n| (0..n).contains(&p)) {
        return Err((
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("Unable to find partition {topic}:{p}."),
        ));
    }
    let Some(replicas) = &target.replicas else {
        return Err((
            errors::NO_REASSIGNMENT_IN_PROGRESS,
            "No reassignment in progress.".to_owned(),
        ));
    };
    let invalid = |m: String| Err((errors::INVALID_REPLICA_ASSIGNMENT, m));
    if replicas.is_empty() {
        return invalid("The manual partition assignment includes an empty replica list.".into());
    }
    let mut ids: Vec<i32> = replicas.iter().map(|b| b.0).collect();
    ids.sort_unstable();
    let mut previous = None;
    for id in ids {
        if id != node_id {
            return invalid(format!(
                "The manual partition assignment includes broker {id}, but no such broker is registered (this cluster is one broker, node id {node_id})."
            ));
        }
        if previous == Some(id) {
            return invalid(format!(
                "The manual partition assignment includes the broker {id} more than once."
            ));
        }
        previous = Some(id);
    }
    // [this broker]: the partition's assignment already.
    Ok(())
}
