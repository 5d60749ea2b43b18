//! The three comparison points of thesis Fig. 4.1 / Table 4.2, on any [`Media`] with the same
//! primitives PMO Sync uses (stores, clwb over the written lines, sfence, persisted 8-byte words):
//!
//! - [`persist_barrier`]: stores in place, then write back the object's lines and fence once per
//!   object. Durable, not atomic: a crash inside the flush leaves a mix of old and new lines.
//! - [`undo_log`]: the thesis's undo log (Fig. 3.9: log each element's old value and make the
//!   entry durable before storing the new one), made atomic per object: an object's stores form
//!   one transaction, opened and closed by a persisted word. What is logged: for every int store,
//!   a 16-byte entry {transaction sequence, byte offset of the int, its old value}.
//! - [`full_shadow`]: the thesis's shadow copy (Fig. 3.10): copy the object into a shadow, store
//!   there, persist the shadow, mark it complete (the commit point), copy it back in place,
//!   persist, clear the mark.
//!
//! Both atomic baselines come with their recovery ([`recover_undo`], [`recover_shadow`]); the
//! tests below crash them at every fence on the crash simulator and check that every object
//! holds all of its old values or all of its new ones.

use pmkit_media::{Domain, Fence, Flush, Media, LINE};

/// Header word: sequence number of the open undo transaction (0: none).
const UNDO_ACTIVE: usize = 0;
/// Header word: 1 + index of the object whose complete shadow is being copied back (0: none).
const SHADOW_OF: usize = LINE;
/// Bytes of the header page.
const HEADER: usize = 4096;
/// Bytes of one undo entry: sequence word, then (offset << 32 | old value).
const UNDO_ENTRY: usize = 16;

/// Where the baselines keep their data on the media: a header page, the objects back to back,
/// then one scratch area (the undo log, or the shadow object; one transaction runs at a time).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    /// Number of objects.
    pub objs: usize,
    /// 4-byte ints per object (1024 for the 4 KiB objects of the thesis).
    pub ints: usize,
}

impl Layout {
    pub(crate) fn new(objs: usize, ints: usize) -> Layout {
        assert!(
            objs > 0 && ints > 0 && (ints * 4).is_multiple_of(LINE),
            "objects are whole lines"
        );
        let l = Layout { objs, ints };
        // Undo entries hold an offset into the data area in 32 bits.
        assert!(
            l.obj_bytes() * objs <= u32::MAX as usize,
            "data area over 4 GiB"
        );
        l
    }
    pub(crate) fn obj_bytes(&self) -> usize {
        self.ints * 4
    }
    fn data(&self) -> usize {
        HEADER
    }
    fn obj(&self, o: usize) -> usize {
        self.data() + o * self.obj_bytes()
    }
    fn scratch(&self) -> usize {
        (self.data() + self.objs * self.obj_bytes()).next_multiple_of(4096)
    }
    /// Bytes of media the layout needs.
    pub(crate) fn len(&self) -> usize {
        let scratch = self.obj_bytes().max(self.ints * UNDO_ENTRY);
        self.scratch() + scratch.next_multiple_of(4096)
    }
    /// Stores `[first, end)` (global int indices) that land in object `o` for `n` stores.
    fn span(&self, o: usize, n: usize) -> (usize, usize) {
        let first = o * self.ints;
        (first, n.min(first + self.ints))
    }
    /// Objects touched by `n` stores.
    pub(crate) fn objs_for(n: usize, ints: usize) -> usize {
        n.div_ceil(ints)
    }
}

pub(crate) use crate::workload::value;

#[inline]
fn flush<M: Media>(m: &M, off: usize, len: usize) {
    if m.domain() == Domain::Adr {
        m.flush(off, len, Flush::best());
    }
}

#[inline]
fn fence<M: Media>(m: &M) {
    m.fence(Fence::Sfence);
}

