//! Helpers shared by the integration tests.
#![allow(dead_code)]

use pmkit_blk::{CreateOptions, Device, EngineOptions, Protect, WriteScheme};
use pmkit_media::Region;
use std::path::PathBuf;

/// A scratch directory on tmpfs (emulated PM), removed on drop (in a child process: inside
/// the directory its parent removes).
pub(crate) fn shm_dir() -> tempfile::TempDir {
    pmkit_testkit::scratch_named("pmkit-blk-test")
}

/// Every protection mode this machine can run (pkey only with pku).
pub(crate) fn modes() -> Vec<Protect> {
    Protect::ALL
        .into_iter()
        .filter(|p| *p != Protect::Pkey || pmkit_media::features().pku)
        .collect()
}

/// Every write scheme this CPU can run.
pub(crate) fn schemes() -> Vec<WriteScheme> {
    WriteScheme::ALL
        .into_iter()
        .filter(|w| w.available())
        .collect()
}

pub(crate) fn engine(protect: Protect, write: WriteScheme) -> EngineOptions {
    let mut e = EngineOptions {
        protect: Some(protect),
        write,
        ..Default::default()
    };
    // Small buffers so pt-batch drains (and writer drains) happen within short tests.
    e.batch.buffer_bytes = 64 << 10;
    e.batch.batch_blocks = 8;
    e.batch.stride_blocks = 4;
    e.batch.buffers = 2;
    e
}

/// A new device of `size` bytes in `dir`.
pub(crate) fn new_device(
    dir: &tempfile::TempDir,
    name: &str,
    size: u64,
    create: &CreateOptions,
    engine: &EngineOptions,
) -> (PathBuf, Device<Region>) {
    let path = dir.path().join(name);
    let dev = pmkit_blk::create_path(&path, Some(size), create, engine)
        .unwrap_or_else(|e| panic!("create {} with {engine:?}: {e}", path.display()));
    (path, dev)
}

/// A block-sized pattern unique to (tag, block).
pub(crate) fn pattern(tag: u64, block: u64, bs: usize) -> Vec<u8> {
    let mut v = vec![0u8; bs];
    for (i, c) in v.chunks_mut(8).enumerate() {
        let x = tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ block.rotate_left(17) ^ i as u64;
        c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
    }
    v
}

/// Block `block` as written by write number `seq` (0: the zeroed block of a fresh device):
/// every 8-byte word carries (block, seq, word index), so a block mixing two writes (or
/// holding a block written elsewhere) is detected by [`unstamp`].
pub(crate) fn stamp(block: u64, seq: u64, bs: usize) -> Vec<u8> {
    let mut v = vec![0u8; bs];
    if seq == 0 {
        return v;
    }
    assert!(block < 1 << 20 && seq < 1 << 28 && bs / 8 <= 1 << 16);
    for (i, c) in v.chunks_mut(8).enumerate() {
        c.copy_from_slice(&(block << 44 | seq << 16 | i as u64).to_le_bytes());
    }
    v
}

/// The write number a block read back holds, or a description of why it holds no single
/// write to this block (a mix of two, or a foreign block).
pub(crate) fn unstamp(block: u64, data: &[u8]) -> Result<u64, String> {
    if data.iter().all(|&b| b == 0) {
        return Ok(0);
    }
    let word = |i: usize| u64::from_le_bytes(data[i * 8..i * 8 + 8].try_into().unwrap());
    let first = word(0);
    let seq = (first >> 16) & ((1 << 28) - 1);
    let want = stamp(block, seq, data.len());
    if seq != 0 && data == want.as_slice() {
        return Ok(seq);
    }
    let seqs: std::collections::BTreeSet<String> = (0..data.len() / 8)
        .map(|i| {
            let w = word(i);
            if w == 0 {
                "zero".to_string()
            } else {
                format!("b{}:s{}", w >> 44, (w >> 16) & ((1 << 28) - 1))
            }
        })
        .collect();
    Err(format!(
        "block {block} is a mix of {} writes: {:?}",
        seqs.len(),
        seqs.iter().take(6).collect::<Vec<_>>()
    ))
}

/// The request mix the basic tests run on every kind of device: blocks 0, 1, 7 and the last
/// written singly, `multi` blocks at block 10 in one request, a FUA write at `fua`, then `fua+1`
/// written and trimmed and `fua+2` written and zeroed; `fua+10` is never written.
pub(crate) struct Mix {
    pub multi: u64,
    pub fua: u64,
}

impl Mix {
    /// Issue the mix; returns the multi-block request's data.
    pub(crate) fn write(&self, dev: &Device<Region>) -> Vec<u8> {
        let bs = dev.block_size() as u64;
        let bsz = bs as usize;
        let blocks = dev.capacity() / bs;
        for b in [0, 1, 7, blocks - 1] {
            dev.write(b * bs, &pattern(1, b, bsz), false).unwrap();
        }
        let multi: Vec<u8> = (10..10 + self.multi)
            .flat_map(|b| pattern(2, b, bsz))
            .collect();
        dev.write(10 * bs, &multi, false).unwrap();
        let f = self.fua;
        dev.write(f * bs, &pattern(3, f, bsz), true).unwrap();
        dev.write((f + 1) * bs, &pattern(4, f + 1, bsz), false)
            .unwrap();
        dev.trim((f + 1) * bs, bs).unwrap();
        dev.write((f + 2) * bs, &pattern(5, f + 2, bsz), false)
            .unwrap();
        dev.write_zeroes((f + 2) * bs, bs, true).unwrap();
        multi
    }

    /// Every block of the mix reads back what it should (9 reads).
    pub(crate) fn check(&self, dev: &Device<Region>, multi: &[u8], name: &str) {
        let bs = dev.block_size() as u64;
        let bsz = bs as usize;
        let blocks = dev.capacity() / bs;
        let mut buf = vec![0u8; bsz];
        for b in [0, 1, 7, blocks - 1] {
            dev.read(b * bs, &mut buf).unwrap();
            assert_eq!(buf, pattern(1, b, bsz), "{name}: block {b}");
        }
        let mut m = vec![0u8; multi.len()];
        dev.read(10 * bs, &mut m).unwrap();
        assert_eq!(m, multi, "{name}: multi-block request");
        dev.read(self.fua * bs, &mut buf).unwrap();
        assert_eq!(buf, pattern(3, self.fua, bsz), "{name}: FUA block");
        for b in [self.fua + 1, self.fua + 2, self.fua + 10] {
            dev.read(b * bs, &mut buf).unwrap();
            assert!(
                buf.iter().all(|&x| x == 0),
                "{name}: block {b} must read zeroes"
            );
        }
    }
}
