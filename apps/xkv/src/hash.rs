//! MemC3's optimistic cuckoo hash, single-writer: buckets of four slots, each a one-byte tag
//! (a fingerprint of the key's hash) and an item handle; two candidate buckets per key, the
//! second derived from the first and the tag alone (partial-key cuckoo hashing: Fan, Andersen and
//! Kaminsky, "MemC3", NSDI 2013), so displacing an item never reads its key. Inserts that find
//! both buckets full search a bounded breadth-first cuckoo path to an empty slot. Buckets live in
//! X-Mem under the tag "hash" (`XSlice` segments, each at most half a region).
//!
//! Concurrency: none here. MemC3's version counters let readers run beside one writer; this table
//! is behind the store's single lock (the server takes it per command), so it needs none.

use anyhow::{ensure, Result};
use pmkit_hmep::probe::Probe;
use pmkit_xmem::{Tag, XMem, XSlice};

/// Slots per bucket (MemC3's 4-way set-associative buckets).
pub const WAYS: usize = 4;
/// Most buckets one cuckoo path search visits (MemC3 bounds its search the same way).
pub const MAX_BFS: usize = 500;
/// Longest cuckoo path (displacements).
pub const MAX_DEPTH: usize = 5;

/// The hash's structure index in every trace.
pub const S_HASH: usize = 0;

#[derive(Clone, Copy, Default)]
#[repr(C)]
pub struct Bucket {
    tags: [u8; WAYS],
    _pad: u32,
    /// Item handles; 0 = empty.
    items: [u64; WAYS],
}

/// Where a key's entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub bucket: usize,
    pub way: usize,
}

/// A key's 64-bit hash (FNV-1a, then a finaliser so the low bits mix).
pub fn hash_key(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

/// The tag of a hash: its top byte, never 0 (a zero tag could not tell an empty slot from a
/// full one if handles were ever cleared without tags).
pub fn tag_of(h: u64) -> u8 {
    ((h >> 56) as u8).max(1)
}

pub struct Cuckoo<'a> {
    segs: Vec<XSlice<'a, Bucket>>,
    seg_shift: u32,
    mask: usize,
    len: usize,
}

