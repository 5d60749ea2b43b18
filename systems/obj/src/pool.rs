//! The pool: format/open with recovery, object create/delete/list, attach/detach with page
//! rights, and PMO Sync (the shadow's pages made durable in the object's other PM slot + one
//! fence + one persisted 8-byte publication, or a committed intent in the Sync Table for several
//! objects). The shadow is a DRAM buffer ([`Shadow::Dram`], the default) or the other PM slot
//! itself ([`Shadow::Pm`], the thesis's design).

use crate::alloc::Extents;
use crate::bits::PageSet;
use crate::error::{ObjError, Result};
use crate::faults;
use crate::keys;
use crate::layout::{
    self, Descriptor, Geometry, Intent, ENTRY, HEADER_LEN, LIVE, MAX_SYNC, PAGE, SYNC_LEN,
};
use crate::staging::{Buf, Cache};
use parking_lot::Mutex;
use pmkit_media::protect::{Access as Rights, Pkey, PkeyWindow};
use pmkit_media::{Domain, Fence, Flush, Media, MediaError};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// Most handles attached at once in one pool.
pub const MAX_HANDLES: usize = 4096;
/// Most threads besides the attaching one that may take a keyed attachment's pointer.
pub const MAX_THREADS_PER_HANDLE: usize = 64;
/// Bytes copied per step when bringing a shadow up to date.
const COPY_CHUNK: usize = 64 * 1024;

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
    /// - give DRAM buffers keys of their own (while [`keys::MAX_BUFFER_KEYS`] last): attach
    ///   enables the buffer's key in the attaching thread, detach disables it. The pointer then
    ///   works in the attaching thread and in threads that call `as_ptr` themselves; any other
    ///   thread faults.
    ///
    /// `false` (or no keys): `mprotect` windows around the library's copies and `mprotect` of
    /// the buffer at attach and detach (a pointer works in every thread).
    pub pkey: bool,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            max_objects: 4096,
            protect: true,
            shadow: Shadow::Dram,
            pkey: true,
        }
    }
}

/// How the library itself reaches the PM object area.
#[derive(Debug)]
enum AreaGuard {
    /// No protection: the area is mapped read-write.
    Open,
    /// The area is tagged with this key, which every thread has disabled; the library opens a
    /// WRPKRU window in its own thread around each copy (no syscall, no TLB flush).
    Key(Pkey),
    /// The area is `PROT_NONE`; the library opens `mprotect` windows (two syscalls each).
    Pages,
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

/// Add `n` to counter `c` (the caller holds the pool lock; see [`Counters`]).
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

struct Obj {
    desc: Descriptor,
    state: u64,
    /// Pages where the non-current slot differs from the current one (DRAM only; all pages
    /// after open, none after create).
    stale: PageSet,
    readers: u32,
    writer: Option<u64>,
}

impl Obj {
    fn pages(&self) -> usize {
        self.desc.cap as usize / PAGE
    }
    fn active(&self) -> u8 {
        layout::state_slot(self.state)
    }
}

struct Att {
    obj: usize,
    access: Access,
    tracking: Tracking,
    /// PM shadow: the slot reads and writes go to (the shadow for ReadWrite, the current slot
    /// for Read). DRAM shadow: the slot the next sync writes (ReadWrite) or the current (Read).
    slot: u8,
    dirty: PageSet,
    /// The shadow equals the current contents plus this attachment's writes (caught up).
    fresh: bool,
    fault_slot: Option<usize>,
    /// DRAM shadow: the buffer reads, writes and the user's pointer go to.
    buf: Option<Buf>,
    /// The attaching thread ([`keys::thread_tag`]).
    owner: u64,
    /// Other threads that took the pointer of a keyed buffer (their PKRU enables its key).
    granted: Vec<u64>,
}

impl Att {
    /// Whether the calling thread is the only one with this attachment's buffer key enabled.
    fn sole_holder(&self) -> bool {
        self.owner == keys::thread_tag() && self.granted.is_empty()
    }
}

/// The rights a user of an attachment gets (pages or key).
fn user_rights(access: Access) -> Rights {
    match access {
        Access::ReadWrite => Rights::ReadWrite,
        Access::Read => Rights::Read,
    }
}

/// Hashes handle ids, which the pool hands out itself in sequence: a multiplication by an odd
/// constant spreads them over every bit (SipHash defends against keys an attacker picks, and
/// costs more than the rest of a map lookup).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

struct Inner {
    objs: Vec<Option<Obj>>,
    names: HashMap<String, usize>,
    free_entries: Vec<usize>,
    extents: Extents,
    atts: IdMap<Att>,
    next_handle: u64,
    seq: u64,
    bufs: Cache,
}

/// A PMO pool on media `M`.
pub struct Pool<M: Media> {
    m: M,
    g: Geometry,
    protect: bool,
    shadow: Shadow,
    guard: AreaGuard,
    /// DRAM buffers get their own protection keys (see [`PoolOptions::pkey`]).
    buf_keys: bool,
    inner: Mutex<Inner>,
    ctr: Counters,
}

/// What `open` had to do to make the pool consistent.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Recovery {
    /// A committed multi-object sync was rolled forward: (entry, word) applied.
    pub rolled_forward: Vec<(u64, u64)>,
    /// Live objects found.
    pub objects: usize,
}

/// Result of a read-only consistency check.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CheckReport {
    pub geometry: Option<Geometry>,
    pub objects: usize,
    pub bytes_used: u64,
    /// A committed multi-object sync that `open` would roll forward.
    pub pending_intent: Option<Vec<(u64, u64)>>,
    pub errors: Vec<String>,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }
}

/// What a table scan found.
struct Scan {
    found: Vec<(usize, u64, Descriptor)>,
    extents: Extents,
    intent: Option<Intent>,
    seq: u64,
    errors: Vec<String>,
}

