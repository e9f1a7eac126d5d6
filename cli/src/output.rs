//! How records are printed, and how input bytes are decoded.

use serde_json::json;

/// `plain` or `json` output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `name=value` fields on one line (see the command's --help for the fields).
    Plain,
    /// One JSON object per line.
    Json,
}

/// How the bytes of a key or value are written on the input side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InputFormat {
    /// The bytes as given (any bytes, not only UTF-8).
    Text,
    /// Hexadecimal digits, two per byte (an optional `0x` prefix is allowed).
    Hex,
    /// Standard base64 (padding optional).
    Base64,
}

impl InputFormat {
    /// Decodes `input` as this format.
    pub fn decode(self, input: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            InputFormat::Text => Ok(input.to_vec()),
            InputFormat::Hex => decode_hex(input),
            InputFormat::Base64 => decode_base64(input),
        }
    }
}

fn decode_hex(input: &[u8]) -> Result<Vec<u8>, String> {
    let digits = input.strip_prefix(b"0x").unwrap_or(input);
    if !digits.len().is_multiple_of(2) {
        return Err(format!(
            "not hex: an odd number of digits ({})",
            digits.len()
        ));
    }
    let nibble = |i: usize| -> Result<u8, String> {
        let c = digits[i];
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(format!(
                "not hex: byte {} is {:?}",
                i + 1,
                char::from(c).escape_default().to_string()
            )),
        }
    };
    (0..digits.len() / 2)
        .map(|i| Ok(nibble(2 * i)? << 4 | nibble(2 * i + 1)?))
        .collect()
}

fn decode_base64(input: &[u8]) -> Result<Vec<u8>, String> {
    let body = match input.iter().position(|&c| c == b'=') {
        Some(p) => {
            let pad = &input[p..];
            if pad.len() > 2 || pad.iter().any(|&c| c != b'=') || !input.len().is_multiple_of(4) {
                return Err("not base64: misplaced '=' padding".to_owned());
            }
            &input[..p]
        }
        None => input,
    };
    if body.len() % 4 == 1 {
        return Err(format!(
            "not base64: {} characters cannot encode whole bytes",
            body.len()
        ));
    }
    let mut out = Vec::with_capacity(body.len() / 4 * 3 + 2);
    let mut acc = 0u32;
    let mut bits = 0u32;
    for (i, &c) in body.iter().enumerate() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => {
                return Err(format!(
                    "not base64: character {} is {:?}",
                    i + 1,
                    char::from(c).escape_default().to_string()
                ))
            }
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8); // ok: masked to one byte
        }
    }
    Ok(out)
}

/// Bytes as lowercase hex with a `0x` prefix.
pub fn hex(b: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(2 + b.len() * 2);
    s.push_str("0x");
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// Which characters force a field into quotes, besides control characters.
#[derive(Clone, Copy)]
enum Field {
    /// The last field of a line: spaces inside are fine.
    Last,
    /// A field followed by others: no whitespace.
    Word,
    /// A header key or value: no whitespace, `,` or `=`.
    Header,
}

/// One key, value or header part in plain output, so that every case reads differently:
/// absent is `-`, empty is `""`, bytes that are not UTF-8 are `0x…` hex, text that could
/// be mistaken for one of those (or has control characters, quotes or, where fields
/// follow, whitespace) is double-quoted with escapes, and other text is printed as is.
fn plain_field(b: Option<&[u8]>, kind: Field) -> String {
    let Some(b) = b else {
        return "-".to_owned();
    };
    let Ok(s) = std::str::from_utf8(b) else {
        return hex(b);
    };
    let bare = !s.is_empty()
        && s != "-"
        && !s.starts_with("0x")
        && !s.starts_with('"')
        && s.trim() == s
        && !s.chars().any(|c| {
            c.is_control()
                || c == '\\'
                || match kind {
                    Field::Last => false,
                    Field::Word => c.is_whitespace(),
                    Field::Header => c.is_whitespace() || c == ',' || c == '=',
                }
        });
    if bare {
        return s.to_owned();
    }
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            c if c.is_control() => q.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// A JSON field for bytes: a string when UTF-8, else `{"hex": "..."}`.
pub fn json_bytes(b: Option<&[u8]>) -> serde_json::Value {
    match b {
        None => serde_json::Value::Null,
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => json!(s),
            Err(_) => json!({ "hex": hex(b).trim_start_matches("0x") }),
        },
    }
}

/// One consumed record as a line.
pub fn record_line(fmt: Format, partition: i32, r: &flume_client::Record) -> String {
    match fmt {
        Format::Plain => format!(
            "partition={partition} offset={} {}",
            r.offset,
            record_fields(r)
        ),
        Format::Json => record_json(partition, r).to_string(),
    }
}

/// The plain fields of a record after its place: `key=K [headers=...] value=V`.
pub fn record_fields(r: &flume_client::Record) -> String {
    let mut line = format!("key={}", plain_field(r.key.as_deref(), Field::Word));
    if !r.headers.is_empty() {
        line.push_str(" headers=");
        for (i, h) in r.headers.iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            line.push_str(&plain_field(Some(h.key.as_bytes()), Field::Header));
            line.push('=');
            line.push_str(&plain_field(h.value.as_deref(), Field::Header));
        }
    }
    line.push_str(" value=");
    line.push_str(&plain_field(r.value.as_deref(), Field::Last));
    line
}

