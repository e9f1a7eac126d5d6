//! How records are printed.

use serde_json::json;

/// `plain` or `json` output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `partition=P offset=O key=K value=V`.
    Plain,
    /// One JSON object per line.
    Json,
}

/// Bytes as text for display: UTF-8 when valid, else `0x` and hex.
pub fn text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_owned(),
        Err(_) => {
            let mut s = String::with_capacity(2 + b.len() * 2);
            s.push_str("0x");
            for x in b {
                s.push_str(&format!("{x:02x}"));
            }
            s
        }
    }
}

/// A JSON field for bytes: a string when UTF-8, else `{"hex": "..."}`.
pub fn json_bytes(b: Option<&[u8]>) -> serde_json::Value {
    match b {
        None => serde_json::Value::Null,
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => json!(s),
            Err(_) => json!({ "hex": text(b).trim_start_matches("0x") }),
        },
    }
}

/// One consumed record as a line.
pub fn record_line(fmt: Format, partition: i32, r: &flume_client::Record) -> String {
    match fmt {
        Format::Plain => format!(
            "partition={partition} offset={} key={} value={}",
            r.offset,
            r.key.as_deref().map_or_else(|| "-".to_owned(), text),
            text(&r.value)
        ),
        Format::Json => {
            let headers: serde_json::Map<String, serde_json::Value> = r
                .headers
                .iter()
                .map(|h| (h.key.clone(), json_bytes(Some(&h.value))))
                .collect();
            json!({
                "partition": partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": json_bytes(r.key.as_deref()),
                "value": json_bytes(Some(&r.value)),
                "headers": headers,
            })
            .to_string()
        }
    }
}
