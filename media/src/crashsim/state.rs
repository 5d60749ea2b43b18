//! The recorder behind [`super::CrashSim`]: the volatile view and, per cache line, the stores
//! that may or may not have reached the media.
//!
//! A line with no pending stores is durable as it is in the volatile view, so the durable media
//! is never kept whole: a pending line keeps its durable content (its "base") and its content
//! after each pending store (a "snapshot"), oldest first. Keeping a prefix of `p` stores at a
//! crash leaves snapshot `p-1` in the line (`p == 0` leaves the base). So a crash image is a clone
//! of the volatile view with the pending lines overwritten, one copy of the media per image, and
//! a store that changes nothing is dropped at once.

use super::point::{CrashPoint, PendingLine};
use crate::{Domain, LINE};
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

/// At most this many pending stores are kept per line. A line that gets more loses its oldest
/// intermediate snapshot (never the one a flush committed, never the newest): a crash can then no
/// longer keep exactly that prefix. Counted in [`CrashSim::coarsened`](crate::crashsim::CrashSim::coarsened); see docs/crashsim.md.
pub const MAX_LINE_STORES: usize = 64;

/// Pending stores of one line.
pub(super) struct Line {
    /// Durable content of the line.
    base: [u8; LINE],
    /// Line content after each pending store, oldest first; never two equal neighbours, and the
    /// first differs from the base.
    snaps: Vec<[u8; LINE]>,
    /// How many of `snaps` (a prefix) the next fence makes durable: set by a flush or a
    /// non-temporal store to the line (ADR only).
    commit: usize,
}

pub(super) struct State {
    len: usize,
    /// What loads return.
    pub(super) volatile: Vec<u8>,
    pending: BTreeMap<usize, Line>,
    /// Lines whose `commit > 0`, so a fence touches only them.
    committing: Vec<usize>,
    /// eADR only: the line of every pending snapshot, in program order (stores persist in order).
    order: Vec<u32>,
    pub(super) domain: Domain,
    /// Split stores into aligned 8-byte words instead of line pieces.
    pub(super) word_stores: bool,
    pub(super) fences: u64,
    pub(super) stores: u64,
    /// Snapshots dropped because a line exceeded [`MAX_LINE_STORES`].
    pub(super) coarsened: u64,
}

