//! Sends records to a running broker.
//!
//! ```sh
//! cargo run --release -p flume-cli -- broker            # in one terminal
//! cargo run -p flume-client --example producer -- 127.0.0.1:9092 orders 10
//! ```

use flume_client::Producer;

fn main() {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:9092".into());
    let topic = args.next().unwrap_or_else(|| "orders".into());
    let n: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let result = flume_rt::block_on(async {
        let producer = Producer::connect(&addr).await?;
        for i in 0..n {
            let key = format!("user-{}", i % 3);
            let value = format!(r#"{{"order":{i}}}"#);
            let meta = producer
                .send(&topic, Some(key.as_bytes()), value.as_bytes())
                .await?;
            println!(
                "{key} -> partition {} offset {}",
                meta.partition, meta.offset
            );
        }
        producer.close().await;
        Ok::<(), flume_client::Error>(())
    });
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
