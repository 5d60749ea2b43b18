//! Every system call X-Mem makes on its address space, one small `unsafe` wrapper each.
//!
//! The callers (`space.rs`) own the address ranges: each function's contract says what the
//! caller must guarantee, and `space.rs` only ever passes ranges inside its own reservation.

use crate::error::{Result, XmemError};
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::AtomicU32;

fn check(p: *mut libc::c_void, what: &'static str) -> Result<usize> {
    if p == libc::MAP_FAILED {
        Err(XmemError::os(what))
    } else {
        Ok(p as usize)
    }
}

/// A fresh private anonymous mapping of `len` bytes where the kernel chooses, with `prot` and
/// `flags` besides `MAP_PRIVATE | MAP_ANONYMOUS`.
fn fresh(len: usize, prot: libc::c_int, flags: libc::c_int, what: &'static str) -> Result<usize> {
    // SAFETY: no MAP_FIXED: the kernel picks unused address space, so nothing is clobbered.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    check(p, what)
}

/// Reserve `len` bytes of address space aligned to `align` (a power of two): `PROT_NONE`,
/// no memory committed. Returns the aligned start.
pub(crate) fn reserve(len: usize, align: usize) -> Result<usize> {
    assert!(align.is_power_of_two());
    let total = len.checked_add(align).expect("reservation size overflows");
    let raw = fresh(
        total,
        libc::PROT_NONE,
        libc::MAP_NORESERVE,
        "mmap (reserve address space)",
    )?;
    let start = (raw + align - 1) & !(align - 1);
    // SAFETY: both trimmed pieces lie inside the mapping just made, which nothing else uses.
    unsafe {
        if start > raw {
            libc::munmap(raw as *mut libc::c_void, start - raw);
        }
        let end = start + len;
        if raw + total > end {
            libc::munmap(end as *mut libc::c_void, raw + total - end);
        }
    }
    Ok(start)
}

/// Fresh read-write anonymous pages at `addr` (replacing what was mapped there).
///
/// # Safety
/// `[addr, addr+len)` must be address space the caller owns, with no live data in it.
pub(crate) unsafe fn map_anon_fixed(addr: usize, len: usize, thp: bool) -> Result<()> {
    // SAFETY: the caller owns the range and nothing in it is live.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    check(p, "mmap (DRAM region)")?;
    if thp {
        advise_huge(addr, len);
    }
    Ok(())
}

/// Map `len` bytes of the file `fd` at `off` over `[addr, addr+len)`, shared, read-write.
///
/// # Safety
/// As for [`map_anon_fixed`], except that the range may hold live data: the caller replaces
/// it with a mapping of identical bytes (the migration copy) or owns it with nothing live.
pub(crate) unsafe fn map_file_fixed(addr: usize, len: usize, fd: RawFd, off: u64) -> Result<()> {
    // SAFETY: the caller owns the range; the file slot belongs to the caller too.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_FIXED | libc::MAP_SHARED,
            fd,
            off as libc::off_t,
        )
    };
    check(p, "mmap (PM region)")?;
    Ok(())
}

/// Return `[addr, addr+len)` to reserved, inaccessible address space (`PROT_NONE`).
///
/// # Safety
/// As for [`map_anon_fixed`]: the caller owns the range and nothing live is in it.
pub(crate) unsafe fn reserve_fixed(addr: usize, len: usize) -> Result<()> {
    // SAFETY: the caller owns the range and nothing in it is live.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_NONE,
            libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    check(p, "mmap (return region to the reservation)")?;
    Ok(())
}

/// Fresh anonymous read-write pages anywhere (a staging area for a copy into DRAM).
pub(crate) fn map_anon(len: usize, thp: bool) -> Result<usize> {
    let a = fresh(len, libc::PROT_READ | libc::PROT_WRITE, 0, "mmap (staging)")?;
    if thp {
        advise_huge(a, len);
    }
    Ok(a)
}

