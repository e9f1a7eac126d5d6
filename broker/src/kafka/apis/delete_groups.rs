//! DeleteGroups (v0-2): each group through the engine's delete (only with
//! no members: NON_EMPTY_GROUP; its committed offsets go, durably;
//! GROUP_ID_NOT_FOUND when the broker knows nothing of it). A share group
//! (KIP-932) the same way: its kept state goes. DELETE on the group.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use flume_protocol::ErrorCode;

use super::super::{errors, Ctx};

pub(super) async fn handle(
    ctx: &Ctx,
    req: DeleteGroupsRequest,
    _version: i16,
) -> DeleteGroupsResponse {
    let mut resp = DeleteGroupsResponse::default();
    for group in req.groups_names {
        let name = group.0.as_str();
        let engine = &ctx.engine;
        let code = if !ctx.with_subject(|s| s.delete_group(name)) {
            errors::GROUP_AUTHORIZATION_FAILED
        } else if engine.shares().is_share_group(name) {
            match engine.shares().delete_share_group(name).await {
                Ok(_) => errors::NONE,
                Err(e) => errors::share_code(&e),
            }
        } else {
            match engine.groups().delete_group(name).await {
                Ok(_) => errors::NONE,
                Err(ErrorCode::GroupNotEmpty) => errors::NON_EMPTY_GROUP,
                Err(ErrorCode::UnknownGroup) => errors::GROUP_ID_NOT_FOUND,
                Err(ErrorCode::InvalidName) => errors::INVALID_GROUP_ID,
                Err(c) => errors::kafka_code(c),
            }
        };
        let mut r = DeletableGroupResult::default();
        r.error_code = code;
        r.group_id = group;
        resp.results.push(r);
    }
    resp
}
