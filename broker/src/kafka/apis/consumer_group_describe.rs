//! ConsumerGroupDescribe (KIP-848): each consumer-protocol group's state
//! ("Stable" or "Reconciling"), group and assignment epochs, assignor and
//! members with their subscriptions, current and target assignments
//! (topics by id and name). A group that is not a consumer-protocol group
//! with members is GROUP_ID_NOT_FOUND; DESCRIBE on the group is required.

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::super::map::kafka_id;
use super::super::{errors, Ctx};
use crate::security::acl::Resource;

/// What an unset `authorized_operations` is (Kafka's INT32_MIN).
const OPS_OMITTED: i32 = i32::MIN;

pub(super) fn handle(
    ctx: &Ctx,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let engine = &ctx.engine;
    let assignment = |a: &crate::engine::Assignment| {
        Assignment::default().with_topic_partitions(
            a.iter()
                .filter_map(|(t, ps)| {
                    engine.records().topic(t).map(|topic| {
                        TopicPartitions::default()
                            .with_topic_id(kafka_id(topic.id))
                            .with_topic_name(TopicName(StrBytes::from_string(t.clone())))
                            .with_partitions(ps.iter().copied().collect())
                    })
                })
                .collect(),
        )
    };
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
            let Some(view) = engine.groups().describe_consumer_group(name) else {
                out.error_code = errors::GROUP_ID_NOT_FOUND;
                out.error_message = Some(StrBytes::from_string(format!(
                    "{name} is not a consumer-protocol group with members"
                )));
                return out;
            };
            if req.include_authorized_operations {
                out.authorized_operations = ctx.authorized_operations(Resource::group(name));
            }
            out.group_state = StrBytes::from_static_str(view.state);
            out.group_epoch = view.epoch;
            out.assignment_epoch = view.assignment_epoch;
            out.assignor_name = StrBytes::from_static_str(view.assignor);
            out.members = view
                .members
                .iter()
                .map(|m| {
                    Member::default()
                        .with_member_id(StrBytes::from_string(m.member_id.clone()))
                        .with_instance_id(m.instance_id.clone().map(StrBytes::from_string))
                        .with_rack_id(m.rack_id.clone().map(StrBytes::from_string))
                        .with_member_epoch(m.member_epoch)
                        .with_client_id(StrBytes::from_string(m.client_id.clone()))
                        .with_client_host(StrBytes::from_string(m.client_host.clone()))
                        .with_subscribed_topic_names(
                            m.subscribed
                                .iter()
                                .map(|t| TopicName(StrBytes::from_string(t.clone())))
                                .collect(),
                        )
                        .with_subscribed_topic_regex(m.regex.clone().map(StrBytes::from_string))
                        .with_assignment(assignment(&m.assignment))
                        .with_target_assignment(assignment(&m.target))
                        // v1: 1 is a consumer-protocol member (0 classic).
                        .with_member_type(1)
                })
                .collect();
            out
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
