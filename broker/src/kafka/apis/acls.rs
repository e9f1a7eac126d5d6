//! DescribeAcls, CreateAcls and DeleteAcls (v1-3): the broker's ACLs
//! ([`crate::security::acl`]) in Kafka's codes, so `kafka-acls.sh` and
//! admin clients manage them. Admins may, and with the authorizer on a
//! principal allowed DESCRIBE (to list) or ALTER (to change) on the cluster;
//! others get CLUSTER_AUTHORIZATION_FAILED, or with the authorizer off
//! SECURITY_DISABLED (54), as a Kafka broker without an authorizer answers
//! (admins may still stage ACLs then). Every refusal carries a message.
//! Flume ACLs have no host: a creation names host `*`.

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};
use crate::security::acl::{Acl, AclPrincipal, Operation, PatternType, Permission, ResourceType};
use crate::security::authz::AclsRefused;

/// Kafka's code for a refusal: SECURITY_DISABLED with the authorizer off
/// (as a Kafka broker without an authorizer answers), else
/// CLUSTER_AUTHORIZATION_FAILED.
fn refusal_code(why: AclsRefused) -> i16 {
    match why {
        AclsRefused::Disabled => errors::SECURITY_DISABLED,
        AclsRefused::Denied => errors::CLUSTER_AUTHORIZATION_FAILED,
    }
}

/// Kafka's ANY in a filter.
const ANY: i8 = 1;
/// Kafka's MATCH pattern filter: every ACL that applies to the name.
const MATCH: i8 = 2;

fn resource_type(code: i8) -> Option<ResourceType> {
    match code {
        2 => Some(ResourceType::Topic),
        3 => Some(ResourceType::Group),
        4 => Some(ResourceType::Cluster),
        _ => None,
    }
}

fn resource_code(t: ResourceType) -> i8 {
    match t {
        ResourceType::Topic => 2,
        ResourceType::Group => 3,
        ResourceType::Cluster => 4,
    }
}

fn pattern(code: i8) -> Option<PatternType> {
    match code {
        3 => Some(PatternType::Literal),
        4 => Some(PatternType::Prefixed),
        _ => None,
    }
}

fn pattern_code(p: PatternType) -> i8 {
    match p {
        PatternType::Literal => 3,
        PatternType::Prefixed => 4,
    }
}

fn operation(code: i8) -> Option<Operation> {
    match code {
        2 => Some(Operation::All),
        3 => Some(Operation::Read),
        4 => Some(Operation::Write),
        5 => Some(Operation::Create),
        6 => Some(Operation::Delete),
        7 => Some(Operation::Alter),
        8 => Some(Operation::Describe),
        _ => None,
    }
}

fn operation_code(o: Operation) -> i8 {
    match o {
        Operation::All => 2,
        Operation::Read => 3,
        Operation::Write => 4,
        Operation::Create => 5,
        Operation::Delete => 6,
        Operation::Alter => 7,
        Operation::Describe => 8,
    }
}

fn permission(code: i8) -> Option<Permission> {
    match code {
        2 => Some(Permission::Deny),
        3 => Some(Permission::Allow),
        _ => None,
    }
}

fn permission_code(p: Permission) -> i8 {
    match p {
        Permission::Deny => 2,
        Permission::Allow => 3,
    }
}

/// A describe or delete filter.
struct Filter {
    resource_type: i8,
    name: Option<String>,
    pattern: i8,
    principal: Option<String>,
    host: Option<String>,
    operation: i8,
    permission: i8,
}

impl Filter {
    fn matches(&self, a: &Acl) -> bool {
        let name_ok = match (&self.name, self.pattern) {
            (None, _) => true,
            (Some(n), MATCH) => match a.pattern {
                PatternType::Literal => a.name == *n || a.name == "*",
                PatternType::Prefixed => n.starts_with(&a.name),
            },
            (Some(n), _) => a.name == *n,
        };
        (self.resource_type == ANY || resource_type(self.resource_type) == Some(a.resource_type))
            && (matches!(self.pattern, ANY | MATCH) || pattern(self.pattern) == Some(a.pattern))
            && name_ok
            && self
                .principal
                .as_ref()
                .is_none_or(|p| *p == a.principal.to_string())
            && self.host.as_deref().is_none_or(|h| h == "*")
            && (self.operation == ANY || operation(self.operation) == Some(a.operation))
            && (self.permission == ANY || permission(self.permission) == Some(a.permission))
    }
}

fn text(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(|s| s.as_str().to_owned())
}

fn to_acl(
    resource: i8,
    name: &str,
    pattern_code: i8,
    principal: &str,
    host: &str,
    op: i8,
    perm: i8,
) -> Result<Acl, String> {
    if host != "*" {
        return Err("Flume ACLs have no host: use host *".into());
    }
    let acl = Acl {
        principal: principal.parse::<AclPrincipal>()?,
        permission: permission(perm).ok_or("permission must be ALLOW or DENY")?,
        resource_type: resource_type(resource)
            .ok_or("resource type must be TOPIC, GROUP or CLUSTER")?,
        pattern: pattern(pattern_code).ok_or("pattern type must be LITERAL or PREFIXED")?,
        name: name.to_owned(),
        operation: operation(op)
            .ok_or("operation must be ALL, READ, WRITE, CREATE, DELETE, ALTER or DESCRIBE")?,
    };
    acl.validate()?;
    Ok(acl)
}

