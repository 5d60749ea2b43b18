//! The protection modes, and the one policy that picks a mode for a CPU and a media when the
//! user asks for none (`auto`).

use crate::kernel_write::KernelWriter;
use crate::region::{Region, RegionKind};

/// How PM is protected from stray stores (the PMBD paper, "Persistent Memory Block Driver",
/// Chen et al., MSST 2014, §IV.B, plus memory protection keys and the kernel write path).
/// Every system takes an `Option<Protect>`: `None` asks for [`auto`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protect {
    /// PM mapped read-write all the time.
    None,
    /// PM mapped read-only; the pages of each store made writable with `mprotect` around it
    /// (the thesis's page-table toggling, PT-naive).
    Pt,
    /// `pt`, with the block device's writes staged in DRAM buffers and written back in sorted
    /// runs, one window per run (the paper's Optimizations 1 and 2). Other systems run it as
    /// `pt`.
    PtBatch,
    /// PM mapped with no access; each access maps a window of the backing file for its duration
    /// (the paper's private mappings).
    Private,
    /// PM tagged with a protection key every thread has access-disabled; an access opens the key
    /// in its own thread with WRPKRU (no system call, no TLB shootdown). Protects reads and
    /// writes.
    Pkey,
    /// PM mapped read-only for good; every store is a `pwrite(2)` on the file behind the
    /// mapping, so a stray store from any thread faults and only the library's write calls
    /// change PM. Protects writes (reads stay loads). Needs a file (regular, tmpfs or DAX), not
    /// device-dax; on the crash simulator it is modelled as the kernel's DAX copy.
    Kernel,
}

impl Protect {
    /// Every mode, in the order of their codes on media (new modes go last).
    pub const ALL: [Protect; 6] = [
        Protect::None,
        Protect::Pt,
        Protect::PtBatch,
        Protect::Private,
        Protect::Pkey,
        Protect::Kernel,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Protect::None => "none",
            Protect::Pt => "pt",
            Protect::PtBatch => "pt-batch",
            Protect::Private => "private",
            Protect::Pkey => "pkey",
            Protect::Kernel => "kernel",
        }
    }

    /// Whether this mode needs a real mapping, not the crash simulator (`kernel` runs on the
    /// simulator as what the kernel does on DAX: a durable non-temporal copy).
    pub fn needs_region(self) -> bool {
        !matches!(self, Protect::None | Protect::Kernel)
    }

    /// The mode's code, for formats that record the last mode used.
    pub fn code(self) -> u8 {
        Protect::ALL
            .iter()
            .position(|p| *p == self)
            .expect("in ALL") as u8
    }

    pub fn from_code(c: u8) -> Option<Protect> {
        Protect::ALL.get(c as usize).copied()
    }

    /// Parse a mode or `auto` (`Ok(None)`), the form every command line and variable takes.
    pub fn parse_choice(s: &str) -> Result<Option<Protect>, String> {
        match s {
            "auto" => Ok(None),
            s => s.parse().map(Some),
        }
    }
}

impl std::fmt::Display for Protect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Protect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Protect::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown protection {s:?} (auto, none, pt, pt-batch, private, pkey, kernel)"
                )
            })
    }
}

/// The mode `auto` picks on `region` (`None`: media without a mapping), and why, in words for
/// the user. One policy for every system: protection keys where the CPU has them (cheapest, and
/// they guard reads too); else the kernel write path where there is a writable file (no window
/// to open, no TLB shootdown); else page-rights windows (device-dax, anonymous memory); nothing
/// on the crash simulator or a read-only mapping, where no store can be made anyway.
pub fn auto(region: Option<&Region>) -> (Protect, String) {
    let Some(r) = region else {
        return (
            Protect::None,
            "the simulator has no mapping to protect".into(),
        );
    };
    if r.is_read_only() {
        return (
            Protect::None,
            "the region is opened read-only: no store can reach it".into(),
        );
    }
    if crate::features().pku {
        return (
            Protect::Pkey,
            "this CPU has memory protection keys: PM is behind a key every thread has disabled, \
             opened per access by WRPKRU"
                .into(),
        );
    }
    match KernelWriter::supports(r) {
        Ok(()) => (
            Protect::Kernel,
            "this CPU has no memory protection keys (pkey); PM stays mapped read-only and writes \
             go through the kernel (pwrite)"
                .into(),
        ),
        Err(e) => (
            Protect::Pt,
            format!(
                "this CPU has no memory protection keys (pkey) and there is no kernel write path \
                 ({e}); PM stays read-only and each write opens an mprotect window"
            ),
        ),
    }
}

/// Why `mode` cannot run on `region` (`None`: the crash simulator), or `None` when it can.
pub fn why_not(mode: Protect, region: Option<&Region>) -> Option<String> {
    let Some(r) = region else {
        return mode
            .needs_region()
            .then(|| "it needs a real mapping (this media is a simulator)".into());
    };
    if mode != Protect::None && r.is_read_only() {
        return Some("the region is opened read-only".into());
    }
    match mode {
        Protect::None | Protect::Pt | Protect::PtBatch => None,
        Protect::Kernel => KernelWriter::supports(r).err().map(|e| e.to_string()),
        Protect::Pkey if !crate::features().pku => {
            Some("this CPU or kernel has no memory protection keys (pku/ospke)".into())
        }
        Protect::Pkey => None,
        Protect::Private if r.file().is_none() || r.kind() == RegionKind::DevDax => Some(
            "it needs a region backed by a regular or DAX file (not anonymous memory or device-dax)"
                .into(),
        ),
        Protect::Private => None,
    }
}
