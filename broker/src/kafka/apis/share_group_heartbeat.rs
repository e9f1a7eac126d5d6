//! ShareGroupHeartbeat (KIP-932): joins a share group (epoch 0), keeps a
//! member in it, changes its subscription, or leaves (epoch -1). The answer
//! carries the member's epoch, the heartbeat interval the broker wants and
//! its assignment: every partition of its subscription, by topic id (a
//! share group's members all read the same partitions). Topics the member
//! may not describe are left out of the assignment; a subscription that
//! names none it may describe gets TOPIC_AUTHORIZATION_FAILED.

use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::map::kafka_id;
use super::super::{errors, Ctx};
use crate::engine::ShareHeartbeat;

pub(super) async fn handle(
    ctx: &Ctx,
    client_id: &str,
    req: ShareGroupHeartbeatRequest,
) -> ShareGroupHeartbeatResponse {
    let mut resp = ShareGroupHeartbeatResponse::default().with_member_epoch(req.member_epoch);
    let group = req.group_id.0.as_str();
    if !ctx.with_subject(|s| s.in_group(group)) {
        resp.error_code = errors::GROUP_AUTHORIZATION_FAILED;
        return resp;
    }
    let subscribed: Option<Vec<String>> = req
        .subscribed_topic_names
        .as_ref()
        .map(|ts| ts.iter().map(|t| t.0.as_str().to_owned()).collect());
    if let Some(ts) = &subscribed {
        if !ts.is_empty() && !ts.iter().any(|t| ctx.with_subject(|s| s.describe_topic(t))) {
            resp.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
            resp.error_message = Some(StrBytes::from_static_str(
                "not authorized to describe any subscribed topic",
            ));
            return resp;
        }
    }
    let engine = &ctx.engine;
    let beat = engine
        .shares()
        .share_heartbeat(ShareHeartbeat {
            group,
            member_id: req.member_id.as_str(),
            member_epoch: req.member_epoch,
            subscribed,
            client_id,
            client_host: &ctx.client_host,
        })
        .await;
    match beat {
        Err(e) => {
            resp.error_code = errors::share_code(&e);
            resp.error_message = Some(StrBytes::from_string(e.to_string()));
        }
        Ok(beat) => {
            resp.member_id = Some(StrBytes::from_string(beat.member_id));
            resp.member_epoch = beat.member_epoch;
            resp.heartbeat_interval_ms =
                i32::try_from(beat.heartbeat_interval_ms).unwrap_or(i32::MAX);
            if beat.member_epoch >= 0 {
                let topic_partitions = beat
                    .assignment
                    .iter()
                    .filter(|(t, _)| ctx.with_subject(|s| s.describe_topic(t)))
                    .filter_map(|(t, ps)| {
                        engine.records().topic(t).map(|topic| {
                            TopicPartitions::default()
                                .with_topic_id(kafka_id(topic.id))
                                .with_partitions(ps.clone())
                        })
                    })
                    .collect();
                resp.assignment =
                    Some(Assignment::default().with_topic_partitions(topic_partitions));
            }
        }
    }
    resp
}
