//! DeleteGroups (v0-2): each group through the engine's delete (only with
//! no members: NON_EMPTY_GROUP; its committed offsets go, durably;
//! GROUP_ID_NOT_FOUND when the broker knows nothing of it). DELETE on the group.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use super::super::{errors, Ctx};
use crate::security::acl::{Operation, Resource};

pub(super) async fn handle(
    ctx: &Ctx,
    req: DeleteGroupsRequest,
    _version: i16,
) -> DeleteGroupsResponse {
    let mut resp = DeleteGroupsResponse::default();
    for group in req.groups_names {
        let name = group.0.as_str();
        let code = if ctx.may(Operation::Delete, Resource::group(name)) {
            ctx.backend.delete_group(name).await
        } else {
            errors::GROUP_AUTHORIZATION_FAILED
        };
        let mut r = DeletableGroupResult::default();
        r.error_code = code;
        r.group_id = group;
        resp.results.push(r);
    }
    resp
}
