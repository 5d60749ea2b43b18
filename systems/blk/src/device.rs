//! The device: request checking, locking, the superblock's life (in use / clean), and the
//! composition of the layers below it: the block store (plain or atomic, over the data path)
//! and, in pt-batch, the DRAM buffers in front of it. Sub-block requests (a 512-byte write to a
//! 4 KiB-block device) are read-modify-written here, under the block's own stripe lock.

use crate::atomic::AtomicMap;
use crate::batch::Batch;
use crate::blocks::{Blocks, Mode};
use crate::data_path::{DataPath, MAX_BLOCK, ZEROES};
use crate::error::{BlkError, Result};
use crate::map;
use crate::options::{CreateOptions, EngineOptions};
use crate::stats::{Ctr, Op, Recorder, Stats};
use crate::superblock::{self, Layout, Superblock, SLOT_LEN};
use parking_lot::Mutex;
use pmkit_media::emulate::{cycles, Emulator};
use pmkit_media::guard::stripes::Stripes;
use pmkit_media::guard::Guarded;
use pmkit_media::Protect;
use pmkit_media::{Media, Persister, WriteScheme};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A PMBD block device on media `M`. All methods take `&self` and are safe to call from many
/// threads at once; each request runs to completion in the calling thread.
pub struct Device<M: Media + 'static> {
    inner: Arc<Inner<M>>,
    syncers: Mutex<Vec<JoinHandle<()>>>,
}

struct Inner<M: Media + 'static> {
    /// Blocks on PM: the data path (media, gate, scheme, counters) and the personality.
    blocks: Blocks<M>,
    /// pt-batch: DRAM buffers in front of the blocks.
    batch: Option<Batch>,
    protect: Protect,
    /// Per-page locks: a write holds its range exclusively, a read shared.
    stripes: Stripes,
    max_request: usize,
    /// The superblock in force and the slot it lives in.
    sb: Mutex<(Superblock, usize)>,
    closed: AtomicBool,
    notes: Vec<String>,
    was_clean: bool,
    /// Opened read-only: nothing is ever stored (see [`EngineOptions::read_only`]).
    read_only: bool,
}

/// What a front end shows about an open device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceInfo {
    pub superblock: Superblock,
    pub block_size: u32,
    pub capacity: u64,
    pub checksum: bool,
    /// Every block write is all-or-nothing (map + free blocks, `--atomic`).
    pub atomic: bool,
    /// Atomic devices: lanes (free lists) and the free physical blocks they hold now.
    pub lanes: usize,
    pub free_blocks: u64,
    pub protect: Protect,
    pub write: WriteScheme,
    /// Whether the previous user of the device closed it cleanly.
    pub was_clean: bool,
    /// Opened read-only: writes are refused and nothing on the media changes.
    pub read_only: bool,
    pub notes: Vec<String>,
}