fn scan<M: Media>(m: &M, g: &Geometry) -> Scan {
    let mut s = Scan {
        found: vec![],
        extents: Extents::new(g.area_off, g.area_len),
        intent: None,
        seq: 0,
        errors: vec![],
    };
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut e = [0u8; ENTRY];
    for i in 0..g.max_objects as usize {
        let off = g.entry_off(i);
        let state = m.load_u64(off);
        if state == 0 {
            continue;
        }
        if state & LIVE == 0 || layout::state_generation(state) == 0 {
            s.errors.push(format!(
                "object table entry {i}: invalid published word {state:#018x}"
            ));
            continue;
        }
        m.read(off, &mut e);
        let d = match Descriptor::decode(i, &e, g) {
            Ok(d) => d,
            Err(err) => {
                s.errors.push(problem(err));
                continue;
            }
        };
        if let Some(j) = names.insert(d.name.clone(), i) {
            s.errors.push(format!(
                "object table entries {j} and {i} have the same name {:?}",
                d.name
            ));
            continue;
        }
        if !s.extents.take(d.offset, 2 * d.cap) {
            s.errors.push(format!(
                "object table entry {i} ({:?}): extent {:#x}+{} overlaps another object",
                d.name,
                d.offset,
                2 * d.cap
            ));
            continue;
        }
        s.found.push((i, state, d));
    }
    let mut page = vec![0u8; SYNC_LEN];
    m.read(g.sync_off as usize, &mut page);
    s.seq = layout::intent_seq(&page);
    let commit = m.load_u64(g.sync_off as usize);
    if commit != 0 {
        match Intent::decode(&page) {
            Ok(i) if i.seq != commit => s.errors.push(format!(
                "PMO Sync Table: commit word {commit} does not match the intent record's sequence {}",
                i.seq
            )),
            Ok(i) => {
                for &(entry, word) in &i.items {
                    let known = s.found.iter().any(|(j, _, _)| *j as u64 == entry);
                    if !known || word & LIVE == 0 {
                        s.errors.push(format!(
                            "PMO Sync Table: committed intent names entry {entry} (word {word:#x}), which is not a live object"
                        ));
                    }
                }
                s.intent = Some(i);
            }
            Err(err) => s.errors.push(problem(err)),
        }
    }
    s
}

/// The bare description of a structural problem (without the "corrupt pool" advice).
fn problem(e: ObjError) -> String {
    match e {
        ObjError::Corrupt(msg) => msg,
        e => e.to_string(),
    }
}

fn read_geometry<M: Media>(m: &M) -> Result<Geometry> {
    if m.len() < HEADER_LEN {
        return Err(ObjError::NotAPool(format!(
            "media of {} bytes is too small for a pool header",
            m.len()
        )));
    }
    let mut h = [0u8; HEADER_LEN];
    m.read(0, &mut h);
    Geometry::decode(&h, m.len())
}

fn pool_id() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    (t as u64) ^ ((std::process::id() as u64) << 40) | 1
}

impl<M: Media> Pool<M> {
    /// Format `m` as an empty pool. The magic is written last, so a crash leaves either the old
    /// contents' magic cleared or a complete pool.
    pub fn format(m: M, opts: &PoolOptions) -> Result<Pool<M>> {
        let g = Geometry::new(m.len(), opts.max_objects, pool_id())?;
        m.persist_u64(layout::H_MAGIC, 0);
        let meta = g.area_off as usize - g.table_off as usize;
        m.zero(g.table_off as usize, meta);
        let h = g.encode();
        m.write(8, &h[8..]);
        if m.domain() == Domain::Adr {
            m.flush(g.table_off as usize, meta, Flush::best());
            m.flush(8, HEADER_LEN - 8, Flush::best());
        }
        m.fence(Fence::Sfence);
        m.persist_u64(layout::H_MAGIC, layout::MAGIC);
        let pool = Pool::assemble(
            m,
            g,
            opts,
            Scan {
                found: vec![],
                extents: Extents::new(g.area_off, g.area_len),
                intent: None,
                seq: 0,
                errors: vec![],
            },
        );
        pool.rest_area()?;
        Ok(pool)
    }

    /// Open a pool and recover: a committed multi-object sync is rolled forward, an uncommitted
    /// one (and any single-object sync a crash interrupted) is simply not visible, because
    /// objects are only ever published by one 8-byte store. A corrupt structure is reported and
    /// nothing is written.
    pub fn open(m: M, opts: &PoolOptions) -> Result<(Pool<M>, Recovery)> {
        let g = read_geometry(&m)?;
        let s = scan(&m, &g);
        if let Some(first) = s.errors.first() {
            let more = if s.errors.len() > 1 {
                format!(" (and {} more problems)", s.errors.len() - 1)
            } else {
                String::new()
            };
            return Err(ObjError::Corrupt(format!("{first}{more}")));
        }
        let mut rec = Recovery {
            rolled_forward: vec![],
            objects: s.found.len(),
        };
        let mut s = s;
        if let Some(intent) = s.intent.take() {
            // Roll forward: idempotent, so a crash here is recovered by the next open.
            for &(entry, word) in &intent.items {
                let off = g.entry_off(entry as usize);
                m.store_u64(off, word);
                if m.domain() == Domain::Adr {
                    m.flush(off, 8, Flush::best());
                }
                if let Some(f) = s.found.iter_mut().find(|f| f.0 as u64 == entry) {
                    f.1 = word;
                }
            }
            m.fence(Fence::Sfence);
            m.persist_u64(g.sync_off as usize, 0);
            rec.rolled_forward = intent.items;
        }
        let pool = Pool::assemble(m, g, opts, s);
        pool.rest_area()?;
        Ok((pool, rec))
    }

    /// Check a pool without changing it.
    pub fn check(m: &M) -> CheckReport {
        let g = match read_geometry(m) {
            Ok(g) => g,
            Err(e) => {
                return CheckReport {
                    errors: vec![e.to_string()],
                    ..Default::default()
                }
            }
        };
        let s = scan(m, &g);
        CheckReport {
            geometry: Some(g),
            objects: s.found.len(),
            bytes_used: g.area_len - s.extents.free_bytes(),
            pending_intent: s.intent.map(|i| i.items),
            errors: s.errors,
        }
    }

    fn assemble(m: M, g: Geometry, opts: &PoolOptions, s: Scan) -> Pool<M> {
        let mut objs: Vec<Option<Obj>> = (0..g.max_objects).map(|_| None).collect();
        let mut names = HashMap::new();
        for (i, state, desc) in s.found {
            let pages = desc.cap as usize / PAGE;
            names.insert(desc.name.clone(), i);
            // The other slot's contents are unknown after a restart: all pages stale.
            objs[i] = Some(Obj {
                desc,
                state,
                stale: PageSet::full(pages),
                readers: 0,
                writer: None,
            });
        }
        let free_entries = (0..g.max_objects as usize)
            .rev()
            .filter(|&i| objs[i].is_none())
            .collect();
        let guard = if !opts.protect {
            AreaGuard::Open
        } else if opts.shadow == Shadow::Dram && opts.pkey && m.mapping().is_some() {
            match Pkey::alloc() {
                Ok(k) => AreaGuard::Key(k),
                Err(e) => {
                    tracing::info!("no protection key for the object area ({e}): mprotect windows");
                    AreaGuard::Pages
                }
            }
        } else {
            AreaGuard::Pages
        };
        Pool {
            m,
            g,
            protect: opts.protect,
            shadow: opts.shadow,
            guard,
            buf_keys: opts.protect && opts.pkey && opts.shadow == Shadow::Dram,
            inner: Mutex::new(Inner {
                objs,
                names,
                free_entries,
                extents: s.extents,
                atts: IdMap::default(),
                next_handle: 1,
                seq: s.seq,
                bufs: Cache::default(),
            }),
            ctr: Counters::default(),
        }
    }

