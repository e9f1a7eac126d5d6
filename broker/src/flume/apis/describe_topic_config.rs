//! DESCRIBE_TOPIC_CONFIG: DESCRIBE on the topic.

use flume_protocol::{DescribeTopicConfigRequest, ErrorCode};

use super::super::{map, InFlight};
use super::Cx;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<DescribeTopicConfigRequest>(payload) {
        Ok(req) if !cx.who.describe_topic_configs(&req.name) => cx.denied(),
        Ok(req) => cx.ready(
            cx.engine
                .admin()
                .topic_config(&req.name)
                .map(|tc| map::topic_settings(&tc))
                .ok_or(ErrorCode::UnknownTopic),
        ),
        Err(f) => f,
    }
}
