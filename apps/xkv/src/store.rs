//! The store: the cuckoo hash ([`super::hash`]) over items in per-size-class slabs
//! ([`super::slab`]). An item is a 24-byte header (CAS unique, flags, value length, expiry, key
//! length), the key and the value, in the smallest class that holds it. Slab memory is bounded by
//! [`KvConfig::memory_bytes`] (the hash table is sized once and not counted, like memcached's
//! `-m`); a class that may not grow evicts by CLOCK. A key's hash entry is the item's handle
//! (class and slot), loaded as a pointer in traces.
//!
//! Single writer: every operation takes `&mut self`; the server puts the store behind one mutex.

use crate::hash::{hash_key, tag_of, Cuckoo, Slot, S_HASH};
use crate::slab::{Class, CHUNK};
use crate::{KvConfig, CLASSES, TAGS};
use anyhow::{ensure, Context, Result};
use pmkit_hmep::probe::Probe;
use pmkit_xmem::XMem;

/// Item header bytes: cas u64, flags u32, value length u32, expiry u32 (unix seconds, 0 =
/// never), key length u8, 3 spare.
pub const HEADER: usize = 24;
/// Longest key (memcached's).
pub const MAX_KEY: usize = 250;
/// Largest item (header + key + value) the store holds: the largest class.
pub const MAX_ITEM: usize = CLASSES[CLASSES.len() - 1];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Set,
    Add,
    Replace,
    /// Store only if the item's CAS unique is this one.
    Cas(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Stored,
    NotStored,
    Exists,
    NotFound,
}

#[derive(Debug, PartialEq, Eq)]
pub enum StoreError {
    KeyLength(usize),
    TooLarge(usize),
    OutOfMemory(usize),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::KeyLength(n) => write!(f, "key of {n} bytes: 1..={MAX_KEY}"),
            StoreError::TooLarge(n) => {
                write!(f, "item of {n} bytes over the largest class ({MAX_ITEM} B)")
            }
            StoreError::OutOfMemory(c) => {
                write!(f, "class {c} B has no slot and the memory limit is reached")
            }
        }
    }
}

impl std::error::Error for StoreError {}

/// A hit: borrowed from slab memory until the next call.
pub struct Hit<'s> {
    pub flags: u32,
    pub cas: u64,
    pub value: &'s [u8],
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Counters {
    pub gets: u64,
    pub hits: u64,
    pub sets: u64,
    pub deletes: u64,
    pub evictions: u64,
    /// Evictions because both cuckoo buckets were full and no path was found.
    pub hash_evictions: u64,
}

pub struct Store<'a> {
    x: &'a XMem,
    hash: Cuckoo<'a>,
    classes: Vec<Class<'a>>,
    limit_chunks: usize,
    chunks: usize,
    cas: u64,
    pub counters: Counters,
}

#[inline]
fn handle(class: usize, slot: u32) -> u64 {
    ((class as u64 + 1) << 56) | slot as u64
}

#[inline]
fn decode(h: u64) -> (usize, u32) {
    (((h >> 56) - 1) as usize, h as u32)
}

fn class_of(size: usize) -> Option<usize> {
    CLASSES.iter().position(|&c| c >= size)
}

fn unix_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

/// Every line of `b` through the probe (loads or stores).
#[inline]
fn lines<P: Probe>(p: &mut P, s: usize, b: &[u8], store: bool) {
    let base = b.as_ptr() as usize;
    let mut off = 0;
    while off < b.len() {
        if store {
            p.store(s, &b[off]);
        } else {
            p.touch(s, &b[off]);
        }
        off = ((base + off) / 64 + 1) * 64 - base;
    }
}

struct Header {
    cas: u64,
    flags: u32,
    vlen: usize,
    expiry: u32,
    klen: usize,
}

fn header(b: &[u8]) -> Header {
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    Header {
        cas: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
        flags: u32_at(8),
        vlen: u32_at(12) as usize,
        expiry: u32_at(16),
        klen: b[20] as usize,
    }
}