    /// Give the media back (every handle must be gone: they borrow the pool).
    pub fn into_media(mut self) -> M {
        self.release_attachments();
        self.untag_area();
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; each owned field is moved out once.
        unsafe {
            drop(std::ptr::read(&this.inner));
            drop(std::ptr::read(&this.guard));
            std::ptr::read(&this.m)
        }
    }

    /// Give the object area back to the default key before the pool's key is freed (another
    /// user may get the same key number), leaving it `PROT_NONE` as a protected pool does.
    fn untag_area(&self) {
        if let AreaGuard::Key(_) = self.guard {
            let (off, len) = (self.g.area_off as usize, self.g.area_len as usize);
            if let Err(e) = set_rights(&self.m, off, len, Rights::None, None) {
                tracing::warn!("cannot untag the object area: {e}");
            }
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

    /// Stop fault tracking of every attachment (handles from the C ABI may still be attached),
    /// and put their keyed buffers at rest before they are unmapped and their keys reused.
    fn release_attachments(&mut self) {
        for att in self.inner.get_mut().atts.values_mut() {
            if let Some(s) = att.fault_slot.take() {
                faults::unregister(s);
            }
            let sole = att.sole_holder();
            if let Some(b) = att.buf.as_mut().filter(|b| b.keyed()) {
                if let Err(e) = b.rest_key(sole) {
                    tracing::warn!("cannot protect a DRAM shadow being released: {e}");
                }
            }
        }
    }
    pub fn media(&self) -> &M {
        &self.m
    }
    pub fn geometry(&self) -> Geometry {
        self.g
    }
    pub fn stats(&self) -> Stats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            syncs: l(&self.ctr.syncs),
            published: l(&self.ctr.published),
            intents: l(&self.ctr.intents),
            bytes_flushed: l(&self.ctr.bytes_flushed),
            bytes_copied: l(&self.ctr.bytes_copied),
            bytes_synced: l(&self.ctr.bytes_synced),
            fences: l(&self.ctr.fences),
            keyed_attaches: l(&self.ctr.keyed_attaches),
        }
    }
    /// Free bytes in the object area and the largest free extent.
    pub fn free_space(&self) -> (u64, u64) {
        let i = self.inner.lock();
        (i.extents.free_bytes(), i.extents.largest())
    }

    /// Rights of object pages nobody has attached.
    fn rest(&self) -> Rights {
        if self.protect {
            Rights::None
        } else {
            Rights::ReadWrite
        }
    }
    fn rest_area(&self) -> Result<()> {
        let (off, len) = (self.g.area_off as usize, self.g.area_len as usize);
        match &self.guard {
            AreaGuard::Open => {}
            AreaGuard::Key(k) => set_rights(&self.m, off, len, Rights::ReadWrite, Some(k))?,
            AreaGuard::Pages => set_rights(&self.m, off, len, Rights::None, None)?,
        }
        Ok(())
    }
    /// Open the library's own access to `[off, off+len)` of the object area for `rights`. A key
    /// window closes when the returned guard drops; page windows close with [`Self::close_area`].
    fn open_area(&self, off: usize, len: usize, rights: Rights) -> Result<Option<PkeyWindow>> {
        Ok(match &self.guard {
            AreaGuard::Open => None,
            AreaGuard::Key(k) if rights == Rights::ReadWrite => Some(k.open_write()),
            AreaGuard::Key(k) => Some(k.open_read()),
            AreaGuard::Pages => {
                self.rights(off, len, rights)?;
                None
            }
        })
    }
    fn close_area(&self, off: usize, len: usize) -> Result<()> {
        if let AreaGuard::Pages = self.guard {
            self.rights(off, len, Rights::None)?;
        }
        Ok(())
    }
    /// Rights of a DRAM buffer nobody has attached.
    fn buf_rest(&self) -> Rights {
        self.rest()
    }
    fn rights(&self, off: usize, len: usize, r: Rights) -> Result<()> {
        Ok(set_rights(&self.m, off, len, r, None)?)
    }
    fn fence(&self) {
        self.m.fence(Fence::Sfence);
        bump(&self.ctr.fences, 1);
    }
    fn flush(&self, off: usize, len: usize) {
        if self.m.domain() == Domain::Adr {
            self.m.flush(off, len, Flush::best());
        }
    }
    fn persist_word(&self, off: usize, v: u64) {
        self.m.persist_u64(off, v);
        bump(&self.ctr.fences, 1);
    }

    /// Create object `name` of `size` bytes, zero-filled. Durable when this returns.
    pub fn create(&self, name: &str, size: u64) -> Result<()> {
        layout::check_name(name)?;
        if size == 0 || size > self.g.area_len / 2 {
            return Err(ObjError::BadArgument(format!(
                "object size {size} must be 1..={} bytes in this pool",
                self.g.area_len / 2
            )));
        }
        let mut inner = self.inner.lock();
        if inner.names.contains_key(name) {
            return Err(ObjError::Exists { name: name.into() });
        }
        let Some(&index) = inner.free_entries.last() else {
            return Err(ObjError::TableFull {
                max: self.g.max_objects,
            });
        };
        let cap = size.next_multiple_of(PAGE as u64);
        let Some(offset) = inner.extents.alloc(2 * cap) else {
            return Err(ObjError::PoolFull {
                name: name.into(),
                need: 2 * cap,
                largest: inner.extents.largest(),
            });
        };
        inner.free_entries.pop();
        let desc = Descriptor {
            offset,
            size,
            cap,
            flags: 0,
            name: name.into(),
        };
        let made = (|| {
            let (off, len) = (offset as usize, 2 * cap as usize);
            let w = self.open_area(off, len, Rights::ReadWrite)?;
            // Both slots start equal (zero), so the first attach copies nothing.
            const Z: [u8; PAGE] = [0; PAGE];
            for p in (0..len).step_by(PAGE) {
                self.m.write_nt(off + p, &Z);
            }
            drop(w);
            self.close_area(off, len)?;
            let eoff = self.g.entry_off(index);
            self.m.write(eoff + 8, &desc.encode());
            self.flush(eoff + 8, ENTRY - 8);
            self.fence();
            // The allocation and the object exist from this one store on.
            self.persist_word(eoff, layout::state_word(1, 0));
            Ok(())
        })();
        if let Err(e) = made {
            inner.extents.release(offset, 2 * cap);
            inner.free_entries.push(index);
            return Err(e);
        }
        let pages = cap as usize / PAGE;
        inner.names.insert(name.into(), index);
        inner.objs[index] = Some(Obj {
            desc,
            state: layout::state_word(1, 0),
            stale: PageSet::new(pages),
            readers: 0,
            writer: None,
        });
        Ok(())
    }

