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
    std::ptr::copy_nonoverlapping(src, dst, len);
}

/// Copy `len` bytes from `src` into PM at `dst` with ordinary (write-back cached) stores.
///
/// # Safety
/// `dst..dst+len` must be mapped writable; `src` valid for `len` bytes of reads; no overlap.
#[inline]
pub unsafe fn copy_in(dst: *mut u8, src: *const u8, len: usize) {
    std::ptr::copy_nonoverlapping(src, dst, len);
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
        flush_line(line as *const u8, how);
        line += LINE;
    }
}

#[inline(always)]
unsafe fn flush_line(p: *const u8, how: Flush) {
    #[cfg(target_arch = "x86_64")]
    match how {
        Flush::Clflush => {
            std::arch::asm!("clflush [{0}]", in(reg) p, options(nostack, preserves_flags))
        }
        Flush::Clflushopt => {
            std::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
        }
        Flush::Clwb => std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags)),
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
    if head >= len || width == 0 {
        copy_in(dst, src, len);
        flush(dst, len, Flush::best());
        return;
    }
    if head > 0 {
        copy_in(dst, src, head);
        flush(dst, head, Flush::best());
    }
    let body = (len - head) & !(LINE - 1);
    let tail = len - head - body;
    stream_lines(dst.add(head), src.add(head), body / LINE, width);
    if tail > 0 {
        let t = dst.add(head + body);
        copy_in(t, src.add(head + body), tail);
        flush(t, tail, Flush::best());
    }
}

/// Stream `lines` whole, 64-byte aligned lines. `src` may be unaligned.
unsafe fn stream_lines(dst: *mut u8, src: *const u8, lines: usize, width: usize) {
    debug_assert_eq!(dst as usize % LINE, 0);
    #[cfg(target_arch = "x86_64")]
    match width {
        64 => return stream_avx512(dst, src, lines),
        32 => return stream_avx2(dst, src, lines),
        16 => return stream_sse2(dst, src, lines),
        _ => {}
    }
    copy_in(dst, src, lines * LINE);
    flush(dst, lines * LINE, Flush::best());
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stream_avx512(dst: *mut u8, src: *const u8, lines: usize) {
    use std::arch::x86_64::*;
    for i in 0..lines {
        let v = _mm512_loadu_si512(src.add(i * LINE) as *const _);
        _mm512_stream_si512(dst.add(i * LINE) as *mut _, v);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn stream_avx2(dst: *mut u8, src: *const u8, lines: usize) {
    use std::arch::x86_64::*;
    for i in 0..lines * 2 {
        let v = _mm256_loadu_si256(src.add(i * 32) as *const __m256i);
        _mm256_stream_si256(dst.add(i * 32) as *mut __m256i, v);
    }
}

#[cfg(target_arch = "x86_64")]
unsafe fn stream_sse2(dst: *mut u8, src: *const u8, lines: usize) {
    use std::arch::x86_64::*;
    for i in 0..lines * 4 {
        let v = _mm_loadu_si128(src.add(i * 16) as *const __m128i);
        _mm_stream_si128(dst.add(i * 16) as *mut __m128i, v);
    }
}

/// The 8-byte word at `p`, read atomically.
///
/// # Safety
/// `p` must be mapped, readable and 8-byte aligned.
#[inline]
pub unsafe fn load_u64(p: *const u8) -> u64 {
    assert_eq!(p as usize % 8, 0, "atomic 8-byte load must be aligned");
    (*(p as *const AtomicU64)).load(Ordering::Acquire)
}

/// Store an 8-byte word atomically (a crash sees the old or the new word, never a mix).
///
/// # Safety
/// `p` must be mapped, writable and 8-byte aligned.
#[inline]
pub unsafe fn store_u64(p: *mut u8, v: u64) {
    assert_eq!(p as usize % 8, 0, "atomic 8-byte store must be aligned");
    (*(p as *const AtomicU64)).store(v, Ordering::Release);
}

/// Compare-and-swap an 8-byte word. `Ok(old)` on success, `Err(actual)` otherwise.
///
/// # Safety
/// As for [`store_u64`].
#[inline]
pub unsafe fn cas_u64(p: *mut u8, current: u64, new: u64) -> Result<u64, u64> {
    assert_eq!(p as usize % 8, 0, "atomic 8-byte CAS must be aligned");
    (*(p as *const AtomicU64)).compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
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
        );
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