impl<'a> Store<'a> {
    /// A store over `x`: the hash under tag "hash", each class under "slab-SIZE", one chunk per
    /// class at once (so every tag has a region from the start).
    pub fn new(x: &'a XMem, cfg: &KvConfig) -> Result<Store<'a>> {
        let limit_chunks = cfg.memory_bytes / CHUNK;
        ensure!(
            limit_chunks >= CLASSES.len(),
            "memory limit {} B: at least one {CHUNK} B chunk per class ({} B)",
            cfg.memory_bytes,
            CLASSES.len() * CHUNK
        );
        let buckets = cfg.buckets();
        let seg = x.config().region_size / 2;
        let hash = Cuckoo::new(x, x.tag(TAGS[S_HASH])?, buckets, seg)
            .context("allocating the cuckoo hash")?;
        let mut classes = Vec::new();
        for (i, &size) in CLASSES.iter().enumerate() {
            let mut c = Class::new(size, x.tag(TAGS[1 + i])?);
            c.grow(x)
                .with_context(|| format!("the first chunk of class {size}"))?;
            classes.push(c);
        }
        Ok(Store {
            x,
            hash,
            classes,
            limit_chunks,
            chunks: CLASSES.len(),
            cas: 0,
            counters: Counters::default(),
        })
    }

    /// Items stored.
    pub fn len(&self) -> usize {
        self.hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hash.is_empty()
    }

    /// Bytes of slab chunks taken (at most the memory limit).
    pub fn slab_bytes(&self) -> usize {
        self.chunks * CHUNK
    }

    pub fn hash_bytes(&self) -> usize {
        self.hash.bytes()
    }

    /// Per class: (item size, chunks, live items, evictions).
    pub fn classes(&self) -> Vec<(usize, usize, usize, u64)> {
        self.classes
            .iter()
            .map(|c| (c.size, c.chunks(), c.live, c.evictions))
            .collect()
    }

    fn addr(&self, it: u64) -> u64 {
        let (c, s) = decode(it);
        self.classes[c].item(s).as_ptr() as u64
    }

    /// The entry of `key` (hash `h`): its slot and handle.
    fn find<P: Probe>(&self, key: &[u8], h: u64, p: &mut P) -> Option<(Slot, u64)> {
        let tag = tag_of(h);
        for bucket in self.hash.buckets_of(h) {
            let m = self.hash.matches(bucket, tag, p, |it| self.addr(it));
            for (way, &it) in m.iter().enumerate() {
                if it == 0 {
                    continue;
                }
                let (c, s) = decode(it);
                let b = self.classes[c].item(s);
                p.touch(1 + c, &b[0]);
                let hd = header(b);
                let k = &b[HEADER..HEADER + hd.klen];
                lines(p, 1 + c, k, false);
                if k == key {
                    return Some((Slot { bucket, way }, it));
                }
            }
        }
        None
    }

    /// Look `key` up; a hit sets the item's CLOCK bit and has its value read through `p`.
    pub fn get<P: Probe>(&mut self, key: &[u8], p: &mut P) -> Option<Hit<'_>> {
        self.counters.gets += 1;
        let h = hash_key(key);
        let (slot, it) = self.find(key, h, p)?;
        let (c, s) = decode(it);
        let hd = header(self.classes[c].item(s));
        if hd.expiry != 0 && unix_now() >= hd.expiry {
            self.unlink(slot, it, p);
            return None;
        }
        self.counters.hits += 1;
        self.classes[c].touch(s);
        let b = self.classes[c].item(s);
        let v = &b[HEADER + hd.klen..HEADER + hd.klen + hd.vlen];
        lines(p, 1 + c, v, false);
        Some(Hit {
            flags: hd.flags,
            cas: hd.cas,
            value: v,
        })
    }

