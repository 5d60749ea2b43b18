//! A transaction: writes staged in DRAM, read back through an overlay, committed through the
//! journal. Logged writes change live metadata (their original bytes are journaled); fresh writes
//! go to space nothing reaches until the commit (new blocks, free directory slots).

use crate::alloc::Alloc;
use crate::blockhash::{BlockMap, BlockSet};
use crate::error::{Error, Result};
use crate::inode::Inode;
use crate::itable::Itable;
use crate::journal::{self, Lane};
use crate::layout::{Geometry, BLOCK, INODE, LINE};
use crate::pm::Pm;
use parking_lot::Mutex;
use pmkit_media::Media;

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
    /// Fresh blocks whose whole image is staged, by block: the index of that write in
    /// `writes`, while no later write touched the block (`Tx::push`).
    images: BlockMap<usize>,
    /// Blocks to free once the transaction is durable.
    pub free_after: Vec<u64>,
    /// Inodes to free once the transaction is durable.
    pub free_inodes_after: Vec<u64>,
    /// Blocks in use that gain a pointer in this transaction (a clone shares them), counted
    /// once it is durable, before `free_after` is released.
    pub share_after: Vec<u64>,
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
            images: Default::default(),
            free_after: Vec::new(),
            free_inodes_after: Vec::new(),
            share_after: Vec::new(),
            allocated: Vec::new(),
            allocated_inodes: Vec::new(),
            done: false,
        }
    }
    /// Stage `w`. A write inside one block whose whole image was staged last (a fresh tree
    /// node) patches that image instead: a clone or a growing tree sets hundreds of pointers in
    /// a fresh node, which would otherwise be as many stores at the commit (each a system call
    /// where every store is a `pwrite`) and as many entries every read of the overlay scans.
    fn push(&mut self, w: W) {
        if !self.images.is_empty() {
            let (first, last) = (w.off / BLOCK, (w.off + w.data.len().max(1) - 1) / BLOCK);
            match self.images.get(&(first as u64)) {
                Some(&i) if first == last => {
                    let img = &mut self.writes[i];
                    debug_assert!(!img.logged && img.data.len() == BLOCK);
                    let at = w.off - img.off;
                    img.data[at..at + w.data.len()].copy_from_slice(&w.data);
                    return;
                }
                _ => (first..=last).for_each(|b| {
                    self.images.remove(&(b as u64));
                }),
            }
        }
        self.writes.push(w);
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
        self.push(W {
            off,
            data: data.to_vec(),
            logged,
            nt: false,
        });
    }
    /// Write space that is unreachable until this transaction commits (not logged).
    pub(crate) fn write_fresh(&mut self, off: usize, data: &[u8]) {
        self.push(W {
            off,
            data: data.to_vec(),
            logged: false,
            nt: false,
        });
    }
    /// Stream `data` to `off` (not logged): file data in place, durable at the commit's fences.
    pub(crate) fn write_stream(&mut self, off: usize, data: &[u8]) {
        self.push(W {
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
        if let Some(&i) = self.images.get(&b) {
            self.writes[i].data = data;
            return;
        }
        self.push(W {
            off: b as usize * BLOCK,
            data,
            logged: false,
            nt: true,
        });
        self.images.insert(b, self.writes.len() - 1);
    }
    /// Does data block `b` have more than one pointer (`shares.rs`)?
    pub(crate) fn is_shared(&self, b: u64) -> bool {
        self.alloc.lock().shares.extra(b) != 0
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
        self.push(W {
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
        self.push(W {
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
                for (off, data, nt) in runs(&fresh, pm.stores_are_calls()) {
                    if nt {
                        pm.write_nt(off, &data);
                    } else {
                        pm.write(off, &data);
                        pm.flush(off, data.len());
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
        for b in self.share_after.drain(..) {
            debug_assert!(a.blocks.is_used(b), "block {b} shared while free");
            a.shares.add(b);
        }
        for b in self.free_after.drain(..) {
            // A shared block loses one pointer; only the last frees it.
            if a.shares.release(b) {
                a.blocks.clear(b);
            }
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
        let bad = |ids: &[u64], used: &dyn Fn(u64) -> bool, pointers: &dyn Fn(u64) -> u32| {
            let mut seen = BlockMap::with_capacity_and_hasher(ids.len(), Default::default());
            ids.iter().copied().find(|&i| {
                let n: &mut u32 = seen.entry(i).or_default();
                *n += 1;
                !used(i) || *n > pointers(i)
            })
        };
        // A block may be freed once per pointer it has (a shared one more than once), counting
        // the pointers this transaction gives it.
        let pointers = |b: u64| {
            let gained = match a.shares.is_empty() && self.share_after.is_empty() {
                true => 0,
                false => self.share_after.iter().filter(|&&s| s == b).count() as u32,
            };
            1 + a.shares.extra(b) + gained
        };
        if let Some(b) = bad(&self.free_after, &|b| a.blocks.is_used(b), &pointers) {
            return Err(Error::Damaged {
                problems: vec![format!(
                    "block {b} would be freed twice (free already, or shared by two files)"
                )],
            });
        }
        if let Some(i) = bad(&self.free_inodes_after, &|i| a.inodes.is_used(i), &|_| 1) {
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

/// The writes `ws` as stores, in order: with `merge` (every store a system call), a write that
/// starts where the one before it ended, and is streamed alike, joins its store (the new blocks
/// of an append, allocated in a row, are one store).
fn runs<'w>(ws: &[&'w W], merge: bool) -> Vec<(usize, std::borrow::Cow<'w, [u8]>, bool)> {
    let mut out: Vec<(usize, std::borrow::Cow<'w, [u8]>, bool)> = Vec::with_capacity(ws.len());
    for w in ws {
        match out.last_mut() {
            Some((off, data, nt)) if merge && *nt == w.nt && *off + data.len() == w.off => {
                data.to_mut().extend_from_slice(&w.data)
            }
            _ => out.push((w.off, std::borrow::Cow::Borrowed(&w.data[..]), w.nt)),
        }
    }
    out
}

#[cfg(test)]
mod tests;
