//! Damage a mount meets in use. A mount from the clean-unmount checkpoint checks each inode on
//! its first use (`walk::verify_inode`) instead of walking everything; what that check finds is
//! kept here. The inode then answers EIO (never plausible data), the rest of the pool is served,
//! and unmount does not mark the pool clean, so the next mount walks it all and refuses it until
//! `pmkit fs check POOL --repair` has run.

use std::collections::BTreeMap;

/// Most inodes whose problems are kept; more are counted (each still answers EIO: its check
/// fails again on every use).
pub(crate) const MAX_KEPT: usize = 1024;

/// The damaged inodes met so far, with what was wrong.
#[derive(Default)]
pub(crate) struct Damage {
    found: BTreeMap<u64, String>,
    more: u64,
}

impl Damage {
    /// Record `problem` in `ino`; true the first time this inode is recorded (say so once).
    pub(crate) fn record(&mut self, ino: u64, problem: &str) -> bool {
        if self.found.contains_key(&ino) {
            return false;
        }
        if self.found.len() >= MAX_KEPT {
            self.more += 1;
            return self.more == 1;
        }
        self.found.insert(ino, problem.to_string());
        debug_assert!(self.found.len() <= MAX_KEPT);
        true
    }

    /// One line per damaged inode, and a count of those not kept.
    pub(crate) fn lines(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .found
            .iter()
            .map(|(ino, p)| format!("inode {ino}: {p}"))
            .collect();
        if self.more > 0 {
            v.push(format!("... and more damaged inodes ({} met)", self.more));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_inode_is_told_once_and_the_list_is_bounded() {
        let mut d = Damage::default();
        assert!(d.lines().is_empty());
        assert!(d.record(7, "bad pointer"));
        assert!(!d.record(7, "bad pointer"));
        for i in 0..MAX_KEPT as u64 + 5 {
            d.record(100 + i, "x");
        }
        let l = d.lines();
        assert_eq!(l.len(), MAX_KEPT + 1, "kept, then one line for the rest");
        assert_eq!(l[0], "inode 7: bad pointer");
        assert!(l.last().unwrap().starts_with("... and more"));
    }
}