/// A record as the JSON object `--format json` prints.
pub fn record_json(partition: i32, r: &flume_client::Record) -> serde_json::Value {
    let headers: serde_json::Map<String, serde_json::Value> = r
        .headers
        .iter()
        .map(|h| (h.key.clone(), json_bytes(h.value.as_deref())))
        .collect();
    json!({
        "partition": partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": json_bytes(r.key.as_deref()),
        "value": json_bytes(r.value.as_deref()),
        "headers": headers,
    })
}

pub fn ranges(mut lines: Vec<u64>) -> String {
    lines.sort_unstable();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let start = lines[i];
        let mut end = start;
        while i + 1 < lines.len() && lines[i + 1] == end + 1 {
            i += 1;
            end = lines[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    if out.is_empty() {
        "none".to_owned()
    } else {
        out.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_fields_keep_every_case_apart() {
        assert_eq!(plain_field(None, Field::Word), "-");
        assert_eq!(plain_field(Some(b"-"), Field::Word), "\"-\"");
        assert_eq!(plain_field(Some(b""), Field::Word), "\"\"");
        assert_eq!(plain_field(Some(b"0xffee"), Field::Last), "\"0xffee\"");
        assert_eq!(plain_field(Some(&[0xff, 0xee]), Field::Last), "0xffee");
        assert_eq!(
            plain_field(Some(b"a\nb\x1b[31m"), Field::Last),
            "\"a\\nb\\u{1b}[31m\""
        );
        assert_eq!(plain_field(Some(b"a b"), Field::Last), "a b");
        assert_eq!(plain_field(Some(b"a b"), Field::Word), "\"a b\"");
        assert_eq!(plain_field(Some(b"user-123"), Field::Word), "user-123");
    }

    #[test]
    fn input_formats_decode_and_refuse_with_reasons() {
        assert_eq!(
            InputFormat::Hex.decode(b"0x00ff10").unwrap(),
            vec![0, 255, 16]
        );
        assert!(InputFormat::Hex.decode(b"abc").unwrap_err().contains("odd"));
        assert!(InputFormat::Hex
            .decode(b"zz")
            .unwrap_err()
            .contains("byte 1"));
        assert_eq!(InputFormat::Base64.decode(b"aGk=").unwrap(), b"hi");
        assert_eq!(InputFormat::Base64.decode(b"aGk").unwrap(), b"hi");
        assert_eq!(InputFormat::Base64.decode(b"AP8=").unwrap(), vec![0, 255]);
        assert_eq!(InputFormat::Base64.decode(b"").unwrap(), b"");
        assert!(InputFormat::Base64.decode(b"a").is_err());
        assert!(InputFormat::Base64.decode(b"a=bc").is_err());
        assert!(InputFormat::Base64.decode(b"a*bc").is_err());
    }

    #[test]
    fn line_ranges() {
        assert_eq!(ranges(vec![1, 2, 3, 4, 6, 9, 10]), "1-4, 6, 9-10");
        assert_eq!(ranges(vec![]), "none");
    }
}