/// Persist + barrier only: for each object, its stores in place, then write back the written
/// lines and one fence. Calls `done(o)` once object `o` is durable.
pub(crate) fn persist_barrier<M: Media>(m: &M, l: &Layout, n: usize, mut done: impl FnMut(usize)) {
    for o in 0..Layout::objs_for(n, l.ints) {
        let (first, end) = l.span(o, n);
        let base = l.obj(o);
        for i in first..end {
            m.write(base + 4 * (i - first), &value(i).to_le_bytes());
        }
        flush(m, base, 4 * (end - first));
        fence(m);
        done(o);
    }
}

/// Per-store undo log, one transaction per object:
/// open (persist `UNDO_ACTIVE = seq`); for each int: read the old value, write entry j
/// {seq, offset, old} (payload word first, sequence word last, in one line), write it back,
/// fence, then store the new value in place; commit: write back the object's lines, fence,
/// persist `UNDO_ACTIVE = 0`. Entries of one transaction fill the log from slot 0, so the valid
/// ones (sequence = the open transaction's) form a prefix. `seq` is the first sequence number
/// to use: above every sequence number in the log (see [`undo_next_seq`]).
pub(crate) fn undo_log<M: Media>(
    m: &M,
    l: &Layout,
    n: usize,
    mut seq: u64,
    mut done: impl FnMut(usize),
) {
    assert!(seq > 0);
    let log = l.scratch();
    for o in 0..Layout::objs_for(n, l.ints) {
        let (first, end) = l.span(o, n);
        let base = l.obj(o);
        m.persist_u64(UNDO_ACTIVE, seq);
        for i in first..end {
            let at = base + 4 * (i - first);
            let mut old = [0u8; 4];
            m.read(at, &mut old);
            let e = log + UNDO_ENTRY * (i - first);
            let rel = (at - l.data()) as u64;
            m.store_u64(e + 8, rel << 32 | u32::from_le_bytes(old) as u64);
            // Same line, later store: if the sequence word persisted, so did the payload.
            m.store_u64(e, seq);
            flush(m, e, UNDO_ENTRY);
            fence(m);
            m.write(at, &value(i).to_le_bytes());
        }
        flush(m, base, 4 * (end - first));
        fence(m);
        m.persist_u64(UNDO_ACTIVE, 0);
        done(o);
        seq += 1;
    }
}

/// First sequence number safe for new undo transactions: above every one in the log.
pub(crate) fn undo_next_seq<M: Media>(m: &M, l: &Layout) -> u64 {
    let log = l.scratch();
    let max = (0..l.ints)
        .map(|j| m.load_u64(log + UNDO_ENTRY * j))
        .max()
        .unwrap_or(0);
    max.max(m.load_u64(UNDO_ACTIVE)) + 1
}

// Used by the crash tests: a benchmark run never crashes, so it never recovers.
#[cfg_attr(not(test), allow(dead_code))]
/// Roll back an interrupted undo transaction: apply its entries' old values newest first, write
/// them back, fence, then close the transaction. Idempotent (a crash here is recovered again).
/// Returns how many entries were applied.
pub(crate) fn recover_undo<M: Media>(m: &M, l: &Layout) -> usize {
    let active = m.load_u64(UNDO_ACTIVE);
    if active == 0 {
        return 0;
    }
    let log = l.scratch();
    let valid = (0..l.ints)
        .take_while(|&j| m.load_u64(log + UNDO_ENTRY * j) == active)
        .count();
    for j in (0..valid).rev() {
        let p = m.load_u64(log + UNDO_ENTRY * j + 8);
        let at = l.data() + (p >> 32) as usize;
        assert!(
            at + 4 <= l.scratch(),
            "undo entry {j} points outside the data area"
        );
        m.write(at, &(p as u32).to_le_bytes());
        flush(m, at, 4);
    }
    fence(m);
    m.persist_u64(UNDO_ACTIVE, 0);
    valid
}

