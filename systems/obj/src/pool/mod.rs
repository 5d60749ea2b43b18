//! The pool: its options, the in-memory object and attachment state, format/open/assemble and
//! the release of a pool. The work is split by job into the child modules.

mod area;
mod attach;
mod binding;
mod checksum;
mod handle;
mod io;
mod objects;
mod recovery;
mod shadow;
mod sync;

pub use handle::Handle;
pub use recovery::{CheckReport, Recovery};

use self::area::{AreaGuard, PmArea};
use self::attach::{Attachment, HandleMap};
use self::recovery::{read_geometry, Scan};
use crate::alloc::Extents;
use crate::bits::PageSet;
use crate::error::{ObjError, Result};
use crate::layout::{self, Descriptor, Geometry, HEADER_LEN, PAGE};
use crate::staging::Cache;
use parking_lot::Mutex;
use pmkit_media::protect::Pkey;
use pmkit_media::{Domain, Fence, Flush, KernelWriter, Media};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most handles attached at once in one pool.
pub const MAX_HANDLES: usize = 4096;
/// Most threads besides the attaching one that may take a keyed attachment's pointer.
pub const MAX_THREADS_PER_HANDLE: usize = 64;

/// How an object is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Access {
    /// Reads see the last published contents; the pages are mapped read-only.
    Read,
    /// Reads and writes go to the shadow; `sync` publishes it.
    ReadWrite,
}

/// How a read-write attachment learns which pages were written (only those are flushed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Tracking {
    /// Write faults on a read-only-mapped shadow where the shadow has addresses (a DRAM
    /// shadow, or a PM shadow on a `Region`), else `Explicit`.
    Auto,
    /// Pages written through [`Handle::write`] or declared with [`Handle::mark_dirty`].
    Explicit,
    /// The first store to each page faults once and is recorded (needs a `Region`).
    Faults,
    /// Every page of the object is flushed at sync (the thesis's behaviour; no tracking cost).
    Whole,
}

/// Where a read-write attachment's shadow (the copy its stores go to) lives. Not persisted:
/// the on-media layout is the same, any pool may be opened with either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Shadow {
    /// A DRAM buffer filled from the current slot at attach; `sync` streams the pages that
    /// must change into the other PM slot with non-temporal stores. Stores are DRAM stores.
    Dram,
    /// The other PM slot itself (the thesis's design): stores go to PM, `sync` writes back the
    /// dirty lines with clwb; the slot is brought up to date at the first access.
    Pm,
}

#[derive(Debug, Clone, Copy)]
pub struct PoolOptions {
    /// Object Table entries (the most objects the pool holds). Used by `format` only.
    pub max_objects: u32,
    /// Keep detached objects inaccessible and read-only attachments read-only with page rights.
    /// Needs media with page tables; ignored by the crash simulator.
    pub protect: bool,
    /// Where shadows live (default: DRAM).
    pub shadow: Shadow,
    /// With `protect` and a DRAM shadow, where the CPU has memory protection keys:
    /// - keep the PM object area behind a key, opened for the library's own copies with a
    ///   per-thread WRPKRU window (no syscall);
    /// - give DRAM buffers keys of their own (while the process-wide budget of 8 buffer keys lasts): attach
    ///   enables the buffer's key in the attaching thread, detach disables it. The pointer then
    ///   works in the attaching thread and in threads that call `as_ptr` themselves; any other
    ///   thread faults.
    ///
    /// `false` (or no keys): see `kernel`.
    pub pkey: bool,
    /// With `protect` and a DRAM shadow, where keys are not used (`pkey` false or no pku):
    /// keep the PM object area mapped read-only for good and write it through the kernel
    /// (`pwrite` on the pool's file), and let DRAM buffers rest read-write (each is refilled
    /// whole at attach, so a stray store into a detached buffer never reaches PM): attach,
    /// sync and detach then make no `mprotect` call (read-only attachments still make their
    /// buffer read-only). Detached objects stay readable; an attached buffer is writable by
    /// every thread. `false` (or media without a file): `mprotect` windows around the
    /// library's copies and `mprotect` of the buffer at attach and detach, which keep
    /// detached objects unreadable too.
    pub kernel: bool,
    /// Give every 4 KiB page of object data a CRC32C (used by `format` only; recorded in the
    /// pool header, so `open` takes it from there). A page that does not match is an error
    /// ([`ObjError::Checksum`], EIO), never data. Default off: the pool is then byte for byte
    /// what it was before checksums existed.
    pub checksum: bool,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            max_objects: 4096,
            protect: true,
            shadow: Shadow::Dram,
            pkey: true,
            kernel: true,
            checksum: false,
        }
    }
}

