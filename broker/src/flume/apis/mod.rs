//! One module per API of the Flume protocol: each decodes its request,
//! checks the principal's right to the domain action ([`crate::security::authz`]),
//! calls the engine and encodes the response, in that order.

pub(super) mod acls;
pub(super) mod alter_topic;
pub(super) mod consumer_group_describe;
pub(super) mod create_partitions;
pub(super) mod create_topic;
pub(super) mod delete_group;
pub(super) mod delete_offsets;
pub(super) mod delete_records;
pub(super) mod delete_topic;
pub(super) mod describe_group;
pub(super) mod describe_topic_config;
pub(super) mod fetch;
pub(super) mod heartbeat;
pub(super) mod heartbeat_wait;
pub(super) mod join_group;
pub(super) mod leave_group;
pub(super) mod list_groups;
pub(super) mod list_offsets;
pub(super) mod list_transactions;
pub(super) mod metadata;
pub(super) mod offset_commit;
pub(super) mod offset_fetch;
pub(super) mod produce;
pub(super) mod share_fetch;
pub(super) mod share_group_describe;
pub(super) mod share_heartbeat;
pub(super) mod topic_configs;

use std::sync::Arc;

use flume_protocol::messages::{Decode, Empty, Encode};
use flume_protocol::{encode_response_frame, ErrorCode};
use futures::FutureExt;

use super::InFlight;
use crate::engine::{Engine, FetchMemory};
use crate::metrics::Tracked;
use crate::security::authz::Subject;

/// What every API's handler gets: the engine, who asks, the request id, the
/// budgets a fetch is charged to, and where it reports what it decoded and
/// what it was about.
pub(super) struct Cx<'a, 'm> {
    pub(super) engine: &'a Arc<Engine>,
    pub(super) who: Subject<'a>,
    pub(super) id: i32,
    pub(super) memory: FetchMemory<'m>,
    /// Bytes the decoded request holds beyond its frame (an estimate).
    pub(super) decoded: &'a mut usize,
    pub(super) tracked: &'a Tracked,
}

impl Cx<'_, '_> {
    /// The request payload as `T`, or the INVALID_REQUEST answer.
    pub(super) fn decode<T: Decode>(&self, payload: &[u8]) -> Result<T, InFlight> {
        T::decode_exact(payload).map_err(|e| {
            tracing::debug!(request_id = self.id, error = %e, "request payload does not decode");
            error_frame(self.id, ErrorCode::InvalidRequest)
        })
    }

    /// AUTHORIZATION_FAILED: nothing was done.
    pub(super) fn denied(&self) -> InFlight {
        error_frame(self.id, ErrorCode::AuthorizationFailed)
    }

    /// An answer that is ready now.
    pub(super) fn ready<R: Encode>(&self, result: Result<R, ErrorCode>) -> InFlight {
        let frame = respond(self.id, result.as_ref().map_err(|e| *e));
        futures::future::ready(frame).boxed()
    }
}

/// The response frame of request `id`.
pub(super) fn respond<R: Encode>(id: i32, result: Result<&R, ErrorCode>) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_response_frame(&mut buf, id, result);
    buf
}

/// An error answer that is ready now.
pub(super) fn error_frame(id: i32, code: ErrorCode) -> InFlight {
    futures::future::ready(respond::<Empty>(id, Err(code))).boxed()
}
