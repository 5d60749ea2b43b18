//! A tree pointer word as stored in a tree node: the block number in bits 0..40 (a pool has at
//! most 2^40 blocks), the huge-block flag in bit 63, and from format 7 a check in bits 40..63.
//!
//! The check ties the pointer to the slot that holds it: 22 bits of the CRC32C of the pointer
//! and the slot's byte offset, with bit 62 always set. So a hole is a non-zero word, and a
//! zeroed node, a flipped bit, or a node copied over another (its words checked against the
//! wrong offsets) fails the check instead of being read as holes or as someone else's blocks.
//! The check travels in the pointer's own 8-byte store: it costs no fence and no log entry.
//!
//! Readers mask the check off ([`value`]): in formats before 7 the bits are zero, so one mask
//! serves every format. The walk (every walking mount, `check`, and each inode's first use
//! after a checkpoint mount) holds every word to its check ([`open`]), as the other metadata
//! checksums are held.

/// The flag of a huge-block pointer.
pub(crate) const HUGE: u64 = 1 << 63;
/// The bits of a word that are the pointer: the block number and the huge flag.
pub(crate) const VALUE: u64 = HUGE | ((1 << 40) - 1);
/// The check's place in the word.
const SHIFT: u32 = 40;
/// Set in every sealed word's check, so no all-zero word is ever valid.
const MARK: u64 = 1 << 22;
/// The CRC bits kept.
const CRC_BITS: u64 = MARK - 1;
const _: () = assert!((MARK | CRC_BITS) << SHIFT & VALUE == 0 && (MARK << SHIFT) == 1 << 62);

/// The pointer a stored word holds (0: a hole), in any format.
#[inline]
pub(crate) fn value(word: u64) -> u64 {
    word & VALUE
}

/// The word that stores `ptr` at byte offset `at` (format 7).
#[inline]
pub(crate) fn seal(ptr: u64, at: usize) -> u64 {
    debug_assert_eq!(
        ptr & !VALUE,
        0,
        "pointer {ptr:#x} has bits in the check's place"
    );
    debug_assert_eq!(at % 8, 0, "slot offset {at} not a word");
    ptr | check(ptr, at) << SHIFT
}

/// The pointer stored at `at`, if `word` carries its check (format 7).
#[inline]
pub(crate) fn open(word: u64, at: usize) -> Option<u64> {
    let ptr = value(word);
    (word == seal(ptr, at)).then_some(ptr)
}

/// The word for `ptr` at `at` in a pool of this kind: sealed (format 7) or bare.
#[inline]
pub(crate) fn store(checked: bool, ptr: u64, at: usize) -> u64 {
    if checked {
        seal(ptr, at)
    } else {
        ptr
    }
}

/// The word a format 7 pool stores for pointer `ptr` in the tree-node slot at byte offset `at`:
/// what a tool that edits a tree by hand must store, and how tests store a wrong pointer a bug
/// would store, which the checks after this one must catch.
pub fn seal_pointer(ptr: u64, at: usize) -> u64 {
    assert_eq!(
        ptr & !VALUE,
        0,
        "pointer {ptr:#x} has bits in the check's place"
    );
    seal(ptr, at)
}

fn check(ptr: u64, at: usize) -> u64 {
    MARK | (crc(ptr, at) as u64 & CRC_BITS)
}

/// CRC32C of the pointer and the offset, 8 bytes each, little-endian.
fn crc(ptr: u64, at: usize) -> u32 {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&ptr.to_le_bytes());
    b[8..].copy_from_slice(&(at as u64).to_le_bytes());
    crc32c::crc32c(&b)
}

/// Slots in a node.
const SLOTS: usize = crate::layout::BLOCK / 8;

/// The words of a new node at byte offset `base` (a block's) holding `ptrs` and then holes, each
/// sealed: what [`seal`] gives slot by slot, in a tenth of the time. CRC is affine in its
/// input, so `crc(p, base + 8s)` is `crc(0, base) ^ L(0, 8s) ^ L(p, 0)`, where `L(x)` is
/// `crc(x) ^ crc(0, 0)`: one CRC for the node, a table for the slots, and one CRC per pointer
/// that is not a hole. (A node's slot offsets never carry into its block's bits.)
pub(crate) fn seal_node(base: usize, ptrs: &[u64]) -> Vec<u64> {
    static SLOT_TERMS: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();
    assert!(base.is_multiple_of(crate::layout::BLOCK) && ptrs.len() <= SLOTS);
    let zero = crc(0, 0);
    let terms = SLOT_TERMS.get_or_init(|| (0..SLOTS).map(|s| crc(0, s * 8) ^ zero).collect());
    let node = crc(0, base);
    (0..SLOTS)
        .map(|s| {
            let p = ptrs.get(s).copied().unwrap_or(0);
            debug_assert_eq!(p & !VALUE, 0);
            let lp = if p == 0 { 0 } else { crc(p, 0) ^ zero };
            let c = node ^ terms[s] ^ lp;
            p | (MARK | c as u64 & CRC_BITS) << SHIFT
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_word_opens_at_its_slot_only() {
        for (ptr, at) in [(0, 4096), (7, 8 * 4096 + 8), (HUGE | 512, 99 * 4096 + 4088)] {
            let w = seal(ptr, at);
            assert_ne!(w, 0);
            assert_eq!(value(w), ptr);
            assert_eq!(open(w, at), Some(ptr));
            assert_eq!(open(w, at + 8), None, "the same word in the next slot");
            assert_eq!(open(w, at + 4096), None, "the same word a page on");
        }
        assert_eq!(open(0, 4096), None, "a zeroed word is no hole");
        assert_eq!(
            store(false, 5, 4096),
            5,
            "formats before 7 store the bare pointer"
        );
    }

    #[test]
    fn a_node_sealed_at_once_is_each_word_sealed() {
        let ptrs: Vec<u64> = (0..300)
            .map(|i| if i % 3 == 0 { 0 } else { 1000 + i })
            .collect();
        for base in [0, 4096, 123_456 * 4096, (1 << 39) * 4096] {
            let words = seal_node(base, &ptrs);
            for (s, &w) in words.iter().enumerate() {
                let p = ptrs.get(s).copied().unwrap_or(0);
                assert_eq!(w, seal(p, base + s * 8), "slot {s} at {base}");
            }
        }
        assert_eq!(seal_node(4096, &[HUGE | 512])[0], seal(HUGE | 512, 4096));
    }

    /// CRC is linear: whether flipping some bits of the pointer goes unseen depends on the bits
    /// alone, not on the pointer or the slot. So trying every one- and two-bit flip of the
    /// pointer's bits at one slot shows that none goes unseen anywhere.
    #[test]
    fn every_flip_of_one_or_two_bits_fails_the_check() {
        let bits: Vec<u32> = (0..64).filter(|b| VALUE >> b & 1 == 1).collect();
        let (ptr, at) = (0x12_3456_789a, 777 * 4096 + 40);
        let w = seal(ptr, at);
        for (i, &a) in bits.iter().enumerate() {
            assert_eq!(open(w ^ 1 << a, at), None, "bit {a}");
            for &b in &bits[i + 1..] {
                assert_eq!(open(w ^ 1 << a ^ 1 << b, at), None, "bits {a} and {b}");
            }
        }
        // and any flip of the check's own bits
        for b in SHIFT..63 {
            assert_eq!(open(w ^ 1 << b, at), None, "check bit {b}");
        }
    }
}