/// One object as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ObjInfo {
    pub name: String,
    pub index: usize,
    pub size: u64,
    pub capacity: u64,
    pub offset: u64,
    pub slot: u8,
    pub generation: u64,
    pub flags: u32,
    pub attached: Option<Access>,
}

/// Counters of work done on the media (for benchmarks and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    pub syncs: u64,
    pub published: u64,
    pub intents: u64,
    /// Bytes written back with clwb at sync (PM shadow).
    pub bytes_flushed: u64,
    /// PM shadow: bytes copied to bring a shadow slot up to date. DRAM shadow: bytes copied from
    /// PM into DRAM buffers at attach.
    pub bytes_copied: u64,
    /// Object bytes a sync made durable in PM: flushed (PM shadow) or streamed from DRAM.
    pub bytes_synced: u64,
    pub fences: u64,
    /// DRAM shadow attachments served by a buffer with its own protection key (no `mprotect`).
    pub keyed_attaches: u64,
}

/// Work counters. Every update happens under the pool lock, so a counter is bumped with a plain
/// load and store: a locked add would also drain the store buffer (and the non-temporal
/// copies in flight) at that point, which costs more than the copy's own fence.
#[derive(Default)]
struct Counters {
    syncs: AtomicU64,
    published: AtomicU64,
    intents: AtomicU64,
    bytes_flushed: AtomicU64,
    bytes_copied: AtomicU64,
    bytes_synced: AtomicU64,
    fences: AtomicU64,
    keyed_attaches: AtomicU64,
}

