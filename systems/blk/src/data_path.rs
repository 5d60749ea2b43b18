//! The plain data path: blocks copied between a request's buffer and PM inside the protection
//! mode's window, with the write scheme's stores and fences, subpage updates, the checksum
//! table, write-verify and speed emulation. Every layer above reaches PM through it: the
//! device's plain mode, the atomic map (which adds its own indirection on top, as Linux's BTT
//! sits on pmem), and the pt-batch buffers' drain.

use crate::error::{BlkError, Result};
use crate::stats::{Ctr, Recorder};
use crate::superblock::Layout;
use pmkit_media::emulate::Emulator;
use pmkit_media::guard::{Guarded, View};
use pmkit_media::{Media, Persister, LINE};

/// Zeroes for trim and write-zeroes (a whole number of blocks of either size).
pub(crate) static ZEROES: [u8; 64 << 10] = [0; 64 << 10];
/// Blocks whose CRCs are handled in one stack buffer.
const CRC_CHUNK: usize = 256;
/// The largest block size.
pub(crate) const MAX_BLOCK: usize = 4096;

const _: () = assert!(
    ZEROES.len().is_multiple_of(MAX_BLOCK),
    "ZEROES holds whole blocks"
);
const _: () = assert!(
    MAX_BLOCK.is_multiple_of(LINE),
    "subpage compares whole lines"
);

/// Whether `s` lies in the static zero buffer (its CRC is known without computing it).
#[inline]
pub(crate) fn is_zeroes(s: &[u8]) -> bool {
    ZEROES.as_ptr_range().contains(&s.as_ptr())
}

/// What every access to PM needs: the media under its protection, the geometry, the
/// write scheme, speed emulation and the counters.
pub(crate) struct DataPath<M: Media> {
    pub(crate) media: Guarded<M>,
    pub(crate) layout: Layout,
    pub(crate) persister: Persister,
    pub(crate) emu: Emulator,
    pub(crate) subpage: bool,
    pub(crate) write_verify: bool,
    pub(crate) stats: Recorder,
    /// CRC32C of an all-zero block.
    pub(crate) zero_crc: u32,
}

impl<M: Media> DataPath<M> {
    /// The CRC of one block of data (the zero block's is known).
    #[inline]
    pub(crate) fn crc_of(&self, block: &[u8]) -> u32 {
        debug_assert_eq!(block.len(), self.layout.block_size as usize);
        if is_zeroes(block) {
            self.zero_crc
        } else {
            crc32c::crc32c(block)
        }
    }

    /// Write blocks `b0..` in place: one window for the data, one for their CRCs. The caller
    /// holds the blocks' stripes (or, in pt-batch, the blocks' buffer).
    pub(crate) fn write_blocks(&self, b0: u64, src: &[u8], fua: bool) -> Result<()> {
        debug_assert!(src.len().is_multiple_of(self.layout.block_size as usize));
        debug_assert!(
            b0 + (src.len() / self.layout.block_size as usize) as u64 <= self.layout.nblocks
        );
        let moff = self.layout.block_off(b0);
        let len = src.len();
        let p = &self.persister;
        let deferred = p.scheme().deferred();
        self.media.with_write(moff, len, |v| {
            self.emu.write(len, || {
                if self.subpage {
                    self.store_changed_lines(v, moff, src);
                } else {
                    p.write(v, moff, src);
                }
                p.fence(v);
                self.emu.barrier();
                if fua && deferred {
                    p.persist_now(v, moff, len)
                } else {
                    Ok(())
                }
            })
        })??;
        if self.layout.checksum() {
            self.write_crcs(b0, src, fua)?;
        }
        if self.write_verify {
            self.verify(b0, src)?;
        }
        Ok(())
    }

    /// Read blocks `b0..` in place and check their CRCs. On a mismatch `dst` is zeroed (never
    /// hand out corrupt data) and the first bad block is named.
    pub(crate) fn read_blocks(&self, b0: u64, dst: &mut [u8]) -> Result<()> {
        debug_assert!(dst.len().is_multiple_of(self.layout.block_size as usize));
        let moff = self.layout.block_off(b0);
        let len = dst.len();
        let bad = self
            .media
            .with_read(moff, len, |v| match v.first_bad(moff, len) {
                Some(at) => Some(at),
                None => {
                    self.emu.read(len, || v.read(moff, dst));
                    None
                }
            })?;
        if let Some(at) = bad {
            dst.fill(0);
            return Err(self.bad_media(at));
        }
        if self.layout.checksum() {
            if let Err(e) = self.check_crcs(b0, dst) {
                dst.fill(0);
                self.stats.add(Ctr::ChecksumErrors, 1);
                return Err(e);
            }
        }
        Ok(())
    }

