//! The device: request checking, locking, and the one data path every protection mode and
//! write scheme shares.

use crate::atomic::{self, Lanes, MapCache};
use crate::batch::Batch;
use crate::error::{BlkError, Result};
use crate::gate::{Gate, View, WindowCount};
use crate::options::{CreateOptions, EngineOptions, Protect};
use crate::stats::{Ctr, Op, Recorder, Stats};
use crate::stripes::Stripes;
use crate::superblock::{self, Layout, Superblock, PAGE, SLOT_LEN};
use parking_lot::Mutex;
use pmkit_media::emulate::{cycles, Emulator};
use pmkit_media::{Media, Persister, RegionKind, WriteScheme, LINE};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Zeroes for trim and write-zeroes (a whole number of blocks of either size).
static ZEROES: [u8; 64 << 10] = [0; 64 << 10];
/// Blocks whose CRCs are handled in one stack buffer.
const CRC_CHUNK: usize = 256;
pub(crate) const MAX_BLOCK: usize = 4096;

/// Whether `s` lies in the static zero buffer (its CRC is known without computing it).
#[inline]
pub(crate) fn is_zeroes(s: &[u8]) -> bool {
    ZEROES.as_ptr_range().contains(&s.as_ptr())
}

/// A PMBD block device on media `M`. All methods take `&self` and are safe to call from many
/// threads at once; each request runs to completion in the calling thread.
pub struct Device<M: Media + 'static> {
    inner: Arc<Inner<M>>,
    syncers: Mutex<Vec<JoinHandle<()>>>,
}

pub(crate) struct Inner<M: Media + 'static> {
    // Field order is drop order: the media (mapping) goes before the gate (protection key).
    pub(crate) media: M,
    pub(crate) gate: Gate,
    pub(crate) layout: Layout,
    pub(crate) persister: Persister,
    pub(crate) protect: Protect,
    stripes: Stripes,
    pub(crate) emu: Emulator,
    subpage: bool,
    pub(crate) write_verify: bool,
    /// Free physical blocks of an atomic device (rebuilt from the map at open).
    pub(crate) lanes: Option<Lanes>,
    /// DRAM copy of an atomic device's map.
    pub(crate) map_cache: Option<MapCache>,
    max_request: usize,
    pub(crate) stats: Recorder,
    pub(crate) windows: WindowCount,
    pub(crate) batch: Option<Batch>,
    /// The superblock in force and the slot it lives in.
    sb: Mutex<(Superblock, usize)>,
    closed: AtomicBool,
    notes: Vec<String>,
    was_clean: bool,
    pub(crate) zero_crc: u32,
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
    pub notes: Vec<String>,
}