/// Add `n` to `counter` (the caller holds the pool lock; see [`Counters`]).
fn add_under_lock(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// Fails with [`ObjError::BadMedia`] naming `what` when the media cannot return a byte of
/// `[off, off+len)`. Asked before every read of PM whose bytes are handed out or relied on;
/// free where the media knows of no errors (a `Region`: the default `first_bad` inlines to
/// `None`, and `what` is never built).
#[inline]
pub(crate) fn check_readable<M: Media>(
    media: &M,
    off: usize,
    len: usize,
    what: impl FnOnce() -> String,
) -> Result<()> {
    match media.first_bad(off, len) {
        None => Ok(()),
        Some(at) => Err(ObjError::BadMedia {
            what: what(),
            media_off: at as u64,
        }),
    }
}

/// The pages of `[off, off+len)` (page aligned) the media cannot return, as a visitor of
/// page indexes relative to `off`. Does nothing where the media knows of no errors.
#[inline]
fn for_each_bad_page<M: Media>(media: &M, off: usize, len: usize, mut visit: impl FnMut(usize)) {
    let mut at = 0;
    while at < len {
        let Some(bad) = media.first_bad(off + at, len - at) else {
            return;
        };
        let page = (bad - off) / PAGE;
        visit(page);
        at = (page + 1) * PAGE;
    }
}

/// One live object as the pool keeps it in DRAM.
struct ObjectState {
    descriptor: Descriptor,
    /// The published state word (live bit, current slot, generation).
    word: u64,
    /// Pages where the non-current slot differs from the current one (all pages after open,
    /// none after create).
    stale: PageSet,
    readers: u32,
    /// The handle attached read-write, if any.
    writer: Option<u64>,
}

impl ObjectState {
    fn pages(&self) -> usize {
        self.descriptor.cap as usize / PAGE
    }
    fn capacity(&self) -> usize {
        self.descriptor.cap as usize
    }
    /// The slot the published word names.
    fn current_slot(&self) -> u8 {
        layout::state_slot(self.word)
    }
    /// Media offset of `slot`.
    fn slot_offset(&self, slot: u8) -> usize {
        self.descriptor.slot_off(slot)
    }
    /// What a media error in `slot` is reported as.
    fn slot_what(&self, slot: u8) -> String {
        format!("object {:?} (slot {slot})", self.descriptor.name)
    }
    /// Fails with [`ObjError::BadMedia`] when a byte of the published slot cannot be read.
    fn check_published<M: Media>(&self, media: &M) -> Result<()> {
        let slot = self.current_slot();
        check_readable(media, self.slot_offset(slot), self.capacity(), || {
            self.slot_what(slot)
        })
    }
    /// Record in `stale` the pages of `slot` (not the current one) the media cannot return, so
    /// that the next copy into it rewrites them (a whole-line store clears a media error).
    fn stale_bad_pages<M: Media>(&self, media: &M, slot: u8) {
        debug_assert_ne!(
            slot,
            self.current_slot(),
            "only the other slot is rewritten"
        );
        for_each_bad_page(media, self.slot_offset(slot), self.capacity(), |page| {
            self.stale.set_range(page, 1);
        });
    }
    /// The word that publishes `slot` as the next generation.
    fn next_word(&self, slot: u8) -> u64 {
        layout::state_word(layout::state_generation(self.word) + 1, slot)
    }
}

/// Everything the pool lock protects.
struct PoolState {
    objects: Vec<Option<ObjectState>>,
    names: HashMap<String, usize>,
    free_entries: Vec<usize>,
    extents: Extents,
    attachments: HandleMap<Attachment>,
    next_handle: u64,
    /// Sequence number of the last intent record.
    seq: u64,
    buffers: Cache,
}

impl PoolState {
    /// The attachment of handle `id`.
    fn attachment(&self, id: u64) -> Result<&Attachment> {
        self.attachments
            .get(&id)
            .ok_or(ObjError::NotAttached { handle: id })
    }
    /// The attachment of handle `id`, to change, with its object.
    fn attachment_mut(&mut self, id: u64) -> Result<(&mut Attachment, &ObjectState)> {
        let attachment = self
            .attachments
            .get_mut(&id)
            .ok_or(ObjError::NotAttached { handle: id })?;
        let object = self.objects[attachment.binding.object]
            .as_ref()
            .expect("attached objects exist");
        Ok((attachment, object))
    }
    /// Object `index`, which an attachment or a name refers to (so it exists).
    fn object(&self, index: usize) -> &ObjectState {
        self.objects[index]
            .as_ref()
            .expect("attached or named objects exist")
    }
    fn object_mut(&mut self, index: usize) -> &mut ObjectState {
        self.objects[index]
            .as_mut()
            .expect("attached or named objects exist")
    }
    /// The table entry of object `name`.
    fn index_of(&self, name: &str) -> Result<usize> {
        self.names
            .get(name)
            .copied()
            .ok_or_else(|| ObjError::NotFound { name: name.into() })
    }
}

/// A PMO pool on media `M`.
pub struct Pool<M: Media> {
    media: M,
    geometry: Geometry,
    protect: bool,
    shadow: Shadow,
    guard: AreaGuard,
    /// The first failed store through the kernel (the one rule of `pmkit_media::guard`): every
    /// later store into the object area is dropped and its sync fails.
    poison: pmkit_media::guard::Poison,
    /// DRAM buffers get their own protection keys (see [`PoolOptions::pkey`]).
    buffer_keys: bool,
    inner: Mutex<PoolState>,
    counters: Counters,
}

/// A number that tells pools apart (time and process; never 0).
fn pool_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or(0);
    (nanos as u64) ^ ((std::process::id() as u64) << 40) | 1
}

