//! The block device as one file on a FUSE mount.
//!
//! The kernel here has neither the nbd nor the ublk driver, but it has FUSE and loop devices: a
//! FUSE file system holding one file, `disk`, whose reads and writes go straight (no page cache:
//! `FOPEN_DIRECT_IO`) to the device in this process, and `losetup` makes that file a real block
//! device that ext4, xfs and databases use unmodified. `fsync` on the file is the device's FLUSH
//! (the loop driver turns a block-layer flush into `fsync`), and `fallocate(PUNCH_HOLE)` is its
//! discard (what the loop driver sends for a block-layer discard).
//!
//! Requests arrive over /dev/fuse ([`dev`]: fuser mounts and answers INIT, then a worker per
//! CPU reads requests on cloned descriptors) or, where the kernel offers it, over FUSE's
//! io_uring transport ([`uring`], a queue per CPU); both hand each request to one decoder
//! (`answer.rs`), so their semantics are the same.
//!
//! [`pmfs`] and [`pmfs::mount`] are the other FUSE front end: a PMFS pool (`pmkit-fs`) mounted as
//! a whole file system (`pmkit fs mount`), over the same two transports.
//!
//! Both file systems implement one typed trait, [`ops::Ops`] ([`Core`] for the device file,
//! [`pmfs::PmfsOps`] for PMFS), and `answer.rs` decodes a request once for any of them, from
//! either transport.

mod abi;
mod answer;
pub mod attach;
pub mod dev;
mod file;
pub mod fusectl;
pub mod holders;
pub mod ops;
pub mod pmfs;
pub mod uring;

pub use file::{Core, Disk, DiskError, DiskFile, DISK_NAME};