/// Full shadow copy, one transaction per object: copy the object into the shadow, do the stores
/// there, write the shadow back and fence, persist `SHADOW_OF = o + 1` (commit point), copy the
/// shadow over the object, write it back and fence, persist `SHADOW_OF = 0`.
pub(crate) fn full_shadow<M: Media>(m: &M, l: &Layout, n: usize, mut done: impl FnMut(usize)) {
    let shadow = l.scratch();
    let size = l.obj_bytes();
    let mut buf = vec![0u8; size];
    for o in 0..Layout::objs_for(n, l.ints) {
        let (first, end) = l.span(o, n);
        let base = l.obj(o);
        m.read(base, &mut buf);
        m.write(shadow, &buf);
        for i in first..end {
            m.write(shadow + 4 * (i - first), &value(i).to_le_bytes());
        }
        flush(m, shadow, size);
        fence(m);
        m.persist_u64(SHADOW_OF, o as u64 + 1);
        copy_back(m, l, o, &mut buf);
        m.persist_u64(SHADOW_OF, 0);
        done(o);
    }
}

fn copy_back<M: Media>(m: &M, l: &Layout, o: usize, buf: &mut [u8]) {
    m.read(l.scratch(), buf);
    m.write(l.obj(o), buf);
    flush(m, l.obj(o), buf.len());
    fence(m);
}

#[cfg_attr(not(test), allow(dead_code))]
/// Finish an interrupted copy-back: if a complete shadow is marked, copy it over its object
/// again, then clear the mark. Idempotent. Returns the object rolled forward.
pub(crate) fn recover_shadow<M: Media>(m: &M, l: &Layout) -> Option<usize> {
    let mark = m.load_u64(SHADOW_OF);
    if mark == 0 {
        return None;
    }
    let o = mark as usize - 1;
    assert!(o < l.objs, "shadow mark names object {o} of {}", l.objs);
    copy_back(m, l, o, &mut vec![0u8; l.obj_bytes()]);
    m.persist_u64(SHADOW_OF, 0);
    Some(o)
}