impl<M: Media> Pool<M> {
    /// Format `media` as an empty pool. The magic is written last, so a crash leaves either the old
    /// contents' magic cleared or a complete pool.
    pub fn format(media: M, opts: &PoolOptions) -> Result<Pool<M>> {
        let features = if opts.checksum {
            layout::FEATURE_CHECKSUM
        } else {
            0
        };
        let geometry = Geometry::with_features(media.len(), opts.max_objects, pool_id(), features)?;
        media.persist_u64(layout::H_MAGIC, 0);
        let meta = geometry.area_off as usize - geometry.table_off as usize;
        media.zero(geometry.table_off as usize, meta);
        let header = geometry.encode();
        debug_assert_eq!(
            Geometry::decode(&header, media.len()).ok(),
            Some(geometry),
            "an encoded header decodes to itself"
        );
        media.write(8, &header[8..]);
        if media.domain() == Domain::Adr {
            media.flush(geometry.table_off as usize, meta, Flush::best());
            media.flush(8, HEADER_LEN - 8, Flush::best());
        }
        media.fence(Fence::Sfence);
        media.persist_u64(layout::H_MAGIC, layout::MAGIC);
        let pool = Pool::assemble(media, geometry, opts, Scan::empty(&geometry));
        pool.area().protect_all()?;
        Ok(pool)
    }

    /// Open a pool and recover: a committed multi-object sync is rolled forward, an uncommitted
    /// one (and any single-object sync a crash interrupted) is simply not visible, because
    /// objects are only ever published by one 8-byte store. A corrupt structure is reported and
    /// nothing is written.
    pub fn open(media: M, opts: &PoolOptions) -> Result<(Pool<M>, Recovery)> {
        let geometry = read_geometry(&media)?;
        let mut scan = recovery::scan(&media, &geometry);
        scan.first_error()?;
        let recovery = Recovery {
            objects: scan.found.len(),
            rolled_forward: recovery::roll_forward(&media, &geometry, &mut scan),
        };
        let pool = Pool::assemble(media, geometry, opts, scan);
        pool.area().protect_all()?;
        Ok((pool, recovery))
    }

    /// Open a pool to read it on media mapped read-only: the same scan as [`Pool::open`], but
    /// nothing is written (no roll forward, no page rights: the mapping protects itself), and
    /// a committed sync waiting to be rolled forward is [`ObjError::NeedsRecovery`].
    pub fn open_read_only(media: M) -> Result<Pool<M>> {
        let geometry = read_geometry(&media)?;
        let scan = recovery::scan(&media, &geometry);
        scan.first_error()?;
        if let Some(intent) = &scan.intent {
            return Err(ObjError::NeedsRecovery {
                objects: intent.items.len(),
            });
        }
        let opts = PoolOptions {
            protect: false,
            ..PoolOptions::default()
        };
        Ok(Pool::assemble(media, geometry, &opts, scan))
    }

    fn assemble(media: M, geometry: Geometry, opts: &PoolOptions, scan: Scan) -> Pool<M> {
        let mut objects: Vec<Option<ObjectState>> =
            (0..geometry.max_objects).map(|_| None).collect();
        let mut names = HashMap::new();
        for (index, word, descriptor) in scan.found {
            let pages = descriptor.cap as usize / PAGE;
            names.insert(descriptor.name.clone(), index);
            // The other slot's contents are unknown after a restart: all pages stale.
            objects[index] = Some(ObjectState {
                descriptor,
                word,
                stale: PageSet::full(pages),
                readers: 0,
                writer: None,
            });
        }
        let free_entries = (0..geometry.max_objects as usize)
            .rev()
            .filter(|&index| objects[index].is_none())
            .collect();
        let guard = if !opts.protect {
            AreaGuard::Open
        } else if let (Shadow::Dram, Some(region)) = (opts.shadow, media.mapping()) {
            let key = opts.pkey.then(Pkey::alloc).and_then(|key| {
                key.inspect_err(|error| {
                    tracing::info!("no protection key for the object area ({error})")
                })
                .ok()
            });
            match key {
                Some(key) => AreaGuard::Key(key),
                None if opts.kernel => match KernelWriter::new(region) {
                    Ok(writer) => AreaGuard::Kernel(writer),
                    Err(error) => {
                        tracing::info!("no kernel write path ({error}): mprotect windows");
                        AreaGuard::Pages
                    }
                },
                None => AreaGuard::Pages,
            }
        } else {
            AreaGuard::Pages
        };
        Pool {
            media,
            geometry,
            protect: opts.protect,
            shadow: opts.shadow,
            guard,
            poison: Default::default(),
            buffer_keys: opts.protect && opts.pkey && opts.shadow == Shadow::Dram,
            inner: Mutex::new(PoolState {
                objects,
                names,
                free_entries,
                extents: scan.extents,
                attachments: HandleMap::default(),
                next_handle: 1,
                seq: scan.seq,
                buffers: Cache::default(),
            }),
            counters: Counters::default(),
        }
    }

