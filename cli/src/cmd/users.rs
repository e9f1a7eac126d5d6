//! `flume-cli users`: SCRAM users, against a running broker (as an admin
//! user, USERS requests) or, with `--data`, in a stopped broker's data
//! directory (how the first admin is made).

use std::path::Path;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use flume_broker::security::users::{new_verifiers, UserStore};
use flume_broker::storage::DataDirLock;
use flume_client::lowlevel::Client;
use flume_protocol::scram::{Verifier, MIN_ITERATIONS};
use flume_protocol::{UsersRequest, USERS_LIST, USERS_PUT, USERS_REMOVE};

use crate::args::client::BrokerAddr;
use crate::args::users::UsersCommand;
use crate::common::{describe, read_password};

/// What to do.
enum Op {
    Put(String, String),
    Remove(String),
    List,
}

pub async fn run(cmd: UsersCommand) -> Result<()> {
    let (op, data, broker) = match cmd {
        UsersCommand::Add {
            name,
            new_password_file,
            data,
            broker,
        } => {
            let pw = read_password(new_password_file.as_deref(), "FLUME_NEW_PASSWORD")?;
            if pw.is_empty() {
                bail!("the new password is empty");
            }
            (Op::Put(name, pw), data, broker)
        }
        UsersCommand::Remove { name, data, broker } => (Op::Remove(name), data, broker),
        UsersCommand::List { data, broker } => (Op::List, data, broker),
    };
    match data {
        Some(dir) => offline(&dir, op),
        None => online(&broker, op).await,
    }
}

fn offline(dir: &Path, op: Op) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    // The first admin comes before the broker's first start: `add` creates
    // and marks the data directory as the broker does (taking its lock
    // does); `remove` and `list` have nothing to read in a missing one.
    if !dir.exists() && !matches!(op, Op::Put(..)) {
        bail!("{} does not exist: no data directory there", dir.display());
    }
    let _lock = DataDirLock::acquire(dir, false).with_context(|| {
        format!(
            "cannot take {}'s lock (stop the broker, or leave out --data to ask it)",
            dir.display()
        )
    })?;
    let store = UserStore::open(dir)?;
    match op {
        Op::Put(name, pw) => {
            store.put_all(&name, new_verifiers(&pw)?)?;
            println!("user {name} saved");
        }
        Op::Remove(name) => {
            if !store.remove(&name)? {
                bail!("no user {name}");
            }
            println!("user {name} removed");
        }
        Op::List => {
            for u in store.list() {
                println!("{u}");
            }
        }
    }
    Ok(())
}

async fn online(broker: &BrokerAddr, op: Op) -> Result<()> {
    if broker.is_kafka() {
        anyhow::bail!(
            "users are Flume's own (Kafka's SCRAM users are managed by the cluster's tools): use a host:port --broker"
        );
    }
    let client = Client::connect(&broker.addr, broker.connection()?)
        .await
        .map_err(describe)
        .context("cannot reach the broker")?;
    let (req, done) = match op {
        Op::Put(name, pw) => {
            let mut salt = [0u8; 16];
            getrandom::fill(&mut salt).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
            let v = Verifier::new(&pw, &salt, MIN_ITERATIONS);
            let req = UsersRequest {
                op: USERS_PUT,
                name: name.clone(),
                iterations: i32::try_from(v.iterations)?,
                salt: Bytes::from(v.salt),
                stored_key: Bytes::copy_from_slice(&v.stored_key),
                server_key: Bytes::copy_from_slice(&v.server_key),
            };
            (req, Some(format!("user {name} saved")))
        }
        Op::Remove(name) => (
            UsersRequest {
                op: USERS_REMOVE,
                name: name.clone(),
                ..UsersRequest::default()
            },
            Some(format!("user {name} removed")),
        ),
        Op::List => (
            UsersRequest {
                op: USERS_LIST,
                ..UsersRequest::default()
            },
            None,
        ),
    };
    let resp = client.call(&req).await.map_err(describe)?;
    match done {
        Some(msg) => println!("{msg}"),
        None => {
            for u in resp.users {
                println!("{u}");
            }
        }
    }
    Ok(())
}
