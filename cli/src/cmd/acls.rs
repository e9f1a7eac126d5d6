//! `flume-cli acls`: add, remove and list ACLs on a running broker (as an
//! admin, ACLS requests; see `docs/security.md`).

use anyhow::{bail, Context, Result};
use flume_client::{AclEntry, Admin};

use crate::args::acls::{AclArgs, AclsCommand};
use crate::common::describe;

impl AclArgs {
    fn entry(self) -> Result<AclEntry> {
        let (resource_type, name) = match (self.topic, self.group, self.cluster) {
            (Some(t), None, false) => ("topic", t),
            (None, Some(g), false) => ("group", g),
            (None, None, true) => ("cluster", "kafka-cluster".to_owned()),
            _ => bail!("name one of --topic, --group or --cluster"),
        };
        if self.prefixed && resource_type == "cluster" {
            bail!("--prefixed is for --topic or --group");
        }
        Ok(AclEntry {
            principal: self.principal,
            permission: if self.deny { "deny" } else { "allow" }.into(),
            resource_type: resource_type.into(),
            pattern: if self.prefixed { "prefixed" } else { "literal" }.into(),
            name,
            operation: self.operation,
        })
    }
}

fn row(a: &AclEntry) -> String {
    format!(
        "{:<28} {:<6} {:<9} {:<9} {:<24} {}",
        a.principal, a.permission, a.operation, a.resource_type, a.name, a.pattern
    )
}

fn print_table(acls: &[AclEntry]) {
    if acls.is_empty() {
        println!("no ACLs");
        return;
    }
    println!(
        "{:<28} {:<6} {:<9} {:<9} {:<24} PATTERN",
        "PRINCIPAL", "PERM", "OPERATION", "RESOURCE", "NAME"
    );
    for a in acls {
        println!("{}", row(a));
    }
}

pub async fn run(cmd: AclsCommand) -> Result<()> {
    let broker = match &cmd {
        AclsCommand::Add { broker, .. }
        | AclsCommand::Remove { broker, .. }
        | AclsCommand::List { broker, .. } => broker.clone(),
    };
    let admin = Admin::connect_with(&broker.addr, broker.connection()?)
        .await
        .map_err(describe)
        .context("cannot reach the broker")?;
    match cmd {
        AclsCommand::Add { acl, .. } => {
            let entry = acl.entry()?;
            let line = row(&entry);
            let added = admin.add_acl(entry).await.map_err(describe)?;
            println!("{} {line}", if added { "added" } else { "already there:" });
        }
        AclsCommand::Remove { acl, .. } => {
            let entry = acl.entry()?;
            let line = row(&entry);
            if !admin.remove_acl(entry).await.map_err(describe)? {
                bail!("no such ACL: {line}");
            }
            println!("removed {line}");
        }
        AclsCommand::List { principal, .. } => {
            let acls = admin
                .list_acls(principal.as_deref())
                .await
                .map_err(describe)?;
            print_table(&acls);
        }
    }
    Ok(())
}
