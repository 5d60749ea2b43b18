//! One slab class: items of one size carved from 1 MiB chunks (memcached's slab pages), each
//! chunk an `XSlice<u8>` in the class's own X-Mem tag, so all of a class's items live in that
//! tag's regions. Free slots on a stack; CLOCK (one reference bit per slot, as MemC3 replaced
//! memcached's LRU lists with) picks a victim when the class may not grow.

use anyhow::{ensure, Result};
use pmkit_xmem::{Tag, XMem, XSlice};

/// Bytes of one slab chunk (memcached's page size).
pub const CHUNK: usize = 1 << 20;

const FREE: u8 = 0;
const LIVE: u8 = 1;
const REFERENCED: u8 = 2;

pub struct Class<'a> {
    pub size: usize,
    tag: Tag,
    chunks: Vec<XSlice<'a, u8>>,
    per_chunk: usize,
    state: Vec<u8>,
    free: Vec<u32>,
    hand: usize,
    pub live: usize,
    pub evictions: u64,
}

impl<'a> Class<'a> {
    pub fn new(size: usize, tag: Tag) -> Class<'a> {
        assert!((32..=CHUNK).contains(&size));
        Class {
            size,
            tag,
            chunks: Vec::new(),
            per_chunk: CHUNK / size,
            state: Vec::new(),
            free: Vec::new(),
            hand: 0,
            live: 0,
            evictions: 0,
        }
    }

    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Add one chunk from X-Mem (the caller keeps the memory limit).
    pub fn grow(&mut self, x: &'a XMem) -> Result<()> {
        let n = self.state.len();
        ensure!(
            n + self.per_chunk < u32::MAX as usize,
            "slab class {}: too many slots",
            self.size
        );
        self.chunks.push(XSlice::new_in(x, self.tag, CHUNK, 0u8)?);
        self.state.resize(n + self.per_chunk, FREE);
        // Pushed in reverse so slots are handed out in address order.
        self.free
            .extend((n..n + self.per_chunk).rev().map(|s| s as u32));
        Ok(())
    }

    /// A free slot, if one is on the stack.
    pub fn take(&mut self) -> Option<u32> {
        let s = self.free.pop()?;
        debug_assert_eq!(self.state[s as usize], FREE);
        self.state[s as usize] = LIVE;
        self.live += 1;
        Some(s)
    }

    /// Give slot `s` back.
    pub fn put(&mut self, s: u32) {
        let st = &mut self.state[s as usize];
        assert!(*st != FREE, "slot {s} of class {} freed twice", self.size);
        *st = FREE;
        self.free.push(s);
        self.live -= 1;
    }

    /// Note a hit (CLOCK's reference bit).
    #[inline]
    pub fn touch(&mut self, s: u32) {
        self.state[s as usize] = REFERENCED;
    }

    /// CLOCK: the next live slot without its reference bit (clearing bits on the way); at most
    /// two sweeps. `None` only when no slot is live.
    pub fn victim(&mut self) -> Option<u32> {
        let n = self.state.len();
        for _ in 0..2 * n + 1 {
            if n == 0 {
                return None;
            }
            let s = self.hand;
            self.hand = (self.hand + 1) % n;
            match self.state[s] {
                REFERENCED => self.state[s] = LIVE,
                LIVE => return Some(s as u32),
                _ => {}
            }
        }
        None
    }

    /// The bytes of slot `s`.
    #[inline]
    pub fn item(&self, s: u32) -> &[u8] {
        let s = s as usize;
        let off = (s % self.per_chunk) * self.size;
        &self.chunks[s / self.per_chunk][off..off + self.size]
    }

    #[inline]
    pub fn item_mut(&mut self, s: u32) -> &mut [u8] {
        let s = s as usize;
        let off = (s % self.per_chunk) * self.size;
        &mut self.chunks[s / self.per_chunk][off..off + self.size]
    }

    pub fn is_live(&self, s: u32) -> bool {
        self.state.get(s as usize).is_some_and(|&st| st != FREE)
    }

    /// Free every slot (flush_all).
    pub fn clear(&mut self) {
        let n = self.state.len();
        self.state.fill(FREE);
        self.free.clear();
        self.free.extend((0..n).rev().map(|s| s as u32));
        self.live = 0;
        self.hand = 0;
    }
}
