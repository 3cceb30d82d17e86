//! The slot of a Redis Cluster key, by the cluster specification's rule. A pure function of the
//! key with nothing else of a cluster in it, so that a node's coalesced batch (`batch.rs`) can
//! split its operations per slot without reaching into the cluster connection (`cluster.rs`),
//! which itself builds on the node.

/// Slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The slot of `key`: CRC16 (XMODEM) of its hash tag — the text between the first `{` and the
/// next `}` when that is not empty — or of the whole key, modulo 16384 (as `CLUSTER KEYSLOT`).
pub fn keyslot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|b| *b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|b| *b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    crc16_xmodem(hashed) % SLOTS
}

fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for byte in data {
        crc ^= (*byte as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyslot_matches_the_cluster_spec() {
        // Redis Cluster specification: CRC16 of "123456789" is 0x31C3.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        // What `CLUSTER KEYSLOT` answers on the stack's cluster.
        assert_eq!(keyslot("foo"), 12182);
        assert_eq!(keyslot("{user1000}.following"), keyslot("user1000"));
        assert_eq!(keyslot("a{}b"), crc16_xmodem(b"a{}b") % SLOTS);
        assert_eq!(keyslot("fence:{lock:order:7}"), keyslot("lock:order:7"));
    }
}
