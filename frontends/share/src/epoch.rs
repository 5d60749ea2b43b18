//! The free epoch a pool's server shares with its clients (`pmkit_fs::direct`): one counter in
//! a memory file the server makes and bumps at every free, and every client maps read-only to
//! check that what it read in place was not freed meanwhile. The counter is only loaded and
//! stored as an atomic; the client's mapping is read-only, so a client cannot move it.

use crate::shm::Shm;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

const LEN: usize = 4096;

#[derive(Debug)]
pub(crate) struct Epoch {
    shm: Shm,
}

impl Epoch {
    /// A new counter at 0 (the server's).
    pub(crate) fn create() -> io::Result<Epoch> {
        Ok(Epoch {
            shm: Shm::create(c"pmkit-epoch", LEN)?,
        })
    }

    /// The server's counter passed to a client: mapped read-only.
    pub(crate) fn open(fd: OwnedFd) -> io::Result<Epoch> {
        Ok(Epoch {
            shm: Shm::open(fd, LEN, libc::PROT_READ)?,
        })
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.shm.fd().as_fd()
    }

    fn word(&self) -> &AtomicU64 {
        // SAFETY: the first 8 bytes of the live, page-aligned mapping; every process changes
        // them only atomically (and only the server, whose mapping is writable).
        unsafe { &*self.shm.base().cast::<AtomicU64>() }
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
