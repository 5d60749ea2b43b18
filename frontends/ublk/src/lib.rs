//! A ublk server: a pmkit block device as `/dev/ublkbN`, the Linux user-space block driver
//! (6.0+, `ublk_drv`) talking to this process over io_uring. Each hardware queue is a thread
//! with its own ring; a request's data passes through a buffer per tag (the driver copies it
//! between the request's pages and the buffer). Written against the NBD crate's
//! [`pmkit_nbd::BlockBackend`], so one adapter serves a device over both. See
//! docs/ARCHITECTURE.md, "Front ends for the block device".

mod abi;
mod ctrl;
mod device;
mod queue;
pub mod request;

pub use abi::IoDesc;
pub use device::{
    available, block_path, exists, free_id, remove_stale, UblkDevice, UblkError, UblkOptions,
    DEFAULT_DEPTH, DEFAULT_MAX_IO, MAX_QUEUES,
};
