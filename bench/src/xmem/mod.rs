//! The benchmarks of X-Mem: `alloc` (its allocator against glibc, jemalloc and mimalloc),
//! `tiers` (placement against first touch, page hotness, memkind's ratio and oracles, per preset
//! and DRAM share) and `xkv` (the key-value store of `apps/xkv`, in process and over memcached's
//! protocol).

pub(crate) mod alloc;
pub(crate) mod tiers;
pub(crate) mod xkv;