pub(super) fn describe(ctx: &Ctx, req: DescribeAclsRequest, _version: i16) -> DescribeAclsResponse {
    let mut resp = DescribeAclsResponse::default();
    if let Err(why) = ctx.with_subject(|s| s.manage_acls(Operation::Describe)) {
        resp.error_code = refusal_code(why);
        resp.error_message = Some(StrBytes::from_static_str(why.message()));
        return resp;
    }
    let filter = Filter {
        resource_type: req.resource_type_filter,
        name: text(&req.resource_name_filter),
        pattern: req.pattern_type_filter,
        principal: text(&req.principal_filter),
        host: text(&req.host_filter),
        operation: req.operation,
        permission: req.permission_type,
    };
    // Grouped by resource (the list is sorted by principal first).
    let mut by_resource: std::collections::BTreeMap<(i8, String, i8), Vec<AclDescription>> =
        std::collections::BTreeMap::new();
    for a in ctx.engine.acl().list(None) {
        if !filter.matches(&a) {
            continue;
        }
        let mut d = AclDescription::default();
        d.principal = StrBytes::from_string(a.principal.to_string());
        d.host = StrBytes::from_static_str("*");
        d.operation = operation_code(a.operation);
        d.permission_type = permission_code(a.permission);
        by_resource
            .entry((
                resource_code(a.resource_type),
                a.name,
                pattern_code(a.pattern),
            ))
            .or_default()
            .push(d);
    }
    resp.resources = by_resource
        .into_iter()
        .map(|((t, name, p), acls)| {
            let mut r = DescribeAclsResource::default();
            r.resource_type = t;
            r.resource_name = StrBytes::from_string(name);
            r.pattern_type = p;
            r.acls = acls;
            r
        })
        .collect();
    resp
}

pub(super) async fn create(ctx: &Ctx, req: CreateAclsRequest, _version: i16) -> CreateAclsResponse {
    let mut resp = CreateAclsResponse::default();
    let allowed = ctx.with_subject(|s| s.manage_acls(Operation::Alter));
    for c in req.creations {
        let mut r = AclCreationResult::default();
        let outcome = if let Err(why) = allowed {
            Err((refusal_code(why), why.message().to_owned()))
        } else {
            match to_acl(
                c.resource_type,
                c.resource_name.as_str(),
                c.resource_pattern_type,
                c.principal.as_str(),
                c.host.as_str(),
                c.operation,
                c.permission_type,
            ) {
                Err(why) => Err((errors::INVALID_REQUEST, why)),
                Ok(acl) => {
                    let authorizer = std::sync::Arc::clone(ctx.engine.acl());
                    flume_rt::unblock(move || authorizer.add(acl))
                        .await
                        .map(|_| ())
                        .map_err(|e| (errors::INVALID_REQUEST, e.to_string()))
                }
            }
        };
        if let Err((code, message)) = outcome {
            r.error_code = code;
            r.error_message = Some(StrBytes::from_string(message));
        }
        resp.results.push(r);
    }
    resp
}

pub(super) async fn delete(ctx: &Ctx, req: DeleteAclsRequest, _version: i16) -> DeleteAclsResponse {
    let mut resp = DeleteAclsResponse::default();
    let allowed = ctx.with_subject(|s| s.manage_acls(Operation::Alter));
    for f in req.filters {
        let mut r = DeleteAclsFilterResult::default();
        if let Err(why) = allowed {
            r.error_code = refusal_code(why);
            r.error_message = Some(StrBytes::from_static_str(why.message()));
            resp.filter_results.push(r);
            continue;
        }
        let filter = Filter {
            resource_type: f.resource_type_filter,
            name: text(&f.resource_name_filter),
            pattern: f.pattern_type_filter,
            principal: text(&f.principal_filter),
            host: text(&f.host_filter),
            operation: f.operation,
            permission: f.permission_type,
        };
        for a in ctx.engine.acl().list(None) {
            if !filter.matches(&a) {
                continue;
            }
            let authorizer = std::sync::Arc::clone(ctx.engine.acl());
            let gone = a.clone();
            let mut m = DeleteAclsMatchingAcl::default();
            if let Err(e) = flume_rt::unblock(move || authorizer.remove(&gone)).await {
                m.error_code = errors::KAFKA_STORAGE_ERROR;
                m.error_message = Some(StrBytes::from_string(e.to_string()));
            }
            m.resource_type = resource_code(a.resource_type);
            m.resource_name = StrBytes::from_string(a.name);
            m.pattern_type = pattern_code(a.pattern);
            m.principal = StrBytes::from_string(a.principal.to_string());
            m.host = StrBytes::from_static_str("*");
            m.operation = operation_code(a.operation);
            m.permission_type = permission_code(a.permission);
            r.matching_acls.push(m);
        }
        resp.filter_results.push(r);
    }
    resp
}
