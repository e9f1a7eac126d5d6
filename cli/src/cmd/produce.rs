//! `flume-cli produce`: one record, or one per line of stdin, each acknowledgement reported.

use std::io::{BufRead, Write};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use flume_client::{Header, Producer, ProducerConfig, ProducerRecord, RecordMetadata};
use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::json;

use crate::args::produce::ProduceArgs;
use crate::common::describe;
use crate::output::{json_bytes, ranges, Format, InputFormat};

/// Longest stdin line taken as one record; a longer one fails as its line.
const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;
/// Records sent but not yet acknowledged (bounds what is kept for the report).
const WINDOW: usize = 10_000;
/// Lines read ahead of the sender.
const READ_AHEAD: usize = 1024;

/// One input record before it is sent: where it came from and what it holds.
struct Input {
    /// 1-based line number, or 0 for --message / --value-file.
    line: u64,
    key: Option<Vec<u8>>,
    /// `None`: a tombstone.
    value: Option<Vec<u8>>,
}

/// What happened to one record.
enum Outcome {
    Written(RecordMetadata),
    Failed(String),
}

pub async fn run(a: ProduceArgs) -> Result<()> {
    if a.at.topic.is_empty() {
        bail!("--topic must not be empty");
    }
    let key = match &a.key {
        Some(k) => Some(
            a.key_format
                .decode(k.as_bytes())
                .map_err(|e| anyhow::anyhow!("--key is {e}"))?,
        ),
        None => None,
    };
    let single = match (&a.message, &a.value_file) {
        _ if a.tombstone => Some(None),
        (Some(m), _) => Some(Some(
            a.value_format
                .decode(m.as_bytes())
                .map_err(|e| anyhow::anyhow!("--message is {e}"))?,
        )),
        (None, Some(path)) => Some(Some(read_value_file(path)?)),
        (None, None) => None,
    };
    // Each record is its own batch, so the broker accepts or refuses each line on its own
    // (a refused batch takes every record in it down); requests still carry many batches,
    // and whatever has arrived is sent at once, without a linger.
    let config = a.kafka.apply(
        ProducerConfig::default()
            .batch_max_bytes(1)
            .connection(a.at.broker.connection()?),
    );
    let producer = Producer::with_config(&a.at.broker.addr, config)
        .await
        .context("cannot reach the broker")?;
    let headers: Vec<Header> = a
        .headers
        .iter()
        .map(|(k, v)| Header::new(k.clone(), Bytes::copy_from_slice(v.as_bytes())))
        .collect();
    let build = |input: &Input| {
        let value = input.value.as_deref().map(Bytes::copy_from_slice);
        let mut rec =
            ProducerRecord::nullable(a.at.topic.clone(), value).headers(headers.iter().cloned());
        if let Some(k) = &input.key {
            rec = rec.key(k.clone());
        }
        if let Some(p) = a.partition {
            rec = rec.partition(p);
        }
        rec
    };
    if let Some(value) = single {
        let input = Input {
            line: 0,
            key,
            value,
        };
        let meta = producer
            .send_record(build(&input))
            .await
            .map_err(|e| explain(e, &input))?;
        producer.close().await;
        if a.quiet {
            println!("1 record sent to {}", a.at.topic);
        } else {
            print_ack(&a, &input, meta);
        }
        return Ok(());
    }

    // Lines are read on their own thread (stdin blocks) and handed over through a bounded
    // channel; this task sends each as it arrives and reports each acknowledgement as soon
    // as it comes back, so a person typing or a slow pipe sees every record confirmed.
    let (tx, rx) = async_channel::bounded::<Result<Input, String>>(READ_AHEAD);
    let (sep, kf, vf, default_key) = (
        a.key_separator.clone().map(String::into_bytes),
        a.key_format,
        a.value_format,
        key,
    );
    std::thread::spawn(move || read_lines(&tx, sep.as_deref(), kf, vf, default_key.as_deref()));

    let mut inflight = FuturesUnordered::new();
    let mut written: Vec<u64> = Vec::new();
    let mut failed: Vec<u64> = Vec::new();
    let mut first_failure: Option<(u64, String)> = None;
    let mut input_done = false;
    let mut read = 0u64;
    loop {
        let stop_reading = input_done || (first_failure.is_some() && !a.keep_going);
        if stop_reading && inflight.is_empty() {
            break;
        }
        let take_line = !stop_reading && inflight.len() < WINDOW;
        let next = futures::select! {
            r = inflight.select_next_some() => Some(Ok(r)),
            l = rx.recv().fuse_if(take_line) => {
                match l {
                    Ok(l) => Some(Err(l)),
                    Err(_) => { input_done = true; None }
                }
            }
        };
        let (input, outcome) = match next {
            None => continue,
            Some(Ok(done)) => done,
            // A line was read (or failed to decode): send it, or record its failure.
            Some(Err(Ok(input))) => {
                read = read.max(input.line);
                match producer.enqueue(build(&input)).await {
                    Ok(ack) => {
                        inflight.push(async move {
                            let outcome = match ack.await {
                                Ok(m) => Outcome::Written(m),
                                Err(e) => Outcome::Failed(format!("{:#}", explain(e, &input))),
                            };
                            (input, outcome)
                        });
                        continue;
                    }
                    Err(e) => {
                        let msg = format!("{:#}", explain(e, &input));
                        (input, Outcome::Failed(msg))
                    }
                }
            }
            Some(Err(Err(msg))) => {
                // `msg` already names its line.
                let line = msg
                    .strip_prefix("line ")
                    .and_then(|s| s.split(':').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(read + 1);
                read = read.max(line);
                (
                    Input {
                        line,
                        key: None,
                        value: None,
                    },
                    Outcome::Failed(msg),
                )
            }
        };
        match outcome {
            Outcome::Written(meta) => {
                written.push(input.line);
                if !a.quiet {
                    print_ack(&a, &input, meta);
                }
            }
            Outcome::Failed(msg) => {
                let msg = if msg.starts_with("line ") {
                    msg
                } else {
                    format!("line {}: {msg}", input.line)
                };
                eprintln!("{msg}");
                failed.push(input.line);
                if first_failure.as_ref().is_none_or(|(l, _)| input.line < *l) {
                    first_failure = Some((input.line, msg));
                }
            }
        }
    }
    producer.close().await;
    let n_written = written.len();
    if a.quiet {
        println!("{n_written} records sent to {}", a.at.topic);
    }
    let Some((line, _)) = first_failure else {
        return Ok(());
    };
    let n_failed = failed.len();
    let unsent = if input_done || a.keep_going {
        String::new()
    } else {
        format!("; stdin was not read past line {read}")
    };
    bail!(
        "{n_failed} of {} lines read failed, the first is line {line}{}: lines written: {}; not written: {}{unsent}",
        n_written + n_failed,
        if a.keep_going {
            ""
        } else {
            " (stopped there; --keep-going sends the rest)"
        },
        ranges(written),
        ranges(failed),
    );
}

fn print_ack(a: &ProduceArgs, input: &Input, meta: RecordMetadata) {
    let mut out = std::io::stdout().lock();
    let _ = match (a.format, input.line) {
        (Format::Plain, 0) => writeln!(out, "partition={} offset={}", meta.partition, meta.offset),
        (Format::Plain, n) => writeln!(
            out,
            "line={n} partition={} offset={}",
            meta.partition, meta.offset
        ),
        (Format::Json, n) => {
            let mut v = json!({
                "partition": meta.partition,
                "offset": meta.offset,
                "key": json_bytes(input.key.as_deref()),
                "value": json_bytes(input.value.as_deref()),
            });
            if n > 0 {
                v["line"] = json!(n);
            }
            writeln!(out, "{v}")
        }
    };
    let _ = out.flush();
}

/// A send error, with the record's size when the size is the problem.
fn explain(e: flume_client::Error, input: &Input) -> anyhow::Error {
    let size = input.value.as_ref().map_or(0, Vec::len) + input.key.as_ref().map_or(0, Vec::len);
    let too_large = e.code() == Some(flume_client::ErrorCode::RecordTooLarge);
    let e = describe(e);
    if too_large {
        e.context(format!("record of {size} bytes of key and value"))
    } else {
        e
    }
}

fn read_value_file(path: &std::path::Path) -> Result<Vec<u8>> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read --value-file {}", path.display()))?;
    if meta.len() > MAX_LINE_BYTES as u64 {
        bail!(
            "--value-file {} is {} bytes, more than any broker takes ({} at most)",
            path.display(),
            meta.len(),
            MAX_LINE_BYTES
        );
    }
    std::fs::read(path).with_context(|| format!("cannot read --value-file {}", path.display()))
}

