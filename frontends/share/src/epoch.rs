//! The free epoch a pool's server shares with its clients (`pmkit_fs::direct`): one counter in
//! a memory file the server makes and bumps at every free, and every client maps read-only to
//! check that what it read in place was not freed meanwhile. The counter is only loaded and
//! stored as an atomic; the client's mapping is read-only, so a client cannot move it.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

const LEN: usize = 4096;

#[derive(Debug)]
pub(crate) struct Epoch {
    base: *mut u8,
    fd: OwnedFd,
}

// SAFETY: the mapping is process-wide memory used only through the atomic below.
unsafe impl Send for Epoch {}
// SAFETY: as above.
unsafe impl Sync for Epoch {}

impl Drop for Epoch {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), LEN) };
    }
}

impl Epoch {
    /// A new counter at 0 (the server's).
    pub(crate) fn create() -> io::Result<Epoch> {
        // SAFETY: a plain system call with a constant name.
        let fd = unsafe { libc::memfd_create(c"pmkit-epoch".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just made and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        std::fs::File::from(fd.try_clone()?).set_len(LEN as u64)?;
        Epoch::map(fd, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// The server's counter passed to a client: mapped read-only.
    pub(crate) fn open(fd: OwnedFd) -> io::Result<Epoch> {
        let len = std::fs::File::from(fd.try_clone()?).metadata()?.len();
        if len != LEN as u64 {
            return Err(io::Error::other(format!("an epoch of {len} bytes")));
        }
        Epoch::map(fd, libc::PROT_READ)
    }

    fn map(fd: OwnedFd, prot: libc::c_int) -> io::Result<Epoch> {
        // SAFETY: a shared mapping of the whole memory file, owned by the returned value.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoch { base: p.cast(), fd })
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    fn word(&self) -> &AtomicU64 {
        // SAFETY: the first 8 bytes of the live, page-aligned mapping; every process changes
        // them only atomically (and only the server, whose mapping is writable).
        unsafe { &*self.base.cast::<AtomicU64>() }
    }

    /// The count now; an acquire load (what is read after it is not read before it).
    pub(crate) fn load(&self) -> u64 {
        self.word().load(Ordering::Acquire)
    }
}

impl pmkit_fs::direct::FreeEpoch for Epoch {
    fn bump(&self) {
        // Before the freed blocks go back to the allocator (the caller holds its lock): a
        // reader that then sees another file's bytes in them also sees the new count.
        self.word().fetch_add(1, Ordering::SeqCst);
    }
    fn now(&self) -> u64 {
        self.load()
    }
}
