//! A transaction: writes staged in DRAM, read back through an overlay, committed through the
//! journal. Logged writes change live metadata (their original bytes are journaled); fresh writes
//! go to space nothing reaches until the commit (new blocks, free directory slots).

use crate::alloc::Alloc;
use crate::error::{Error, Result};
use crate::inode::Inode;
use crate::itable::Itable;
use crate::journal::{self, Lane};
use crate::layout::{Geometry, BLOCK, INODE, LINE};
use crate::pm::Pm;
use parking_lot::Mutex;
use pmkit_media::Media;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// A hasher for block numbers (the `fresh` set): one multiply, no SipHash. Block numbers come
/// from this process's allocator, not from an adversary, so flooding is no concern, and a
/// preallocating append inserts up to 128 of them in one transaction.
#[derive(Default)]
pub(crate) struct BlockHasher(u64);

impl Hasher for BlockHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        // Fibonacci hashing: the high bits, which hashbrown uses, depend on every bit of `v`
        self.0 = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type BlockSet = HashSet<u64, BuildHasherDefault<BlockHasher>>;

struct W {
    off: usize,
    data: Vec<u8>,
    logged: bool,
    nt: bool,
}

pub(crate) struct Tx<'a, M> {
    pm: &'a Pm<M>,
    geo: &'a Geometry,
    it: &'a Itable,
    alloc: &'a Mutex<Alloc>,
    writes: Vec<W>,
    fresh: BlockSet,
    /// Blocks to free once the transaction is durable.
    pub free_after: Vec<u64>,
    /// Inodes to free once the transaction is durable.
    pub free_inodes_after: Vec<u64>,
    allocated: Vec<u64>,
    allocated_inodes: Vec<u64>,
    done: bool,
}

