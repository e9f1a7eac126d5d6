//! ShareGroupDescribe (KIP-932): each share group's state, epoch and
//! members with their subscriptions and assignments (topics by id and
//! name). A group that is not a share group (or has neither members nor
//! kept state) is GROUP_ID_NOT_FOUND; DESCRIBE on the group is required.

use kafka_protocol::messages::share_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::super::map::kafka_id;
use super::super::{errors, Ctx};
use crate::security::acl::Resource;

/// What an unset `authorized_operations` is (Kafka's INT32_MIN).
const OPS_OMITTED: i32 = i32::MIN;

pub(super) fn handle(ctx: &Ctx, req: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse {
    let engine = &ctx.engine;
    let groups = req
        .group_ids
        .iter()
        .map(|g| {
            let name = g.0.as_str();
            let mut out = DescribedGroup::default()
                .with_group_id(g.clone())
                .with_authorized_operations(OPS_OMITTED);
            if !ctx.with_subject(|s| s.describe_group(name)) {
                out.error_code = errors::GROUP_AUTHORIZATION_FAILED;
                return out;
            }
            let Some(view) = engine.shares().describe_share_group(name) else {
                out.error_code = errors::GROUP_ID_NOT_FOUND;
                out.error_message = Some(StrBytes::from_string(format!(
                    "{name} is not a share group"
                )));
                return out;
            };
            if req.include_authorized_operations {
                out.authorized_operations = ctx.authorized_operations(Resource::group(name));
            }
            out.group_state = StrBytes::from_static_str(if view.members.is_empty() {
                "Empty"
            } else {
                "Stable"
            });
            out.group_epoch = view.epoch;
            out.assignment_epoch = view.epoch;
            out.assignor_name = StrBytes::from_static_str("simple");
            out.members = view
                .members
                .iter()
                .map(|m| {
                    let topic_partitions = m
                        .assignment
                        .iter()
                        .filter_map(|(t, ps)| {
                            engine.records().topic(t).map(|topic| {
                                TopicPartitions::default()
                                    .with_topic_id(kafka_id(topic.id))
                                    .with_topic_name(TopicName(StrBytes::from_string(t.clone())))
                                    .with_partitions(ps.clone())
                            })
                        })
                        .collect();
                    Member::default()
                        .with_member_id(StrBytes::from_string(m.member_id.clone()))
                        .with_member_epoch(m.member_epoch)
                        .with_client_id(StrBytes::from_string(m.client_id.clone()))
                        .with_client_host(StrBytes::from_string(m.client_host.clone()))
                        .with_subscribed_topic_names(
                            m.subscribed
                                .iter()
                                .map(|t| TopicName(StrBytes::from_string(t.clone())))
                                .collect(),
                        )
                        .with_assignment(
                            Assignment::default().with_topic_partitions(topic_partitions),
                        )
                })
                .collect();
            out
        })
        .collect();
    ShareGroupDescribeResponse::default().with_groups(groups)
}