impl<M: Media + 'static> Device<M> {
    /// Format `media` as a new device, then open it.
    pub fn create(media: M, create: &CreateOptions, engine: &EngineOptions) -> Result<Device<M>> {
        create.validate()?;
        check_scheme(engine.write)?;
        if engine.read_only {
            return Err(BlkError::BadOption(
                "a device cannot be created read-only".into(),
            ));
        }
        let layout = Layout::compute(
            media.len() as u64,
            create.block_size,
            create.checksum,
            create.atomic,
        )?;
        crate::format::format(&media, layout, create.zero_data, engine.write)?;
        Device::open(media, engine)
    }

    /// Open a device created earlier. A device not closed cleanly is opened all the same and
    /// says so in [`Device::was_clean`] and [`Device::notes`]. Read-only (with
    /// [`EngineOptions::read_only`], or on a read-only region) nothing is written, ever.
    pub fn open(media: M, engine: &EngineOptions) -> Result<Device<M>> {
        check_scheme(engine.write)?;
        if engine.max_request == 0 || engine.max_request > crate::options::MAX_REQUEST_LIMIT {
            return Err(BlkError::BadOption(format!(
                "max request must be 1..={} bytes, got {}",
                crate::options::MAX_REQUEST_LIMIT,
                engine.max_request
            )));
        }
        let found = superblock::read(&media)?;
        let layout = found.current.layout;
        let mut notes: Vec<String> = media
            .mapping()
            .map(|r| r.notes().to_vec())
            .unwrap_or_default();
        if engine.write != WriteScheme::Msync && media.mapping().is_some_and(|r| r.needs_msync()) {
            notes.push("the device is durable there only with --write msync".into());
        }
        if let Some(e) = &found.slot_errors[1 - found.slot] {
            notes.push(format!(
                "superblock slot {} is unusable ({e}); slot {} is in force (an interrupted update leaves this)",
                slot_name(1 - found.slot),
                slot_name(found.slot)
            ));
        }
        let was_clean = found.current.clean;
        if layout.atomic() && engine.subpage {
            return Err(BlkError::BadOption(
                "--subpage does not apply to an atomic device: every write goes to a fresh block, \
                 so there is no old content to compare with"
                    .into(),
            ));
        }
        // Recovery of an atomic device: the free blocks are those no map entry names. Read
        // only; an interrupted write whose map store did not persist is thereby discarded.
        let mode = if layout.atomic() {
            let scan = map::scan_map(&media, &layout);
            if scan.problems > 0 {
                return Err(BlkError::MapCorrupt {
                    why: format!(
                        "{} problem(s), first: {}",
                        scan.problems,
                        scan.examples.first().map_or("", |s| s.as_str())
                    ),
                });
            }
            Mode::Atomic(AtomicMap::new(&scan))
        } else {
            Mode::Plain
        };
        if !was_clean && layout.atomic() {
            notes.push(
                "the device was not shut down cleanly; it is atomic, so every block holds one whole \
                 write (writes interrupted before their map update were discarded)"
                    .into(),
            );
        } else if !was_clean {
            notes.push(
                "the device was not shut down cleanly: writes in flight at the crash may be torn \
                 (detected as checksum errors with --checksum, undetected without)"
                    .into(),
            );
            tracing::warn!("block device was not shut down cleanly");
        }
        let read_only = engine.read_only || media.mapping().is_some_and(|r| r.is_read_only());
        let media = if read_only {
            notes.push(read_only_note(engine.protect));
            Guarded::unprotected(media, "read-only")
        } else {
            let g = Guarded::open(media, engine.protect, engine.pkey_fallback)
                .map_err(crate::error::from_gate)?;
            let say = match engine.protect {
                None => g.mode() != Protect::Pkey,
                Some(p) => p != g.mode(),
            };
            if say {
                notes.push(format!("protection {}: {}", g.mode(), g.why()));
            }
            g
        };
        let protect = media.mode();
        if protect == Protect::PtBatch {
            engine.batch.validate(layout.block_size)?;
        }
        let persister = Persister::new(engine.write, media.len(), media.domain());
        let batch =
            (protect == Protect::PtBatch).then(|| Batch::new(&engine.batch, layout.block_size));
        let zero_crc = crc32c::crc32c(&ZEROES[..layout.block_size as usize]);
        let path = DataPath {
            media,
            layout,
            persister,
            emu: Emulator::new(engine.emulate),
            subpage: engine.subpage,
            write_verify: engine.write_verify,
            stats: Recorder::default(),
            zero_crc,
        };
        let inner = Arc::new(Inner {
            blocks: Blocks { path, mode },
            batch,
            protect,
            stripes: Stripes::default(),
            max_request: engine.max_request,
            sb: Mutex::new((found.current.clone(), found.slot)),
            closed: AtomicBool::new(false),
            notes,
            was_clean,
            read_only,
        });
        let dev = Device {
            inner,
            syncers: Mutex::new(vec![]),
        };
        if read_only {
            return Ok(dev);
        }
        // Mark the device in use before the first write can reach it.
        dev.inner.update_superblock(|sb| {
            sb.clean = false;
            sb.opens = sb.opens.saturating_add(1);
            sb.last_protect = Some(protect);
            sb.last_write = Some(engine.write);
        })?;
        if dev.inner.batch.is_some() {
            *dev.syncers.lock() = spawn_syncers(&dev.inner);
        }
        Ok(dev)
    }

    /// Read `dst.len()` bytes at byte offset `off` (both multiples of the block size).
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        let i = &*self.inner;
        let t0 = cycles();
        let b0 = i.check(off, dst.len())?;
        let _g = i.stripes.lock(i.layout().lock_off(b0), dst.len(), false);
        i.check_open()?;
        i.read_locked(b0, dst)?;
        i.count_read(dst.len() as u64, t0);
        Ok(())
    }

    /// Write `src` at byte offset `off`. With `fua`, the data is durable when this returns;
    /// without, it is durable after the next [`Device::flush`].
    pub fn write(&self, off: u64, src: &[u8], fua: bool) -> Result<()> {
        let i = &*self.inner;
        let t0 = cycles();
        let b0 = i.check(off, src.len())?;
        let _g = i.stripes.lock(i.layout().lock_off(b0), src.len(), true);
        i.check_open()?;
        i.write_locked(b0, src, fua)?;
        i.count_write(src.len() as u64, fua, t0);
        Ok(())
    }

    /// Read `dst.len()` bytes at any byte offset (a front end's sub-block read). Partial
    /// blocks are read whole into a stack buffer and the asked-for bytes copied out.
    pub fn read_bytes(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        let i = &*self.inner;
        if i.is_whole_blocks(off, dst.len()) {
            return self.read(off, dst);
        }
        let t0 = cycles();
        let len = dst.len() as u64;
        i.for_each_piece(off, len, false, |first, at, done, n| {
            i.read_piece_locked(first, at, &mut dst[done..done + n])
        })?;
        i.count_read(len, t0);
        Ok(())
    }

    /// Write `src` at any byte offset (a front end's sub-block write). A partial block is
    /// read, patched and written back while its stripe is held exclusively, so concurrent
    /// writes to different bytes of one block all survive. Durability as for [`Device::write`].
    pub fn write_bytes(&self, off: u64, src: &[u8], fua: bool) -> Result<()> {
        let i = &*self.inner;
        if i.is_whole_blocks(off, src.len()) {
            return self.write(off, src, fua);
        }
        let t0 = cycles();
        i.for_each_piece(off, src.len() as u64, true, |first, at, done, n| {
            i.patch_locked(first, at, Some(&src[done..done + n]), n, fua)
        })?;
        i.count_write(src.len() as u64, fua, t0);
        Ok(())
    }

    /// Write zeroes over `[off, off+len)` at any byte offset: whole blocks as
    /// [`Device::write_zeroes`], partial edges read-modify-written as in [`Device::write_bytes`].
    pub fn write_zeroes_bytes(&self, off: u64, len: u64, fua: bool) -> Result<()> {
        let i = &*self.inner;
        if len > 0 && i.is_whole_blocks(off, 0) && len.is_multiple_of(i.layout().block_size as u64)
        {
            return self.write_zeroes(off, len, fua);
        }
        i.for_each_piece(off, len, true, |first, at, _, n| {
            i.patch_locked(first, at, None, n, fua)
        })?;
        i.stats().add(Ctr::WriteZeroes, 1);
        i.stats().add(Ctr::WriteZeroBytes, len);
        Ok(())
    }

    /// Write barrier: wait for writes in flight, then make every completed write durable.
    /// Read-only, there are none: it succeeds at once.
    pub fn flush(&self) -> Result<()> {
        let i = &*self.inner;
        i.check_open()?;
        if i.read_only {
            return Ok(());
        }
        let t0 = cycles();
        i.flush_all()?;
        i.stats().add(Ctr::Flushes, 1);
        i.stats().latency(Op::Flush, cycles().wrapping_sub(t0));
        Ok(())
    }

    /// Discard `[off, off+len)`: the range reads back as zeroes. Durable after the next flush.
    pub fn trim(&self, off: u64, len: u64) -> Result<()> {
        self.inner.zero_range(off, len, false)?;
        self.inner.stats().add(Ctr::Trims, 1);
        self.inner.stats().add(Ctr::TrimBytes, len);
        Ok(())
    }

    /// Write zeroes over `[off, off+len)`, durable on return with `fua`.
    pub fn write_zeroes(&self, off: u64, len: u64, fua: bool) -> Result<()> {
        self.inner.zero_range(off, len, fua)?;
        self.inner.stats().add(Ctr::WriteZeroes, 1);
        self.inner.stats().add(Ctr::WriteZeroBytes, len);
        Ok(())
    }

    pub fn block_size(&self) -> u32 {
        self.inner.layout().block_size
    }

    /// Usable bytes (blocks × block size).
    pub fn capacity(&self) -> u64 {
        self.inner.layout().capacity()
    }

    /// Largest request accepted, in bytes.
    pub fn max_request(&self) -> usize {
        self.inner.max_request
    }

    pub fn protect(&self) -> Protect {
        self.inner.protect
    }

    pub fn write_scheme(&self) -> WriteScheme {
        self.inner.path().persister.scheme()
    }

    /// Whether the previous user closed the device cleanly.
    pub fn was_clean(&self) -> bool {
        self.inner.was_clean
    }

    /// Whether the device was opened read-only (writes fail with [`BlkError::ReadOnly`]).
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// Things the user should know about this open (fallbacks, unclean shutdown, mapping).
    pub fn notes(&self) -> &[String] {
        &self.inner.notes
    }

    pub fn info(&self) -> DeviceInfo {
        let i = &*self.inner;
        DeviceInfo {
            superblock: i.sb.lock().0.clone(),
            block_size: i.layout().block_size,
            capacity: i.layout().capacity(),
            checksum: i.layout().checksum(),
            atomic: i.layout().atomic(),
            lanes: i.blocks.atomic().map_or(0, |a| a.lanes()),
            free_blocks: i
                .blocks
                .atomic()
                .map_or(0, |a| a.free_blocks().len() as u64),
            protect: i.protect,
            write: i.path().persister.scheme(),
            was_clean: i.was_clean,
            read_only: i.read_only,
            notes: i.notes.clone(),
        }
    }

    pub fn stats(&self) -> Stats {
        let i = &*self.inner;
        i.stats().snapshot(
            i.path().media.gate().windows_opened(),
            i.batch.as_ref().map(|b| b.stats()),
        )
    }

    /// Atomic devices: every free physical block now, sorted (empty on a plain device). With
    /// no write in flight, these are exactly the blocks no map entry names.
    pub fn free_blocks(&self) -> Vec<u32> {
        self.inner
            .blocks
            .atomic()
            .map_or(vec![], |a| a.free_blocks())
    }

    /// The media under the device (for tests and tools; never write through it).
    pub fn media(&self) -> &M {
        self.inner.path().media.inner()
    }

    /// Drain buffers, make everything durable, stop the syncers, give the region back its
    /// ordinary rights and mark the device clean. Requests after this fail with `Closed`.
    /// Calling it again does nothing.
    pub fn close(&self) -> Result<()> {
        let i = &*self.inner;
        if i.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        // Requests check `closed` after taking their stripes, so after this no write runs.
        i.stripes.wait_idle();
        self.stop_syncers();
        if !i.read_only {
            i.flush_all()?;
            i.update_superblock(|sb| sb.clean = true)?;
        }
        let path = i.path();
        path.media.unprotect()?;
        if let Some(region) = path.media.mapping() {
            region.unlock();
        }
        Ok(())
    }

    fn stop_syncers(&self) {
        if let Some(b) = &self.inner.batch {
            b.stop();
        }
        for h in self.syncers.lock().drain(..) {
            let _ = h.join();
        }
    }
}

