//! Consumes a topic as a member of a group, committing each record.
//!
//! ```sh
//! cargo run --release -p flume-cli -- broker            # in one terminal
//! cargo run -p flume-client --example group_consumer -- 127.0.0.1:9092 billing orders 10
//! ```
//! Start two of them with the same group: the partitions are split between them.

use flume_client::{GroupConsumer, RebalanceEvent};
use futures::StreamExt;

fn main() {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:9092".into());
    let group = args.next().unwrap_or_else(|| "billing".into());
    let topic = args.next().unwrap_or_else(|| "orders".into());
    let max: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(usize::MAX);
    let result = flume_rt::block_on(async {
        let mut consumer = GroupConsumer::builder(&addr, &group)
            .topic(&topic)
            .auto_commit(false)
            .build()
            .await?;
        let events = consumer.events();
        let mut seen = 0;
        while let Some(record) = consumer.next().await {
            while let Some(ev) = events.try_recv() {
                match ev {
                    RebalanceEvent::Assigned {
                        generation,
                        partitions,
                    } => println!("generation {generation}: assigned {partitions:?}"),
                    RebalanceEvent::Revoked(p) => println!("revoked {p:?}"),
                }
            }
            let record = record?;
            println!(
                "{}/{} @{}: {}",
                record.topic,
                record.partition,
                record.offset,
                String::from_utf8_lossy(record.payload())
            );
            consumer.commit(&record).await?;
            seen += 1;
            if seen >= max {
                break;
            }
        }
        consumer.close().await?;
        Ok::<(), flume_client::Error>(())
    });
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
