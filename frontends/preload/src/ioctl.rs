//! ioctl(2) on shim descriptors: FS_IOC_FIEMAP answered from the file's tree (filefrag and
//! xfs_io's `fiemap` use it), FICLONE and FICLONERANGE by the pool sharing the blocks
//! (`cp --reflink`; `Posix::clone_range`, EXDEV when only one side is in the pool); every other
//! request goes to libc on the descriptor's kernel number, as before.

use crate::state::{self, en, enter};
use std::ffi::{c_int, c_ulong, c_void};

/// `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: c_ulong = 0xC020_660B;
/// `struct fiemap` before its extents, and one `struct fiemap_extent`.
const HEAD: usize = 32;
const EXTENT: usize = 56;
const FLAG_SYNC: u32 = 1;
const EXTENT_LAST: u32 = 1;
const EXTENT_SHARED: u32 = 0x2000;
/// `_IOW(0x94, 9, int)`: the whole source file into the destination.
const FICLONE: c_ulong = 0x4004_9409;
/// `_IOW(0x94, 13, struct file_clone_range)`.
const FICLONERANGE: c_ulong = 0x4020_940D;
/// `struct file_clone_range`: `s64 src_fd; u64 src_offset, src_length, dest_offset`.
const CLONE_RANGE: usize = 32;
/// Extents one call may ask for (the kernel's own limit is the buffer; this bounds ours).
const MAX_EXTENTS: u32 = 1 << 16;

/// # Safety
/// ioctl(2)'s contract; the third argument is read as a pointer (fixed and variadic arguments
/// are passed alike on the ABIs the shim builds for).
#[no_mangle]
pub(crate) unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    if req == FICLONE || req == FICLONERANGE {
        // SAFETY: ioctl(2)'s contract, passed on.
        if let Some(r) = unsafe { clone(fd, req, arg) } {
            return r;
        }
    }
    let open = (req == FS_IOC_FIEMAP).then(|| state::lookup(fd)).flatten();
    let Some(o) = open else {
        return real!(ioctl(fd, req, arg) as fn(c_int, c_ulong, *mut c_void) -> c_int);
    };
    enter(-1, |fs| {
        // SAFETY: the caller's `struct fiemap` (checked: EFAULT otherwise).
        let head = unsafe { crate::fd::out_buf(arg, HEAD) }?;
        let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let (start, len) = (u64_at(head, 0), u64_at(head, 8));
        let (flags, count) = (u32_at(head, 16), u32_at(head, 24));
        if flags & !FLAG_SYNC != 0 {
            // As the kernel: the flags it does not serve are written back, EBADR.
            head[16..20].copy_from_slice(&(flags & !FLAG_SYNC).to_le_bytes());
            return Err(libc::EBADR);
        }
        if count > MAX_EXTENTS {
            return Err(libc::EINVAL);
        }
        let all = fs.extents(o.fd, start, len).map_err(en)?;
        let n = if count == 0 {
            all.len()
        } else {
            all.len().min(count as usize)
        };
        head[20..24].copy_from_slice(&(n as u32).to_le_bytes());
        if count == 0 {
            return Ok(0); // a count only
        }
        let at = arg.cast::<u8>().wrapping_add(HEAD).cast::<c_void>();
        // SAFETY: the caller's array of `count` extents (checked: EFAULT otherwise).
        let out = unsafe { crate::fd::out_buf(at, n * EXTENT) }?;
        for (e, b) in all.iter().zip(out.chunks_exact_mut(EXTENT)) {
            b.fill(0);
            b[0..8].copy_from_slice(&e.logical.to_le_bytes());
            b[8..16].copy_from_slice(&e.physical.to_le_bytes());
            b[16..24].copy_from_slice(&e.len.to_le_bytes());
            let f =
                (if e.last { EXTENT_LAST } else { 0 }) | if e.shared { EXTENT_SHARED } else { 0 };
            b[40..44].copy_from_slice(&f.to_le_bytes());
        }
        Ok(0)
    })
}

/// FICLONE (`arg` is the source's descriptor) or FICLONERANGE (`arg` points at a `struct
/// file_clone_range`) into `fd`: None when neither descriptor is the shim's (the kernel's
/// then), EXDEV when one is.
///
/// # Safety
/// ioctl(2)'s contract for these requests.
unsafe fn clone(fd: c_int, req: c_ulong, arg: *mut c_void) -> Option<c_int> {
    let (src, range) = match req {
        FICLONE => (arg as usize as c_int, None),
        _ => {
            // SAFETY: the caller's `struct file_clone_range`, only read (checked: EFAULT
            // otherwise).
            let b = match unsafe { crate::fd::in_buf(arg, CLONE_RANGE) } {
                Ok(b) => b,
                Err(e) if state::lookup(fd).is_some() => return Some(fail(e)),
                Err(_) => return None,
            };
            let at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
            (at(0) as i64 as c_int, Some((at(8), at(16), at(24))))
        }
    };
    let (s, d) = (state::lookup(src), state::lookup(fd));
    let (s, d) = match (s, d) {
        (None, None) => return None,
        (Some(s), Some(d)) => (s, d),
        _ => return Some(fail(libc::EXDEV)),
    };
    let (off_in, len, off_out) = range.unwrap_or((0, 0, 0));
    Some(enter(-1, |p| {
        p.clone_range(s.fd, off_in, d.fd, off_out, len)
            .map(|_| 0)
            .map_err(en)
    }))
}

/// -1 with errno `e`.
fn fail(e: c_int) -> c_int {
    state::set_errno(e);
    -1
}
