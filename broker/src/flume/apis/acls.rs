//! ACLS: list and change the ACLs: admins, and with the authorizer on
//! whoever may ALTER the cluster; with it off anyone else gets
//! SECURITY_DISABLED (no permission is missing: ACLs are not in use).

use std::sync::Arc;

use flume_protocol::{AclsRequest, ErrorCode};
use flume_rt as rt;
use futures::FutureExt;

use super::super::InFlight;
use super::{respond, Cx};
use crate::security::acl::Operation;
use crate::security::authz::AclsRefused;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    match cx.who.manage_acls(Operation::Alter) {
        Ok(()) => {}
        Err(AclsRefused::Denied) => {
            tracing::info!(principal = %cx.who.principal(), "ACLS refused: not an admin");
            return cx.denied();
        }
        Err(why @ AclsRefused::Disabled) => {
            tracing::info!(principal = %cx.who.principal(), "ACLS refused: {}", why.message());
            return super::error_frame(id, ErrorCode::SecurityDisabled);
        }
    }
    let req = match cx.decode::<AclsRequest>(payload) {
        Ok(r) => r,
        Err(f) => return f,
    };
    let acl = Arc::clone(cx.engine.acl());
    let who = cx.who.principal().to_string();
    async move {
        let r = rt::unblock(move || crate::security::acl::serve_request(&acl, &who, req)).await;
        respond(id, r.as_ref().map_err(|e| *e))
    }
    .boxed()
}
