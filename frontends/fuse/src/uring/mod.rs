//! FUSE over io_uring (Linux 6.14+, `CONFIG_FUSE_IO_URING`, enabled by root with
//! `/sys/module/fuse/parameters/enable_uring`): after the INIT handshake on /dev/fuse has
//! granted `FUSE_OVER_IO_URING`, a queue per CPU registers ring entries with
//! `IORING_OP_URING_CMD` on the FUSE descriptor; once every CPU's queue has one, the kernel
//! sends requests through the rings instead of /dev/fuse (interrupts and forgets still come
//! through /dev/fuse, which fuser's workers keep serving). No Rust FUSE crate we use speaks
//! this protocol (fuser 0.18 does not), so this module does, for the handful of opcodes a
//! single-file device gets.

mod abi;
mod ops;
mod queue;

pub(crate) use queue::start;
pub use queue::{Queues, UringError, QUEUE_DEPTH};

/// Whether the kernel offers FUSE over io_uring to new connections.
pub fn enabled() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|s| s.trim() == "Y")
}
