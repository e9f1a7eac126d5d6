//! Encoding and decoding a PRODUCE of 1000 records of 100 bytes. `cargo bench --bench protocol`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flume_protocol::messages::{Decode, Encode};
use flume_protocol::{record, ProduceEntry, ProduceRequest};

/// Encodes 1000 keyed records of 100 bytes into a PRODUCE request payload.
fn encoded_request() -> Vec<u8> {
    let value = [b'x'; 100];
    let mut records = Vec::with_capacity(1000 * 140);
    for i in 0..1000u32 {
        record::encode(&mut records, 0, 1, Some(&i.to_be_bytes()), &value, &[]);
    }
    let req = ProduceRequest {
        entries: vec![ProduceEntry {
            topic: "bench".into(),
            partition: -1,
            records: records.into(),
        }],
    };
    let mut buf = Vec::with_capacity(150 * 1000);
    req.encode(&mut buf);
    buf
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("produce_1000x100B");
    g.throughput(Throughput::Elements(1000));
    g.bench_function("encode_records_and_request", |b| b.iter(encoded_request));
    let buf = encoded_request();
    g.bench_function("decode_request_and_validate_crcs", |b| {
        b.iter(|| {
            let r = ProduceRequest::decode_exact(&buf).unwrap();
            record::validate_batch(&r.entries[0].records, u64::MAX).unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
