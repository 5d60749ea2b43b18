//! pmkit's media layer: the one place that touches persistent memory.
//!
//! Every system above (the block device, persistent objects, ...) is written against [`Media`],
//! a small interface of copy-in/copy-out, cache-line flushes, fences and atomic words. Two
//! implementations exist: [`Region`] (a real mapping: DAX file, device-dax, plain file or
//! anonymous memory) and [`crashsim::CrashSim`] (records every store, flush and fence and yields
//! every post-crash image). Systems take `M: Media` as a generic, so production code pays nothing
//! for the indirection and every layer runs unchanged on the crash simulator in tests.

pub mod cpu;
pub mod crashsim;
pub mod emulate;
pub mod error;
pub mod extent_map;
pub mod guard;
pub mod holders;
pub mod kernel_write;
pub mod persist;
pub mod protect;
pub mod raw;
pub mod region;
pub mod sigsegv;

pub use cpu::{features, CpuFeatures};
pub use error::{MediaError, Result};
pub use guard::{Guarded, Protect};
pub use holders::Holder;
pub use kernel_write::KernelWriter;
pub use persist::{Persister, WriteScheme};
pub use raw::{Fence, Flush, LINE};
pub use region::{DaxMode, Domain, Region, RegionKind, RegionOptions};

/// Byte-addressable persistent media. Offsets are bytes from the start of the media; an access
/// outside `0..len()` is a bug in the caller and panics (systems validate requests first).
///
/// Durability model (what the crash simulator enforces): bytes stored with [`Media::write`] reach
/// the media when their cache line is flushed and a fence follows (or, unflushed, at any moment:
/// a crash may or may not keep them); bytes stored with [`Media::write_nt`] are durable after the
/// next fence; aligned 8-byte stores are atomic.
pub trait Media: Send + Sync {
    /// Size in bytes.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether caches are inside the persistence domain.
    fn domain(&self) -> Domain;
    /// The memory mapping behind this media, when there is one: page rights, protection keys
    /// and raw addresses (for pointers handed to users) exist only on a mapping. Simulators
    /// return `None`, and a system then offers only what needs no mapping.
    fn mapping(&self) -> Option<&Region> {
        None
    }
    /// The first byte of `[off, off+len)` the media cannot return (a media error: poison on
    /// real PM, one injected by the crash simulator), or `None`. A load of such a byte gives
    /// no data (a machine check on real PM, a fill pattern on the simulator), so a system asks
    /// before it hands data out and answers EIO instead. The default knows of none.
    fn first_bad(&self, off: usize, len: usize) -> Option<usize> {
        let _ = (off, len);
        None
    }
    /// Copy `dst.len()` bytes out of the media at `off`.
    fn read(&self, off: usize, dst: &mut [u8]);
    /// Store `src` at `off` with ordinary write-back stores.
    fn write(&self, off: usize, src: &[u8]);
    /// Store `src` at `off` with non-temporal stores (partial lines are stored and flushed).
    fn write_nt(&self, off: usize, src: &[u8]);
    /// [`Self::write_nt`] that also returns `crc32c::crc32c_append(crc, src)`, the CRC-32C of
    /// the bytes stored, chained onto `crc`. A mapping computes it in the copy loop itself (from
    /// the registers the streaming stores write) when the store is whole, aligned lines and the
    /// CPU can; the default stores, then checksums.
    fn write_nt_crc32c(&self, off: usize, src: &[u8], crc: u32) -> u32 {
        self.write_nt(off, src);
        crc32c::crc32c_append(crc, src)
    }
    /// [`Self::read`] into memory other code may reach while the copy runs (a buffer a user
    /// may hold a pointer to), written only through raw pointers, never as a `&mut [u8]`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes during the call.
    unsafe fn read_into(&self, off: usize, dst: *mut u8, len: usize) {
        let mut own = vec![0u8; len];
        self.read(off, &mut own);
        // SAFETY: `own` holds `len` bytes; the caller vouches `dst` is valid for `len` writes.
        unsafe { std::ptr::copy_nonoverlapping(own.as_ptr(), dst, len) };
    }
    /// [`Self::write_nt`] from memory other code may change while the copy runs (a buffer a
    /// user holds a pointer to), read only through raw pointers, never as a `&[u8]`. The
    /// default copies it into a private buffer first; a mapping streams it directly.
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes during the call.
    unsafe fn write_nt_from(&self, off: usize, src: *const u8, len: usize) {
        let mut own = vec![0u8; len];
        // SAFETY: the caller vouches `src` is valid for `len` reads; `own` holds `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src, own.as_mut_ptr(), len) };
        self.write_nt(off, &own);
    }
    /// Write back the cache lines covering `[off, off+len)`; durable after the next fence.
    fn flush(&self, off: usize, len: usize, how: Flush);
    /// Complete earlier flushes and non-temporal stores.
    fn fence(&self, kind: Fence);
    /// Page-granular durability (`msync`) for media whose durability point is the page cache.
    fn sync_pages(&self, off: usize, len: usize) -> Result<()>;
    /// Atomic aligned 8-byte load.
    fn load_u64(&self, off: usize) -> u64;
    /// Atomic aligned 8-byte store (not flushed).
    fn store_u64(&self, off: usize, v: u64);
    /// Atomic aligned 8-byte compare-and-swap: `Ok(previous)` or `Err(actual)`.
    fn cas_u64(&self, off: usize, current: u64, new: u64) -> std::result::Result<u64, u64>;
    /// Atomic 16-byte-aligned compare-and-swap (cmpxchg16b).
    fn cas_u128(&self, off: usize, current: u128, new: u128) -> std::result::Result<u128, u128>;

