//! ApiVersions: exactly the APIs and versions in [`super::SUPPORTED`].

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

pub(super) fn handle(_req: &ApiVersionsRequest) -> ApiVersionsResponse {
    let mut resp = ApiVersionsResponse::default();
    resp.api_keys = super::SUPPORTED
        .iter()
        .map(|(k, min, max)| {
            let mut v = ApiVersion::default();
            v.api_key = *k as i16;
            v.min_version = *min;
            v.max_version = *max;
            v
        })
        .collect();
    resp
}
