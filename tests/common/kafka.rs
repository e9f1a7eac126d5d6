//! One Kafka connection speaking raw requests, encoded and decoded with the
//! `kafka-protocol` crate (the codec the broker uses, driven from the other
//! side): what the end-to-end tests of the Kafka listener call.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

/// A Kafka connection: one request at a time, each answered before the next.
pub struct Kc {
    pub s: TcpStream,
    correlation: i32,
}

impl Kc {
    /// Connects, with a 5 s read timeout.
    pub fn connect(addr: &str) -> Result<Self> {
        let s = TcpStream::connect(addr).context("connect")?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(Kc { s, correlation: 0 })
    }

    /// Sends `req` at `version` and reads its response, checking the
    /// correlation id and that nothing trails it.
    pub fn call<R: Request>(&mut self, version: i16, req: &R) -> Result<R::Response> {
        let key = ApiKey::try_from(R::KEY).map_err(|()| anyhow::anyhow!("api key"))?;
        self.correlation += 1;
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("e2e")))
            .encode(&mut buf, key.request_header_version(version))?;
        req.encode(&mut buf, version)?;
        let size = i32::try_from(buf.len() - 4)?;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        self.s.write_all(&buf)?;
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len).context("response size")?;
        let mut body = vec![0u8; usize::try_from(i32::from_be_bytes(len))?];
        self.s.read_exact(&mut body).context("response body")?;
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, key.response_header_version(version))?;
        ensure!(header.correlation_id == self.correlation, "correlation id");
        let resp = R::Response::decode(&mut body, version)?;
        ensure!(!body.has_remaining(), "trailing bytes in the response");
        Ok(resp)
    }
}