/// Check that the first `n` stores are in place (the benchmark's end-of-run verification).
pub(crate) fn verify<M: Media>(m: &M, l: &Layout, n: usize) -> Result<(), String> {
    let mut buf = vec![0u8; l.obj_bytes()];
    for o in 0..Layout::objs_for(n, l.ints) {
        let (first, end) = l.span(o, n);
        m.read(l.obj(o), &mut buf);
        for i in first..end {
            let k = 4 * (i - first);
            let got = u32::from_le_bytes(buf[k..k + 4].try_into().expect("4 bytes"));
            if got != value(i) {
                return Err(format!(
                    "object {o} int {}: found {got}, expected {}",
                    i - first,
                    value(i)
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmkit_media::crashsim::CrashSim;
    use pmkit_media::crashsim::{check_every_fence, CrashOpts};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    const OBJS: usize = 3;
    const INTS: usize = 32; // two lines per object
    const N: usize = 80; // the last object is written half

    /// Data area after the first `c` objects' transactions.
    fn expected(l: &Layout, c: usize) -> Vec<u8> {
        let mut v = vec![0u8; OBJS * l.obj_bytes()];
        for o in 0..c {
            let (first, end) = l.span(o, N);
            for i in first..end {
                let at = o * l.obj_bytes() + 4 * (i - first);
                v[at..at + 4].copy_from_slice(&value(i).to_le_bytes());
            }
        }
        v
    }

    /// Crash `workload` at every fence; after `recover`, the data must be the state after the
    /// acknowledged transactions or after the one in flight.
    fn crash_check(
        word_stores: bool,
        workload: impl Fn(&CrashSim, &Layout, &AtomicUsize),
        recover: impl Fn(&CrashSim, &Layout) + Send,
    ) -> (u64, u64) {
        let l = Layout::new(OBJS, INTS);
        let acked = Arc::new(AtomicUsize::new(0));
        let opts = CrashOpts {
            k: 8,
            random_images: 32,
            word_stores,
            ..CrashOpts::default()
        };
        let states: Vec<Vec<u8>> = (0..=OBJS).map(|c| expected(&l, c)).collect();
        let a2 = acked.clone();
        let report = check_every_fence(
            l.len(),
            &opts,
            |m| workload(m, &l, &acked),
            move |m| {
                recover(m, &l);
                let mut data = vec![0u8; OBJS * l.obj_bytes()];
                m.read(l.data(), &mut data);
                let c = a2.load(Ordering::SeqCst);
                let ok = states[c] == data || (c < OBJS && states[c + 1] == data);
                if ok {
                    Ok(())
                } else {
                    Err(format!(
                        "after {c} acknowledged objects the data matches neither state"
                    ))
                }
            },
        );
        (report.violation_count, report.images)
    }

    #[test]
    fn undo_log_recovers_every_crash() {
        for word in [false, true] {
            let (bad, images) = crash_check(
                word,
                |m, l, acked| {
                    let seq = undo_next_seq(m, l);
                    undo_log(m, l, N, seq, |_| {
                        acked.fetch_add(1, Ordering::SeqCst);
                    })
                },
                |m, l| {
                    recover_undo(m, l);
                },
            );
            assert!(images > 100, "the workload was crashed ({images} images)");
            assert_eq!(bad, 0, "undo log: {bad} bad images (word stores {word})");
        }
    }

    #[test]
    fn full_shadow_recovers_every_crash() {
        for word in [false, true] {
            let (bad, images) = crash_check(
                word,
                |m, l, acked| {
                    full_shadow(m, l, N, |_| {
                        acked.fetch_add(1, Ordering::SeqCst);
                    })
                },
                |m, l| {
                    recover_shadow(m, l);
                },
            );
            assert!(images > 10, "the workload was crashed ({images} images)");
            assert_eq!(bad, 0, "full shadow: {bad} bad images (word stores {word})");
        }
    }

    /// Negative control: persist + barrier has no atomicity, and the same check must catch it.
    #[test]
    fn persist_barrier_is_not_atomic() {
        let (bad, _) = crash_check(
            false,
            |m, l, acked| {
                persist_barrier(m, l, N, |_| {
                    acked.fetch_add(1, Ordering::SeqCst);
                })
            },
            |_, _| {},
        );
        assert!(bad > 0, "a torn object must be found");
    }

    /// Negative control for the undo log: storing before the entry is durable must be caught.
    #[test]
    fn undo_without_recovery_is_caught() {
        let (bad, _) = crash_check(
            false,
            |m, l, acked| {
                undo_log(m, l, N, 1, |_| {
                    acked.fetch_add(1, Ordering::SeqCst);
                })
            },
            |_, _| {},
        );
        assert!(
            bad > 0,
            "without rollback, partial transactions must be visible"
        );
    }

    #[test]
    fn undo_recovery_is_idempotent_and_seq_moves_past_the_log() {
        let l = Layout::new(OBJS, INTS);
        let m = CrashSim::new(l.len());
        undo_log(&m, &l, N, 7, |_| {});
        // Three transactions used 7, 8, 9; fake a crash in a fourth one after two entries.
        assert_eq!(undo_next_seq(&m, &l), 10);
        verify(&m, &l, N).unwrap();
        let before = m.image();
        let log = l.scratch();
        m.persist_u64(UNDO_ACTIVE, 10);
        for j in 0..2 {
            let at = l.obj(0) + 4 * j;
            let mut old = [0u8; 4];
            m.read(at, &mut old);
            m.store_u64(
                log + 16 * j + 8,
                ((at - l.data()) as u64) << 32 | u32::from_le_bytes(old) as u64,
            );
            m.persist_u64(log + 16 * j, 10);
            m.write(at, &999u32.to_le_bytes());
        }
        assert_eq!(recover_undo(&m, &l), 2);
        assert_eq!(recover_undo(&m, &l), 0);
        let mut a = vec![0u8; OBJS * l.obj_bytes()];
        let mut b = a.clone();
        m.read(l.data(), &mut a);
        b.copy_from_slice(&before[l.data()..l.data() + OBJS * l.obj_bytes()]);
        assert_eq!(a, b);
    }
}