    /// Give the media back (every handle must be gone: they borrow the pool).
    pub fn into_media(mut self) -> M {
        self.release_attachments();
        self.area().untag();
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; each owned field is moved out once.
        unsafe {
            drop(std::ptr::read(&this.inner));
            drop(std::ptr::read(&this.guard));
            std::ptr::read(&this.media)
        }
    }

    /// Where shadows live in this pool.
    pub fn shadow(&self) -> Shadow {
        self.shadow
    }
    /// Whether the library reaches the object area through a protection-key window.
    pub fn uses_pkey(&self) -> bool {
        matches!(self.guard, AreaGuard::Key(_))
    }
    /// How the object area is protected: `none`, `pkey`, `kernel` or `mprotect`.
    pub fn protection(&self) -> &'static str {
        match self.guard {
            AreaGuard::Open => "none",
            AreaGuard::Key(_) => "pkey",
            AreaGuard::Kernel(_) => "kernel",
            AreaGuard::Pages => "mprotect",
        }
    }

    /// Stop fault tracking of every attachment (handles from the C ABI may still be attached),
    /// and put their keyed buffers at rest before they are unmapped and their keys reused.
    fn release_attachments(&mut self) {
        for attachment in self.inner.get_mut().attachments.values_mut() {
            attachment.binding.stop_fault_tracking();
            attachment.view.release();
        }
    }
    pub fn media(&self) -> &M {
        &self.media
    }
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }
    pub fn stats(&self) -> Stats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let counters = &self.counters;
        Stats {
            syncs: load(&counters.syncs),
            published: load(&counters.published),
            intents: load(&counters.intents),
            bytes_flushed: load(&counters.bytes_flushed),
            bytes_copied: load(&counters.bytes_copied),
            bytes_synced: load(&counters.bytes_synced),
            fences: load(&counters.fences),
            keyed_attaches: load(&counters.keyed_attaches),
        }
    }
    /// Free bytes in the object area and the largest free extent.
    pub fn free_space(&self) -> (u64, u64) {
        let inner = self.inner.lock();
        (inner.extents.free_bytes(), inner.extents.largest())
    }

    /// The object area as the shadows and the library's own copies reach it.
    #[inline]
    fn area(&self) -> PmArea<'_, M> {
        PmArea::new(
            &self.media,
            &self.geometry,
            &self.guard,
            &self.poison,
            &self.counters,
            self.protect,
            self.buffer_keys,
        )
    }
    fn fence(&self) {
        self.area().fence();
    }
    fn flush(&self, off: usize, len: usize) {
        self.area().flush(off, len);
    }
    fn persist_word(&self, off: usize, word: u64) {
        self.media.persist_u64(off, word);
        add_under_lock(&self.counters.fences, 1);
    }
}

impl<M: Media> Drop for Pool<M> {
    fn drop(&mut self) {
        // Before the bitsets the fault handler writes go away, and before the buffers unmap.
        self.release_attachments();
    }
}
