//! xkv: a MemC3-like key-value store as an X-Mem user, speaking memcached's text protocol
//! ([`proto`], [`server`]: the `pmkit-xkv` program) and benchmarked by `pmkit-bench xkv`.
//!
//! Structures, one X-Mem tag each, in structure-index order ([`TAGS`]): the cuckoo hash
//! ("hash", [`hash`]) and eight slab classes of 64, 128, 256, ... 8192 B items ("slab-64" ...
//! "slab-8192", [`slab`]): the thesis's Table 8 structures for MemC3, with its smallest classes
//! (16-64 B) folded into one 64 B class since an item here carries a 24 B header.
//!
//! The API another benchmark uses:
//! - [`xmem_config`] sizes an X-Mem configuration for a [`KvConfig`] (every tag fits the fast
//!   budget and the PM file);
//! - [`Store::new`]`(&XMem, &KvConfig)`; `get`/`set`/`delete` take a [`Probe`]
//!   (`()` for timed runs, `pmkit_hmep::sim::Sim` with [`TAGS`]`.len()` structures for traces);
//! - [`Workload::etc`]`(seed, keys, theta)`, [`load`] then [`run`] a request slice.
//!
//! Concurrency: one writer. The store takes `&mut self`; the server holds it in one mutex per
//! command (MemC3's optimistic version counters are for concurrent readers, not needed here).

pub mod hash;
pub mod proto;
pub mod server;
pub mod slab;
pub mod store;
#[cfg(test)]
mod tests;
pub mod workload;

pub use pmkit_hmep::probe::Probe;
pub use store::{Mode, Store};
pub use workload::{Op, Request, Workload};

use pmkit_xmem::Config;
use std::path::Path;

/// Item sizes of the slab classes.
pub const CLASSES: [usize; 8] = [64, 128, 256, 512, 1024, 2048, 4096, 8192];

/// The tags, in structure-index order: the hash, then the classes smallest first.
pub const TAGS: [&str; 9] = [
    "hash",
    "slab-64",
    "slab-128",
    "slab-256",
    "slab-512",
    "slab-1024",
    "slab-2048",
    "slab-4096",
    "slab-8192",
];

/// What a store is sized by.
#[derive(Clone, Debug)]
pub struct KvConfig {
    /// Slab memory limit (memcached's `-m`); at least 8 MiB (one 1 MiB chunk per class).
    pub memory_bytes: usize,
    /// Items the hash table is sized for (4 per bucket at 90% occupancy); more still fit, by
    /// evicting when a cuckoo path is not found.
    pub hash_items: usize,
}

impl KvConfig {
    /// A limit of `memory_bytes`, the hash sized for items of 128 B on average.
    pub fn new(memory_bytes: usize) -> KvConfig {
        KvConfig {
            memory_bytes,
            hash_items: (memory_bytes / 128).max(1024),
        }
    }

    /// Buckets of the hash table (a power of two).
    pub fn buckets(&self) -> usize {
        (self.hash_items * 10 / 9 / hash::WAYS)
            .next_power_of_two()
            .max(2)
    }
}

/// An X-Mem configuration for `k` over a PM file at `pm`: `region` byte regions, room for every
/// tag's memory in the fast budget and in the file (so every placement can be set).
pub fn xmem_config(pm: &Path, k: &KvConfig, region: usize, thp: bool) -> Config {
    let hash = k.buckets() * std::mem::size_of::<hash::Bucket>();
    let regions = (k.memory_bytes + hash).div_ceil(region) + 2 * TAGS.len() + 2;
    let bytes = (regions * region) as u64;
    let mut c = Config::new(pm, bytes, bytes);
    c.region_size = region;
    c.thp = thp;
    c
}

/// Load every key of `w` once (SET), values filled for version 0; returns the items stored.
pub fn load<P: Probe>(s: &mut Store, w: &Workload, p: &mut P) -> anyhow::Result<usize> {
    let mut buf = vec![0u8; store::MAX_ITEM];
    for k in 0..w.keys {
        let v = &mut buf[..w.value_len(k)];
        workload::fill_value(v, k, 0);
        s.set(&workload::key(k), k, 0, v, Mode::Set, p)
            .map_err(|e| anyhow::anyhow!("loading key {k}: {e}"))?;
    }
    Ok(s.len())
}

/// Check `s` after a load: the store's invariants, and every item inside a region of its own
/// tag (the placement of a tag moves all of its items).
pub fn check_placement(x: &pmkit_xmem::XMem, s: &Store) -> anyhow::Result<()> {
    s.check();
    let regions = x.regions();
    let tags: Vec<pmkit_xmem::Tag> = TAGS.iter().map(|t| x.tag(t)).collect::<Result<_, _>>()?;
    for (st, addr, key) in s.items() {
        let r = x
            .region_of(addr as usize)
            .and_then(|i| regions.iter().find(|r| r.index == i))
            .ok_or_else(|| anyhow::anyhow!("item {key:?} at {addr:#x} is in no region"))?;
        anyhow::ensure!(
            r.tag == tags[st],
            "item {:?} of {} is in a region of another tag",
            String::from_utf8_lossy(&key),
            TAGS[st]
        );
    }
    Ok(())
}

/// What a run saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunStats {
    pub gets: u64,
    pub hits: u64,
    pub sets: u64,
    /// Bytes of values read (a checksum of sorts: equal across placements).
    pub value_bytes: u64,
}

/// Run `reqs` against `s`; SETs write the key's value at version `version` (so a run can be
/// told from the load).
pub fn run<P: Probe>(s: &mut Store, w: &Workload, reqs: &[Request], p: &mut P) -> RunStats {
    let mut buf = vec![0u8; store::MAX_ITEM];
    let mut st = RunStats::default();
    for r in reqs {
        let key = workload::key(r.key);
        match r.op {
            Op::Get => {
                st.gets += 1;
                if let Some(h) = s.get(&key, p) {
                    st.hits += 1;
                    st.value_bytes += h.value.len() as u64;
                    debug_assert_eq!(h.flags, r.key);
                }
            }
            Op::Set => {
                st.sets += 1;
                let v = &mut buf[..w.value_len(r.key)];
                workload::fill_value(v, r.key, 1);
                // An item too large cannot happen (the sizes fit the largest class); a full
                // class evicts, so a SET always stores.
                let _ = s.set(&key, r.key, 0, v, Mode::Set, p);
            }
        }
    }
    st
}
