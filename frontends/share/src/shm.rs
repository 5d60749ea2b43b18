//! Memory files shared between a client and its server (the channel, the free epoch): made with
//! `memfd_create`, passed over the socket, mapped whole by each side. Their bytes may change
//! under either side at any time: the owners read them through atomics and raw copies only.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A memory file and its mapping; unmapped when dropped.
#[derive(Debug)]
pub(crate) struct Shm {
    base: *mut u8,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is process-wide memory its owners use only through atomics and raw copies.
unsafe impl Send for Shm {}
// SAFETY: as above.
unsafe impl Sync for Shm {}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

impl Shm {
    /// A new memory file of `len` zero bytes named `name`, mapped read-write.
    pub(crate) fn create(name: &CStr, len: usize) -> io::Result<Shm> {
        // SAFETY: a plain system call with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just made and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        std::fs::File::from(fd.try_clone()?).set_len(len as u64)?;
        Shm::map(fd, len, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// The other side's memory file, which must be `len` bytes, mapped with `prot`.
    pub(crate) fn open(fd: OwnedFd, len: usize, prot: libc::c_int) -> io::Result<Shm> {
        let got = std::fs::File::from(fd.try_clone()?).metadata()?.len();
        if got != len as u64 {
            return Err(io::Error::other(format!(
                "a shared memory file of {got} bytes; {len} expected"
            )));
        }
        Shm::map(fd, len, prot)
    }

    fn map(fd: OwnedFd, len: usize, prot: libc::c_int) -> io::Result<Shm> {
        // SAFETY: a shared mapping of the whole memory file, owned by the returned value.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Shm {
            base: p.cast(),
            len,
            fd,
        })
    }

    /// The mapping's first byte (page-aligned); `len` bytes follow.
    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}