/// Move the mapping at `from` (with its pages) over `[to, to+len)`, replacing what is there.
///
/// # Safety
/// `from` must be a mapping of `len` bytes the caller owns (it is gone afterwards); `to` as for
/// [`map_file_fixed`].
pub(crate) unsafe fn move_fixed(from: usize, len: usize, to: usize) -> Result<()> {
    // SAFETY: the caller owns both ranges.
    let p = unsafe {
        libc::mremap(
            from as *mut libc::c_void,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to as *mut libc::c_void,
        )
    };
    let got = check(p, "mremap (install DRAM pages)")?;
    assert_eq!(got, to, "mremap(MREMAP_FIXED) moved elsewhere");
    Ok(())
}

/// Set page rights on `[addr, addr+len)`.
///
/// # Safety
/// The caller owns the range; readers and writers of it must tolerate the new rights (writers
/// fault into `fault.rs`, which parks them).
pub(crate) unsafe fn protect(addr: usize, len: usize, prot: libc::c_int) -> Result<()> {
    // SAFETY: the caller owns the range.
    if unsafe { libc::mprotect(addr as *mut libc::c_void, len, prot) } != 0 {
        return Err(XmemError::os("mprotect"));
    }
    Ok(())
}

/// Unmap `[addr, addr+len)`.
///
/// # Safety
/// The caller owns the range and nothing live is in it.
pub(crate) unsafe fn unmap(addr: usize, len: usize) {
    // SAFETY: the caller owns the range.
    let r = unsafe { libc::munmap(addr as *mut libc::c_void, len) };
    debug_assert_eq!(r, 0, "munmap failed");
}

fn advise_huge(addr: usize, len: usize) {
    // SAFETY: madvise(MADV_HUGEPAGE) is a hint on a range we just mapped; it never changes
    // contents. Failure (THP disabled) is ignored: the pages stay 4 KiB.
    unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
}

const MPOL_BIND: libc::c_int = 2;
const MPOL_F_NODE: libc::c_ulong = 1;
const MPOL_F_ADDR: libc::c_ulong = 2;
/// Bits in the node masks passed to the kernel.
const MASK_BITS: usize = 1024;

/// Bind `[addr, addr+len)` to NUMA node `node` (`mbind(MPOL_BIND)`): its pages come from that
/// node only. Pages already there are not moved (no `MPOL_MF_MOVE`); X-Mem binds fresh mappings.
pub(crate) fn bind(addr: usize, len: usize, node: u32) -> Result<()> {
    mbind(addr, len, node, 0, "mbind")
}

/// Bind `[addr, addr+len)` to NUMA node `node` and move its pages there
/// (`mbind(MPOL_BIND, MPOL_MF_MOVE | MPOL_MF_STRICT)`): the kernel migrates each page at the
/// same address, a thread touching one meanwhile waits in the kernel; a page that could not be
/// moved is an error (`EIO`).
pub(crate) fn bind_move(addr: usize, len: usize, node: u32) -> Result<()> {
    const MPOL_MF_STRICT: u32 = 1;
    const MPOL_MF_MOVE: u32 = 2;
    mbind(
        addr,
        len,
        node,
        MPOL_MF_MOVE | MPOL_MF_STRICT,
        "mbind(MPOL_MF_MOVE)",
    )
}

fn mbind(addr: usize, len: usize, node: u32, flags: u32, what: &'static str) -> Result<()> {
    assert!((node as usize) < MASK_BITS);
    let mut mask = [0u64; MASK_BITS / 64];
    mask[node as usize / 64] |= 1 << (node % 64);
    // SAFETY: mbind reads `mask` (MASK_BITS bits) and changes only the memory policy of the range,
    // never its contents or rights.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            MPOL_BIND,
            mask.as_ptr(),
            MASK_BITS + 1,
            flags,
        )
    };
    if r != 0 {
        return Err(XmemError::os(what));
    }
    Ok(())
}

/// Mark `[addr, addr+len)` as left out of core dumps (`MADV_DONTDUMP`). X-Mem sets it on odd
/// regions only so that neighbouring regions never merge into one VMA (their flags differ) and
/// `smaps` reports each region apart (`referenced.rs`).
pub(crate) fn dontdump(addr: usize, len: usize) -> Result<()> {
    // SAFETY: MADV_DONTDUMP changes a flag of the mapping, never its contents or rights.
    if unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTDUMP) } != 0 {
        return Err(XmemError::os("madvise(MADV_DONTDUMP)"));
    }
    Ok(())
}

