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

/// CRC-32C (Castagnoli) generator polynomial in normal form, without its x^32 term.
const CRC32C_POLY: u32 = 0x1EDC_6F41;

/// x^n mod P(x) for the CRC-32C polynomial, in normal form (bit d is the coefficient of x^d).
const fn crc32c_xpow(n: u32) -> u32 {
    let mut r: u64 = 1;
    let mut i = 0;
    while i < n {
        r <<= 1;
        if r & (1 << 32) != 0 {
            r ^= (1 << 32) | CRC32C_POLY as u64;
        }
        i += 1;
    }
    r as u32
}

/// The 64-bit carry-less multiplier that moves a reflected 64-bit half-lane `n` bits towards the
/// end of the message (multiplies it by x^n mod P).
///
/// In the reflected layout bit k of a 128-bit lane is the coefficient of x^(127-k), and bit j of a
/// 64-bit operand the coefficient of x^(63-j); the carry-less product of two such operands puts
/// the coefficient of x^(126-k) at bit k, one degree short of the lane's layout. So the
/// multiplier is x^(n-1) mod P, bit-reversed into the reflected 64-bit layout.
const fn crc32c_fold_k(n: u32) -> u64 {
    (crc32c_xpow(n - 1) as u64).reverse_bits()
}

/// The (low, high) multipliers that fold a 128-bit lane forward by `bits`: the low half is the
/// earlier (higher-degree) one, so it travels 64 bits further.
const fn crc32c_fold_pair(bits: u32) -> (i64, i64) {
    (crc32c_fold_k(bits + 64) as i64, crc32c_fold_k(bits) as i64)
}

/// Whether this CPU can run [`stream_lines_crc32c`]'s fused loop.
pub fn crc32c_stream_supported() -> bool {
    features().crc_fold
}

/// Stream `lines` whole 64-byte lines into PM with 64-byte non-temporal stores (durable after the
/// next `sfence`, as [`copy_in_nt`]) and return `crc32c_append(crc, src[..lines * 64])`, the
/// CRC-32C of the data folded from the same registers the copy loads. `None` (and nothing
/// written) when the CPU lacks AVX-512F, VPCLMULQDQ or SSE4.2; the caller then copies and
/// checksums separately.
///
/// # Safety
/// `dst` is 64-byte aligned and `dst..dst+lines*64` mapped writable; `src..src+lines*64`
/// readable (any alignment); the ranges do not overlap.
pub unsafe fn stream_lines_crc32c(
    dst: *mut u8,
    src: *const u8,
    lines: usize,
    crc: u32,
) -> Option<u32> {
    assert_eq!(
        dst as usize % LINE,
        0,
        "streamed lines must be line-aligned"
    );
    #[cfg(target_arch = "x86_64")]
    if features().crc_fold {
        // SAFETY: the caller's ranges and alignment; the CPU has the features (checked).
        return Some(unsafe { stream_crc32c_avx512(dst, src, lines, crc) });
    }
    let _ = (dst, src, lines, crc);
    None
}

/// `acc` folded forward by the distance `k` encodes (per 128-bit lane), xored with `next`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,vpclmulqdq")]
fn crc32c_fold(
    acc: std::arch::x86_64::__m512i,
    k: std::arch::x86_64::__m512i,
    next: std::arch::x86_64::__m512i,
) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    let lo = _mm512_clmulepi64_epi128::<0x00>(acc, k);
    let hi = _mm512_clmulepi64_epi128::<0x11>(acc, k);
    _mm512_ternarylogic_epi64::<0x96>(lo, hi, next)
}