    /// Atomic 16-byte load (a CAS that swaps the value with itself).
    fn load_u128(&self, off: usize) -> u128 {
        match self.cas_u128(off, 0, 0) {
            Ok(v) | Err(v) => v,
        }
    }
    /// Atomic 16-byte store (not flushed).
    fn store_u128(&self, off: usize, v: u128) {
        let mut cur = self.load_u128(off);
        while let Err(actual) = self.cas_u128(off, cur, v) {
            cur = actual;
        }
    }
    /// Store an 8-byte word atomically and make it durable (flush + sfence), for metadata.
    fn persist_u64(&self, off: usize, v: u64) {
        self.store_u64(off, v);
        if self.domain() == Domain::Adr {
            self.flush(off, 8, Flush::best());
        }
        self.fence(Fence::Sfence);
    }
    /// Store a 16-byte word atomically and make it durable.
    fn persist_u128(&self, off: usize, v: u128) {
        self.store_u128(off, v);
        if self.domain() == Domain::Adr {
            self.flush(off, 16, Flush::best());
        }
        self.fence(Fence::Sfence);
    }
    /// Store zeroes over `[off, off+len)` (write-back stores, not flushed).
    fn zero(&self, off: usize, len: usize) {
        const Z: [u8; 4096] = [0; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(Z.len());
            self.write(off + done, &Z[..n]);
            done += n;
        }
    }
}

/// Forward every method of [`Media`] through a pointer type, so a system can run on media it
/// shares (`Arc<M>`) or borrows (`&M`) with no wrapper of its own.
macro_rules! forward_media {
    ($($ptr:ty),*) => {$(
        impl<M: Media + ?Sized> Media for $ptr {
            fn len(&self) -> usize {
                (**self).len()
            }
            fn domain(&self) -> Domain {
                (**self).domain()
            }
            fn mapping(&self) -> Option<&Region> {
                (**self).mapping()
            }
            fn first_bad(&self, off: usize, len: usize) -> Option<usize> {
                (**self).first_bad(off, len)
            }
            fn read(&self, off: usize, dst: &mut [u8]) {
                (**self).read(off, dst)
            }
            fn write(&self, off: usize, src: &[u8]) {
                (**self).write(off, src)
            }
            fn write_nt(&self, off: usize, src: &[u8]) {
                (**self).write_nt(off, src)
            }
            fn write_nt_crc32c(&self, off: usize, src: &[u8], crc: u32) -> u32 {
                (**self).write_nt_crc32c(off, src, crc)
            }
            unsafe fn write_nt_from(&self, off: usize, src: *const u8, len: usize) {
                // SAFETY: the caller's contract is the same as the target's.
                unsafe { (**self).write_nt_from(off, src, len) }
            }
            unsafe fn read_into(&self, off: usize, dst: *mut u8, len: usize) {
                // SAFETY: the caller's contract is the same as the target's.
                unsafe { (**self).read_into(off, dst, len) }
            }
            fn flush(&self, off: usize, len: usize, how: Flush) {
                (**self).flush(off, len, how)
            }
            fn fence(&self, kind: Fence) {
                (**self).fence(kind)
            }
            fn sync_pages(&self, off: usize, len: usize) -> Result<()> {
                (**self).sync_pages(off, len)
            }
            fn load_u64(&self, off: usize) -> u64 {
                (**self).load_u64(off)
            }
            fn store_u64(&self, off: usize, v: u64) {
                (**self).store_u64(off, v)
            }
            fn cas_u64(&self, off: usize, current: u64, new: u64) -> std::result::Result<u64, u64> {
                (**self).cas_u64(off, current, new)
            }
            fn cas_u128(
                &self,
                off: usize,
                current: u128,
                new: u128,
            ) -> std::result::Result<u128, u128> {
                (**self).cas_u128(off, current, new)
            }
        }
    )*};
}

forward_media!(&M, std::sync::Arc<M>);