    /// Delete object `name` (it must not be attached). Durable when this returns.
    pub fn delete(&self, name: &str) -> Result<()> {
        let mut inner = self.inner.lock();
        let index = *inner
            .names
            .get(name)
            .ok_or_else(|| ObjError::NotFound { name: name.into() })?;
        let o = inner.objs[index].as_ref().expect("named object exists");
        if o.writer.is_some() || o.readers > 0 {
            return Err(ObjError::Busy {
                name: name.into(),
                why: "it is attached; detach every handle first",
            });
        }
        let (off, cap) = (o.desc.offset, o.desc.cap);
        self.persist_word(self.g.entry_off(index), 0);
        inner.objs[index] = None;
        inner.names.remove(name);
        inner.free_entries.push(index);
        inner.extents.release(off, 2 * cap);
        Ok(())
    }

    /// Every object, in table order.
    pub fn list(&self) -> Vec<ObjInfo> {
        let inner = self.inner.lock();
        inner
            .objs
            .iter()
            .enumerate()
            .filter_map(|(i, o)| {
                let o = o.as_ref()?;
                Some(ObjInfo {
                    name: o.desc.name.clone(),
                    index: i,
                    size: o.desc.size,
                    capacity: o.desc.cap,
                    offset: o.desc.offset,
                    slot: o.active(),
                    generation: layout::state_generation(o.state),
                    flags: o.desc.flags,
                    attached: if o.writer.is_some() {
                        Some(Access::ReadWrite)
                    } else if o.readers > 0 {
                        Some(Access::Read)
                    } else {
                        None
                    },
                })
            })
            .collect()
    }

    /// The last published contents of `name` (what `dump` prints).
    pub fn read_published(&self, name: &str) -> Result<Vec<u8>> {
        let inner = self.inner.lock();
        let index = *inner
            .names
            .get(name)
            .ok_or_else(|| ObjError::NotFound { name: name.into() })?;
        let o = inner.objs[index].as_ref().expect("named object exists");
        let off = o.desc.slot_off(o.active());
        let mut buf = vec![0u8; o.desc.size as usize];
        // A PM-shadow reader keeps the current slot readable: leave its rights alone.
        let window = !(self.shadow == Shadow::Pm && o.readers > 0);
        let w = if window {
            self.open_area(off, o.desc.cap as usize, Rights::Read)?
        } else {
            None
        };
        self.m.read(off, &mut buf);
        drop(w);
        if window {
            self.close_area(off, o.desc.cap as usize)?;
        }
        Ok(buf)
    }

