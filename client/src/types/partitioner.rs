//! Key routing for the producer over Kafka: Flume's FNV-1a by default (a
//! key lands on the partition it lands on with a Flume broker), or murmur2
//! as the Java client computes it (records co-partition with Java and
//! librdkafka-`murmur2_random` producers).

/// How the producer picks a keyed record's partition over Kafka (with
/// Flume's own protocol the broker routes, always by FNV-1a).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Partitioner {
    /// FNV-1a of the key modulo the partition count, as a Flume broker
    /// routes (`flume_protocol::partition_for_key`).
    #[default]
    Fnv1a,
    /// The Java client's: murmur2 of the key, its sign bit cleared,
    /// modulo the partition count.
    Murmur2,
}

impl std::str::FromStr for Partitioner {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fnv1a" => Ok(Partitioner::Fnv1a),
            "murmur2" => Ok(Partitioner::Murmur2),
            _ => Err(format!("partitioner must be fnv1a or murmur2, not {s:?}")),
        }
    }
}

impl Partitioner {
    /// The partition of `key` among `partitions`.
    pub fn partition(self, key: &[u8], partitions: u32) -> u32 {
        let n = partitions.max(1);
        match self {
            Partitioner::Fnv1a => flume_protocol::partition_for_key(key, n),
            Partitioner::Murmur2 => (murmur2(key) & 0x7fff_ffff) % n,
        }
    }
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`): 32-bit,
/// seed 0x9747b28c, little-endian 4-byte blocks.
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    let mut h = SEED ^ len;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if let Some(&b) = rest.first() {
        h ^= u32::from(b);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from the Java client's own test (`UtilsTest.testMurmur2`) and
    /// partitions as its default partitioner computes them.
    #[test]
    fn murmur2_matches_the_java_client() {
        let cases: [(&[u8], i32); 3] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
        ];
        for (key, want) in cases {
            assert_eq!(murmur2(key), want as u32, "{:?}", std::str::from_utf8(key));
        }
        let more: [(&[u8], i32); 3] = [
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, want) in more {
            assert_eq!(murmur2(key), want as u32, "{:?}", std::str::from_utf8(key));
        }
        assert_eq!(
            Partitioner::Murmur2.partition(b"foobar", 10),
            (murmur2(b"foobar") & 0x7fff_ffff) % 10
        );
        assert_eq!(
            Partitioner::Fnv1a.partition(b"user-1", 8),
            flume_protocol::partition_for_key(b"user-1", 8)
        );
    }
}
