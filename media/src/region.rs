//! Regions: mappings of (real or emulated) persistent memory.
//!
//! A region is a file on any file system (emulated PM; `/dev/shm` by default), a DAX file mapped
//! with `MAP_SYNC` (real PM through a file system), a device-dax character device (real PM, raw),
//! or anonymous memory (tests). All four are accessed through [`crate::Media`].

use crate::error::{MediaError, Result};
use crate::raw;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Smallest region pmkit maps: one page.
pub const MIN_REGION: u64 = 4096;
/// Device-dax mappings must be aligned to (and sized in) 2 MiB.
pub const DEVDAX_ALIGN: u64 = 2 << 20;
const PAGE: u64 = 4096;

/// Where the CPU caches stand relative to power failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Domain {
    /// Asynchronous DRAM refresh: the memory controller is persistent, caches are not, so stores
    /// must be flushed (or be non-temporal) and fenced.
    Adr,
    /// Extended ADR: caches are persistent too; a fence is enough.
    Eadr,
}

impl std::fmt::Display for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Domain::Adr => "ADR (caches volatile)",
            Domain::Eadr => "eADR (caches persistent)",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RegionKind {
    /// A regular file mapped `MAP_SHARED` (emulated PM; durable on a disk only after msync).
    File,
    /// A file on a DAX file system mapped `MAP_SHARED_VALIDATE | MAP_SYNC`.
    Dax,
    /// A device-dax character device (`/dev/daxX.Y`).
    DevDax,
    /// Anonymous shared memory (tests).
    Anonymous,
}

/// How hard to try for a DAX mapping of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DaxMode {
    /// Try `MAP_SYNC`; if the file system is not DAX, fall back to a shared mapping and say so.
    #[default]
    Auto,
    /// Fail if the file system is not DAX.
    Require,
    /// Never ask for `MAP_SYNC`.
    Off,
}

#[derive(Debug, Clone, Default)]
pub struct RegionOptions {
    pub dax: DaxMode,
    /// Persistence domain when the platform does not say (no `/sys/bus/nd` regions); default ADR.
    pub domain: Option<Domain>,
    /// Fault every page in at map time so first touches do not distort timing.
    pub populate: bool,
    /// Open the file `O_RDONLY` and map it `PROT_READ` (`MAP_SHARED`): nothing can change its
    /// bytes, and read-only file systems or read-only permission suffice. Every storing method
    /// of [`crate::Media`] (`write*`, `store_*`, `cas_*`, `zero`, and `load_u128`, which is a
    /// CAS) panics on such a region
    /// instead of faulting; systems refuse writes before they get there. `mprotect` to
    /// writable rights fails (`EACCES`), so protection modes do not apply.
    pub read_only: bool,
}

/// A mapping of persistent memory.
pub struct Region {
    ptr: *mut u8,
    len: usize,
    kind: RegionKind,
    domain: Domain,
    path: PathBuf,
    file: Option<File>,
    on_tmpfs: bool,
    read_only: bool,
    notes: Vec<String>,
    /// The alignment any mapping of part of the file must keep (device-dax: the device's).
    map_align: usize,
}

// SAFETY: the mapping is plain shared memory; all access goes through raw-pointer copies and
// atomics in `raw.rs`, which are sound to call from any thread.
unsafe impl Send for Region {}
// SAFETY: as for Send: no method hands out a reference into the mapping, so sharing a Region
// shares only raw-pointer access, which every method makes atomic or a byte copy.
unsafe impl Sync for Region {}