impl<'a, M: Media> Tx<'a, M> {
    pub(crate) fn new(
        pm: &'a Pm<M>,
        geo: &'a Geometry,
        it: &'a Itable,
        alloc: &'a Mutex<Alloc>,
    ) -> Tx<'a, M> {
        Tx {
            pm,
            geo,
            it,
            alloc,
            writes: Vec::new(),
            fresh: BlockSet::default(),
            free_after: Vec::new(),
            free_inodes_after: Vec::new(),
            allocated: Vec::new(),
            allocated_inodes: Vec::new(),
            done: false,
        }
    }
    /// The media as this transaction will leave it.
    pub(crate) fn read(&self, off: usize, buf: &mut [u8]) {
        self.pm.read(off, buf);
        let end = off + buf.len();
        for w in &self.writes {
            let (a, b) = (w.off.max(off), (w.off + w.data.len()).min(end));
            if a < b {
                buf[a - off..b - off].copy_from_slice(&w.data[a - w.off..b - w.off]);
            }
        }
    }
    pub(crate) fn read_u64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        u64::from_le_bytes(b)
    }
    fn in_fresh(&self, off: usize) -> bool {
        self.fresh.contains(&((off / BLOCK) as u64))
    }
    /// Change live metadata (logged), or a fresh block (not logged).
    pub(crate) fn write(&mut self, off: usize, data: &[u8]) {
        let logged = !self.in_fresh(off);
        self.writes.push(W {
            off,
            data: data.to_vec(),
            logged,
            nt: false,
        });
    }
    /// Write space that is unreachable until this transaction commits (not logged).
    pub(crate) fn write_fresh(&mut self, off: usize, data: &[u8]) {
        self.writes.push(W {
            off,
            data: data.to_vec(),
            logged: false,
            nt: false,
        });
    }
    /// Stream `data` to `off` (not logged): file data in place, durable at the commit's fences.
    pub(crate) fn write_stream(&mut self, off: usize, data: &[u8]) {
        self.writes.push(W {
            off,
            data: data.to_vec(),
            logged: false,
            nt: true,
        });
    }
    pub(crate) fn write_u64(&mut self, off: usize, v: u64) {
        self.write(off, &v.to_le_bytes());
    }
    /// The pointer stored at `off` in a tree node (`ptr.rs`).
    pub(crate) fn read_ptr(&self, off: usize) -> u64 {
        crate::ptr::value(self.read_u64(off))
    }
    /// Store pointer `ptr` at `off` in a tree node: sealed with its check in format 7.
    pub(crate) fn write_ptr(&mut self, off: usize, ptr: u64) {
        let w = crate::ptr::store(self.geo.checked_ptrs(), ptr, off);
        self.write_u64(off, w);
    }
    /// The bytes of a tree node at `block` holding `ptrs` in its first slots and holes after.
    pub(crate) fn node_image(&self, block: u64, ptrs: &[u64]) -> Vec<u8> {
        assert!(ptrs.len() <= BLOCK / 8);
        let base = block as usize * BLOCK;
        let mut data = vec![0u8; BLOCK];
        if self.geo.checked_ptrs() {
            let words = crate::ptr::seal_node(base, ptrs);
            for (w, v) in data.chunks_exact_mut(8).zip(words) {
                w.copy_from_slice(&v.to_le_bytes());
            }
        } else {
            for (w, &p) in data.chunks_exact_mut(8).zip(ptrs) {
                w.copy_from_slice(&p.to_le_bytes());
            }
        }
        data
    }
    /// A new tree node holding `ptrs` (then holes), written with streaming stores.
    pub(crate) fn new_node(&mut self, ptrs: &[u64]) -> Result<u64> {
        let b = self.alloc_block()?;
        let data = self.node_image(b, ptrs);
        self.stream_block(b, data);
        Ok(b)
    }
    /// Stage a whole new block's bytes, streamed (a fresh block: nothing to log).
    fn stream_block(&mut self, b: u64, data: Vec<u8>) {
        debug_assert_eq!(data.len(), BLOCK);
        self.writes.push(W {
            off: b as usize * BLOCK,
            data,
            logged: false,
            nt: true,
        });
    }
    /// A new block from the allocator; returned to it if the transaction is dropped.
    pub(crate) fn alloc_block(&mut self) -> Result<u64> {
        let b = self.alloc.lock().block()?;
        self.allocated.push(b);
        self.fresh.insert(b);
        Ok(b)
    }
    /// Up to `n` new blocks under one lock of the allocator (fewer when it runs out), each
    /// returned to it if the transaction is dropped; for blocks this transaction only points
    /// at (preallocation): not in the fresh set, so a write to one would be logged.
    pub(crate) fn alloc_unwritten(&mut self, n: usize) -> Vec<u64> {
        let mut a = self.alloc.lock();
        let got: Vec<u64> = std::iter::from_fn(|| a.block().ok()).take(n).collect();
        drop(a);
        self.allocated.extend_from_slice(&got);
        got
    }
    /// A new block holding `content` (zero-padded to a block), written with streaming stores.
    pub(crate) fn new_block(&mut self, content: &[u8]) -> Result<u64> {
        assert!(content.len() <= BLOCK);
        let b = self.alloc_block()?;
        let mut data = vec![0u8; BLOCK];
        data[..content.len()].copy_from_slice(content);
        self.stream_block(b, data);
        Ok(b)
    }
    /// A new huge block (512 contiguous, 2 MiB-aligned blocks) starting with `content`, written
    /// with streaming stores; the bytes after it are not written (the caller's file size does
    /// not cover them). `None` when no whole 2 MiB chunk is free.
    pub(crate) fn new_huge(&mut self, content: &[u8]) -> Option<u64> {
        let n = crate::alloc::CHUNK;
        assert!(content.len() <= n as usize * BLOCK);
        let run = self.alloc.lock().huge()?;
        self.allocated.extend(run..run + n);
        self.fresh.extend(run..run + n);
        // the rest of the 2 MiB stays as it was: beyond the file's size (see `Fs::try_huge`)
        self.writes.push(W {
            off: run as usize * BLOCK,
            data: content.to_vec(),
            logged: false,
            nt: true,
        });
        Some(run)
    }
    pub(crate) fn alloc_inode(&mut self) -> Result<u64> {
        let i = self.alloc.lock().inode()?;
        crate::watch::note(|| crate::watch::Change::Created(i));
        self.allocated_inodes.push(i);
        Ok(i)
    }
    pub(crate) fn inode(&self, ino: u64) -> Inode {
        let mut b = [0u8; INODE];
        self.read(self.it.off(ino), &mut b);
        Inode::decode(&b)
    }
    /// Format 7: put the record at `off` (its stored checksum) into directory `d`'s tally
    /// (`dir::tally`), or take it out; the directory's tail word is staged with it. A cleared slot
    /// (inode 0) is no record and changes nothing.
    pub(crate) fn tally_record(&mut self, d: u64, off: usize, add: bool) {
        if !self.geo.checked_dirs() {
            return;
        }
        if self.read_u64(off + crate::dir::H_INO) == 0 {
            return; // a cleared slot: no record, in no tally
        }
        let mut sum = [0u8; 4];
        self.read(off + crate::dir::H_SUM, &mut sum);
        // The tail word alone: the inode's checksum does not cover it, so nothing is resealed.
        let at = self.it.off(d) + crate::inode::TAIL;
        let word = crate::dir::tally(self.read_u64(at), d, u32::from_le_bytes(sum), add);
        self.write_u64(at, word);
    }
    /// Where the inodes are (the table as this transaction's start found it).
    pub(crate) fn itable(&self) -> &'a Itable {
        self.it
    }
    /// Stage the whole inode, with its checksum (format 4). A file's tail record goes to 0: the
    /// record speaks for the last one-fence append only until anything else changes the file
    /// (`tail.rs`). A symlink's tail word is its target's checksum, a directory's its records'
    /// tally (format 7, `dir::tally`): both kept.
    pub(crate) fn put_inode(&mut self, ino: u64, i: &Inode) {
        crate::watch::note(|| crate::watch::Change::Attr(ino));
        let off = self.it.off(ino);
        let tail = if i.is(crate::inode::Kind::File) {
            0
        } else {
            i.tail
        };
        let i = Inode { tail, ..*i }.seal_in(self.geo, ino);
        self.writes.push(W {
            off,
            data: i.encode().to_vec(),
            logged: true,
            nt: false,
        });
    }
    /// (undo ranges with original bytes, redo ranges with final bytes): the union of the
    /// logged ranges, the undo cut down to the 8-byte words that change, the redo to those
    /// words merged across gaps of up to a line.
    #[allow(clippy::type_complexity)]
    fn undo(&self) -> (Vec<(usize, Vec<u8>)>, Vec<(usize, Vec<u8>)>) {
        let mut iv: Vec<(usize, usize)> = self
            .writes
            .iter()
            .filter(|w| w.logged)
            .map(|w| (w.off / 8 * 8, (w.off + w.data.len()).div_ceil(8) * 8))
            .collect();
        iv.sort();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (a, b) in iv {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let (mut undo, mut redo) = (Vec::new(), Vec::new());
        for (a, b) in merged {
            let mut orig = vec![0u8; b - a];
            self.pm.read(a, &mut orig);
            let mut fin = orig.clone();
            for w in self.writes.iter().filter(|w| w.logged) {
                let (x, y) = (w.off.max(a), (w.off + w.data.len()).min(b));
                if x < y {
                    fin[x - a..y - a].copy_from_slice(&w.data[x - w.off..y - w.off]);
                }
            }
            // Undo: the changed words, runs merged across gaps of less than two words. Redo:
            // runs merged across gaps of up to a line (the words between hold what they hold,
            // so storing them again changes nothing, torn or not, and needs no undo): one
            // `pwrite` in `kernel` mode where there would be two (an inode's two lines at a
            // create), at most a line more stored.
            let mut run: Option<(usize, usize)> = None;
            let mut span: Option<(usize, usize)> = None;
            let mut push = |r: (usize, usize)| {
                undo.push((a + r.0, orig[r.0..r.1].to_vec()));
                span = match span {
                    Some((s, e)) if r.0 <= e + LINE => Some((s, r.1)),
                    Some((s, e)) => {
                        redo.push((a + s, fin[s..e].to_vec()));
                        Some(r)
                    }
                    None => Some(r),
                };
            };
            for k in (0..b - a).step_by(8) {
                if orig[k..k + 8] != fin[k..k + 8] {
                    run = match run {
                        Some((s, e)) if k <= e + 16 => Some((s, k + 8)),
                        Some(r) => {
                            push(r);
                            Some((k, k + 8))
                        }
                        None => Some((k, k + 8)),
                    };
                }
            }
            if let Some(r) = run {
                push(r);
            }
            if let Some((x, y)) = span {
                redo.push((a + x, fin[x..y].to_vec()));
            }
        }
        (undo, redo)
    }

    /// Make every staged write durable, all or nothing. Frees `free_after` afterwards.
    pub(crate) fn commit(mut self, lane: &mut Lane) -> Result<()> {
        let (undo, redo) = self.undo();
        let n = journal::entries_for(&undo);
        if n + 1 >= self.geo.lane_entries as usize {
            return Err(Error::TooBig {
                len: n as u64,
                max: self.geo.lane_entries as u64 - 2,
            });
        }
        self.frees_are_in_use()?;
        let fresh: Vec<&W> = self.writes.iter().filter(|w| !w.logged).collect();
        if !undo.is_empty() || !fresh.is_empty() {
            let pm = self.pm;
            let (alloc, frees) = (self.alloc, &self.free_after);
            journal::run(pm, self.geo, lane, &undo, || {
                // What this transaction frees stays allocated until it is durable: a block
                // another transaction got now would be shared with the tree an undo restores.
                debug_assert!(
                    frees.iter().all(|&b| alloc.lock().blocks.is_used(b)),
                    "a block freed before its transaction committed"
                );
                for w in &fresh {
                    if w.nt {
                        pm.write_nt(w.off, &w.data);
                    } else {
                        pm.write(w.off, &w.data);
                        pm.flush(w.off, w.data.len());
                    }
                }
                for (off, data) in &redo {
                    pm.write(*off, data);
                    pm.flush(*off, data.len());
                }
            });
        }
        self.done = true;
        let mut a = self.alloc.lock();
        // Before the blocks can be allocated again: a peer reading them in place sees it.
        if let (false, Some(e)) = (self.free_after.is_empty(), &a.epoch) {
            e.bump();
        }
        for b in self.free_after.drain(..) {
            a.blocks.clear(b);
        }
        for i in self.free_inodes_after.drain(..) {
            a.inodes.clear(i);
        }
        Ok(())
    }

    /// Every block and inode this transaction frees is in use, and freed once: on a damaged
    /// pool (a block two files share, which a mount from the checkpoint checks only per file)
    /// the operation is refused with nothing changed, rather than freeing a block twice.
    fn frees_are_in_use(&self) -> Result<()> {
        if self.free_after.is_empty() && self.free_inodes_after.is_empty() {
            return Ok(());
        }
        let a = self.alloc.lock();
        let bad = |ids: &[u64], used: &dyn Fn(u64) -> bool| {
            let mut seen = std::collections::HashSet::with_capacity(ids.len());
            ids.iter().copied().find(|&i| !used(i) || !seen.insert(i))
        };
        if let Some(b) = bad(&self.free_after, &|b| a.blocks.is_used(b)) {
            return Err(Error::Damaged {
                problems: vec![format!(
                    "block {b} would be freed twice (free already, or shared by two files)"
                )],
            });
        }
        if let Some(i) = bad(&self.free_inodes_after, &|i| a.inodes.is_used(i)) {
            return Err(Error::Damaged {
                problems: vec![format!("inode {i} would be freed twice")],
            });
        }
        Ok(())
    }
}

