//! `Tx`'s tests: the journal covers every byte it changes, and what it frees is not handed out
//! before it commits.

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
    fn cas_u128(&self, off: usize, current: u128, new: u128) -> std::result::Result<u128, u128> {
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