impl<M: Media + 'static> Drop for Device<M> {
    fn drop(&mut self) {
        if !self.inner.closed.load(Ordering::SeqCst) && !self.inner.read_only {
            // Not closed: keep acknowledged data (drain and flush) but leave the device marked
            // unclean, as a crash would.
            tracing::warn!(
                "block device dropped without close(); it stays marked not cleanly shut down"
            );
            self.inner.closed.store(true, Ordering::SeqCst);
            self.stop_syncers();
            if let Err(e) = self.inner.flush_all() {
                tracing::error!("flush while dropping the block device failed: {e}");
            }
            let path = self.inner.path();
            let _ = path.media.unprotect();
        }
    }
}

/// What a read-only open tells the user about protection.
fn read_only_note(asked: Option<Protect>) -> String {
    let ignored = match asked {
        Some(p) if p != Protect::None => format!(" (--protect {p} does not apply)"),
        _ => String::new(),
    };
    format!(
        "opened read-only: nothing is written, not even the superblock's in-use mark; protection \
         is none{ignored}: the PROT_READ mapping already faults on any store, and pt, pt-batch, \
         private and pkey all need write rights to toggle"
    )
}

fn slot_name(i: usize) -> char {
    [b'A', b'B'][i] as char
}

fn check_scheme(w: WriteScheme) -> Result<()> {
    if !w.available() {
        return Err(BlkError::SchemeUnavailable(w.name()));
    }
    Ok(())
}