/// The NUMA node holding the (faulted-in) page at `addr`, from `get_mempolicy`.
pub(crate) fn node_of(addr: usize) -> Result<u32> {
    let mut node: libc::c_int = -1;
    // SAFETY: get_mempolicy writes one int to `node`; no node mask is asked for (NULL, 0).
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<u64>(),
            0usize,
            addr,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    if r != 0 {
        return Err(XmemError::os("get_mempolicy"));
    }
    Ok(node as u32)
}

/// The memory policy of the mapping at `addr`: (mode, nodes in its mask). Mode 0 is the
/// default policy, 2 is `MPOL_BIND`.
pub(crate) fn policy_of(addr: usize) -> Result<(i32, Vec<u32>)> {
    let mut mode: libc::c_int = -1;
    let mut mask = [0u64; MASK_BITS / 64];
    // SAFETY: get_mempolicy writes one int to `mode` and at most MASK_BITS bits to `mask`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            MASK_BITS,
            addr,
            MPOL_F_ADDR,
        )
    };
    if r != 0 {
        return Err(XmemError::os("get_mempolicy"));
    }
    let nodes = (0..MASK_BITS as u32)
        .filter(|&n| mask[n as usize / 64] & (1 << (n % 64)) != 0)
        .collect();
    Ok((mode, nodes))
}

/// Sleep while `*word == expected` (async-signal-safe: one system call).
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT reads the word at a valid address; a timeout of NULL waits until woken
    // or the value differs. Spurious returns are handled by the caller's loop.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        )
    };
}

/// Wake every waiter on `word`.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only reads the address; waking nobody is fine.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        )
    };
}

/// Bytes of physical memory.
pub(crate) fn physical_memory() -> u64 {
    // SAFETY: sysconf reads system constants.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages.max(0) as u64).saturating_mul(size.max(0) as u64)
}

/// A read-only, zero-filled table of `len` bytes of fresh anonymous memory (`MAP_NORESERVE`):
/// reads of untouched parts see the shared zero page and commit nothing; the owner makes parts
/// writable with [`protect`] before writing them.
pub(crate) fn map_table(len: usize) -> Result<usize> {
    fresh(
        len,
        libc::PROT_READ,
        libc::MAP_NORESERVE,
        "mmap (side table)",
    )
}

// userfaultfd write protection (linux/userfaultfd.h). The constants are the kernel's ABI;
// Debian 12's headers predate UFFD_FEATURE_WP_UNPOPULATED (Linux 6.4).
const UFFD_API: u64 = 0xAA;
const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00;
const UFFDIO_UNREGISTER: libc::c_ulong = 0x8010_aa01;
const UFFDIO_WAKE: libc::c_ulong = 0x8010_aa02;
const UFFDIO_WRITEPROTECT: libc::c_ulong = 0xc018_aa06;
const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
/// `sizeof(struct uffd_msg)`.
const UFFD_MSG: usize = 32;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