impl State {
    pub(super) fn new(image: Vec<u8>) -> State {
        assert!(
            image.len() / LINE < u32::MAX as usize,
            "crashsim: media of {} bytes has too many lines",
            image.len()
        );
        State {
            len: image.len(),
            volatile: image,
            pending: BTreeMap::new(),
            committing: vec![],
            order: vec![],
            domain: Domain::Adr,
            word_stores: false,
            fences: 0,
            stores: 0,
            coarsened: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn pending_lines(&self) -> usize {
        self.pending.len()
    }

    /// Byte range of line `line` (the last line of the media may be short).
    fn span(&self, line: usize) -> (usize, usize) {
        let s = line * LINE;
        (s, (s + LINE).min(self.len))
    }

    /// Bytes certainly persistent now.
    pub(super) fn durable(&self) -> Vec<u8> {
        match self.domain {
            // Every visible store is persistent: the bases only lag until the next fence.
            Domain::Eadr => self.volatile.clone(),
            Domain::Adr => self.base_image(),
        }
    }

    /// Switch persistence domain (a set-up step): pending stores become durable first, so no
    /// store is ever tracked under two models.
    pub(super) fn set_domain(&mut self, d: Domain) {
        if d != self.domain {
            self.settle_all();
        }
        self.domain = d;
    }

    /// Write-back (`nt == false`) or non-temporal stores of `src` at `off`: one store per line
    /// piece, or per aligned 8-byte word with `word_stores`. Bounds are checked by the caller.
    pub(super) fn store(&mut self, off: usize, src: &[u8], nt: bool) {
        let mut done = 0;
        while done < src.len() {
            let at = off + done;
            let unit = if self.word_stores { 8 } else { LINE };
            let n = (unit - at % unit).min(src.len() - done);
            self.store_unit(at, &src[done..done + n], nt);
            done += n;
        }
    }

    /// One store that a crash keeps whole or not at all. Must lie inside one line.
    pub(super) fn store_unit(&mut self, off: usize, src: &[u8], nt: bool) {
        debug_assert!(src.is_empty() || off / LINE == (off + src.len() - 1) / LINE);
        self.stores += 1;
        let line = off / LINE;
        let (s, e) = self.span(line);
        let mut base = [0u8; LINE];
        if !self.pending.contains_key(&line) {
            // Not pending: the line was durable as it stood before this store.
            base[..e - s].copy_from_slice(&self.volatile[s..e]);
        }
        self.volatile[off..off + src.len()].copy_from_slice(src);
        let mut snap = [0u8; LINE];
        snap[..e - s].copy_from_slice(&self.volatile[s..e]);
        let pushed = match self.pending.entry(line) {
            Entry::Occupied(o) => {
                let l = o.into_mut();
                let changed = l.snaps.last() != Some(&snap);
                if changed {
                    l.snaps.push(snap);
                }
                changed
            }
            Entry::Vacant(v) => {
                let changed = snap != base;
                if changed {
                    v.insert(Line {
                        base,
                        snaps: vec![snap],
                        commit: 0,
                    });
                }
                changed
            }
        };
        if pushed && self.domain == Domain::Eadr {
            self.order.push(line as u32);
        }
        if nt && self.domain == Domain::Adr {
            // x86 evicts the cached line for a streaming store, so the line's earlier stores
            // commit with it.
            self.commit_line(line);
        }
        if pushed && self.pending[&line].snaps.len() > MAX_LINE_STORES {
            self.coarsen(line);
        }
    }

    /// Mark the current pending stores of `line` to become durable at the next fence.
    fn commit_line(&mut self, line: usize) {
        if let Some(l) = self.pending.get_mut(&line) {
            if l.commit < l.snaps.len() {
                if l.commit == 0 {
                    self.committing.push(line);
                }
                l.commit = l.snaps.len();
            }
        }
    }

    fn coarsen(&mut self, line: usize) {
        let l = self.pending.get_mut(&line).expect("coarsen a pending line");
        // Drop the oldest snapshot unless it is the committed one; never the newest.
        let j = if l.commit == 1 { 1 } else { 0 };
        assert!(
            j + 1 < l.snaps.len(),
            "coarsen needs an intermediate snapshot"
        );
        l.snaps.remove(j);
        if j < l.commit {
            l.commit -= 1;
        }
        if self.domain == Domain::Eadr {
            // The (j+1)-th store of this line in program order goes with its snapshot.
            let pos = self
                .order
                .iter()
                .enumerate()
                .filter(|(_, &x)| x as usize == line)
                .nth(j)
                .map(|(i, _)| i)
                .expect("eADR order lists every snapshot");
            self.order.remove(pos);
        }
        self.coarsened += 1;
    }

    /// `flush` of the lines covering `[off, off+len)`.
    pub(super) fn flush(&mut self, off: usize, len: usize) {
        if len == 0 || self.domain == Domain::Eadr {
            return;
        }
        let (first, last) = (off / LINE, (off + len - 1) / LINE);
        for (&line, l) in self.pending.range_mut(first..=last) {
            if l.commit < l.snaps.len() {
                if l.commit == 0 {
                    self.committing.push(line);
                }
                l.commit = l.snaps.len();
            }
        }
    }

    /// A fence takes effect: committed prefixes become durable (all pending stores under eADR).
    pub(super) fn fence(&mut self) {
        self.fences += 1;
        if self.domain == Domain::Eadr {
            self.settle_all();
            return;
        }
        for line in std::mem::take(&mut self.committing) {
            let l = self
                .pending
                .get_mut(&line)
                .expect("committing lines are pending");
            assert!(l.commit > 0 && l.commit <= l.snaps.len());
            l.base = l.snaps[l.commit - 1];
            l.snaps.drain(..l.commit);
            l.commit = 0;
            if l.snaps.is_empty() {
                self.pending.remove(&line);
            }
        }
    }

    /// Make every pending store durable (the volatile view already holds them).
    fn settle_all(&mut self) {
        self.pending.clear();
        self.committing.clear();
        self.order.clear();
    }

    /// Everything needed to build the crash images of this moment, detached from the recorder.
    pub(super) fn crash_point(&self) -> CrashPoint {
        let lines: Vec<PendingLine> = self
            .pending
            .iter()
            .map(|(&line, l)| {
                let (s, e) = self.span(line);
                PendingLine::new(line, &l.base[..e - s], l.snaps.clone())
            })
            .collect();
        let order = (self.domain == Domain::Eadr).then(|| {
            self.order
                .iter()
                .map(|&line| {
                    lines
                        .binary_search_by_key(&(line as usize), |p| p.line)
                        .expect("eADR order names pending lines") as u32
                })
                .collect()
        });
        CrashPoint::new(self.fences, self.base_image(), lines, order)
    }

    /// The volatile view with every pending line at its base: what survives if no pending
    /// store does.
    fn base_image(&self) -> Vec<u8> {
        let mut img = self.volatile.clone();
        for (&line, l) in &self.pending {
            let (s, e) = self.span(line);
            img[s..e].copy_from_slice(&l.base[..e - s]);
        }
        img
    }
}