impl<M: Media + 'static> Device<M> {
    /// Format `media` as a new device, then open it.
    pub fn create(media: M, create: &CreateOptions, engine: &EngineOptions) -> Result<Device<M>> {
        create.validate()?;
        check_scheme(engine.write)?;
        let layout = Layout::compute(
            media.len() as u64,
            create.block_size,
            create.checksum,
            create.atomic,
        )?;
        format(&media, layout, create.zero_data, engine.write)?;
        Device::open(media, engine)
    }

    /// Open a device created earlier. A device not closed cleanly is opened all the same and
    /// says so in [`Device::was_clean`] and [`Device::notes`].
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
        let (lanes, map_cache) = if layout.atomic() {
            let scan = atomic::scan_map(&media, &layout);
            if scan.problems > 0 {
                return Err(BlkError::MapCorrupt {
                    why: format!(
                        "{} problem(s), first: {}",
                        scan.problems,
                        scan.examples.first().map_or("", |s| s.as_str())
                    ),
                });
            }
            (Some(Lanes::new(&scan.free)), Some(MapCache::new(&scan.map)))
        } else {
            (None, None)
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
        let (protect, gate) = resolve_protect(&media, engine, &mut notes)?;
        if protect == Protect::PtBatch {
            engine.batch.validate(layout.block_size)?;
        }
        let persister = Persister::new(engine.write, media.len(), media.domain());
        let batch =
            (protect == Protect::PtBatch).then(|| Batch::new(&engine.batch, layout.block_size));
        gate.protect(media.mapping())?;
        let zero_crc = crc32c::crc32c(&ZEROES[..layout.block_size as usize]);
        let inner = Arc::new(Inner {
            media,
            gate,
            layout,
            persister,
            protect,
            stripes: Stripes::default(),
            emu: Emulator::new(engine.emulate),
            subpage: engine.subpage,
            write_verify: engine.write_verify,
            lanes,
            map_cache,
            max_request: engine.max_request,
            stats: Recorder::default(),
            windows: WindowCount::default(),
            batch,
            sb: Mutex::new((found.current.clone(), found.slot)),
            closed: AtomicBool::new(false),
            notes,
            was_clean,
            zero_crc,
        });
        let dev = Device {
            inner,
            syncers: Mutex::new(vec![]),
        };
        // Mark the device in use before the first write can reach it.
        dev.inner.update_superblock(|sb| {
            sb.clean = false;
            sb.opens += 1;
            sb.last_protect = Some(protect);
            sb.last_write = Some(engine.write);
        })?;
        if dev.inner.batch.is_some() {
            *dev.syncers.lock() = Batch::spawn_syncers(&dev.inner);
        }
        Ok(dev)
    }

    /// Read `dst.len()` bytes at byte offset `off` (both multiples of the block size).
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        let i = &*self.inner;
        let t0 = cycles();
        let b0 = i.check(off, dst.len())?;
        let _g = i.stripes.lock(i.layout.lock_off(b0), dst.len(), false);
        i.check_open()?;
        match &i.batch {
            Some(b) => b.read(i, b0, dst)?,
            None => i.read_pm(b0, dst)?,
        }
        i.stats.add(Ctr::Reads, 1);
        i.stats.add(Ctr::ReadBytes, dst.len() as u64);
        i.stats.latency(Op::Read, cycles().wrapping_sub(t0));
        Ok(())
    }

    /// Write `src` at byte offset `off`. With `fua`, the data is durable when this returns;
    /// without, it is durable after the next [`Device::flush`].
    pub fn write(&self, off: u64, src: &[u8], fua: bool) -> Result<()> {
        let i = &*self.inner;
        let t0 = cycles();
        let b0 = i.check(off, src.len())?;
        let _g = i.stripes.lock(i.layout.lock_off(b0), src.len(), true);
        i.check_open()?;
        i.write_locked(b0, src, fua)?;
        i.stats.add(Ctr::Writes, 1);
        i.stats.add(Ctr::WriteBytes, src.len() as u64);
        if fua {
            i.stats.add(Ctr::FuaWrites, 1);
        }
        i.stats.latency(Op::Write, cycles().wrapping_sub(t0));
        Ok(())
    }

    /// Write barrier: wait for writes in flight, then make every completed write durable.
    pub fn flush(&self) -> Result<()> {
        let i = &*self.inner;
        i.check_open()?;
        let t0 = cycles();
        i.flush_all()?;
        i.stats.add(Ctr::Flushes, 1);
        i.stats.latency(Op::Flush, cycles().wrapping_sub(t0));
        Ok(())
    }

    /// Discard `[off, off+len)`: the range reads back as zeroes. Durable after the next flush.
    pub fn trim(&self, off: u64, len: u64) -> Result<()> {
        self.inner.zero_range(off, len, false)?;
        self.inner.stats.add(Ctr::Trims, 1);
        self.inner.stats.add(Ctr::TrimBytes, len);
        Ok(())
    }

    /// Write zeroes over `[off, off+len)`, durable on return with `fua`.
    pub fn write_zeroes(&self, off: u64, len: u64, fua: bool) -> Result<()> {
        self.inner.zero_range(off, len, fua)?;
        self.inner.stats.add(Ctr::WriteZeroes, 1);
        self.inner.stats.add(Ctr::WriteZeroBytes, len);
        Ok(())
    }

    pub fn block_size(&self) -> u32 {
        self.inner.layout.block_size
    }

    /// Usable bytes (blocks × block size).
    pub fn capacity(&self) -> u64 {
        self.inner.layout.capacity()
    }

    /// Largest request accepted, in bytes.
    pub fn max_request(&self) -> usize {
        self.inner.max_request
    }

    pub fn protect(&self) -> Protect {
        self.inner.protect
    }

    pub fn write_scheme(&self) -> WriteScheme {
        self.inner.persister.scheme()
    }

    /// Whether the previous user closed the device cleanly.
    pub fn was_clean(&self) -> bool {
        self.inner.was_clean
    }

    /// Things the user should know about this open (fallbacks, unclean shutdown, mapping).
    pub fn notes(&self) -> &[String] {
        &self.inner.notes
    }

    pub fn info(&self) -> DeviceInfo {
        let i = &*self.inner;
        DeviceInfo {
            superblock: i.sb.lock().0.clone(),
            block_size: i.layout.block_size,
            capacity: i.layout.capacity(),
            checksum: i.layout.checksum(),
            atomic: i.layout.atomic(),
            lanes: i.lanes.as_ref().map_or(0, |l| l.count()),
            free_blocks: i.lanes.as_ref().map_or(0, |l| l.free_blocks().len() as u64),
            protect: i.protect,
            write: i.persister.scheme(),
            was_clean: i.was_clean,
            notes: i.notes.clone(),
        }
    }

    pub fn stats(&self) -> Stats {
        let i = &*self.inner;
        i.stats.snapshot(
            i.windows.opened.load(Ordering::Relaxed),
            i.batch.as_ref().map(|b| b.stats()),
        )
    }

    /// Atomic devices: every free physical block now, sorted (empty on a plain device). With
    /// no write in flight, these are exactly the blocks no map entry names.
    pub fn free_blocks(&self) -> Vec<u32> {
        self.inner
            .lanes
            .as_ref()
            .map_or(vec![], |l| l.free_blocks())
    }

    /// The media under the device (for tests and tools; never write through it).
    pub fn media(&self) -> &M {
        &self.inner.media
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
        i.flush_all()?;
        i.update_superblock(|sb| sb.clean = true)?;
        i.gate.unprotect(i.media.mapping())?;
        if let Some(r) = i.media.mapping() {
            crate::path::unlock(r);
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
        if !self.inner.closed.load(Ordering::SeqCst) {
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
            let _ = self.inner.gate.unprotect(self.inner.media.mapping());
        }
    }
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

/// Lay out a fresh device: invalidate any old superblock, zero the data (if asked) and the
/// checksum table, then write both superblock slots.
fn format<M: Media>(m: &M, layout: Layout, zero_data: bool, scheme: WriteScheme) -> Result<()> {
    let p = Persister::new(scheme, m.len(), m.domain());
    // Old superblocks first, so a crash mid-format never leaves a valid-looking device.
    p.zero(m, 0, PAGE as usize);
    p.barrier(m)?;
    if layout.atomic() {
        format_map(m, &p, layout, zero_data);
    } else if zero_data {
        p.zero(m, layout.data_off as usize, layout.capacity() as usize);
    }
    if layout.checksum() && !layout.atomic() {
        let crc = crc32c::crc32c(&ZEROES[..layout.block_size as usize]).to_le_bytes();
        let mut page = [0u8; PAGE as usize];
        for c in page.chunks_mut(4) {
            c.copy_from_slice(&crc);
        }
        let table = (layout.data_off - layout.csum_off) as usize;
        let mut done = 0;
        while done < table {
            let n = (table - done).min(page.len());
            p.write(m, layout.csum_off as usize + done, &page[..n]);
            done += n;
        }
    }
    p.fence(m);
    p.barrier(m)?;
    let mut sb = Superblock::new(layout);
    superblock::write_slot(m, 1, &sb);
    sb.seq += 1;
    superblock::write_slot(m, 0, &sb);
    Ok(())
}

/// Atomic layout: logical block `i` starts on physical block `i` (zeroed if asked, with the
/// zero block's CRC when checksums are on); blocks `nblocks..` are the spares.
fn format_map<M: Media>(m: &M, p: &Persister, layout: Layout, zero_data: bool) {
    if zero_data {
        p.zero(m, layout.data_off as usize, layout.capacity() as usize);
    }
    let crc = if layout.checksum() {
        crc32c::crc32c(&ZEROES[..layout.block_size as usize])
    } else {
        0
    };
    let mut page = [0u8; PAGE as usize];
    let per_page = PAGE / superblock::MAP_ENTRY;
    let mut b = 0u64;
    while b < layout.nblocks {
        let n = (layout.nblocks - b).min(per_page);
        for k in 0..n {
            let e = atomic::entry(b + k, crc);
            page[k as usize * 8..k as usize * 8 + 8].copy_from_slice(&e.to_le_bytes());
        }
        p.write(m, layout.map_entry_off(b), &page[..n as usize * 8]);
        b += n;
    }
}

/// Pick the protection mode and build its gate, applying the user's fallback for pkey.
fn resolve_protect<M: Media + 'static>(
    m: &M,
    o: &EngineOptions,
    notes: &mut Vec<String>,
) -> Result<(Protect, Gate)> {
    let region = m.mapping();
    let file_backed = region.is_some_and(|r| r.file().is_some() && r.kind() != RegionKind::DevDax);
    let pku = pmkit_media::features().pku;
    let why_not = |p: Protect| -> Option<String> {
        match p {
            Protect::None => None,
            _ if region.is_none() => Some("it needs a real mapping (this media is a simulator)".into()),
            Protect::Pkey if !pku => Some("this CPU or kernel has no memory protection keys (pku/ospke)".into()),
            Protect::Private if !file_backed => {
                Some("it needs a region backed by a regular or DAX file (not anonymous memory or device-dax)".into())
            }
            _ => None,
        }
    };
    let want = match o.protect {
        Some(p) => p,
        None if region.is_some() && pku => Protect::Pkey,
        None => {
            let p = if file_backed {
                Protect::Private
            } else if region.is_some() {
                Protect::Pt
            } else {
                Protect::None
            };
            notes.push(format!(
                "default protection pkey is not available here; using {p}"
            ));
            p
        }
    };
    let build = |p: Protect| -> Result<Gate> {
        if let Some(why) = why_not(p) {
            return Err(BlkError::ProtectUnavailable {
                mode: p.name(),
                why,
            });
        }
        Ok(match p {
            Protect::None => Gate::Open,
            Protect::Pt | Protect::PtBatch => Gate::Pages {
                locks: Stripes::default(),
            },
            Protect::Private => Gate::Private,
            Protect::Pkey => Gate::Pkey(pmkit_media::protect::Pkey::alloc().map_err(|e| {
                BlkError::ProtectUnavailable {
                    mode: "pkey",
                    why: format!("cannot allocate a protection key: {e}"),
                }
            })?),
        })
    };
    match build(want) {
        Ok(g) => Ok((want, g)),
        Err(BlkError::ProtectUnavailable { why, .. })
            if want == Protect::Pkey && o.pkey_fallback.is_some() =>
        {
            let fb = o.pkey_fallback.unwrap();
            notes.push(format!(
                "pkey protection is not available ({why}); falling back to {fb} as asked"
            ));
            Ok((fb, build(fb)?))
        }
        Err(BlkError::ProtectUnavailable { mode, why }) => Err(BlkError::ProtectUnavailable {
            mode,
            why: format!("{why}; choose another protection mode (or a pkey fallback)"),
        }),
        Err(e) => Err(e),
    }
}