impl Region {
    /// Create a new file of `size` bytes at `path` (fallocate'd) and map it. Fails if the path
    /// exists. Nothing is left behind on failure.
    pub fn create(path: &Path, size: u64, opts: &RegionOptions) -> Result<Region> {
        if opts.read_only {
            return Err(MediaError::Unsupported {
                path: path.into(),
                why: "cannot create a region read-only".into(),
            });
        }
        check_size(path, size, PAGE)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| MediaError::io(path, "cannot create", e))?;
        let made = (|| {
            fallocate(&file, size)
                .map_err(|e| MediaError::io(path, "cannot allocate space (fallocate)", e))?;
            Self::map_file(path, file, size, opts)
        })();
        if made.is_err() {
            let _ = std::fs::remove_file(path);
        }
        made
    }

    /// Open an existing file or device-dax device and map all of it. A sparse file opened
    /// read-write has its holes allocated first, so a store never meets a full file system.
    pub fn open(path: &Path, opts: &RegionOptions) -> Result<Region> {
        let meta = std::fs::metadata(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                MediaError::Missing { path: path.into() }
            } else {
                MediaError::io(path, "cannot stat", e)
            }
        })?;
        if meta.file_type().is_char_device() {
            return Self::open_devdax(path, meta.rdev(), opts);
        }
        if !meta.is_file() {
            return Err(MediaError::Unsupported {
                path: path.into(),
                why: "not a regular file or device-dax character device".into(),
            });
        }
        check_size(path, meta.len(), PAGE)?;
        let file = open_file(path, opts.read_only)?;
        if !opts.read_only && meta.blocks() * 512 < meta.len() {
            // A sparse file (made by `truncate`, or copied without its holes) would take its
            // missing blocks at the first store into each: on a full file system that store
            // is a SIGBUS, where no error can be returned. Allocate them now, where it can.
            fallocate(&file, meta.len()).map_err(|e| {
                MediaError::io(
                    path,
                    "is sparse and its blocks cannot be allocated (fallocate; free space on its \
                     file system, or move it to one with room)",
                    e,
                )
            })?;
        }
        Self::map_file(path, file, meta.len(), opts)
    }

    /// [`Region::open`] with `read_only` set: `O_RDONLY`, `PROT_READ`, nothing written.
    pub fn open_read_only(path: &Path) -> Result<Region> {
        Self::open(
            path,
            &RegionOptions {
                read_only: true,
                ..Default::default()
            },
        )
    }

    /// Open `path` if it exists, else create it with `size` bytes.
    pub fn open_or_create(path: &Path, size: u64, opts: &RegionOptions) -> Result<Region> {
        if path.exists() {
            Self::open(path, opts)
        } else {
            Self::create(path, size, opts)
        }
    }

    /// Anonymous shared memory of `len` bytes (tests; forked children share it).
    pub fn anonymous(len: usize) -> Result<Region> {
        let path = PathBuf::from("<anonymous>");
        check_size(&path, len as u64, PAGE)?;
        let ptr = mmap(
            &path,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )?;
        Ok(Region {
            ptr,
            len,
            kind: RegionKind::Anonymous,
            domain: Domain::Adr,
            path,
            file: None,
            on_tmpfs: true,
            read_only: false,
            notes: vec![],
            map_align: PAGE as usize,
        })
    }

    fn map_file(path: &Path, file: File, size: u64, opts: &RegionOptions) -> Result<Region> {
        let len = usize::try_from(size).map_err(|_| MediaError::BadSize {
            path: path.into(),
            size,
            why: "larger than the address space".into(),
        })?;
        let mut notes = vec![];
        let prot = prot(opts.read_only);
        let populate = if opts.populate { libc::MAP_POPULATE } else { 0 };
        let fd = file.as_raw_fd();
        let mut kind = RegionKind::File;
        let ptr = if opts.dax == DaxMode::Off {
            mmap(path, len, prot, libc::MAP_SHARED | populate, fd, 0)?
        } else {
            match mmap(
                path,
                len,
                prot,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC | populate,
                fd,
                0,
            ) {
                Ok(p) => {
                    kind = RegionKind::Dax;
                    p
                }
                Err(MediaError::Io { err, .. })
                    if err.raw_os_error() == Some(libc::EOPNOTSUPP)
                        && opts.dax == DaxMode::Auto =>
                {
                    notes.push(format!(
                        "{}: file system is not DAX (MAP_SYNC refused); mapped MAP_SHARED as emulated PM",
                        path.display()
                    ));
                    mmap(path, len, prot, libc::MAP_SHARED | populate, fd, 0)?
                }
                Err(MediaError::Io { err, .. }) if err.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    return Err(MediaError::Unsupported {
                        path: path.into(),
                        why: "DAX required but the file system does not support MAP_SYNC".into(),
                    })
                }
                Err(e) => return Err(e),
            }
        };
        let on_tmpfs = is_tmpfs(&file);
        let domain = platform_domain().or(opts.domain).unwrap_or(Domain::Adr);
        if kind == RegionKind::File && !on_tmpfs && !opts.read_only {
            notes.push(format!(
                "{}: a plain file on a disk file system (not DAX, not tmpfs) is durable only after msync",
                path.display()
            ));
        }
        Ok(Region {
            ptr,
            len,
            kind,
            domain,
            path: path.into(),
            file: Some(file),
            on_tmpfs,
            read_only: opts.read_only,
            notes,
            map_align: PAGE as usize,
        })
    }

    fn open_devdax(path: &Path, rdev: u64, opts: &RegionOptions) -> Result<Region> {
        let (maj, min) = (libc::major(rdev), libc::minor(rdev));
        let sys = PathBuf::from(format!("/sys/dev/char/{maj}:{min}"));
        let subsystem = std::fs::read_link(sys.join("subsystem")).ok();
        let is_dax = subsystem
            .as_ref()
            .and_then(|s| s.file_name())
            .is_some_and(|n| n == "dax");
        if !is_dax {
            return Err(MediaError::NotDevDax {
                path: path.into(),
                why: format!("character device {maj}:{min} is not in the dax subsystem"),
            });
        }
        let read_num = |name: &str| -> Option<u64> {
            std::fs::read_to_string(sys.join(name))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let size = read_num("size").ok_or_else(|| MediaError::NotDevDax {
            path: path.into(),
            why: "no size in sysfs".into(),
        })?;
        let align = read_num("align").unwrap_or(DEVDAX_ALIGN).max(DEVDAX_ALIGN);
        check_size(path, size, align)?;
        let file = open_file(path, opts.read_only)?;
        let ptr = mmap(
            path,
            size as usize,
            prot(opts.read_only),
            libc::MAP_SHARED | if opts.populate { libc::MAP_POPULATE } else { 0 },
            file.as_raw_fd(),
            0,
        )?;
        let domain = platform_domain().or(opts.domain).unwrap_or(Domain::Adr);
        Ok(Region {
            ptr,
            len: size as usize,
            kind: RegionKind::DevDax,
            domain,
            path: path.into(),
            file: Some(file),
            on_tmpfs: false,
            read_only: opts.read_only,
            notes: vec![],
            map_align: align as usize,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn kind(&self) -> RegionKind {
        self.kind
    }
    pub fn domain(&self) -> Domain {
        self.domain
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The backing file, for per-thread windows (`private` protection) and msync.
    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }
    /// Things the user should know about how this region was mapped (DAX fallback, msync needs).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
    /// Whether stores reach durable media only through `msync` (a plain file on a disk).
    pub fn needs_msync(&self) -> bool {
        self.kind == RegionKind::File && !self.on_tmpfs
    }
    /// Whether the region is emulated PM in memory (a file on tmpfs, or anonymous memory).
    pub fn is_emulated(&self) -> bool {
        self.on_tmpfs && self.kind != RegionKind::Dax
    }
    /// Whether the region is mapped read-only ([`RegionOptions::read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The alignment (bytes) of the offset and length of any `mmap` of part of this region's
    /// file: a device-dax device's `align` (2 MiB or 1 GiB), else a page.
    pub fn map_align(&self) -> usize {
        self.map_align
    }

    pub(crate) fn from_parts(
        ptr: *mut u8,
        len: usize,
        kind: RegionKind,
        domain: Domain,
        path: PathBuf,
    ) -> Region {
        Region {
            ptr,
            len,
            kind,
            domain,
            path,
            file: None,
            on_tmpfs: true,
            read_only: false,
            notes: vec![],
            map_align: PAGE as usize,
        }
    }

    /// Pointer to byte `off`, after checking that `[off, off+len)` lies inside the region.
    #[inline]
    pub(crate) fn at(&self, off: usize, len: usize) -> *mut u8 {
        assert!(
            off <= self.len && len <= self.len - off,
            "access {off}+{len} outside region of {} bytes",
            self.len
        );
        // SAFETY: in bounds, checked above.
        unsafe { self.ptr.add(off) }
    }

    /// [`Region::at`] for a store: a read-only mapping would fault, so say why instead.
    #[inline]
    fn at_w(&self, off: usize, len: usize) -> *mut u8 {
        assert!(
            !self.read_only,
            "{}: store into a region mapped read-only",
            self.path.display()
        );
        self.at(off, len)
    }

    /// Address of byte `off` after checking that `[off, off+len)` lies inside the region, for
    /// layers that hand raw pointers to C callers (the object store's C ABI) or install page
    /// rights. Dereferencing it is the caller's `unsafe`, with the same rules as `raw.rs`.
    pub fn ptr_at(&self, off: usize, len: usize) -> *mut u8 {
        self.at(off, len)
    }

    /// Take an advisory `flock` on the file behind the region, shared or exclusive, without
    /// waiting: `Ok(false)` when another open file holds a conflicting lock. Anonymous
    /// regions have nothing to lock and always succeed. Released by [`Region::unlock`] or
    /// when the region (its file) is dropped.
    pub fn try_lock(&self, exclusive: bool) -> Result<bool> {
        let Some(file) = self.file() else {
            return Ok(true);
        };
        let op = if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        // SAFETY: flock on a file descriptor the region owns; it touches no memory.
        if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Ok(false);
        }
        Err(MediaError::io(self.path(), "cannot lock (flock)", e))
    }

    /// [`Region::try_lock`] that fails with [`MediaError::InUse`], naming the processes that
    /// hold the file (pid and command line), when another holds a conflicting lock.
    pub fn claim(&self, exclusive: bool) -> Result<()> {
        if self.try_lock(exclusive)? {
            return Ok(());
        }
        Err(MediaError::InUse {
            path: self.path.clone(),
            holders: self.holders(),
        })
    }

    /// The processes other than this one that hold a lock on the region's file.
    pub fn holders(&self) -> Vec<crate::holders::Holder> {
        self.file().map(crate::holders::of_file).unwrap_or_default()
    }

    /// Release the lock [`Region::try_lock`] took (unlocking an unlocked file does nothing).
    pub fn unlock(&self) {
        if let Some(file) = self.file() {
            // SAFETY: flock on a file descriptor the region owns; it touches no memory.
            unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
        }
    }

    /// `msync(MS_SYNC)` the pages covering `[off, off+len)`.
    pub fn msync(&self, off: usize, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let start = off & !(PAGE as usize - 1);
        let end = (off + len).min(self.len);
        let p = self.at(start, end - start);
        // SAFETY: the range is inside our mapping.
        let r = unsafe { libc::msync(p.cast(), end - start, libc::MS_SYNC) };
        if r != 0 {
            return Err(MediaError::Sync {
                offset: start,
                end,
                err: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: we own the mapping and nobody holds pointers into it past our lifetime.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("kind", &self.kind)
            .field("domain", &self.domain)
            .finish()
    }
}

impl crate::Media for Region {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }
    fn domain(&self) -> Domain {
        self.domain
    }
    fn mapping(&self) -> Option<&Region> {
        Some(self)
    }
    #[inline]
    fn read(&self, off: usize, dst: &mut [u8]) {
        let p = self.at(off, dst.len());
        // SAFETY: bounds checked by `at`; dst is our own buffer.
        unsafe { raw::copy_out(p, dst.as_mut_ptr(), dst.len()) }
    }
    #[inline]
    fn write(&self, off: usize, src: &[u8]) {
        let p = self.at_w(off, src.len());
        // SAFETY: bounds checked; the caller holds write rights (protection windows) to the range.
        unsafe { raw::copy_in(p, src.as_ptr(), src.len()) }
    }
    #[inline]
    fn write_nt(&self, off: usize, src: &[u8]) {
        let p = self.at_w(off, src.len());
        // SAFETY: as for `write`.
        unsafe {
            raw::copy_in_nt(
                p,
                src.as_ptr(),
                src.len(),
                crate::cpu::features().nt_width(),
            )
        }
    }
    fn write_nt_crc32c(&self, off: usize, src: &[u8], crc: u32) -> u32 {
        let p = self.at_w(off, src.len());
        if (p as usize).is_multiple_of(raw::LINE) && src.len().is_multiple_of(raw::LINE) {
            // SAFETY: bounds checked by `at_w`, `p` is line-aligned (checked) and whole lines
            // follow; `src` is our caller's buffer, which cannot overlap the mapping as a `&[u8]`
            // while we store into it (PM is never turned into a slice).
            let fused =
                unsafe { raw::stream_lines_crc32c(p, src.as_ptr(), src.len() / raw::LINE, crc) };
            if let Some(c) = fused {
                return c;
            }
        }
        self.write_nt(off, src);
        crc32c::crc32c_append(crc, src)
    }
    #[inline]
    unsafe fn read_into(&self, off: usize, dst: *mut u8, len: usize) {
        let p = self.at(off, len);
        // SAFETY: bounds checked; the caller vouches for `dst`; the copy writes it by pointer.
        unsafe { raw::copy_out(p, dst, len) }
    }
    #[inline]
    unsafe fn write_nt_from(&self, off: usize, src: *const u8, len: usize) {
        let p = self.at_w(off, len);
        // SAFETY: bounds checked; the caller vouches for `src`; the copy reads it by pointer.
        unsafe { raw::copy_in_nt(p, src, len, crate::cpu::features().nt_width()) }
    }
    #[inline]
    fn flush(&self, off: usize, len: usize, how: raw::Flush) {
        let p = self.at(off, len);
        // SAFETY: bounds checked; flushing needs only a mapping.
        unsafe { raw::flush(p, len, how) }
    }
    #[inline]
    fn fence(&self, kind: raw::Fence) {
        raw::fence(kind)
    }
    fn sync_pages(&self, off: usize, len: usize) -> Result<()> {
        self.msync(off, len)
    }
    #[inline]
    fn load_u64(&self, off: usize) -> u64 {
        // SAFETY: bounds checked; alignment asserted in `raw`.
        unsafe { raw::load_u64(self.at(off, 8)) }
    }
    #[inline]
    fn store_u64(&self, off: usize, v: u64) {
        // SAFETY: as above.
        unsafe { raw::store_u64(self.at_w(off, 8), v) }
    }
    #[inline]
    fn cas_u64(&self, off: usize, current: u64, new: u64) -> std::result::Result<u64, u64> {
        // SAFETY: as above.
        unsafe { raw::cas_u64(self.at_w(off, 8), current, new) }
    }
    #[inline]
    fn cas_u128(&self, off: usize, current: u128, new: u128) -> std::result::Result<u128, u128> {
        // SAFETY: as above.
        unsafe { raw::cas_u128(self.at_w(off, 16), current, new) }
    }
}

fn check_size(path: &Path, size: u64, align: u64) -> Result<()> {
    if size < MIN_REGION.max(align) {
        return Err(MediaError::BadSize {
            path: path.into(),
            size,
            why: format!(
                "smaller than the minimum of {} bytes",
                MIN_REGION.max(align)
            ),
        });
    }
    if !size.is_multiple_of(align) {
        return Err(MediaError::BadSize {
            path: path.into(),
            size,
            why: format!("not a multiple of {align} bytes"),
        });
    }
    Ok(())
}

fn open_file(path: &Path, read_only: bool) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(!read_only)
        .open(path)
        .map_err(|e| {
            let what = if read_only {
                "cannot open read-only"
            } else {
                "cannot open read-write"
            };
            MediaError::io(path, what, e)
        })
}

fn prot(read_only: bool) -> i32 {
    if read_only {
        libc::PROT_READ
    } else {
        libc::PROT_READ | libc::PROT_WRITE
    }
}

fn fallocate(file: &File, size: u64) -> std::io::Result<()> {
    // SAFETY: plain syscall on an fd we own.
    let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size as libc::off_t) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    Ok(())
}

fn mmap(path: &Path, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> Result<*mut u8> {
    // SAFETY: a fresh mapping chosen by the kernel; it aliases nothing Rust owns.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, off) };
    if p == libc::MAP_FAILED {
        return Err(MediaError::io(
            path,
            "cannot mmap",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(p.cast())
}

fn is_tmpfs(file: &File) -> bool {
    // SAFETY: fstatfs fills a struct we own.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        libc::fstatfs(file.as_raw_fd(), &mut s) == 0 && s.f_type == libc::TMPFS_MAGIC
    }
}

/// The platform's persistence domain from `/sys/bus/nd/devices/region*/persistence_domain`:
/// eADR only when every region says `cpu_cache`; `None` when there are no nd regions.
pub fn platform_domain() -> Option<Domain> {
    let dir = std::fs::read_dir("/sys/bus/nd/devices").ok()?;
    let mut seen = None;
    for e in dir.flatten() {
        if !e.file_name().to_string_lossy().starts_with("region") {
            continue;
        }
        let Ok(s) = std::fs::read_to_string(e.path().join("persistence_domain")) else {
            continue;
        };
        let d = if s.trim() == "cpu_cache" {
            Domain::Eadr
        } else {
            Domain::Adr
        };
        seen = Some(match (seen, d) {
            (Some(Domain::Adr), _) | (_, Domain::Adr) => Domain::Adr,
            _ => Domain::Eadr,
        });
    }
    seen
}
