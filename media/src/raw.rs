//! Raw access to mapped persistent memory. Every load, store, cache-line flush and fence pmkit
//! issues on real PM goes through the functions here, so this file (with `region.rs`'s mmap and
//! `protect.rs`'s WRPKRU) holds nearly all of pmkit's `unsafe`.
//!
//! PM is memory that other threads and processes may change at any time, so it is never turned
//! into `&[u8]`/`&mut [u8]`: these functions take raw pointers and copy bytes in or out, the way
//! rust-vmm's vm-memory treats guest memory. Callers check bounds first; the functions here only
//! assert the invariants they rely on (alignment of atomic words).

use crate::cpu::features;
use std::sync::atomic::{AtomicU64, Ordering};

/// Size of a CPU cache line, the unit of flushing and of the crash model.
pub const LINE: usize = 64;

/// How a cache line is written back to the persistence domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Flush {
    /// `clflush`: write back and invalidate, strongly ordered (needs no fence to be ordered, but
    /// the classic sequence pairs it with `mfence`).
    Clflush,
    /// `clflushopt`: write back and invalidate, weakly ordered; durable after `sfence`.
    Clflushopt,
    /// `clwb`: write back, line may stay cached; durable after `sfence`.
    Clwb,
}

impl Flush {
    /// The best flush this CPU has (clwb, else clflushopt, else clflush).
    pub fn best() -> Flush {
        let f = features();
        if f.clwb {
            Flush::Clwb
        } else if f.clflushopt {
            Flush::Clflushopt
        } else {
            Flush::Clflush
        }
    }

    /// Whether this CPU can execute the instruction.
    pub fn available(self) -> bool {
        let f = features();
        match self {
            Flush::Clflush => f.clflush,
            Flush::Clflushopt => f.clflushopt,
            Flush::Clwb => f.clwb,
        }
    }
}

/// Which fence completes a batch of flushes or non-temporal stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Fence {
    Sfence,
    Mfence,
}