/// The fused loop of [`stream_lines_crc32c`].
///
/// The message is folded 512 bits at a time in four 128-bit lanes (four zmm accumulators, 2048
/// bits apart, while at least four lines remain, so the carry-less multiplies of successive lines
/// overlap), the lanes are folded into one, and the last 128 bits (congruent to the whole message
/// modulo P) are reduced with two `crc32` instructions, which compute exactly CRC-32C's
/// remainder with no pre- or post-inversion.
///
/// # Safety
/// As for [`stream_lines_crc32c`], and the CPU has AVX-512F, VPCLMULQDQ and SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,vpclmulqdq,sse4.2")]
unsafe fn stream_crc32c_avx512(dst: *mut u8, src: *const u8, lines: usize, crc: u32) -> u32 {
    use std::arch::x86_64::*;
    if lines == 0 {
        return crc;
    }
    /// Load line `i`, stream it to `dst`, and give it back for the CRC.
    macro_rules! line {
        ($i:expr) => {{
            let i: usize = $i;
            // SAFETY: line `i < lines` is inside both ranges; the store target is 64-byte
            // aligned (the caller's `dst` is, and lines are 64 bytes).
            unsafe {
                let v = _mm512_loadu_si512(src.add(i * LINE) as *const _);
                _mm512_stream_si512(dst.add(i * LINE) as *mut _, v);
                v
            }
        }};
    }
    const K512: (i64, i64) = crc32c_fold_pair(512);
    const K2048: (i64, i64) = crc32c_fold_pair(2048);
    const K384: (i64, i64) = crc32c_fold_pair(384);
    const K256: (i64, i64) = crc32c_fold_pair(256);
    const K128: (i64, i64) = crc32c_fold_pair(128);
    let k512 = _mm512_set_epi64(
        K512.1, K512.0, K512.1, K512.0, K512.1, K512.0, K512.1, K512.0,
    );
    // The running CRC enters as the (inverted) first 32 bits of the message: for a reflected
    // CRC, starting from state s is the same as xoring s into the message's first four bytes.
    let init = _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, (!crc) as u64 as i64);
    let mut i;
    let mut acc;
    if lines >= 4 {
        let k2048 = _mm512_set_epi64(
            K2048.1, K2048.0, K2048.1, K2048.0, K2048.1, K2048.0, K2048.1, K2048.0,
        );
        let mut a0 = _mm512_xor_si512(line!(0), init);
        let mut a1 = line!(1);
        let mut a2 = line!(2);
        let mut a3 = line!(3);
        i = 4;
        while i + 4 <= lines {
            a0 = crc32c_fold(a0, k2048, line!(i));
            a1 = crc32c_fold(a1, k2048, line!(i + 1));
            a2 = crc32c_fold(a2, k2048, line!(i + 2));
            a3 = crc32c_fold(a3, k2048, line!(i + 3));
            i += 4;
        }
        acc = crc32c_fold(a0, k512, a1);
        acc = crc32c_fold(acc, k512, a2);
        acc = crc32c_fold(acc, k512, a3);
    } else {
        acc = _mm512_xor_si512(line!(0), init);
        i = 1;
    }
    while i < lines {
        acc = crc32c_fold(acc, k512, line!(i));
        i += 1;
    }
    // Lanes 0, 1, 2 lie 384, 256 and 128 bits before lane 3: fold each onto it.
    let kr = _mm512_set_epi64(0, 0, K128.1, K128.0, K256.1, K256.0, K384.1, K384.0);
    let folded = crc32c_fold(acc, kr, _mm512_maskz_mov_epi64(0xC0, acc));
    let r = _mm_xor_si128(
        _mm_xor_si128(
            _mm512_extracti32x4_epi32::<0>(folded),
            _mm512_extracti32x4_epi32::<1>(folded),
        ),
        _mm_xor_si128(
            _mm512_extracti32x4_epi32::<2>(folded),
            _mm512_extracti32x4_epi32::<3>(folded),
        ),
    );
    let lo = _mm_cvtsi128_si64(r) as u64;
    let hi = _mm_cvtsi128_si64(_mm_unpackhi_epi64(r, r)) as u64;
    let c = _mm_crc32_u64(_mm_crc32_u64(0, lo), hi);
    !(c as u32)
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
        // rbx cannot be named as an operand, so the low half of `new` goes through a scratch
        // register swapped into rbx around the instruction. Both that register and the
        // address (and the flag out) are pinned: with `in(reg)` the compiler may put an operand
        // in rbx itself (rustc 1.95 did, the address), and the swap would then replace it.
        // SAFETY: `p` is mapped, writable and 16-byte aligned (caller; alignment asserted) and
        // the CPU has cmpxchg16b (caller); rbx is restored before the block ends.
        unsafe {
            std::arch::asm!(
            "xchg rdi, rbx",
            "lock cmpxchg16b [rsi]",
            "sete r8b",
            "xchg rdi, rbx",
            in("rsi") p,
            inout("rdi") new as u64 => _,
            out("r8b") ok,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_constants_derive_from_the_polynomial() {
        // x^n for n < 32 is itself; x^32 is the polynomial's low terms.
        assert_eq!(crc32c_xpow(0), 1);
        assert_eq!(crc32c_xpow(31), 1 << 31);
        assert_eq!(crc32c_xpow(32), CRC32C_POLY);
        // x^(a+b) = x^a * x^b mod P, checked with a bitwise multiply-and-reduce.
        let mulmod = |a: u32, b: u32| {
            let mut r = 0u64;
            for i in 0..32 {
                if b >> i & 1 != 0 {
                    r ^= (a as u64) << i;
                }
            }
            for i in (32..64).rev() {
                if r >> i & 1 != 0 {
                    r ^= ((1u64 << 32) | CRC32C_POLY as u64) << (i - 32);
                }
            }
            r as u32
        };
        for (a, b) in [(100, 200), (511, 1537), (2047, 64), (33, 33)] {
            assert_eq!(crc32c_xpow(a + b), mulmod(crc32c_xpow(a), crc32c_xpow(b)));
        }
        // The reflected multiplier puts x^(n-1)'s coefficient of x^d at bit 63-d.
        assert_eq!(crc32c_fold_k(1), 1 << 63);
        assert_eq!(crc32c_fold_k(33), (CRC32C_POLY as u64).reverse_bits());
    }
}
