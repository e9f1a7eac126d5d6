//! JoinGroup: a member joins a client-assigned group and waits (parked in
//! the coordinator, bounded by the rebalance timeout) until every known
//! member has joined; the leader's answer lists every member's metadata.
//!
//! Served up to v9, as Kafka serves it: v4+ answers a first join without a
//! member id with MEMBER_ID_REQUIRED and a new id (KIP-394), except a static
//! member's; v5+ carries the group instance id (`group.instance.id`, static
//! membership, KIP-345: a static member that comes back gets its place and
//! assignment without a rebalance and fences the process before it,
//! FENCED_INSTANCE_ID); v6+ is the flexible encoding; v7+ answers with the
//! protocol type; v8's reason is only logged; v9 lets a static leader that
//! comes back to a stable group be told the members with `skip_assignment`
//! (KIP-814) instead of being named a leader it is not.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{ConsumerProtocolSubscription, JoinGroupRequest, JoinGroupResponse};
use kafka_protocol::protocol::{Decodable, StrBytes};

use super::super::errors::group_code;
use super::super::{errors, Ctx};
use crate::domain::{ClientJoinSpec, GroupError};

/// The protocol type of Kafka's consumers, whose metadata and assignments
/// have a known format (read for describe and lag, never required).
pub(super) const CONSUMER: &str = "consumer";

/// The topics of a consumer's subscription metadata (version, topics,
/// user data, ...); empty if it does not decode.
pub(super) fn subscription_topics(metadata: &Bytes) -> Vec<String> {
    let mut buf = metadata.clone();
    if buf.len() < 2 {
        return Vec::new();
    }
    let version = i16::from_be_bytes([buf[0], buf[1]]).clamp(0, 3);
    let _ = bytes::Buf::get_i16(&mut buf);
    match ConsumerProtocolSubscription::decode(&mut buf, version) {
        Ok(s) => s.topics.iter().map(|t| t.as_str().to_owned()).collect(),
        Err(_) => Vec::new(),
    }
}

fn ms(v: i32) -> Duration {
    Duration::from_millis(u64::try_from(v).unwrap_or(0))
}

pub(super) async fn handle(
    ctx: &Ctx,
    client_id: &str,
    req: JoinGroupRequest,
    version: i16,
) -> JoinGroupResponse {
    if !ctx.with_subject(|s| s.in_group(req.group_id.0.as_str())) {
        let mut resp = JoinGroupResponse::default();
        resp.error_code = errors::GROUP_AUTHORIZATION_FAILED;
        resp.generation_id = -1;
        return resp;
    }
    let protocol_type = req.protocol_type.as_str().to_owned();
    let protocols: Vec<(String, Bytes)> = req
        .protocols
        .iter()
        // Copied: a slice would keep the whole request frame alive while the member lives.
        .map(|p| {
            (
                p.name.as_str().to_owned(),
                Bytes::copy_from_slice(&p.metadata),
            )
        })
        .collect();
    let topics = match protocols.first() {
        Some((_, md)) if protocol_type == CONSUMER => subscription_topics(md),
        _ => Vec::new(),
    };
    // v0 has no rebalance timeout: the session timeout stands for it, as in Kafka.
    let rebalance = if version >= 1 {
        req.rebalance_timeout_ms
    } else {
        req.session_timeout_ms
    };
    if let Some(reason) = req.reason.as_ref().filter(|_| version >= 8) {
        tracing::debug!(group = %req.group_id.0.as_str(), member = %req.member_id.as_str(), reason = %reason.as_str(), "kafka JoinGroup");
    }
    let spec = ClientJoinSpec {
        group: req.group_id.0.as_str().to_owned(),
        member_id: req.member_id.as_str().to_owned(),
        require_member_id: version >= 4,
        client_id: client_id.to_owned(),
        group_instance_id: req
            .group_instance_id
            .as_ref()
            .filter(|_| version >= 5)
            .map(|i| i.as_str().to_owned()),
        skip_assignment_supported: version >= 9,
        client_host: ctx.client_host.clone(),
        protocol_type,
        protocols,
        topics,
        session_timeout: ms(req.session_timeout_ms),
        rebalance_timeout: ms(rebalance),
    };
    let mut resp = JoinGroupResponse::default();
    match ctx.engine.groups().join_client_group(spec).await {
        Ok(j) => {
            resp.error_code = errors::NONE;
            resp.generation_id = j.generation;
            if version >= 7 {
                resp.protocol_type = Some(StrBytes::from_string(j.protocol_type));
            }
            resp.protocol_name = Some(StrBytes::from_string(j.protocol));
            resp.leader = StrBytes::from_string(j.leader_id);
            resp.member_id = StrBytes::from_string(j.member_id);
            resp.skip_assignment = j.skip_assignment && version >= 9;
            resp.members = j
                .members
                .into_iter()
                .map(|jm| {
                    let mut m = JoinGroupResponseMember::default();
                    m.member_id = StrBytes::from_string(jm.member_id);
                    if version >= 5 {
                        m.group_instance_id = jm.group_instance_id.map(StrBytes::from_string);
                    }
                    m.metadata = jm.metadata;
                    m
                })
                .collect();
        }
        Err(GroupError::MemberIdRequired(id)) => {
            resp.error_code = errors::MEMBER_ID_REQUIRED;
            resp.member_id = StrBytes::from_string(id);
        }
        Err(e) => {
            tracing::debug!(group = %req.group_id.0.as_str(), error = %e, "kafka JoinGroup refused");
            resp.error_code = group_code(&e);
            resp.member_id = req.member_id;
        }
    }
    resp
}
