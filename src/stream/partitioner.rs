//! Which partition a producer put a keyed message in, computed the way the producer computes it,
//! so the console reads one partition of a topic instead of all of them.
//!
//! Two partitioners cover the producers of this pattern: librdkafka's default
//! (`consistent_random`: CRC-32 of the key, modulo the partition count, for a non-empty key —
//! what idemguard's own producers use) and the Java client's (`murmur2`: Kafka's MurmurHash2 of
//! the key, made positive, modulo the partition count — librdkafka's `murmur2_random`). A team
//! whose producers use anything else sets `none` and every partition is read.

/// A configuration value (`kafka.partitioner`), defined with the configuration; what it
/// computes is here, with the hashes.
pub use crate::config::Partitioner;

impl Partitioner {
    /// The partition of `key` among `partitions`; `None` when it cannot be computed (an empty
    /// key goes to a random partition under both partitioners, and `Partitioner::None`).
    pub fn partition_of(self, key: &[u8], partitions: i32) -> Option<i32> {
        if key.is_empty() || partitions <= 0 {
            return None;
        }
        let n = partitions as u32;
        match self {
            Partitioner::ConsistentRandom => Some((crc32(key) % n) as i32),
            Partitioner::Murmur2Random => Some(((murmur2(key) & 0x7fff_ffff) % n) as i32),
            Partitioner::None => None,
        }
    }
}

/// CRC-32 (IEEE 802.3, reflected, as zlib and librdkafka's `rd_crc32`), bit by bit: keys are a
/// few dozen bytes and a trace computes a handful of them.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xedb8_8320 & mask);
        }
    }
    !crc
}

/// Kafka's MurmurHash2 (`org.apache.kafka.common.utils.Utils.murmur2`, seed 0x9747b28c).
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
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

    /// Kafka's own vectors (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java,
    /// `testMurmur2`), as Java's signed ints.
    #[test]
    fn murmur2_matches_kafkas_test_vectors() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            (b"abc", 479470107),
        ];
        for (key, java) in cases {
            assert_eq!(
                murmur2(key) as i32,
                java,
                "{}",
                String::from_utf8_lossy(key)
            );
        }
    }

    /// The CRC-32 check value and zlib's answers for short inputs.
    #[test]
    fn crc32_matches_the_ieee_check_values() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"a"), 0xe8b7_be43);
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414f_a339
        );
    }

    /// Java's partition: the hash made positive by masking (not `abs`), then modulo.
    #[test]
    fn a_partition_is_the_positive_hash_modulo_the_count() {
        // murmur2("21") = -973932308 → & 0x7fffffff = 1173551340 → % 3 = 0, % 7 = 3
        assert_eq!(Partitioner::Murmur2Random.partition_of(b"21", 3), Some(0));
        assert_eq!(Partitioner::Murmur2Random.partition_of(b"21", 7), Some(3));
        // crc32("123456789") = 3421780262 → % 3 = 2, % 10 = 2
        assert_eq!(
            Partitioner::ConsistentRandom.partition_of(b"123456789", 3),
            Some(2)
        );
        assert_eq!(Partitioner::ConsistentRandom.partition_of(b"", 3), None);
        assert_eq!(Partitioner::None.partition_of(b"21", 3), None);
    }
}
