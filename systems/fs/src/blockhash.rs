//! A hasher for block numbers, and the sets and maps keyed by them.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A hasher for block numbers (a transaction's fresh set and staged images, the shared blocks'
/// counts): one multiply, no SipHash. Block numbers come from this process's allocator or from
/// the pool's own trees, which the walk checked, not from a caller, so flooding is no concern;
/// a preallocating append inserts up to 128 of them in one transaction, and freeing a cloned
/// 256 MiB file looks up 65,536.
#[derive(Default)]
pub(crate) struct BlockHasher(u64);

impl Hasher for BlockHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        // Fibonacci hashing: the high bits, which hashbrown uses, depend on every bit of `v`
        self.0 = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Block numbers.
pub(crate) type BlockSet = HashSet<u64, BuildHasherDefault<BlockHasher>>;
/// Values by block number.
pub(crate) type BlockMap<V> = HashMap<u64, V, BuildHasherDefault<BlockHasher>>;
