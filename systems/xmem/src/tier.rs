//! The two tiers as X-Mem sees them: a fast DRAM budget counted in region slots, and a slow
//! tier of region-sized slots: a PM file or device-dax device, mapped whole through the media
//! layer (which migration copies into) and mapped slot by slot at region addresses (by
//! `space.rs`), or a NUMA node whose memory regions are bound to.

use crate::config::{Config, PmSpec};
use crate::error::{Result, XmemError};
use pmkit_media::{Region, RegionOptions};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::io::{AsRawFd, RawFd};

/// Which memory a region's pages come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// DRAM: anonymous memory, counted against the fast budget.
    Fast,
    /// The slow tier: a slot of the PM file or device, or of the slow NUMA node's capacity.
    Slow,
}

/// The fast tier's budget, in region slots.
#[derive(Debug)]
pub struct Dram {
    slots: usize,
    used: usize,
}

impl Dram {
    pub fn new(slots: usize) -> Dram {
        Dram { slots, used: 0 }
    }
    /// Take one slot of the budget; `false` when the budget is spent.
    pub fn take(&mut self) -> bool {
        if self.used < self.slots {
            self.used += 1;
            true
        } else {
            false
        }
    }
    pub fn give(&mut self) {
        assert!(self.used > 0, "DRAM budget released more often than taken");
        self.used -= 1;
    }
    pub fn slots(&self) -> usize {
        self.slots
    }
    pub fn used(&self) -> usize {
        self.used
    }
}

/// Region slots of the slow tier, handed out lowest first.
#[derive(Debug)]
struct Slots {
    free: Vec<u32>,
    slots: usize,
}

impl Slots {
    fn new(slots: usize) -> Slots {
        // Hand out low slots first (popped from the end).
        Slots {
            free: (0..slots as u32).rev().collect(),
            slots,
        }
    }
    fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }
    fn give(&mut self, slot: u32) {
        assert!((slot as usize) < self.slots && !self.free.contains(&slot));
        self.free.push(slot);
    }
    fn used(&self) -> usize {
        self.slots - self.free.len()
    }
}

/// The slow tier.
pub enum Slow {
    /// PM as memory-mapped storage: a file (emulated PM on `/dev/shm`, or a file on a DAX file
    /// system) or a device-dax device, cut into region slots. Regions move by copy and remap.
    File(Pm),
    /// PM (or CXL memory) as a CPU-less NUMA node: regions are anonymous memory bound to the
    /// node, and move by `mbind(MPOL_MF_MOVE)`, the kernel migrating their pages.
    Node(Node),
}

impl Slow {
    pub fn open(cfg: &Config) -> Result<Slow> {
        match cfg.slow_node {
            Some(node) => Ok(Slow::Node(Node {
                node,
                slots: Slots::new((cfg.pm.bytes / cfg.region_size as u64) as usize),
            })),
            None => Pm::open(&cfg.pm, cfg.region_size).map(Slow::File),
        }
    }

    pub fn take(&mut self) -> Result<u32> {
        let taken = match self {
            Slow::File(pm) => pm.slots.take(),
            Slow::Node(n) => n.slots.take(),
        };
        taken.ok_or_else(|| XmemError::PmFull {
            slots: self.slots(),
            path: match self {
                Slow::File(pm) => pm.region.path().to_path_buf(),
                Slow::Node(n) => format!("NUMA node {}", n.node).into(),
            },
        })
    }

    pub fn give(&mut self, slot: u32) {
        match self {
            Slow::File(pm) => pm.slots.give(slot),
            Slow::Node(n) => n.slots.give(slot),
        }
    }

    pub fn slots(&self) -> usize {
        match self {
            Slow::File(pm) => pm.slots.slots,
            Slow::Node(n) => n.slots.slots,
        }
    }

    pub fn used(&self) -> usize {
        match self {
            Slow::File(pm) => pm.slots.used(),
            Slow::Node(n) => n.slots.used(),
        }
    }
}

/// The slow tier as a NUMA node: a capacity in region slots and the node.
pub struct Node {
    pub node: u32,
    slots: Slots,
}

/// The slow tier as a PM file or device-dax device of whole region slots.
pub struct Pm {
    region: Region,
    slot_size: usize,
    slots: Slots,
    /// X-Mem made the file (and removes it when done); false for a device-dax device.
    created: bool,
}

impl Pm {
    /// Create the PM file and map it, or map a device-dax device (`/dev/daxX.Y`, a character
    /// device: it exists, is used from offset 0 for `spec.bytes`, and is never removed). An
    /// existing regular file is refused: X-Mem uses PM as volatile memory and would overwrite
    /// whatever it holds.
    pub fn open(spec: &PmSpec, slot_size: usize) -> Result<Pm> {
        let meta = std::fs::metadata(&spec.path).ok();
        let (region, created) = match meta {
            Some(m) if m.file_type().is_char_device() => {
                (Region::open(&spec.path, &RegionOptions::default())?, false)
            }
            Some(_) => {
                return Err(XmemError::BadConfig(format!(
                    "{} exists: X-Mem uses the PM file as volatile memory and would overwrite \
                     it; remove it or name a new file (or a device-dax device)",
                    spec.path.display()
                )))
            }
            None => (
                Region::create(&spec.path, spec.bytes, &RegionOptions::default())?,
                true,
            ),
        };
        if !created {
            // A device: its size and mapping alignment are the kernel's.
            if (region.len() as u64) < spec.bytes {
                return Err(XmemError::BadConfig(format!(
                    "{} holds {} bytes, less than the PM capacity asked for ({})",
                    spec.path.display(),
                    region.len(),
                    spec.bytes
                )));
            }
            if !slot_size.is_multiple_of(region.map_align()) {
                return Err(XmemError::BadConfig(format!(
                    "{} maps in units of {} bytes: the region size ({slot_size}) must be a \
                     multiple of it",
                    spec.path.display(),
                    region.map_align()
                )));
            }
        } else {
            assert_eq!(region.len() as u64, spec.bytes);
        }
        Ok(Pm {
            slots: Slots::new((spec.bytes / slot_size as u64) as usize),
            region,
            slot_size,
            created,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.region
            .file()
            .expect("a PM tier is a file region")
            .as_raw_fd()
    }

    /// Byte offset of `slot` in the file.
    pub fn offset(&self, slot: u32) -> u64 {
        slot as u64 * self.slot_size as u64
    }

    /// The whole-file mapping (migration copies into a slot through it).
    pub fn media(&self) -> &Region {
        &self.region
    }

    /// Remove the file now if X-Mem created it (its mapping and descriptor stay valid); a
    /// device is left alone.
    pub fn unlink(&mut self) {
        if std::mem::take(&mut self.created) {
            let _ = std::fs::remove_file(self.region.path());
        }
    }
}

impl Drop for Pm {
    fn drop(&mut self) {
        // We created the file; it holds nothing once the mapping goes.
        self.unlink();
    }
}
