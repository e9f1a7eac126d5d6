//! FindCoordinator: this broker, for groups (key type 0) and for
//! transactional ids (key type 1); another key type is INVALID_REQUEST.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};

pub(super) fn handle(
    ctx: &Ctx,
    req: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let error = match req.key_type {
        0 | 1 => errors::NONE,
        _ => errors::INVALID_REQUEST,
    };
    let host = StrBytes::from_string(ctx.advertised_host.clone());
    let port = i32::from(ctx.advertised_port);
    let mut resp = FindCoordinatorResponse::default();
    if version >= 4 {
        resp.coordinators = req
            .coordinator_keys
            .into_iter()
            .map(|key| {
                let mut c = Coordinator::default();
                c.key = key;
                c.error_code = error;
                if error == errors::NONE {
                    c.node_id = BrokerId(ctx.node_id);
                    c.host = host.clone();
                    c.port = port;
                } else {
                    c.node_id = BrokerId(-1);
                    c.port = -1;
                }
                c
            })
            .collect();
    } else {
        resp.error_code = error;
        if error == errors::NONE {
            resp.node_id = BrokerId(ctx.node_id);
            resp.host = host;
            resp.port = port;
        } else {
            resp.node_id = BrokerId(-1);
            resp.port = -1;
        }
    }
    resp
}
