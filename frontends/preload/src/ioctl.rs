//! ioctl(2) on shim descriptors: FS_IOC_FIEMAP answered from the file's tree (filefrag and
//! xfs_io's `fiemap` use it); every other request goes to libc on the descriptor's kernel
//! number, as before.

use crate::state::{self, en, enter};
use std::ffi::{c_int, c_ulong, c_void};

/// `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: c_ulong = 0xC020_660B;
/// `struct fiemap` before its extents, and one `struct fiemap_extent`.
const HEAD: usize = 32;
const EXTENT: usize = 56;
const FLAG_SYNC: u32 = 1;
const EXTENT_LAST: u32 = 1;
/// Extents one call may ask for (the kernel's own limit is the buffer; this bounds ours).
const MAX_EXTENTS: u32 = 1 << 16;

/// # Safety
/// ioctl(2)'s contract; the third argument is read as a pointer (fixed and variadic arguments
/// are passed alike on the ABIs the shim builds for).
#[no_mangle]
pub(crate) unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
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
            let f = if e.last { EXTENT_LAST } else { 0 };
            b[40..44].copy_from_slice(&f.to_le_bytes());
        }
        Ok(0)
    })
}