/// Copy `len` bytes from PM at `src` to `dst`.
///
/// # Safety
/// `src..src+len` must be mapped readable; `dst` must be valid for `len` bytes of writes.
#[inline]
pub unsafe fn copy_out(src: *const u8, dst: *mut u8, len: usize) {
    // A byte copy: concurrent writers may tear what we read, which callers accept (they hold
    // block locks or validate checksums); no reference to PM is ever formed.
    // SAFETY: the caller guarantees both ranges are valid for `len` bytes.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// Copy `len` bytes from `src` into PM at `dst` with ordinary (write-back cached) stores.
///
/// # Safety
/// `dst..dst+len` must be mapped writable; `src` valid for `len` bytes of reads; no overlap.
#[inline]
pub unsafe fn copy_in(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: the caller guarantees both ranges are valid for `len` bytes and disjoint.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// Write back every cache line touching `[p, p+len)`.
///
/// # Safety
/// The range must be mapped (flushing needs no write permission).
#[inline]
pub unsafe fn flush(p: *const u8, len: usize, how: Flush) {
    if len == 0 {
        return;
    }
    let start = (p as usize) & !(LINE - 1);
    let end = p as usize + len;
    let mut line = start;
    while line < end {
        // SAFETY: `line` starts a cache line that overlaps the caller's mapped range, and a
        // flush acts on the whole line containing its address.
        unsafe { flush_line(line as *const u8, how) };
        line += LINE;
    }
}

/// Write back the cache line containing `p` with `how`.
///
/// # Safety
/// `p` must be mapped; the CPU must have the instruction (`Flush::available`).
#[inline(always)]
unsafe fn flush_line(p: *const u8, how: Flush) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller guarantees `p` is mapped and the instruction exists; a flush reads
    // no data into Rust and changes no memory contents, only where the line is cached.
    unsafe {
        match how {
            Flush::Clflush => {
                std::arch::asm!("clflush [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
            Flush::Clflushopt => {
                std::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
            Flush::Clwb => {
                std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, how);
}

/// Order earlier flushes and non-temporal stores before later stores.
#[inline]
pub fn fence(kind: Fence) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: fences have no memory operands; SSE2 is part of x86_64.
    unsafe {
        match kind {
            Fence::Sfence => std::arch::x86_64::_mm_sfence(),
            Fence::Mfence => std::arch::x86_64::_mm_mfence(),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = kind;
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}

/// Copy into PM with non-temporal stores, durable after the next `sfence`.
///
/// Whole 64-byte lines are streamed with the widest vector store the CPU has; a partial line at the
/// head or tail is written with ordinary stores and flushed with the best flush, so the bytes
/// around it in the same line are never touched (a streaming store of a partial line would need
/// the rest of the line, which we must not rewrite: another writer may own it).
///
/// # Safety
/// As for [`copy_in`].
pub unsafe fn copy_in_nt(dst: *mut u8, src: *const u8, len: usize, width: usize) {
    if len == 0 {
        return;
    }
    let d = dst as usize;
    let head = ((d + LINE - 1) & !(LINE - 1)) - d;
    // The caller guarantees `dst..dst+len` is mapped writable and `src..src+len` readable;
    // each piece below (head, body, tail) lies inside those ranges: `head + body + tail == len`.
    if head >= len || width == 0 {
        // SAFETY: the whole of both ranges.
        unsafe {
            copy_in(dst, src, len);
            flush(dst, len, Flush::best());
        }
        return;
    }
    if head > 0 {
        // SAFETY: see above; `head < len`.
        unsafe {
            copy_in(dst, src, head);
            flush(dst, head, Flush::best());
        }
    }
    let body = (len - head) & !(LINE - 1);
    let tail = len - head - body;
    debug_assert_eq!((d + head) % LINE, 0, "the body starts on a line");
    // SAFETY: see above; `dst + head` is line-aligned and `body / LINE` whole lines follow.
    unsafe { stream_lines(dst.add(head), src.add(head), body / LINE, width) };
    if tail > 0 {
        // SAFETY: see above; the tail is the last `tail` bytes of both ranges.
        unsafe {
            let t = dst.add(head + body);
            copy_in(t, src.add(head + body), tail);
            flush(t, tail, Flush::best());
        }
    }
}

/// Stream `lines` whole, 64-byte aligned lines. `src` may be unaligned.
///
/// # Safety
/// `dst` is line-aligned and `dst..dst+lines*64` mapped writable, `src..src+lines*64`
/// readable; `width` is a vector width this CPU has (`CpuFeatures::nt_width`) or 0.
unsafe fn stream_lines(dst: *mut u8, src: *const u8, lines: usize, width: usize) {
    debug_assert_eq!(dst as usize % LINE, 0);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's ranges; `width` names a vector extension the CPU reported.
    unsafe {
        match width {
            64 => return stream_avx512(dst, src, lines),
            32 => return stream_avx2(dst, src, lines),
            16 => return stream_sse2(dst, src, lines),
            _ => {}
        }
    }
    // SAFETY: the caller's ranges.
    unsafe {
        copy_in(dst, src, lines * LINE);
        flush(dst, lines * LINE, Flush::best());
    }
}

/// # Safety
/// As for [`stream_lines`], and the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stream_avx512(dst: *mut u8, src: *const u8, lines: usize) {
    use std::arch::x86_64::*;
    for i in 0..lines {
        // SAFETY: line `i` is inside both ranges; the store target is 64-byte aligned.
        unsafe {
            let v = _mm512_loadu_si512(src.add(i * LINE) as *const _);
            _mm512_stream_si512(dst.add(i * LINE) as *mut _, v);
        }
    }
}

/// # Safety
/// As for [`stream_lines`], and the CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn stream_avx2(dst: *mut u8, src: *const u8, lines: usize) {
    use std::arch::x86_64::*;
    for i in 0..lines * 2 {
        // SAFETY: half-line `i` is inside both ranges; the store target is 32-byte aligned.
        unsafe {
            let v = _mm256_loadu_si256(src.add(i * 32) as *const __m256i);
            _mm256_stream_si256(dst.add(i * 32) as *mut __m256i, v);
        }
    }
}

/// # Safety
/// As for [`stream_lines`] (SSE2 is part of x86_64).
#[cfg(target_arch = "x86_64")]
unsafe fn stream_sse2(dst: *mut u8, src: *const u8, lines: usize) {
    use std::arch::x86_64::*;
    for i in 0..lines * 4 {
        // SAFETY: quarter-line `i` is inside both ranges; the store target is 16-byte aligned.
        unsafe {
            let v = _mm_loadu_si128(src.add(i * 16) as *const __m128i);
            _mm_stream_si128(dst.add(i * 16) as *mut __m128i, v);
        }
    }
}

/// The 8-byte word at `p`, read atomically.
///
/// # Safety
/// `p` must be mapped, readable and 8-byte aligned.
#[inline]
pub unsafe fn load_u64(p: *const u8) -> u64 {
    assert_eq!(p as usize % 8, 0, "atomic 8-byte load must be aligned");
    // SAFETY: mapped and aligned (asserted); an AtomicU64 has u64's layout, and atomic access
    // is sound however other threads or processes touch the word.
    unsafe { (*(p as *const AtomicU64)).load(Ordering::Acquire) }
}

/// Store an 8-byte word atomically (a crash sees the old or the new word, never a mix).
///
/// # Safety
/// `p` must be mapped, writable and 8-byte aligned.
#[inline]
pub unsafe fn store_u64(p: *mut u8, v: u64) {
    assert_eq!(p as usize % 8, 0, "atomic 8-byte store must be aligned");
    // SAFETY: as for `load_u64`, and the caller guarantees write rights.
    unsafe { (*(p as *const AtomicU64)).store(v, Ordering::Release) };
}

/// Compare-and-swap an 8-byte word. `Ok(old)` on success, `Err(actual)` otherwise.
///
/// # Safety
/// As for [`store_u64`].
#[inline]
pub unsafe fn cas_u64(p: *mut u8, current: u64, new: u64) -> Result<u64, u64> {
    assert_eq!(p as usize % 8, 0, "atomic 8-byte CAS must be aligned");
    // SAFETY: as for `store_u64`.
    unsafe {
        (*(p as *const AtomicU64)).compare_exchange(
            current,
            new,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
    }
}

/// Compare-and-swap a 16-byte word with `lock cmpxchg16b`. `Ok(old)` on success, `Err(actual)`.
///
/// # Safety
/// `p` must be mapped, writable and 16-byte aligned; the CPU must have cmpxchg16b.
#[inline]
pub unsafe fn cas_u128(p: *mut u8, current: u128, new: u128) -> Result<u128, u128> {
    assert_eq!(p as usize % 16, 0, "16-byte CAS must be aligned");
    #[cfg(target_arch = "x86_64")]
    {
        let (mut lo, mut hi) = (current as u64, (current >> 64) as u64);
        let ok: u8;
        // rbx is reserved by LLVM, so the low half of `new` goes through a scratch register.
        // SAFETY: `p` is mapped, writable and 16-byte aligned (caller; alignment asserted) and
        // the CPU has cmpxchg16b (caller); rbx is restored before the block ends.
        unsafe {
            std::arch::asm!(
            "xchg {nlo}, rbx",
            "lock cmpxchg16b [{p}]",
            "sete {ok}",
            "xchg {nlo}, rbx",
            p = in(reg) p,
            nlo = inout(reg) new as u64 => _,
            ok = out(reg_byte) ok,
            inout("rax") lo,
            inout("rdx") hi,
            in("rcx") (new >> 64) as u64,
            options(nostack),
            )
        };
        let actual = (lo as u128) | ((hi as u128) << 64);
        if ok != 0 {
            Ok(actual)
        } else {
            Err(actual)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    compile_error!("pmkit needs x86_64 for 16-byte atomics")
}
