//! The `pmkit` library: what the `pmkit` command and the `pmkit-bench` benchmarks share, over the
//! systems (`pmkit-blk`, `pmkit-obj`) and front ends (`pmkit-nbd`, `pmkit-fuse`).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod adapters;
pub mod args;
pub mod attach_kernel;
pub mod daemon_log;
pub mod entry;
pub mod progress;
pub mod sd_notify;
pub mod sibling;
pub mod stats_file;
