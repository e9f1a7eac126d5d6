//! `flume-cli data`: a stopped broker's data directory, read-only, through
//! the broker's own storage code (`flume_broker::storage::inspect`). Nothing
//! is written; a directory a broker holds is refused unless
//! `--force-read-only`.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;

use anyhow::{bail, Context, Result};
use flume_broker::storage::inspect::{self, DataDir, PartitionReport};
use flume_broker::storage::StorageError;
use flume_broker::BrokerConfig;

use crate::args::data::{DataCommand, DirArgs};
use crate::output::{record_fields, record_json, Format};

pub fn run(cmd: DataCommand) -> Result<()> {
    match cmd {
        DataCommand::Check { dir, verbose } => check(&open(&dir)?, verbose),
        DataCommand::Dump {
            dir,
            topic,
            partition,
            offset,
            count,
            format,
        } => dump(&open(&dir)?, &topic, partition, offset, count, format),
        DataCommand::Usage { dir } => usage(&open(&dir)?),
    }
}

fn open(a: &DirArgs) -> Result<DataDir> {
    let d = DataDir::open(&a.dir, a.force_read_only).map_err(|e| match e {
        StorageError::DataDirLocked { .. } => anyhow::anyhow!(
            "{e} (the data tools read a stopped broker's directory; --force-read-only reads it anyway)"
        ),
        e => anyhow::Error::new(e),
    })?;
    if let Some(pid) = d.holder() {
        let pid = pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        eprintln!(
            "warning: a broker{pid} holds {}: reading it anyway (--force-read-only); what it writes meanwhile may show as a torn tail",
            a.dir.display()
        );
    }
    Ok(d)
}

fn index_interval() -> u64 {
    BrokerConfig::new("").index_interval_bytes
}

fn check(d: &DataDir, verbose: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let mut problems = 0usize;
    let mut damaged_partitions = 0usize;
    writeln!(out, "checking {}", d.path().display())?;
    if let Some(p) = d.marker_problem() {
        writeln!(out, "problem: {p}")?;
        problems += 1;
    }
    let partitions = d.partitions()?;
    for p in &partitions {
        let r = inspect::check_partition(p, index_interval())
            .with_context(|| format!("cannot check {}", p.dir.display()))?;
        let n = r.all_problems().count();
        problems += n;
        damaged_partitions += usize::from(n > 0);
        writeln!(out, "{}", partition_line(&r, n))?;
        if verbose {
            for s in &r.segments {
                writeln!(
                    out,
                    "  segment {}: {} records, offsets {}..{}, {} bytes, index {} entries{}",
                    s.files.log.display(),
                    s.records,
                    s.files.base,
                    s.next_offset,
                    s.files.log_bytes,
                    s.index_entries,
                    if s.active { " (active)" } else { "" }
                )?;
            }
        }
        for s in &r.segments {
            for note in &s.notes {
                writeln!(out, "  note: {}: {note}", s.files.log.display())?;
            }
        }
        for other in &r.others {
            writeln!(
                out,
                "  note: {}: not a segment file: {other}",
                p.dir.display()
            )?;
        }
        for problem in r.all_problems() {
            writeln!(out, "  problem: {problem}")?;
        }
    }
    match flume_broker::check_offsets_file(&d.offsets_file())? {
        None => writeln!(
            out,
            "committed offsets: none (no {})",
            d.offsets_file().display()
        )?,
        Some(o) => {
            writeln!(
                out,
                "committed offsets: {} (version {}, {} bytes, {} records, {} committed offsets){}",
                o.path.display(),
                o.version,
                o.bytes,
                o.records,
                o.committed.len(),
                if o.damage.is_some() { "" } else { " ok" }
            )?;
            if let Some(p) = o.damage {
                writeln!(out, "  problem: {p}")?;
                problems += 1;
            }
        }
    }
    match flume_broker::check_share_file(&d.share_state_file())? {
        None => writeln!(
            out,
            "share-group state: none (no {})",
            d.share_state_file().display()
        )?,
        Some(r) => {
            writeln!(
                out,
                "share-group state: {} (version {}, {} bytes, {} records, {} share-partitions){}",
                r.path.display(),
                r.version,
                r.bytes,
                r.records,
                r.partitions.len(),
                if r.damage.is_some() { "" } else { " ok" }
            )?;
            if let Some(p) = r.damage {
                writeln!(out, "  problem: {p}")?;
                problems += 1;
            }
        }
    }
    writeln!(
        out,
        "{} partitions checked, {damaged_partitions} damaged, {problems} problems",
        partitions.len()
    )?;
    out.flush()?;
    if problems > 0 {
        bail!(
            "{} is damaged: {problems} problems (listed above)",
            d.path().display()
        );
    }
    Ok(())
}