impl<M: Media + 'static> Inner<M> {
    /// Validate a request; returns its first block. Counts rejections.
    #[inline]
    fn check(&self, off: u64, len: usize) -> Result<u64> {
        let r = self.check_range(off, len as u64);
        if r.is_err() {
            self.stats.add(Ctr::Rejected, 1);
        }
        r
    }

    fn check_range(&self, off: u64, len: u64) -> Result<u64> {
        let bs = self.layout.block_size;
        if len == 0 {
            return Err(BlkError::ZeroLength { off });
        }
        if len > self.max_request as u64 {
            return Err(BlkError::TooLarge {
                len,
                max: self.max_request as u64,
            });
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
        let cap = self.layout.capacity();
        if off.checked_add(len).is_none_or(|end| end > cap) {
            return Err(BlkError::OutOfRange {
                off,
                len,
                capacity: cap,
            });
        }
        Ok(off / bs as u64)
    }

    #[inline]
    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(BlkError::Closed);
        }
        Ok(())
    }

    /// A write, with the request's stripes held exclusively.
    #[inline]
    fn write_locked(&self, b0: u64, src: &[u8], fua: bool) -> Result<()> {
        match &self.batch {
            Some(b) => b.write(self, b0, src, fua),
            None => self.write_pm(b0, src, fua),
        }
    }

    fn zero_range(&self, off: u64, len: u64, fua: bool) -> Result<()> {
        // Ranges may be larger than one request's limit: check the whole, then go in chunks.
        let bs = self.layout.block_size as u64;
        if len == 0 {
            self.stats.add(Ctr::Rejected, 1);
            return Err(BlkError::ZeroLength { off });
        }
        let end = off.checked_add(len);
        if off & (bs - 1) != 0 || len & (bs - 1) != 0 {
            self.stats.add(Ctr::Rejected, 1);
            return Err(BlkError::Misaligned {
                off,
                len,
                block_size: bs as u32,
            });
        }
        if end.is_none_or(|e| e > self.layout.capacity()) {
            self.stats.add(Ctr::Rejected, 1);
            return Err(BlkError::OutOfRange {
                off,
                len,
                capacity: self.layout.capacity(),
            });
        }
        let mut pos = off;
        while pos < off + len {
            let n = (off + len - pos).min(ZEROES.len() as u64);
            let b0 = pos / bs;
            let _g = self
                .stripes
                .lock(self.layout.lock_off(b0), n as usize, true);
            self.check_open()?;
            self.write_locked(b0, &ZEROES[..n as usize], fua)?;
            pos += n;
        }
        Ok(())
    }

    /// Write blocks `b0..` straight to PM: one window for the data, one for their CRCs. The
    /// caller holds the blocks' stripes (or, in pt-batch, the blocks' buffer).
    pub(crate) fn write_pm(&self, b0: u64, src: &[u8], fua: bool) -> Result<()> {
        if self.lanes.is_some() {
            return self.atomic_write(b0, src, fua);
        }
        let moff = self.layout.block_off(b0);
        let len = src.len();
        let p = &self.persister;
        let deferred = p.scheme().deferred();
        self.gate
            .write(&self.media, moff, len, &self.windows, |v| {
                self.emu.write(len, || {
                    if self.subpage {
                        self.store_changed_lines(v, moff, src);
                    } else {
                        p.write(v, moff, src);
                    }
                    p.fence(v);
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
                let crc = if is_zeroes(src) {
                    self.zero_crc
                } else {
                    crc32c::crc32c(blk)
                };
                buf[k * 4..k * 4 + 4].copy_from_slice(&crc.to_le_bytes());
            }
            let coff = self.layout.crc_off(b0 + i as u64);
            let p = &self.persister;
            self.gate
                .write(&self.media, coff, n * 4, &self.windows, |v| {
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
            self.gate.read(&self.media, off, bs, &self.windows, |v| {
                v.read(off, &mut back[..bs])
            })?;
            if back[..bs] != *blk {
                self.stats.add(Ctr::VerifyFailures, 1);
                return Err(BlkError::VerifyFailed {
                    block: b0 + k as u64,
                });
            }
        }
        Ok(())
    }

    /// Read blocks `b0..` from PM and check their CRCs. On a mismatch `dst` is zeroed (never
    /// hand out corrupt data) and the first bad block is named.
    pub(crate) fn read_pm(&self, b0: u64, dst: &mut [u8]) -> Result<()> {
        if self.lanes.is_some() {
            return self.atomic_read(b0, dst);
        }
        let moff = self.layout.block_off(b0);
        let len = dst.len();
        self.gate.read(&self.media, moff, len, &self.windows, |v| {
            self.emu.read(len, || v.read(moff, dst))
        })?;
        if self.layout.checksum() {
            if let Err(e) = self.check_crcs(b0, dst) {
                dst.fill(0);
                self.stats.add(Ctr::ChecksumErrors, 1);
                return Err(e);
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
            self.gate
                .read(&self.media, coff, n * 4, &self.windows, |v| {
                    v.read(coff, &mut buf[..n * 4])
                })?;
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

    /// The write barrier (Table III of seed 000): wait for writes in flight, drain staging
    /// buffers, then the scheme's barrier (a fence; flush of dirty pages for `wb`; msync of
    /// dirty pages for `msync`).
    pub(crate) fn flush_all(&self) -> Result<()> {
        self.stripes.wait_idle();
        if let Some(b) = &self.batch {
            b.drain_all(self)?;
        }
        self.settle_lanes()?;
        self.gate
            .barrier(&self.media, |v| self.persister.barrier(v))??;
        Ok(())
    }

    /// Change the superblock and publish it in the other slot (crash-safe: see superblock.rs).
    fn update_superblock(&self, f: impl FnOnce(&mut Superblock)) -> Result<()> {
        let mut g = self.sb.lock();
        let mut next = g.0.clone();
        f(&mut next);
        next.seq = g.0.seq + 1;
        let slot = 1 - g.1;
        let off = superblock::SLOT_OFF[slot] as usize;
        self.gate
            .write(&self.media, off, SLOT_LEN, &self.windows, |v| {
                superblock::write_slot(v, slot, &next)
            })?;
        *g = (next, slot);
        Ok(())
    }
}
