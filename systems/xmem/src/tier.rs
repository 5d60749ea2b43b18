//! The two tiers as X-Mem sees them: a fast DRAM budget counted in region slots, and a PM file
//! cut into region-sized slots, mapped whole through the media layer (which migration copies
//! into) and mapped slot by slot at region addresses (by `space.rs`).

use crate::config::PmSpec;
use crate::error::{Result, XmemError};
use pmkit_media::{Region, RegionOptions};
use std::os::unix::io::{AsRawFd, RawFd};

/// Which memory a region's pages come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// DRAM: anonymous memory, counted against the fast budget.
    Fast,
    /// PM: a slot of the PM file.
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

/// The slow tier: one PM file of whole region slots.
pub struct Pm {
    region: Region,
    slot_size: usize,
    free: Vec<u32>,
    slots: usize,
}

impl Pm {
    /// Create the PM file and map it. An existing file is refused: X-Mem uses PM as volatile
    /// memory and would overwrite whatever it holds.
    pub fn open(spec: &PmSpec, slot_size: usize) -> Result<Pm> {
        if spec.path.exists() {
            return Err(XmemError::BadConfig(format!(
                "{} exists: X-Mem uses the PM file as volatile memory and would overwrite it; \
                 remove it or name a new file",
                spec.path.display()
            )));
        }
        let region = Region::create(&spec.path, spec.bytes, &RegionOptions::default())?;
        assert_eq!(region.len() as u64, spec.bytes);
        let slots = region.len() / slot_size;
        // Hand out low slots first (popped from the end).
        let free = (0..slots as u32).rev().collect();
        Ok(Pm {
            region,
            slot_size,
            free,
            slots,
        })
    }

    pub fn take(&mut self) -> Result<u32> {
        self.free.pop().ok_or_else(|| XmemError::PmFull {
            slots: self.slots,
            path: self.region.path().into(),
        })
    }

    pub fn give(&mut self, slot: u32) {
        assert!((slot as usize) < self.slots && !self.free.contains(&slot));
        self.free.push(slot);
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

    pub fn slots(&self) -> usize {
        self.slots
    }
    pub fn used(&self) -> usize {
        self.slots - self.free.len()
    }
}

impl Drop for Pm {
    fn drop(&mut self) {
        // We created the file; it holds nothing once the mapping goes.
        let _ = std::fs::remove_file(self.region.path());
    }
}
