//! SyncGroup: the leader's brings every member's assignment and completes
//! the generation; the others wait (parked in the coordinator until the
//! leader's arrives or the rebalance timeout removes the members that did
//! not sync) and get their own assignment. v3+ carries a static member's
//! group instance id: FENCED_INSTANCE_ID once the instance has another
//! member id.

use bytes::Bytes;
use kafka_protocol::messages::{ConsumerProtocolAssignment, SyncGroupRequest, SyncGroupResponse};
use kafka_protocol::protocol::{Decodable, StrBytes};

use super::super::errors::group_code;
use super::super::{errors, Ctx};
use super::join_group::CONSUMER;
use crate::domain::{MemberAssignment, SyncSpec, TopicAssignment};

/// The partitions of a consumer assignment (version, topics, user data);
/// empty if it does not decode.
pub(super) fn assignment_partitions(assignment: &Bytes) -> Vec<TopicAssignment> {
    let mut buf = assignment.clone();
    if buf.len() < 2 {
        return Vec::new();
    }
    let version = i16::from_be_bytes([buf[0], buf[1]]).clamp(0, 3);
    let _ = bytes::Buf::get_i16(&mut buf);
    match ConsumerProtocolAssignment::decode(&mut buf, version) {
        Ok(a) => a
            .assigned_partitions
            .into_iter()
            .map(|tp| TopicAssignment {
                topic: tp.topic.0.as_str().to_owned(),
                partitions: tp.partitions,
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

pub(super) async fn handle(ctx: &Ctx, req: SyncGroupRequest, version: i16) -> SyncGroupResponse {
    if !ctx.with_subject(|s| s.in_group(req.group_id.0.as_str())) {
        let mut resp = SyncGroupResponse::default();
        resp.error_code = errors::GROUP_AUTHORIZATION_FAILED;
        return resp;
    }
    let protocol_type = if version >= 5 {
        req.protocol_type.as_ref().map(|s| s.as_str().to_owned())
    } else {
        None
    };
    let consumer = protocol_type.as_deref().is_none_or(|t| t == CONSUMER);
    let assignments = req
        .assignments
        .into_iter()
        .map(|a| MemberAssignment {
            member_id: a.member_id.as_str().to_owned(),
            partitions: if consumer {
                assignment_partitions(&a.assignment)
            } else {
                Vec::new()
            },
            // Copied: a slice would keep the whole request frame alive.
            assignment: Bytes::copy_from_slice(&a.assignment),
        })
        .collect();
    let spec = SyncSpec {
        group: req.group_id.0.as_str().to_owned(),
        member_id: req.member_id.as_str().to_owned(),
        group_instance_id: req
            .group_instance_id
            .as_ref()
            .filter(|_| version >= 3)
            .map(|i| i.as_str().to_owned()),
        generation: req.generation_id,
        protocol_type,
        protocol: if version >= 5 {
            req.protocol_name.as_ref().map(|s| s.as_str().to_owned())
        } else {
            None
        },
        assignments,
    };
    let mut resp = SyncGroupResponse::default();
    match ctx.engine.groups().sync_group(spec).await {
        Ok(s) => {
            resp.error_code = errors::NONE;
            resp.assignment = s.assignment;
            if version >= 5 {
                resp.protocol_type = Some(StrBytes::from_string(s.protocol_type));
                resp.protocol_name = Some(StrBytes::from_string(s.protocol));
            }
        }
        Err(e) => {
            tracing::debug!(group = %req.group_id.0.as_str(), error = %e, "kafka SyncGroup refused");
            resp.error_code = group_code(&e);
        }
    }
    resp
}