impl<M> Drop for Tx<'_, M> {
    fn drop(&mut self) {
        if !self.done {
            let mut a = self.alloc.lock();
            for b in self.allocated.drain(..) {
                a.blocks.clear(b);
            }
            for i in self.allocated_inodes.drain(..) {
                a.inodes.clear(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fs, MkfsOptions};
    use pmkit_media::crashsim::CrashSim;

    /// Apply `ranges` onto `img` (offsets relative to `base`).
    fn apply(img: &mut [u8], base: usize, ranges: &[(usize, Vec<u8>)]) {
        for (off, d) in ranges {
            img[off - base..off - base + d.len()].copy_from_slice(d);
        }
    }

    /// Every unaligned store of every length at every offset of two lines, alone and beside a
    /// second store, against a byte model: the undo ranges restore every byte the transaction
    /// changes (applied over the final bytes they give the original back, whatever subset of
    /// the in-place stores reached the media), and the redo ranges give the final bytes.
    #[test]
    fn the_journal_covers_every_byte_of_unaligned_stores() {
        let sim = CrashSim::new(256 << 10);
        Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
        let sb = crate::superblock(&sim).unwrap();
        let geo = sb.geo;
        let pm = Pm::new(&sim, crate::Faults::default());
        let alloc = Mutex::new(Alloc::base(&geo));
        let it = crate::itable::Itable::new(&geo, &[], true);
        let base = geo.data_block as usize * BLOCK;
        const SPAN: usize = 2 * LINE + 16;
        let orig: Vec<u8> = (0..SPAN + 64).map(|i| (i * 7 + 3) as u8).collect();
        pm.write(base, &orig);
        for off in 0..SPAN {
            for len in 1..=SPAN - off {
                for second in [None, Some((off / 2, 5)), Some((off + len, 3))] {
                    let mut tx = Tx::new(&pm, &geo, &it, &alloc);
                    let mut model = orig.clone();
                    let data: Vec<u8> = (0..len).map(|i| !(orig[off + i]) ^ i as u8).collect();
                    tx.write(base + off, &data);
                    model[off..off + len].copy_from_slice(&data);
                    if let Some((o, l)) = second {
                        let d = vec![0xEE; l];
                        tx.write(base + o, &d);
                        model[o..o + l].copy_from_slice(&d);
                    }
                    let (undo, redo) = tx.undo();
                    let mut back = model.clone();
                    apply(&mut back, base, &undo);
                    assert_eq!(back, orig, "undo of {off}+{len} {second:?}: {undo:?}");
                    let mut fwd = orig.clone();
                    apply(&mut fwd, base, &redo);
                    assert_eq!(fwd, model, "redo of {off}+{len} {second:?}");
                    tx.done = true;
                }
            }
        }
    }

    /// Media that runs `at_fence` before each fence: another thread's work, landed at every
    /// point where the order of a commit's steps matters.
    struct Spy<'a> {
        inner: &'a CrashSim,
        at_fence: &'a (dyn Fn() + Sync),
    }

    impl Media for Spy<'_> {
        fn len(&self) -> usize {
            self.inner.len()
        }
        fn domain(&self) -> pmkit_media::Domain {
            self.inner.domain()
        }
        fn read(&self, off: usize, dst: &mut [u8]) {
            self.inner.read(off, dst)
        }
        fn write(&self, off: usize, src: &[u8]) {
            self.inner.write(off, src)
        }
        fn write_nt(&self, off: usize, src: &[u8]) {
            self.inner.write_nt(off, src)
        }
        fn flush(&self, off: usize, len: usize, how: pmkit_media::Flush) {
            self.inner.flush(off, len, how)
        }
        fn fence(&self, kind: pmkit_media::Fence) {
            (self.at_fence)();
            self.inner.fence(kind)
        }
        fn sync_pages(&self, off: usize, len: usize) -> pmkit_media::Result<()> {
            self.inner.sync_pages(off, len)
        }
        fn load_u64(&self, off: usize) -> u64 {
            self.inner.load_u64(off)
        }
        fn store_u64(&self, off: usize, v: u64) {
            self.inner.store_u64(off, v)
        }
        fn cas_u64(&self, off: usize, current: u64, new: u64) -> std::result::Result<u64, u64> {
            self.inner.cas_u64(off, current, new)
        }
        fn cas_u128(
            &self,
            off: usize,
            current: u128,
            new: u128,
        ) -> std::result::Result<u128, u128> {
            self.inner.cas_u128(off, current, new)
        }
    }

    /// A block a transaction frees is not handed out before the transaction is durable: at
    /// every fence of the commit another allocation runs (taking every free block, then giving
    /// them back) and must never get it. Otherwise a crash before the commit entry would let
    /// the undo restore a tree that points at a block someone else now owns.
    #[test]
    fn what_a_transaction_frees_is_not_handed_out_before_it_commits() {
        let sim = CrashSim::new(256 << 10);
        Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
        let geo = crate::superblock(&sim).unwrap().geo;
        let alloc = Mutex::new(Alloc::base(&geo));
        let victim = alloc.lock().block().unwrap();
        let seen = std::sync::atomic::AtomicBool::new(false);
        let fences = std::sync::atomic::AtomicU32::new(0);
        let grab = || {
            fences.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut a = alloc.lock();
            let mut got = Vec::new();
            while let Ok(b) = a.block() {
                got.push(b);
            }
            if got.contains(&victim) {
                seen.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            for b in got {
                a.blocks.clear(b);
            }
        };
        let spy = Spy {
            inner: &sim,
            at_fence: &grab,
        };
        let pm = Pm::new(&spy, crate::Faults::default());
        let journal = journal::Journal::new(&vec![1; geo.lanes as usize]);
        let it = crate::itable::Itable::new(&geo, &[], true);
        let mut tx = Tx::new(&pm, &geo, &it, &alloc);
        // A logged change (so the commit journals and fences) and the free.
        let mut node = tx.inode(crate::layout::ROOT_INO);
        node.mtime += 1;
        tx.put_inode(crate::layout::ROOT_INO, &node);
        tx.free_after.push(victim);
        tx.commit(&mut journal.take()).unwrap();
        assert!(
            fences.load(std::sync::atomic::Ordering::Relaxed) >= 2,
            "the commit fenced"
        );
        assert!(
            !seen.load(std::sync::atomic::Ordering::Relaxed),
            "block {victim} was handed out before the transaction that frees it committed"
        );
        assert!(
            !alloc.lock().blocks.is_used(victim),
            "free after the commit"
        );
    }
}