/// One syncer thread per pt-batch buffer, each holding the device until [`Batch::stop`].
fn spawn_syncers<M: Media + 'static>(inner: &Arc<Inner<M>>) -> Vec<JoinHandle<()>> {
    let n = inner.batch.as_ref().map_or(0, |b| b.buffers());
    (0..n)
        .map(|i| {
            let inner = Arc::clone(inner);
            std::thread::Builder::new()
                .name(format!("pmbd-sync{i}"))
                .spawn(move || {
                    let batch = inner.batch.as_ref().expect("pt-batch device");
                    batch.run_syncer(&inner.blocks, i);
                })
                .expect("cannot spawn a pmbd syncer thread")
        })
        .collect()
}

impl<M: Media + 'static> Inner<M> {
    #[inline]
    fn path(&self) -> &DataPath<M> {
        &self.blocks.path
    }

    #[inline]
    fn layout(&self) -> &Layout {
        &self.blocks.path.layout
    }

    #[inline]
    fn stats(&self) -> &Recorder {
        &self.blocks.path.stats
    }

    /// Count a completed read of `bytes` that started at TSC `t0`.
    #[inline]
    fn count_read(&self, bytes: u64, t0: u64) {
        self.stats().add(Ctr::Reads, 1);
        self.stats().add(Ctr::ReadBytes, bytes);
        self.stats().latency(Op::Read, cycles().wrapping_sub(t0));
    }

    /// Count a completed write of `bytes` that started at TSC `t0`.
    #[inline]
    fn count_write(&self, bytes: u64, fua: bool, t0: u64) {
        self.stats().add(Ctr::Writes, 1);
        self.stats().add(Ctr::WriteBytes, bytes);
        if fua {
            self.stats().add(Ctr::FuaWrites, 1);
        }
        self.stats().latency(Op::Write, cycles().wrapping_sub(t0));
    }

    /// Validate a request; returns its first block. Counts rejections.
    #[inline]
    fn check(&self, off: u64, len: usize) -> Result<u64> {
        let r = self.check_range(off, len as u64, self.max_request as u64);
        if r.is_err() {
            self.stats().add(Ctr::Rejected, 1);
        }
        r
    }

    /// A range of whole blocks inside the device and no longer than `max`.
    fn check_range(&self, off: u64, len: u64, max: u64) -> Result<u64> {
        let bs = self.layout().block_size;
        if len == 0 {
            return Err(BlkError::ZeroLength { off });
        }
        if len > max {
            return Err(BlkError::TooLarge { len, max });
        }
        // Block sizes are powers of two (512 or 4096).
        let mask = bs as u64 - 1;
        if off & mask != 0 || len & mask != 0 {
            return Err(BlkError::Misaligned {
                off,
                len,
                block_size: bs,
            });
        }
        self.check_bounds(off, len)?;
        Ok(off / bs as u64)
    }

    /// `[off, off+len)` lies inside the device.
    fn check_bounds(&self, off: u64, len: u64) -> Result<()> {
        let capacity = self.layout().capacity();
        if off.checked_add(len).is_none_or(|end| end > capacity) {
            return Err(BlkError::OutOfRange { off, len, capacity });
        }
        Ok(())
    }

    /// A request the block path takes as it is: whole blocks, within one request's limit.
    #[inline]
    fn is_whole_blocks(&self, off: u64, len: usize) -> bool {
        let mask = self.layout().block_size as u64 - 1;
        off & mask == 0 && len as u64 & mask == 0 && len <= self.max_request
    }

    #[inline]
    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(BlkError::Closed);
        }
        Ok(())
    }

    /// A write, with the request's stripes held exclusively. Every store of data (writes,
    /// trims, zeroing, read-modify-writes) comes through here, so read-only refuses them here.
    #[inline]
    fn write_locked(&self, b0: u64, src: &[u8], fua: bool) -> Result<()> {
        if self.read_only {
            self.stats().add(Ctr::Rejected, 1);
            return Err(BlkError::ReadOnly);
        }
        match &self.batch {
            Some(b) => b.write(&self.blocks, b0, src, fua),
            None => self.blocks.write(b0, src, fua),
        }
    }

    /// A read, with the request's stripes held (shared or exclusively).
    #[inline]
    fn read_locked(&self, b0: u64, dst: &mut [u8]) -> Result<()> {
        match &self.batch {
            Some(b) => b.read(&self.blocks, b0, dst),
            None => self.blocks.read(b0, dst),
        }
    }

    fn zero_range(&self, off: u64, len: u64, fua: bool) -> Result<()> {
        // Ranges may be larger than one request's limit: check the whole, then go in chunks.
        if let Err(e) = self.check_range(off, len, u64::MAX) {
            self.stats().add(Ctr::Rejected, 1);
            return Err(e);
        }
        let bs = self.layout().block_size as u64;
        let mut pos = off;
        while pos < off + len {
            let n = (off + len - pos).min(ZEROES.len() as u64);
            let b0 = pos / bs;
            let _g = self
                .stripes
                .lock(self.layout().lock_off(b0), n as usize, true);
            self.check_open()?;
            self.write_locked(b0, &ZEROES[..n as usize], fua)?;
            pos += n;
        }
        Ok(())
    }

    /// Bytes `[off, off+len)` at any alignment, in pieces whose covering blocks fit one
    /// request: `piece(first block, offset of the piece in its first block, bytes done so far,
    /// piece length)` runs with the covering blocks' stripes held (`exclusive` for writes), so a
    /// partial block is read, patched and written back with no other writer in between.
    fn for_each_piece(
        &self,
        off: u64,
        len: u64,
        exclusive: bool,
        mut piece: impl FnMut(u64, usize, usize, usize) -> Result<()>,
    ) -> Result<()> {
        if len == 0 {
            self.stats().add(Ctr::Rejected, 1);
            return Err(BlkError::ZeroLength { off });
        }
        if let Err(e) = self.check_bounds(off, len) {
            self.stats().add(Ctr::Rejected, 1);
            return Err(e);
        }
        let bs = self.layout().block_size as u64;
        // Whole blocks per piece; at least one, so a tiny max_request still makes progress.
        let span = (self.max_request as u64 / bs).max(1) * bs;
        let mut pos = off;
        while pos < off + len {
            let first = pos / bs;
            let start = first * bs;
            let n = (off + len - pos).min(start + span - pos);
            let end = (pos + n).div_ceil(bs) * bs;
            debug_assert!(end - start <= span.max(bs));
            let _g = self.stripes.lock(
                self.layout().lock_off(first),
                (end - start) as usize,
                exclusive,
            );
            self.check_open()?;
            piece(
                first,
                (pos - start) as usize,
                (pos - off) as usize,
                n as usize,
            )?;
            pos += n;
        }
        Ok(())
    }

    /// Store `src` (or zeroes) at byte `at` of the blocks from `first`; the caller holds their
    /// stripes exclusively. Whole blocks go straight down; a partial block at either end is
    /// read, patched and written back.
    fn patch_locked(
        &self,
        first: u64,
        at: usize,
        src: Option<&[u8]>,
        len: usize,
        fua: bool,
    ) -> Result<()> {
        let bs = self.layout().block_size as usize;
        let mut block = first;
        let (mut in_block, mut done) = (at, 0);
        while done < len {
            let n = (bs - in_block).min(len - done);
            if in_block == 0 && n == bs {
                // Whole blocks: as many as are left, in one write.
                let whole = (len - done) / bs * bs;
                match src {
                    Some(s) => self.write_locked(block, &s[done..done + whole], fua)?,
                    None => {
                        let mut z = 0;
                        while z < whole {
                            let k = (whole - z).min(ZEROES.len());
                            self.write_locked(block + (z / bs) as u64, &ZEROES[..k], fua)?;
                            z += k;
                        }
                    }
                }
                block += (whole / bs) as u64;
                done += whole;
                continue;
            }
            let mut buf = [0u8; MAX_BLOCK];
            let buf = &mut buf[..bs];
            self.read_locked(block, buf)?;
            match src {
                Some(s) => buf[in_block..in_block + n].copy_from_slice(&s[done..done + n]),
                None => buf[in_block..in_block + n].fill(0),
            }
            self.write_locked(block, buf, fua)?;
            self.stats().add(Ctr::PartialBlocks, 1);
            block += 1;
            in_block = 0;
            done += n;
        }
        Ok(())
    }

    /// Copy bytes at byte `at` of the blocks from `first` into `dst`; the caller holds their
    /// stripes. Whole blocks are read straight into `dst`.
    fn read_piece_locked(&self, first: u64, at: usize, dst: &mut [u8]) -> Result<()> {
        let bs = self.layout().block_size as usize;
        let mut block = first;
        let (mut in_block, mut done) = (at, 0);
        while done < dst.len() {
            let n = (bs - in_block).min(dst.len() - done);
            if in_block == 0 && n == bs {
                let whole = (dst.len() - done) / bs * bs;
                self.read_locked(block, &mut dst[done..done + whole])?;
                block += (whole / bs) as u64;
                done += whole;
                continue;
            }
            let mut buf = [0u8; MAX_BLOCK];
            let buf = &mut buf[..bs];
            if let Err(e) = self.read_locked(block, buf) {
                dst.fill(0); // never hand out part of a failed read
                return Err(e);
            }
            dst[done..done + n].copy_from_slice(&buf[in_block..in_block + n]);
            block += 1;
            in_block = 0;
            done += n;
        }
        Ok(())
    }

    /// The write barrier (Table III of the PMBD paper): wait for writes in flight, drain
    /// staging buffers, then the blocks' barrier (settle atomic lanes; a fence; flush of dirty
    /// pages for `wb`; msync of dirty pages for `msync`).
    fn flush_all(&self) -> Result<()> {
        self.stripes.wait_idle();
        if let Some(b) = &self.batch {
            b.drain_all(&self.blocks)?;
        }
        self.blocks.barrier()
    }

    /// Change the superblock and publish it in the other slot (crash-safe: see superblock.rs).
    fn update_superblock(&self, f: impl FnOnce(&mut Superblock)) -> Result<()> {
        let mut current = self.sb.lock();
        let mut next = current.0.clone();
        f(&mut next);
        // A slot at MAX_SEQ or beyond reads as corrupt, so the last generation is never
        // written (2^63 updates: unreachable, but a corrupt-yet-CRC-valid slot may claim it).
        next.seq = current
            .0
            .seq
            .checked_add(1)
            .filter(|&seq| seq < superblock::MAX_SEQ)
            .ok_or_else(|| BlkError::BadSuperblock {
                why: format!(
                    "generation {} is the last one a superblock can have; format the device again",
                    current.0.seq
                ),
            })?;
        let slot = 1 - current.1;
        let off = superblock::SLOT_OFF[slot] as usize;
        let path = self.path();
        path.media
            .with_write(off, SLOT_LEN, |v| superblock::write_slot(v, slot, &next))?;
        *current = (next, slot);
        Ok(())
    }
}
