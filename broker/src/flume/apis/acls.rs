//! ACLS: list and change the ACLs: admins, and with the authorizer on
//! whoever may ALTER the cluster.

use std::sync::Arc;

use flume_protocol::AclsRequest;
use flume_rt as rt;
use futures::FutureExt;

use super::super::InFlight;
use super::{respond, Cx};
use crate::security::acl::Operation;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    if !cx.who.manage_acls(Operation::Alter) {
        tracing::info!(principal = %cx.who.principal(), "ACLS refused: not an admin");
        return cx.denied();
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