    /// The error for a media error at media byte `at` inside the data area.
    pub(crate) fn bad_media(&self, at: usize) -> BlkError {
        self.stats.add(Ctr::MediaErrors, 1);
        let rel = at as u64 - self.layout.data_off;
        BlkError::BadMedia {
            block: rel / self.layout.block_size as u64,
            media_off: at as u64,
        }
    }

    /// The scheme's barrier inside the rights it needs (a fence; flush of dirty pages for
    /// `wb`; msync of dirty pages for `msync`).
    pub(crate) fn barrier(&self) -> Result<()> {
        self.media.with_barrier(|v| self.persister.barrier(v))??;
        self.emu.barrier();
        Ok(())
    }

    /// Subpage update: compare each 64-byte line with what PM holds and store only lines that
    /// differ (the original driver's `subupdate`).
    fn store_changed_lines(&self, v: &View<'_, M>, moff: usize, src: &[u8]) {
        let mut old = [0u8; MAX_BLOCK];
        let (mut written, mut skipped) = (0u64, 0u64);
        let mut done = 0;
        while done < src.len() {
            let n = (src.len() - done).min(MAX_BLOCK);
            v.read(moff + done, &mut old[..n]);
            let mut line = 0;
            while line < n {
                if old[line..line + LINE] == src[done + line..done + line + LINE] {
                    skipped += 1;
                    line += LINE;
                    continue;
                }
                // Extend over the run of changed lines and store it in one go.
                let start = line;
                while line < n && old[line..line + LINE] != src[done + line..done + line + LINE] {
                    line += LINE;
                }
                written += ((line - start) / LINE) as u64;
                self.persister
                    .write(v, moff + done + start, &src[done + start..done + line]);
            }
            done += n;
        }
        self.stats.add(Ctr::SubpageLinesWritten, written);
        self.stats.add(Ctr::SubpageLinesSkipped, skipped);
    }

    fn write_crcs(&self, b0: u64, src: &[u8], fua: bool) -> Result<()> {
        let bs = self.layout.block_size as usize;
        let nblocks = src.len() / bs;
        let mut buf = [0u8; CRC_CHUNK * 4];
        let mut i = 0;
        while i < nblocks {
            let n = (nblocks - i).min(CRC_CHUNK);
            for k in 0..n {
                let blk = &src[(i + k) * bs..(i + k + 1) * bs];
                let crc = self.crc_of(blk);
                buf[k * 4..k * 4 + 4].copy_from_slice(&crc.to_le_bytes());
            }
            let coff = self.layout.crc_off(b0 + i as u64);
            let p = &self.persister;
            self.media.with_write(coff, n * 4, |v| {
                p.write(v, coff, &buf[..n * 4]);
                p.fence(v);
                if fua && p.scheme().deferred() {
                    p.persist_now(v, coff, n * 4)
                } else {
                    Ok(())
                }
            })??;
            i += n;
        }
        Ok(())
    }

    fn verify(&self, b0: u64, src: &[u8]) -> Result<()> {
        let bs = self.layout.block_size as usize;
        let mut back = [0u8; MAX_BLOCK];
        for (k, blk) in src.chunks(bs).enumerate() {
            let off = self.layout.block_off(b0 + k as u64);
            self.media
                .with_read(off, bs, |v| v.read(off, &mut back[..bs]))?;
            if back[..bs] != *blk {
                self.stats.add(Ctr::VerifyFailures, 1);
                return Err(BlkError::VerifyFailed {
                    block: b0 + k as u64,
                });
            }
        }
        Ok(())
    }

    fn check_crcs(&self, b0: u64, data: &[u8]) -> Result<()> {
        let bs = self.layout.block_size as usize;
        let nblocks = data.len() / bs;
        let mut buf = [0u8; CRC_CHUNK * 4];
        let mut i = 0;
        while i < nblocks {
            let n = (nblocks - i).min(CRC_CHUNK);
            let coff = self.layout.crc_off(b0 + i as u64);
            self.media
                .with_read(coff, n * 4, |v| v.read(coff, &mut buf[..n * 4]))?;
            for k in 0..n {
                let stored = u32::from_le_bytes(buf[k * 4..k * 4 + 4].try_into().unwrap());
                let computed = crc32c::crc32c(&data[(i + k) * bs..(i + k + 1) * bs]);
                if stored != computed {
                    let block = b0 + (i + k) as u64;
                    return Err(BlkError::Checksum {
                        block,
                        off: block * bs as u64,
                        stored,
                        computed,
                    });
                }
            }
            i += n;
        }
        Ok(())
    }
}
