//! Configuration and its explicit limits.

use crate::error::{Result, XmemError};
use crate::place::Latencies;
use std::path::PathBuf;

/// Page size the allocator and the mappings work in.
pub const PAGE: usize = 4096;
/// Most tags one `XMem` hands out.
pub const MAX_TAGS: usize = 1024;
/// Most regions in one reservation.
pub const MAX_REGIONS: usize = 1 << 16;
/// Smallest and largest region size (powers of two).
pub const MIN_REGION: usize = 2 << 20;
pub const MAX_REGION: usize = 1 << 30;
/// Default region size: the thesis's 64 MB.
pub const DEFAULT_REGION: usize = 64 << 20;
/// Default reservation: 64 GiB of address space (no memory until regions are used).
pub const DEFAULT_RESERVE: usize = 64 << 30;

/// Where the slow tier lives.
#[derive(Debug, Clone)]
pub struct PmSpec {
    /// A file on `/dev/shm` (emulated PM) or on a DAX file system. It must not exist: X-Mem
    /// creates it and removes it again when the `XMem` is dropped.
    pub path: PathBuf,
    /// Capacity of the PM tier in bytes (a whole number of regions).
    pub bytes: u64,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Bytes of address space to reserve (a whole number of regions).
    pub reserve: usize,
    /// Region size, a power of two in `MIN_REGION..=MAX_REGION`.
    pub region_size: usize,
    /// Fast-tier (DRAM) budget in bytes, a whole number of regions: the thesis's 1/T.
    pub fast_budget: u64,
    /// Ask for transparent huge pages on DRAM regions (`madvise(MADV_HUGEPAGE)`).
    pub thp: bool,
    /// Bind DRAM regions to this NUMA node (`mbind(MPOL_BIND)`); `None`: the kernel's default
    /// policy. Must name an online node.
    pub fast_node: Option<u32>,
    /// The slow tier: a PM file or device-dax device (`pm.path`) of `pm.bytes`, unless
    /// `slow_node` is set.
    pub pm: PmSpec,
    /// The slow tier is this NUMA node (PM in the kernel's KMEM DAX mode, CXL memory: memory on
    /// a CPU-less node) with a capacity of `pm.bytes`; `pm.path` is not used. Slow regions are
    /// anonymous memory bound to it, and regions move between the tiers by
    /// `mbind(MPOL_BIND, MPOL_MF_MOVE)`, the kernel migrating their pages at the same
    /// addresses (the thesis's way). Needs `fast_node`, the node DRAM regions are bound and
    /// moved to. The two may be the same node (to check the plumbing on a one-node machine:
    /// then nothing moves).
    pub slow_node: Option<u32>,
    /// `L(p, m)` of the placement model.
    pub latencies: Latencies,
    /// Hold off a migrating region's writers with userfaultfd write protection (on by
    /// default) where the kernel (5.19+ for shmem, 6.4+ for unpopulated pages) and the
    /// process's privileges allow it (root, or `vm.unprivileged_userfaultfd = 1`): every
    /// writer, a system call writing on the program's behalf (`read(fd, buf, n)`) included,
    /// waits in the kernel for the copy. Otherwise, or off: read-only page rights, the
    /// program's writers wait in X-Mem's SIGSEGV handler and such a system call fails with
    /// `EFAULT`. `XMem::write_protection` says which is in use.
    pub uffd: bool,
    /// Per-thread caches of small objects (`tcache`; on by default). On: a small `alloc`/`free`
    /// is a push or pop on the calling thread's array for (tag, class) plus one live byte, and
    /// the tag's heap lock is taken once per 32 objects; a region's live bytes count the objects
    /// threads cache too, and a region emptied through a cache goes back to the reservation at
    /// the cache's next spill or `XMem::flush_thread_cache`. Off: every small call takes the
    /// heap lock, live bytes are exact and an emptied region goes back at once
    /// (docs/xmem.md, "Allocation speed").
    pub thread_cache: bool,
}

impl Config {
    /// A configuration with the defaults (64 MiB regions, 64 GiB reservation) over a PM file.
    pub fn new(pm_path: impl Into<PathBuf>, pm_bytes: u64, fast_budget: u64) -> Config {
        Config {
            reserve: DEFAULT_RESERVE,
            region_size: DEFAULT_REGION,
            fast_budget,
            thp: false,
            fast_node: None,
            slow_node: None,
            pm: PmSpec {
                path: pm_path.into(),
                bytes: pm_bytes,
            },
            latencies: Latencies::default(),
            thread_cache: true,
            uffd: true,
        }
    }

    /// Check every limit; also that the budget fits in physical memory and the reservation.
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |s: String| Err(XmemError::BadConfig(s));
        let r = self.region_size;
        if !r.is_power_of_two() || !(MIN_REGION..=MAX_REGION).contains(&r) {
            return bad(format!(
                "region size {r} must be a power of two in {MIN_REGION}..={MAX_REGION}"
            ));
        }
        if self.reserve == 0 || !self.reserve.is_multiple_of(r) {
            return bad(format!(
                "reservation {} must be a non-zero multiple of the region size {r}",
                self.reserve
            ));
        }
        if self.reserve / r > MAX_REGIONS {
            return bad(format!(
                "reservation {} holds {} regions; the limit is {MAX_REGIONS}",
                self.reserve,
                self.reserve / r
            ));
        }
        if !self.fast_budget.is_multiple_of(r as u64) {
            return bad(format!(
                "fast budget {} must be a multiple of the region size {r}",
                self.fast_budget
            ));
        }
        if !self.pm.bytes.is_multiple_of(r as u64) {
            return bad(format!(
                "PM capacity {} must be a multiple of the region size {r}",
                self.pm.bytes
            ));
        }
        let phys = physical_memory();
        if self.fast_budget > phys {
            return Err(XmemError::BudgetTooLarge {
                budget: self.fast_budget,
                what: "physical memory",
                limit: phys,
            });
        }
        if self.fast_budget > self.reserve as u64 {
            return Err(XmemError::BudgetTooLarge {
                budget: self.fast_budget,
                what: "the reservation",
                limit: self.reserve as u64,
            });
        }
        for n in self.fast_node.iter().chain(&self.slow_node) {
            let online = std::path::Path::new("/sys/devices/system/node").join(format!("node{n}"));
            if *n >= 1024 || !online.exists() {
                return bad(format!(
                    "NUMA node {n} does not exist ({})",
                    online.display()
                ));
            }
        }
        if self.slow_node.is_some() && self.fast_node.is_none() {
            return bad(
                "a NUMA slow tier (slow_node) needs fast_node: the node DRAM regions are bound \
                 and moved to"
                    .into(),
            );
        }
        self.latencies.validate()
    }
}

/// Bytes of physical memory (`sysconf`; plain libc calls, no memory touched).
fn physical_memory() -> u64 {
    crate::sys::physical_memory()
}