    /// Store `value` under `key` as `mode` says; `expiry` is unix seconds (0 = never).
    pub fn set<P: Probe>(
        &mut self,
        key: &[u8],
        flags: u32,
        expiry: u32,
        value: &[u8],
        mode: Mode,
        p: &mut P,
    ) -> Result<Outcome, StoreError> {
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(StoreError::KeyLength(key.len()));
        }
        let size = HEADER + key.len() + value.len();
        let c = class_of(size).ok_or(StoreError::TooLarge(size))?;
        self.counters.sets += 1;
        let h = hash_key(key);
        // Decide against the current entry first: add/replace/cas never allocate in vain.
        let old = self.find(key, h, p);
        match (mode, old) {
            (Mode::Add, Some(_)) => return Ok(Outcome::NotStored),
            (Mode::Replace, None) => return Ok(Outcome::NotStored),
            (Mode::Cas(_), None) => return Ok(Outcome::NotFound),
            (Mode::Cas(want), Some((_, it))) => {
                let (oc, os) = decode(it);
                if header(self.classes[oc].item(os)).cas != want {
                    return Ok(Outcome::Exists);
                }
            }
            _ => {}
        }
        // The allocation may evict the old item (same class): look it up again afterwards.
        let s = self.alloc(c, p)?;
        self.cas += 1;
        let cas = self.cas;
        let b = self.classes[c].item_mut(s);
        b[0..8].copy_from_slice(&cas.to_le_bytes());
        b[8..12].copy_from_slice(&flags.to_le_bytes());
        b[12..16].copy_from_slice(&(value.len() as u32).to_le_bytes());
        b[16..20].copy_from_slice(&expiry.to_le_bytes());
        b[20] = key.len() as u8;
        b[HEADER..HEADER + key.len()].copy_from_slice(key);
        b[HEADER + key.len()..size].copy_from_slice(value);
        lines(p, 1 + c, &self.classes[c].item(s)[..size], true);
        let it = handle(c, s);
        match self.find(key, h, p) {
            Some((slot, old)) => {
                self.hash.replace(slot, it, p);
                let (oc, os) = decode(old);
                self.classes[oc].put(os);
            }
            None => self.insert(h, it, p),
        }
        Ok(Outcome::Stored)
    }

    /// Insert a new entry, evicting a resident of its buckets when the cuckoo search fails.
    fn insert<P: Probe>(&mut self, h: u64, it: u64, p: &mut P) {
        let mut pick = (h >> 8) as usize;
        while !self.hash.insert(h, it, p) {
            let (slot, victim) = self.hash.resident(h, pick);
            pick += 1;
            if victim == 0 || victim == it {
                continue;
            }
            self.counters.hash_evictions += 1;
            self.unlink(slot, victim, p);
        }
    }

    /// Remove entry `slot` (holding `it`) and free its item.
    fn unlink<P: Probe>(&mut self, slot: Slot, it: u64, p: &mut P) {
        debug_assert_eq!(self.hash.get(slot), it);
        self.hash.clear(slot, p);
        let (c, s) = decode(it);
        self.classes[c].put(s);
    }

    /// A slot of class `c`: a free one, a new chunk within the limit, or CLOCK's victim.
    fn alloc<P: Probe>(&mut self, c: usize, p: &mut P) -> Result<u32, StoreError> {
        if let Some(s) = self.classes[c].take() {
            return Ok(s);
        }
        if self.chunks < self.limit_chunks && self.classes[c].grow(self.x).is_ok() {
            self.chunks += 1;
            return Ok(self.classes[c].take().expect("a fresh chunk has slots"));
        }
        let s = self.classes[c]
            .victim()
            .ok_or(StoreError::OutOfMemory(CLASSES[c]))?;
        let it = handle(c, s);
        let b = self.classes[c].item(s);
        let hd = header(b);
        let h = hash_key(&b[HEADER..HEADER + hd.klen]);
        let slot = self
            .hash
            .find_handle(h, it)
            .expect("every live item has a hash entry");
        self.hash.clear(slot, p);
        self.classes[c].evictions += 1;
        self.counters.evictions += 1;
        // The victim's slot goes straight to the new item.
        self.classes[c].put(s);
        Ok(self.classes[c].take().expect("just freed"))
    }

    /// Delete `key`; false when absent.
    pub fn delete<P: Probe>(&mut self, key: &[u8], p: &mut P) -> bool {
        self.counters.deletes += 1;
        let h = hash_key(key);
        match self.find(key, h, p) {
            Some((slot, it)) => {
                self.unlink(slot, it, p);
                true
            }
            None => false,
        }
    }

    /// Drop every item (slab chunks stay with their classes).
    pub fn flush_all(&mut self) {
        self.hash.clear_all();
        for c in &mut self.classes {
            c.clear();
        }
    }

    /// Every live item: (structure index = tag index, address, key). For checks.
    pub fn items(&self) -> Vec<(usize, u64, Vec<u8>)> {
        self.hash
            .handles()
            .map(|it| {
                let (c, s) = decode(it);
                let b = self.classes[c].item(s);
                let hd = header(b);
                (
                    1 + c,
                    b.as_ptr() as u64,
                    b[HEADER..HEADER + hd.klen].to_vec(),
                )
            })
            .collect()
    }

    /// The store's own invariants: every hash entry points at a live item whose key hashes to
    /// the entry's bucket, one entry per live item. Panics on a broken one (tests).
    pub fn check(&self) {
        let mut n = 0;
        for it in self.hash.handles() {
            let (c, s) = decode(it);
            assert!(
                self.classes[c].is_live(s),
                "entry {it:#x} points at a free slot"
            );
            let b = self.classes[c].item(s);
            let hd = header(b);
            let h = hash_key(&b[HEADER..HEADER + hd.klen]);
            assert!(
                self.hash.find_handle(h, it).is_some(),
                "entry in a wrong bucket"
            );
            n += 1;
        }
        let live: usize = self.classes.iter().map(|c| c.live).sum();
        assert_eq!(n, live, "hash entries against live items");
    }
}