fn partition_line(r: &PartitionReport, problems: usize) -> String {
    let bytes: u64 = r
        .segments
        .iter()
        .map(|s| s.files.log_bytes + s.files.index_bytes.unwrap_or(0))
        .sum();
    let verdict = match problems {
        0 => "ok".to_owned(),
        1 => "1 problem".to_owned(),
        n => format!("{n} problems"),
    };
    format!(
        "{}/{}: {} segments, offsets {}..{}, {bytes} bytes: {verdict}",
        r.partition.topic,
        r.partition.partition,
        r.segments.len(),
        r.log_start(),
        r.log_end()
    )
}

fn dump(
    d: &DataDir,
    topic: &str,
    partition: i32,
    offset: Option<u64>,
    count: Option<u64>,
    format: Format,
) -> Result<()> {
    let p = d.partition(topic, u32::try_from(partition)?)?;
    let from = match offset {
        Some(o) => o,
        None => inspect::log_start(&p.dir, &inspect::segments(&p.dir)?.0)?,
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut printed = 0u64;
    let mut failed: Option<std::io::Error> = None;
    let max = count.unwrap_or(u64::MAX);
    if max == 0 {
        return Ok(());
    }
    let result = inspect::read_records(&p, from, &mut |r| {
        let line = match format {
            Format::Plain => format!(
                "offset={} position={} timestamp={} size={} crc={:#010x} {}",
                r.record.offset,
                r.position,
                r.record.timestamp,
                r.size,
                r.crc,
                record_fields(&r.record)
            ),
            Format::Json => {
                let mut v = record_json(partition, &r.record);
                if let Some(o) = v.as_object_mut() {
                    o.insert("position".into(), r.position.into());
                    o.insert("size".into(), r.size.into());
                    o.insert("crc".into(), r.crc.into());
                    o.insert("segment".into(), file_name(&r.segment).into());
                }
                v.to_string()
            }
        };
        if let Err(e) = writeln!(out, "{line}") {
            failed = Some(e);
            return ControlFlow::Break(());
        }
        printed += 1;
        if printed >= max {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    out.flush()?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    let next = result.with_context(|| format!("stopped after {printed} records"))?;
    if printed == 0 {
        eprintln!("no records at or after offset {from} (the partition ends at {next})");
    }
    Ok(())
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn usage(d: &DataDir) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<32} {:>9} {:>8} {:>14} {:>20}",
        "TOPIC", "PARTITION", "SEGMENTS", "BYTES", "FIRST OFFSET"
    )?;
    let mut total = (0usize, 0u64);
    let mut topic_total: Option<(String, usize, u64)> = None;
    let flush_topic = |out: &mut dyn Write, t: &Option<(String, usize, u64)>| -> Result<()> {
        if let Some((name, segs, bytes)) = t {
            writeln!(out, "{name:<32} {:>9} {segs:>8} {bytes:>14}", "all")?;
        }
        Ok(())
    };
    for p in d.partitions()? {
        let (segs, _) = inspect::segments(&p.dir)?;
        let bytes: u64 = segs
            .iter()
            .map(|s| s.log_bytes + s.index_bytes.unwrap_or(0))
            .sum();
        let first = segs.first().map_or(0, |s| s.base);
        if topic_total.as_ref().is_some_and(|(t, _, _)| *t != p.topic) {
            flush_topic(&mut out, &topic_total)?;
            topic_total = None;
        }
        let t = topic_total.get_or_insert_with(|| (p.topic.clone(), 0, 0));
        t.1 += segs.len();
        t.2 += bytes;
        total.0 += segs.len();
        total.1 += bytes;
        writeln!(
            out,
            "{:<32} {:>9} {:>8} {bytes:>14} {first:>20}",
            p.topic,
            p.partition,
            segs.len()
        )?;
    }
    flush_topic(&mut out, &topic_total)?;
    let offsets = std::fs::metadata(d.offsets_file()).map_or(0, |m| m.len());
    writeln!(
        out,
        "{:<32} {:>9} {:>8} {offsets:>14}",
        "(committed offsets)", "", ""
    )?;
    writeln!(
        out,
        "{:<32} {:>9} {:>8} {:>14}",
        "total",
        "",
        total.0,
        total.1 + offsets
    )?;
    Ok(())
}
