//! FindCoordinator: this broker, for groups. Transactions are not served.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::Ctx;

/// COORDINATOR_NOT_AVAILABLE: asked for a transaction coordinator.
const COORDINATOR_NOT_AVAILABLE: i16 = 15;

pub(super) fn handle(
    ctx: &Ctx,
    req: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let error = if req.key_type == 0 {
        0
    } else {
        COORDINATOR_NOT_AVAILABLE
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
                if error == 0 {
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
        if error == 0 {
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