impl<'a> Cuckoo<'a> {
    /// A table of `buckets` (a power of two) under tag `t`, each segment at most `seg_bytes`.
    pub fn new(x: &'a XMem, t: Tag, buckets: usize, seg_bytes: usize) -> Result<Cuckoo<'a>> {
        ensure!(
            buckets.is_power_of_two() && buckets >= 2,
            "buckets {buckets}"
        );
        let per = (seg_bytes / std::mem::size_of::<Bucket>())
            .next_power_of_two()
            .max(2)
            / 2;
        let per = per.min(buckets);
        let segs = (0..buckets / per)
            .map(|_| XSlice::new_in(x, t, per, Bucket::default()))
            .collect::<pmkit_xmem::Result<Vec<_>>>()?;
        Ok(Cuckoo {
            segs,
            seg_shift: per.trailing_zeros(),
            mask: buckets - 1,
            len: 0,
        })
    }

    pub fn buckets(&self) -> usize {
        self.mask + 1
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> usize {
        self.buckets() * std::mem::size_of::<Bucket>()
    }

    #[inline]
    fn b(&self, i: usize) -> &Bucket {
        &self.segs[i >> self.seg_shift][i & ((1 << self.seg_shift) - 1)]
    }

    #[inline]
    fn b_mut(&mut self, i: usize) -> &mut Bucket {
        let m = (1 << self.seg_shift) - 1;
        &mut self.segs[i >> self.seg_shift][i & m]
    }

    /// The two candidate buckets of hash `h`.
    #[inline]
    pub fn buckets_of(&self, h: u64) -> [usize; 2] {
        let i1 = h as usize & self.mask;
        [i1, self.alt(i1, tag_of(h))]
    }

    /// The other bucket of an entry with tag `tag` in bucket `i` (an involution).
    #[inline]
    fn alt(&self, i: usize, tag: u8) -> usize {
        (i ^ (tag as usize).wrapping_mul(0x5bd1_e995)) & self.mask
    }

    /// Bucket `bucket`'s handles whose tag is `tag` (0 elsewhere). Each matching handle is
    /// loaded as a pointer: `addr(handle)` is its item's address (what the classifier chases).
    #[inline]
    pub fn matches<P: Probe>(
        &self,
        bucket: usize,
        tag: u8,
        p: &mut P,
        addr: impl Fn(u64) -> u64,
    ) -> [u64; WAYS] {
        let b = self.b(bucket);
        p.touch(S_HASH, &b.tags);
        let mut out = [0; WAYS];
        for (way, o) in out.iter_mut().enumerate() {
            if b.tags[way] == tag && b.items[way] != 0 {
                *o = b.items[way];
                p.load_ptr(S_HASH, &b.items[way], addr(*o));
            }
        }
        out
    }

    /// The slot holding handle `it` among `h`'s buckets.
    pub fn find_handle(&self, h: u64, it: u64) -> Option<Slot> {
        self.buckets_of(h).into_iter().find_map(|bucket| {
            let b = self.b(bucket);
            (0..WAYS)
                .find(|&w| b.items[w] == it)
                .map(|way| Slot { bucket, way })
        })
    }

    pub fn get(&self, s: Slot) -> u64 {
        self.b(s.bucket).items[s.way]
    }

    /// Point slot `s` (holding an entry) at another handle of the same key.
    pub fn replace<P: Probe>(&mut self, s: Slot, it: u64, p: &mut P) {
        assert!(it != 0 && self.get(s) != 0);
        let b = self.b_mut(s.bucket);
        b.items[s.way] = it;
        p.store(S_HASH, &b.items[s.way]);
    }

    pub fn clear<P: Probe>(&mut self, s: Slot, p: &mut P) {
        let b = self.b_mut(s.bucket);
        assert!(b.items[s.way] != 0, "clearing an empty slot");
        b.items[s.way] = 0;
        b.tags[s.way] = 0;
        p.store(S_HASH, &b.tags);
        self.len -= 1;
    }

    /// Insert handle `it` for a key of hash `h` (not in the table). Returns false when both
    /// buckets are full and no cuckoo path of at most [`MAX_DEPTH`] displacements within
    /// [`MAX_BFS`] buckets ends in an empty slot: the caller evicts one of the eight residents
    /// ([`Cuckoo::resident`]) and tries again.
    pub fn insert<P: Probe>(&mut self, h: u64, it: u64, p: &mut P) -> bool {
        assert!(it != 0);
        let tag = tag_of(h);
        let Some(s) = self.free_slot(h, p) else {
            return false;
        };
        let b = self.b_mut(s.bucket);
        b.tags[s.way] = tag;
        b.items[s.way] = it;
        p.store(S_HASH, &b.items[s.way]);
        self.len += 1;
        true
    }

    /// One of the eight entries in `h`'s buckets, chosen by `pick` (for eviction when full).
    pub fn resident(&self, h: u64, pick: usize) -> (Slot, u64) {
        let bs = self.buckets_of(h);
        let bucket = bs[(pick / WAYS) % 2];
        let way = pick % WAYS;
        let s = Slot { bucket, way };
        (s, self.get(s))
    }

    /// An empty slot in one of `h`'s buckets, making one by a cuckoo path if needed.
    fn free_slot<P: Probe>(&mut self, h: u64, p: &mut P) -> Option<Slot> {
        let start = self.buckets_of(h);
        for bucket in start {
            let b = self.b(bucket);
            p.touch(S_HASH, &b.tags);
            if let Some(way) = (0..WAYS).find(|&w| b.items[w] == 0) {
                return Some(Slot { bucket, way });
            }
        }
        // Breadth-first search: nodes are (bucket, parent node, way in the parent, depth).
        let mut nodes: Vec<(usize, usize, usize, usize)> =
            start.iter().map(|&b| (b, usize::MAX, 0, 0)).collect();
        let mut head = 0;
        let mut found = None;
        'search: while head < nodes.len() && nodes.len() < MAX_BFS {
            let (bucket, _, _, depth) = nodes[head];
            let b = *self.b(bucket);
            p.touch(S_HASH, self.b(bucket));
            for way in 0..WAYS {
                if b.items[way] == 0 {
                    found = Some((head, way));
                    break 'search;
                }
            }
            if depth < MAX_DEPTH {
                for way in 0..WAYS {
                    nodes.push((self.alt(bucket, b.tags[way]), head, way, depth + 1));
                }
            }
            head += 1;
        }
        let (mut node, mut empty_way) = found?;
        // Walk back: move the parent's entry into the empty slot, which frees the parent's slot.
        while nodes[node].1 != usize::MAX {
            let (bucket, parent, pway, _) = nodes[node];
            let pb = nodes[parent].0;
            let (t, it) = {
                let b = self.b(pb);
                (b.tags[pway], b.items[pway])
            };
            // A path through the same bucket twice may have been changed by a move below it:
            // then stop (every move made so far kept its entry in one of its two buckets).
            if it == 0 || self.alt(pb, t) != bucket || self.b(bucket).items[empty_way] != 0 {
                return None;
            }
            let dst = self.b_mut(bucket);
            dst.tags[empty_way] = t;
            dst.items[empty_way] = it;
            p.store(S_HASH, &dst.items[empty_way]);
            let src = self.b_mut(pb);
            src.tags[pway] = 0;
            src.items[pway] = 0;
            p.store(S_HASH, &src.items[pway]);
            node = parent;
            empty_way = pway;
        }
        Some(Slot {
            bucket: nodes[node].0,
            way: empty_way,
        })
    }

    /// Empty every slot.
    pub fn clear_all(&mut self) {
        for s in &mut self.segs {
            s.fill(Bucket::default());
        }
        self.len = 0;
    }

    /// Every handle in the table.
    pub fn handles(&self) -> impl Iterator<Item = u64> + '_ {
        self.segs
            .iter()
            .flat_map(|s| s.iter())
            .flat_map(|b| b.items.into_iter())
            .filter(|&i| i != 0)
    }
}