/// Reads stdin line by line (any bytes; a line ends at `\n`, which is not part of it),
/// splits and decodes each, and sends it on until stdin ends or the receiver is gone.
fn read_lines(
    tx: &async_channel::Sender<Result<Input, String>>,
    sep: Option<&[u8]>,
    kf: InputFormat,
    vf: InputFormat,
    default_key: Option<&[u8]>,
) {
    let stdin = std::io::stdin();
    let mut r = stdin.lock();
    let mut buf = Vec::new();
    let mut line = 0u64;
    loop {
        buf.clear();
        line += 1;
        let limit = u64::try_from(MAX_LINE_BYTES).unwrap_or(u64::MAX) + 1;
        let item = match std::io::Read::take(&mut r, limit).read_until(b'\n', &mut buf) {
            Ok(0) => return,
            Err(e) => Err(format!("line {line}: cannot read stdin: {e}")),
            Ok(_) if buf.len() > MAX_LINE_BYTES && buf.last() != Some(&b'\n') => {
                // Skip the rest of the over-long line so the next line keeps its number.
                let mut rest = Vec::new();
                while matches!(r.read_until(b'\n', &mut rest), Ok(n) if n > 0)
                    && rest.last() != Some(&b'\n')
                {
                    rest.clear();
                }
                Err(format!(
                    "line {line}: longer than {MAX_LINE_BYTES} bytes, not sent"
                ))
            }
            Ok(_) => {
                if buf.last() == Some(&b'\n') {
                    buf.pop();
                }
                let (k, v) = split(&buf, sep);
                (|| {
                    let key = match k {
                        Some(k) => Some(kf.decode(k).map_err(|e| format!("key is {e}"))?),
                        None => default_key.map(<[u8]>::to_vec),
                    };
                    let value = vf.decode(v).map_err(|e| format!("value is {e}"))?;
                    Ok(Input {
                        line,
                        key,
                        value: Some(value),
                    })
                })()
                .map_err(|e: String| format!("line {line}: {e}"))
            }
        };
        let failed_read = matches!(&item, Err(m) if m.contains("cannot read stdin"));
        if tx.send_blocking(item).is_err() || failed_read {
            return;
        }
    }
}

/// A line's key (if it has one) and value: split at the first `sep` when given and present.
fn split<'a>(line: &'a [u8], sep: Option<&[u8]>) -> (Option<&'a [u8]>, &'a [u8]) {
    if let Some(sep) = sep.filter(|s| !s.is_empty()) {
        if let Some(at) = line.windows(sep.len()).position(|w| w == sep) {
            return (Some(&line[..at]), &line[at + sep.len()..]);
        }
    }
    (None, line)
}

/// `fuse()` when `on`, else a future that never completes (a disabled `select!` branch).
trait FuseIf: futures::Future + Sized {
    fn fuse_if(self, on: bool) -> futures::future::Fuse<Self> {
        use futures::FutureExt;
        if on {
            self.fuse()
        } else {
            futures::future::Fuse::terminated()
        }
    }
}

impl<F: futures::Future> FuseIf for F {}