/// A userfaultfd for write protection of anonymous and shmem memory, faults from system calls
/// included (no `UFFD_USER_MODE_ONLY`), or why there is none: the kernel lacks the features,
/// or the process may not handle kernel faults (it needs `CAP_SYS_PTRACE`, or
/// `vm.unprivileged_userfaultfd = 1`).
pub(crate) fn uffd_open() -> std::result::Result<OwnedFd, String> {
    // SAFETY: userfaultfd takes flags only and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if fd < 0 {
        return Err(format!(
            "userfaultfd: {} (root, or vm.unprivileged_userfaultfd = 1, is needed for faults \
             from system calls)",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a descriptor just returned to us and owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let want = UFFD_FEATURE_PAGEFAULT_FLAG_WP
        | UFFD_FEATURE_WP_HUGETLBFS_SHMEM
        | UFFD_FEATURE_WP_UNPOPULATED;
    let mut api = UffdioApi {
        api: UFFD_API,
        features: want,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API reads and writes one `struct uffdio_api`, which `api` is.
    if unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api) } != 0 {
        return Err(format!(
            "UFFDIO_API (write protection of anonymous, shmem and unpopulated pages): {}",
            std::io::Error::last_os_error()
        ));
    }
    if api.features & want != want {
        return Err(format!(
            "userfaultfd lacks write-protection features (has {:#x})",
            api.features
        ));
    }
    Ok(fd)
}

fn uffd_ioctl<T>(fd: &OwnedFd, req: libc::c_ulong, arg: &mut T, what: &'static str) -> Result<()> {
    // SAFETY: each request below reads (and may write) exactly the struct `T` passed for it;
    // none touches memory outside the registered ranges' page tables.
    if unsafe { libc::ioctl(fd.as_raw_fd(), req, arg as *mut T) } != 0 {
        return Err(XmemError::os(what));
    }
    Ok(())
}

fn range(addr: usize, len: usize) -> UffdioRange {
    UffdioRange {
        start: addr as u64,
        len: len as u64,
    }
}

/// Register `[addr, addr+len)` for write-protect faults and write-protect every page of it,
/// present or not: from now on a write to it, by the program or by a system call, waits in the
/// kernel until [`uffd_wake`]. Fails on memory the kernel cannot write-protect (a DAX file).
pub(crate) fn uffd_protect(fd: &OwnedFd, addr: usize, len: usize) -> Result<()> {
    let mut reg = UffdioRegister {
        range: range(addr, len),
        mode: UFFDIO_REGISTER_MODE_WP,
        ioctls: 0,
    };
    uffd_ioctl(fd, UFFDIO_REGISTER, &mut reg, "UFFDIO_REGISTER")?;
    let mut wp = UffdioWriteprotect {
        range: range(addr, len),
        mode: UFFDIO_WRITEPROTECT_MODE_WP,
    };
    if let Err(e) = uffd_ioctl(fd, UFFDIO_WRITEPROTECT, &mut wp, "UFFDIO_WRITEPROTECT") {
        let _ = uffd_unregister(fd, addr, len);
        return Err(e);
    }
    Ok(())
}

/// Undo [`uffd_protect`] on the same mapping (a failed migration): writable again, unregistered.
pub(crate) fn uffd_unprotect(fd: &OwnedFd, addr: usize, len: usize) -> Result<()> {
    let mut wp = UffdioWriteprotect {
        range: range(addr, len),
        mode: 0,
    };
    uffd_ioctl(
        fd,
        UFFDIO_WRITEPROTECT,
        &mut wp,
        "UFFDIO_WRITEPROTECT (off)",
    )?;
    uffd_unregister(fd, addr, len)
}

fn uffd_unregister(fd: &OwnedFd, addr: usize, len: usize) -> Result<()> {
    let mut r = range(addr, len);
    uffd_ioctl(fd, UFFDIO_UNREGISTER, &mut r, "UFFDIO_UNREGISTER")
}

/// Wake every thread waiting on a write-protect fault in `[addr, addr+len)`; each retries its
/// access (against whatever is mapped there now).
pub(crate) fn uffd_wake(fd: &OwnedFd, addr: usize, len: usize) -> Result<()> {
    let mut r = range(addr, len);
    uffd_ioctl(fd, UFFDIO_WAKE, &mut r, "UFFDIO_WAKE")
}

/// Read (and so count) the fault messages queued on `fd`: one per thread that waited.
pub(crate) fn uffd_drain(fd: &OwnedFd) -> u64 {
    let mut buf = [0u8; UFFD_MSG * 16];
    let mut n = 0;
    loop {
        // SAFETY: reads at most `buf.len()` bytes into `buf`; the descriptor is non-blocking.
        let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if r <= 0 {
            return n;
        }
        n += r as u64 / UFFD_MSG as u64;
    }
}

/// Fault in the page tables of `[addr, addr+len)` for reading (`MADV_POPULATE_READ`, Linux
/// 5.14+), in one call rather than one fault per page during a copy. Write-protected shmem
/// (a PM file on /dev/shm under userfaultfd) gets no fault-around, so without this a copy out
/// of it takes a fault per 4 KiB page. Best effort: an older kernel's `EINVAL` is ignored.
pub(crate) fn populate_read(addr: usize, len: usize) {
    // SAFETY: populating for reading changes no byte, right or mapping of the range.
    let _ = unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_POPULATE_READ) };
}