    /// Attach `name`; see [`Tracking::Auto`] for how writes are tracked.
    pub fn attach(&self, name: &str, access: Access) -> Result<Handle<'_, M>> {
        self.attach_with(name, access, Tracking::Auto)
    }

    /// Attach `name` with a chosen dirty-tracking method. One read-write attachment or any
    /// number of read-only ones at a time.
    pub fn attach_with(
        &self,
        name: &str,
        access: Access,
        tracking: Tracking,
    ) -> Result<Handle<'_, M>> {
        let id = self.attach_id(name, access, tracking)?;
        Ok(Handle { pool: self, id })
    }

    /// Id-based API (the C ABI's handles are ids): every call with a stale id fails with
    /// [`ObjError::NotAttached`].
    pub fn attach_id(&self, name: &str, access: Access, tracking: Tracking) -> Result<u64> {
        let mut inner = self.inner.lock();
        let index = *inner
            .names
            .get(name)
            .ok_or_else(|| ObjError::NotFound { name: name.into() })?;
        if inner.atts.len() >= MAX_HANDLES {
            return Err(ObjError::TooManyHandles { max: MAX_HANDLES });
        }
        // A DRAM shadow always has addresses; a PM shadow only on mapped media.
        let has_addr = self.shadow == Shadow::Dram || self.m.mapping().is_some();
        let tracking = match tracking {
            Tracking::Auto if has_addr => Tracking::Faults,
            Tracking::Auto => Tracking::Explicit,
            Tracking::Faults if !has_addr => {
                return Err(ObjError::BadArgument(
                    "fault tracking of a PM shadow needs media with addresses (a Region)".into(),
                ))
            }
            t => t,
        };
        let id = inner.next_handle;
        let o = inner.objs[index].as_ref().expect("named object exists");
        match access {
            Access::ReadWrite if o.writer.is_some() => {
                return Err(ObjError::Busy {
                    name: name.into(),
                    why: "it is already attached read-write; detach that handle first",
                })
            }
            Access::ReadWrite if o.readers > 0 => {
                return Err(ObjError::Busy {
                    name: name.into(),
                    why: "it is attached read-only by other handles",
                })
            }
            Access::Read if o.writer.is_some() => {
                return Err(ObjError::Busy {
                    name: name.into(),
                    why: "it is attached read-write",
                })
            }
            _ => {}
        }
        let (pages, cur, cap) = (o.pages(), o.desc.slot_off(o.active()), o.desc.cap as usize);
        // The fault handler writes the dirty set of a tracked attachment through a pointer.
        let dirty = if tracking == Tracking::Faults {
            PageSet::tracked(pages)
        } else {
            PageSet::new(pages)
        };
        let (buf, fault_slot) = match self.shadow {
            Shadow::Dram => {
                // Never synced: both slots still hold create's zeroes.
                let zero = layout::state_generation(o.state) == 1;
                let (b, f) =
                    self.stage(&mut inner.bufs, cur, cap, zero, access, tracking, &dirty)?;
                (Some(b), f)
            }
            Shadow::Pm => {
                if access == Access::Read && o.readers == 0 && self.protect {
                    self.rights(cur, cap, Rights::Read)?;
                }
                (None, None)
            }
        };
        let o = inner.objs[index].as_mut().expect("named object exists");
        let slot = match access {
            Access::ReadWrite => {
                o.writer = Some(id);
                o.active() ^ 1
            }
            Access::Read => {
                o.readers += 1;
                o.active()
            }
        };
        inner.next_handle += 1;
        inner.atts.insert(
            id,
            Att {
                obj: index,
                access,
                tracking,
                slot,
                dirty,
                fresh: access == Access::Read || buf.is_some(),
                fault_slot,
                buf,
                owner: keys::thread_tag(),
                granted: vec![],
            },
        );
        Ok(id)
    }

    /// DRAM shadow: a buffer holding the object's current slot `[cur, cur+cap)`, with the
    /// rights the attachment needs, and its write-fault registration (into `dirty`) if tracked.
    #[allow(clippy::too_many_arguments)]
    fn stage(
        &self,
        bufs: &mut Cache,
        cur: usize,
        cap: usize,
        zero: bool,
        access: Access,
        tracking: Tracking,
        dirty: &PageSet,
    ) -> Result<(Buf, Option<usize>)> {
        let pages = cap / PAGE;
        let io = |what: &str, e: std::io::Error| {
            ObjError::BadArgument(format!(
                "cannot {what} a DRAM shadow of {cap} bytes: {e} (out of memory or map count?)"
            ))
        };
        let buf = match bufs.take(pages) {
            Some(b) => b,
            None => Buf::map(pages, self.buf_rest(), self.buf_keys).map_err(|e| io("map", e))?,
        };
        // Open the buffer for the fill: a keyed one in this thread (the user's rights follow
        // below; on an error the key is disabled again), another by its page rights.
        if buf.keyed() {
            buf.allow_thread(Rights::ReadWrite);
        } else if self.protect {
            buf.set(0, cap, Rights::ReadWrite)
                .map_err(|e| io("open", e))?;
        }
        let tracked = access == Access::ReadWrite && tracking == Tracking::Faults;
        let ready = || -> Result<Option<usize>> {
            if zero {
                // SAFETY: the buffer was opened above; zeroing DRAM instead of reading PM's
                // known zeroes.
                unsafe { buf.zero(0, cap) };
            } else {
                let w = self.open_area(cur, cap, Rights::Read)?;
                // SAFETY: the buffer holds at least `cap` bytes and is writable here (opened
                // above). It is not handed out yet, but a pointer kept from its last
                // attachment may still reach it, so it is written by raw pointer only.
                unsafe { self.m.read_into(cur, buf.ptr(), cap) };
                drop(w);
                self.close_area(cur, cap)?;
                bump(&self.ctr.bytes_copied, cap as u64);
            }
            if access == Access::Read && buf.keyed() {
                buf.allow_thread(Rights::Read);
            }
            if tracked || (access == Access::Read && self.protect && !buf.keyed()) {
                buf.set(0, cap, Rights::Read)
                    .map_err(|e| io("protect", e))?;
            }
            if !tracked {
                return Ok(None);
            }
            faults::register(buf.ptr(), cap, dirty.words_ptr())
                .map_err(|e| {
                    ObjError::BadArgument(format!("cannot install the write-fault handler: {e}"))
                })?
                .ok_or(ObjError::TooManyHandles {
                    max: faults::MAX_TRACKED,
                })
                .map(Some)
        };
        match ready() {
            Ok(fault_slot) => {
                if buf.keyed() {
                    bump(&self.ctr.keyed_attaches, 1);
                }
                Ok((buf, fault_slot))
            }
            Err(e) => {
                // The buffer is unmapped on return: it must be at rest (its key reusable).
                buf.deny_thread();
                Err(e)
            }
        }
    }

    /// DRAM shadow: return a detached attachment's buffer to the cache at rest: `PROT_NONE` with
    /// page protection, or its key disabled in every thread, so a kept pointer faults. A keyed
    /// buffer whose key another thread still has enabled loses the key (see `keys.rs`). A
    /// buffer that cannot be put at rest is unmapped instead of cached.
    fn unstage(&self, bufs: &mut Cache, mut buf: Buf, cap: usize, att: &Att) {
        let tracked = att.access == Access::ReadWrite && att.tracking == Tracking::Faults;
        let reset = if buf.keyed() {
            buf.rest_key(att.sole_holder()).and_then(|()| {
                // Fault tracking left pages read-only; a keyed buffer rests read-write (one
                // whose key was retired rests `PROT_NONE` already).
                if tracked && buf.keyed() {
                    buf.set(0, cap, Rights::ReadWrite)
                } else {
                    Ok(())
                }
            })
        } else if self.protect || tracked {
            buf.set(0, cap, self.buf_rest())
        } else {
            Ok(())
        };
        if let Err(e) = reset {
            tracing::warn!("cannot reset a DRAM shadow's rights ({e}): unmapping it");
            return;
        }
        bufs.give(buf);
    }

    /// Bring a read-write attachment's shadow up to date: copy the stale pages from the current
    /// slot (non-temporal stores, then one fence), then open the shadow for writing.
    fn freshen(&self, inner: &mut Inner, id: u64) -> Result<()> {
        let att = inner
            .atts
            .get(&id)
            .ok_or(ObjError::NotAttached { handle: id })?;
        if att.fresh {
            return Ok(());
        }
        let (index, slot, tracking) = (att.obj, att.slot, att.tracking);
        let o = inner.objs[index].as_mut().expect("attached object exists");
        let (shadow, cur, cap) = (
            o.desc.slot_off(slot),
            o.desc.slot_off(o.active()),
            o.desc.cap as usize,
        );
        if self.protect || tracking == Tracking::Faults {
            self.rights(shadow, cap, Rights::ReadWrite)?;
        }
        if !o.stale.is_empty() {
            if self.protect {
                self.rights(cur, cap, Rights::Read)?;
            }
            let mut buf = vec![0u8; COPY_CHUNK];
            for (first, n) in o.stale.runs() {
                let (mut at, end) = (first * PAGE, (first + n) * PAGE);
                while at < end {
                    let k = (end - at).min(COPY_CHUNK);
                    self.m.read(cur + at, &mut buf[..k]);
                    self.m.write_nt(shadow + at, &buf[..k]);
                    bump(&self.ctr.bytes_copied, k as u64);
                    at += k;
                }
            }
            // Orders the streaming copies before the attachment's own stores to the same lines.
            self.fence();
            if self.protect {
                self.rights(cur, cap, Rights::None)?;
            }
            o.stale.clear();
        }
        let att = inner.atts.get_mut(&id).expect("checked above");
        if tracking == Tracking::Faults {
            self.rights(shadow, cap, Rights::Read)?;
            let start = address(&self.m, shadow, cap).expect("fault tracking needs addresses");
            let slot = faults::register(start, cap, att.dirty.words_ptr())
                .map_err(|e| {
                    ObjError::BadArgument(format!("cannot install the write-fault handler: {e}"))
                })?
                .ok_or(ObjError::TooManyHandles {
                    max: faults::MAX_TRACKED,
                })?;
            att.fault_slot = Some(slot);
        }
        att.fresh = true;
        Ok(())
    }

    /// Stop fault tracking and close the shadow (after sync or detach).
    fn close_shadow(&self, att: &mut Att, o: &Obj) -> Result<()> {
        if let Some(s) = att.fault_slot.take() {
            faults::unregister(s);
        }
        if att.access == Access::ReadWrite && (self.protect || att.tracking == Tracking::Faults) {
            self.rights(o.desc.slot_off(att.slot), o.desc.cap as usize, self.rest())?;
        }
        Ok(())
    }

    fn check_range(o: &Obj, off: u64, len: usize) -> Result<()> {
        if off
            .checked_add(len as u64)
            .is_none_or(|end| end > o.desc.size)
        {
            return Err(ObjError::OutOfBounds {
                name: o.desc.name.clone(),
                off,
                len: len as u64,
                size: o.desc.size,
            });
        }
        Ok(())
    }

    /// A write-side call (`what`) on handle `id` over `[off, off+len)`: the handle must be
    /// attached read-write and the range inside the object.
    fn check_writable(
        inner: &Inner,
        id: u64,
        off: u64,
        len: usize,
        what: &'static str,
    ) -> Result<()> {
        let att = inner
            .atts
            .get(&id)
            .ok_or(ObjError::NotAttached { handle: id })?;
        let o = inner.objs[att.obj]
            .as_ref()
            .expect("attached object exists");
        if att.access != Access::ReadWrite {
            return Err(ObjError::ReadOnly {
                name: o.desc.name.clone(),
                what,
            });
        }
        Self::check_range(o, off, len)
    }

    pub fn read_id(&self, id: u64, off: u64, dst: &mut [u8]) -> Result<()> {
        let mut inner = self.inner.lock();
        self.freshen(&mut inner, id)?;
        let att = &inner.atts[&id];
        let o = inner.objs[att.obj]
            .as_ref()
            .expect("attached object exists");
        Self::check_range(o, off, dst.len())?;
        match &att.buf {
            Some(b) => {
                let _w = b.window(Rights::Read);
                // SAFETY: an attached buffer is readable (in this thread: the window); the
                // handle's owner is the one reading.
                unsafe { b.copy_out(off as usize, dst) }
            }
            None => self.m.read(o.desc.slot_off(att.slot) + off as usize, dst),
        }
        Ok(())
    }

    pub fn write_id(&self, id: u64, off: u64, src: &[u8]) -> Result<()> {
        let mut inner = self.inner.lock();
        Self::check_writable(&inner, id, off, src.len(), "write")?;
        self.freshen(&mut inner, id)?;
        let att = &inner.atts[&id];
        let o = inner.objs[att.obj]
            .as_ref()
            .expect("attached object exists");
        if !src.is_empty() {
            let first = off as usize / PAGE;
            let last = (off as usize + src.len() - 1) / PAGE;
            let newly = (first..=last).any(|p| !att.dirty.contains(p));
            // Recorded before the store so a fault-tracked write does not need to fault.
            att.dirty.set_range(first, last - first + 1);
            if att.tracking == Tracking::Faults && newly {
                let (at, len) = (first * PAGE, (last - first + 1) * PAGE);
                match &att.buf {
                    Some(b) => b.set(at, len, Rights::ReadWrite).map_err(|e| {
                        ObjError::BadArgument(format!("cannot open a DRAM shadow page: {e}"))
                    })?,
                    None => self.rights(o.desc.slot_off(att.slot) + at, len, Rights::ReadWrite)?,
                }
            }
            if att.tracking == Tracking::Whole && att.buf.is_some() {
                att.dirty.set_range(0, o.pages());
            }
        }
        match &att.buf {
            Some(b) => {
                let _w = b.window(Rights::ReadWrite);
                // SAFETY: the range is inside the object (checked) and writable (read-write
                // attachment, in this thread: the window; fault-tracked pages were opened
                // above); the owner is the writer.
                unsafe { b.copy_in(off as usize, src) }
            }
            None => self.m.write(o.desc.slot_off(att.slot) + off as usize, src),
        }
        Ok(())
    }

    pub fn mark_dirty_id(&self, id: u64, off: u64, len: u64) -> Result<()> {
        let mut inner = self.inner.lock();
        Self::check_writable(&inner, id, off, len as usize, "mark_dirty")?;
        self.freshen(&mut inner, id)?;
        if len > 0 {
            let first = off as usize / PAGE;
            let last = (off + len - 1) as usize / PAGE;
            let att = &inner.atts[&id];
            att.dirty.set_range(first, last - first + 1);
            if att.tracking == Tracking::Whole && att.buf.is_some() {
                att.dirty
                    .set_range(0, inner.objs[att.obj].as_ref().expect("attached").pages());
            }
        }
        Ok(())
    }

    /// Address of the attachment's view (the shadow for read-write). DRAM shadow: valid until
    /// `detach` (the same buffer across syncs). PM shadow: valid until the next `sync` or
    /// `detach` of this handle.
    pub fn ptr_id(&self, id: u64) -> Result<Option<*mut u8>> {
        let mut inner = self.inner.lock();
        self.freshen(&mut inner, id)?;
        let inner = &mut *inner;
        let att = inner.atts.get_mut(&id).expect("freshen checked the handle");
        let o = inner.objs[att.obj]
            .as_ref()
            .expect("attached object exists");
        if let Some(b) = &att.buf {
            if att.tracking == Tracking::Whole && att.access == Access::ReadWrite {
                att.dirty.set_range(0, o.pages());
            }
            let me = keys::thread_tag();
            if b.keyed() && me != att.owner && !att.granted.contains(&me) {
                // Asking for the pointer is what lets this thread use it.
                if att.granted.len() == MAX_THREADS_PER_HANDLE {
                    return Err(ObjError::BadArgument(format!(
                        "more than {MAX_THREADS_PER_HANDLE} threads took the pointer of handle \
                         {id}; attach with protection keys off (PoolOptions::pkey = false, \
                         PMO_PKEY=off) to share it widely"
                    )));
                }
                b.allow_thread(user_rights(att.access));
                att.granted.push(me);
            }
            return Ok(Some(b.ptr()));
        }
        Ok(address(
            &self.m,
            o.desc.slot_off(att.slot),
            o.desc.cap as usize,
        ))
    }

    pub fn info_id(&self, id: u64) -> Result<(String, u64, Access)> {
        let inner = self.inner.lock();
        let att = inner
            .atts
            .get(&id)
            .ok_or(ObjError::NotAttached { handle: id })?;
        let o = inner.objs[att.obj]
            .as_ref()
            .expect("attached object exists");
        Ok((o.desc.name.clone(), o.desc.size, att.access))
    }

    pub fn detach_id(&self, id: u64) -> Result<()> {
        let mut inner = self.inner.lock();
        let mut att = inner
            .atts
            .remove(&id)
            .ok_or(ObjError::NotAttached { handle: id })?;
        let inner = &mut *inner;
        let o = inner.objs[att.obj]
            .as_mut()
            .expect("attached object exists");
        if let Some(s) = att.fault_slot.take() {
            faults::unregister(s);
        }
        if let Some(b) = att.buf.take() {
            // DRAM shadow: unsynced writes vanish with the buffer; PM was not touched.
            match att.access {
                Access::ReadWrite => o.writer = None,
                Access::Read => o.readers -= 1,
            }
            self.unstage(&mut inner.bufs, b, o.desc.cap as usize, &att);
            return Ok(());
        }
        match att.access {
            Access::ReadWrite => {
                // Unsynced writes are dropped: those shadow pages now differ from the current slot.
                // Whole tracking records no pages before its sync: any page may differ.
                if att.fresh && att.tracking == Tracking::Whole {
                    o.stale.set_range(0, o.pages());
                } else if att.fresh {
                    o.stale.union(&att.dirty);
                }
                o.writer = None;
                self.close_shadow(&mut att, o)?;
            }
            Access::Read => {
                o.readers -= 1;
                if o.readers == 0 && self.protect {
                    self.rights(
                        o.desc.slot_off(o.active()),
                        o.desc.cap as usize,
                        Rights::None,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// PMO Sync: publish the writes of every handle in `ids` atomically, as one.
    pub fn sync_ids(&self, ids: &[u64]) -> Result<()> {
        if ids.len() > MAX_SYNC {
            return Err(ObjError::TooMany {
                n: ids.len(),
                max: MAX_SYNC,
            });
        }
        let mut inner = self.inner.lock();
        let mut seen = Vec::new(); // objects of a multi-object sync (a single one needs no check)
        for &id in ids {
            let att = inner
                .atts
                .get(&id)
                .ok_or(ObjError::NotAttached { handle: id })?;
            let name = &inner.objs[att.obj].as_ref().expect("attached").desc.name;
            if att.access != Access::ReadWrite {
                return Err(ObjError::ReadOnly {
                    name: name.clone(),
                    what: "sync",
                });
            }
            if ids.len() > 1 {
                if seen.contains(&att.obj) {
                    return Err(ObjError::Duplicate { name: name.clone() });
                }
                seen.push(att.obj);
            }
        }
        // 1. Make each changed shadow's pages durable in its target slot, without a fence per
        //    line or per object; 2. one fence and the publication. The library's own window
        //    onto the object area is open only from the first copy to the publication.
        let key = match &self.guard {
            AreaGuard::Key(k) if self.shadow == Shadow::Dram => Some(k.open_write()),
            _ => None,
        };
        let mut opened = vec![];
        let done = self
            .write_back(&inner, ids, &mut opened)
            .inspect(|changed| {
                if !changed.is_empty() {
                    self.publish(&mut inner, changed);
                }
            });
        drop(key);
        let mut closed = Ok(());
        for (off, len) in opened {
            closed = closed.and(self.close_area(off, len));
        }
        let changed = done?;
        closed?;
        if changed.is_empty() {
            return Ok(());
        }
        // 3. The old current slot is the next target; it differs on exactly the synced pages.
        for &(id, index, word) in &changed {
            let inner = &mut *inner;
            let att = inner.atts.get_mut(&id).expect("validated");
            let o = inner.objs[index].as_mut().expect("attached");
            if att.buf.is_none() {
                self.close_shadow(att, o)?;
            }
            o.state = word;
            o.stale.clear();
            o.stale.union(&att.dirty);
            att.dirty.clear();
            att.slot = o.active() ^ 1;
            let Some(b) = &att.buf else {
                att.fresh = false;
                continue;
            };
            // DRAM shadow: the buffer equals the new current slot and stays attached.
            match att.tracking {
                Tracking::Whole => att.dirty.set_range(0, o.pages()),
                Tracking::Faults => {
                    // Re-arm: the next store to each page faults again.
                    if let Err(e) = b.set(0, o.desc.cap as usize, Rights::Read) {
                        tracing::warn!("cannot re-arm write faults ({e}): next sync writes all");
                        att.dirty.set_range(0, o.pages());
                    }
                }
                _ => {}
            }
        }
        bump(&self.ctr.syncs, 1);
        bump(&self.ctr.published, changed.len() as u64);
        Ok(())
    }

    /// Step 1 of a sync: make each handle's changed pages durable-to-be in its target slot (PM
    /// shadow: clwb of the dirty pages; DRAM shadow: non-temporal copies of the dirty and stale
    /// pages). No fence. Returns (handle, object, new state word) per object to publish, and
    /// records in `opened` the page windows to close.
    fn write_back(
        &self,
        inner: &Inner,
        ids: &[u64],
        opened: &mut Vec<(usize, usize)>,
    ) -> Result<Vec<(u64, usize, u64)>> {
        let mut changed = vec![];
        for &id in ids {
            let att = &inner.atts[&id];
            let o = inner.objs[att.obj].as_ref().expect("attached");
            let Some(b) = &att.buf else {
                if !att.fresh {
                    continue; // nothing was written since the last sync: nothing to publish
                }
                if att.tracking == Tracking::Whole {
                    att.dirty.set_range(0, o.pages());
                }
                if att.dirty.is_empty() {
                    continue;
                }
                let base = o.desc.slot_off(att.slot);
                for (first, n) in att.dirty.runs() {
                    self.flush(base + first * PAGE, n * PAGE);
                    let k = (n * PAGE) as u64;
                    bump(&self.ctr.bytes_flushed, k);
                    bump(&self.ctr.bytes_synced, k);
                }
                let word = layout::state_word(layout::state_generation(o.state) + 1, att.slot);
                changed.push((id, att.obj, word));
                continue;
            };
            if att.dirty.is_empty() {
                continue;
            }
            // The target will differ from the current slot on the dirty pages: record that
            // first, so a failure part-way leaves `stale` an over-estimate, never an under one.
            o.stale.union(&att.dirty);
            let (target, cap) = (o.desc.slot_off(att.slot), o.desc.cap as usize);
            if let AreaGuard::Pages = self.guard {
                self.open_area(target, cap, Rights::ReadWrite)?;
                opened.push((target, cap));
            }
            let _w = b.window(Rights::Read);
            for (first, n) in o.stale.runs() {
                let (at, len) = (first * PAGE, n * PAGE);
                assert!(at + len <= cap, "stale pages inside the object");
                // SAFETY: `[at, at+len)` lies in the attached buffer (cap <= its size), which
                // is readable here (the window above). User threads may store into it while
                // this runs (they should not: such stores may or may not be synced), so it is
                // read by raw pointer, never as a slice.
                unsafe { self.m.write_nt_from(target + at, b.ptr().add(at), len) };
                bump(&self.ctr.bytes_synced, len as u64);
            }
            let word = layout::state_word(layout::state_generation(o.state) + 1, att.slot);
            changed.push((id, att.obj, word));
        }
        Ok(changed)
    }

    /// Step 2 of a sync: one fence after the write-back, then the publication: one persisted
    /// state word (one object), or a committed intent record (several).
    fn publish(&self, inner: &mut Inner, changed: &[(u64, usize, u64)]) {
        if let [(_, index, word)] = changed[..] {
            self.fence();
            self.persist_word(self.g.entry_off(index), word);
            return;
        }
        let seq = inner.seq + 1;
        let intent = Intent {
            seq,
            items: changed.iter().map(|&(_, i, w)| (i as u64, w)).collect(),
        };
        let body = intent.encode();
        let so = self.g.sync_off as usize;
        self.m.write(so + 8, &body);
        self.flush(so + 8, body.len());
        self.fence(); // shadows and intent durable
        self.persist_word(so, seq); // commit point
        for &(_, index, word) in changed {
            let eo = self.g.entry_off(index);
            self.m.store_u64(eo, word);
            self.flush(eo, 8);
        }
        self.fence();
        self.persist_word(so, 0); // retire the intent before any later publication
        inner.seq = seq;
        bump(&self.ctr.intents, 1);
    }

    /// Publish several handles' writes atomically (one sync).
    pub fn sync(&self, handles: &[&Handle<'_, M>]) -> Result<()> {
        let ids: Vec<u64> = handles.iter().map(|h| h.id).collect();
        self.sync_ids(&ids)
    }

    /// Detach a handle (unsynced writes are discarded).
    pub fn detach(&self, h: Handle<'_, M>) -> Result<()> {
        h.detach()
    }
}

impl<M: Media> Drop for Pool<M> {
    fn drop(&mut self) {
        // Before the bitsets the fault handler writes go away, and before the buffers unmap.
        self.release_attachments();
    }
}

/// An attached object. Reads and writes are bounds-checked copies; nothing hands out a Rust
/// reference into PM. Dropping a handle detaches it (unsynced writes are discarded).
pub struct Handle<'p, M: Media> {
    pool: &'p Pool<M>,
    id: u64,
}

impl<M: Media> Handle<'_, M> {
    pub fn id(&self) -> u64 {
        self.id
    }
    pub fn name(&self) -> Result<String> {
        Ok(self.pool.info_id(self.id)?.0)
    }
    pub fn size(&self) -> Result<u64> {
        Ok(self.pool.info_id(self.id)?.1)
    }
    pub fn access(&self) -> Result<Access> {
        Ok(self.pool.info_id(self.id)?.2)
    }
    /// Copy `dst.len()` bytes at `off` out of the object (the shadow for a read-write handle).
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        self.pool.read_id(self.id, off, dst)
    }
    /// Copy `src` into the shadow at `off`; visible to other attachments only after `sync`.
    pub fn write(&self, off: u64, src: &[u8]) -> Result<()> {
        self.pool.write_id(self.id, off, src)
    }
    /// Declare `[off, off+len)` written through the raw pointer ([`Tracking::Explicit`]).
    pub fn mark_dirty(&self, off: u64, len: u64) -> Result<()> {
        self.pool.mark_dirty_id(self.id, off, len)
    }
    /// The attachment's view as a raw pointer (for C callers), valid until this handle's next
    /// `sync` or `detach`; `None` on media without addresses. Writing through it is `unsafe`
    /// for the caller; with protection a read-only view faults on a write. With buffer keys
    /// ([`PoolOptions::pkey`]) the pointer works in the attaching thread and in each thread that
    /// calls `as_ptr` itself; other threads fault.
    pub fn as_ptr(&self) -> Result<Option<*mut u8>> {
        self.pool.ptr_id(self.id)
    }
    /// Publish this handle's writes.
    pub fn sync(&self) -> Result<()> {
        self.pool.sync_ids(&[self.id])
    }
    pub fn detach(mut self) -> Result<()> {
        let id = std::mem::replace(&mut self.id, 0);
        self.pool.detach_id(id)
    }
}

impl<M: Media> Drop for Handle<'_, M> {
    fn drop(&mut self) {
        if self.id != 0 {
            let _ = self.pool.detach_id(self.id);
        }
    }
}

/// Set the page rights of `[off, off+len)` and tag the pages with `key` (`None`: the default
/// key). Rights exist only on a mapping; on a simulator this changes nothing.
fn set_rights<M: Media>(
    media: &M,
    off: usize,
    len: usize,
    rights: Rights,
    key: Option<&Pkey>,
) -> std::result::Result<(), MediaError> {
    match media.mapping() {
        Some(region) => region.set_access_key(off, len, rights, key),
        None => Ok(()),
    }
}

/// Address of media byte `off` when the media is a mapping.
fn address<M: Media>(media: &M, off: usize, len: usize) -> Option<*mut u8> {
    media.mapping().map(|region| region.ptr_at(off, len))
}
