//! PMBD: a protected, persistent block device on PM, in user space (Chen, Mesnier and Hahn,
//! "A Protected Block Device for Persistent Memory", MSST 2014).
//!
//! Block reads and writes become loads and stores in the calling thread: no queue, no context
//! switch. PM is protected from stray writes by one of five modes ([`Protect`]), and writes are
//! made durable by one of six write schemes ([`pmkit_media::WriteScheme`]).
//!
//! # API (used by the NBD server, FUSE and the CLI)
//!
//! ```no_run
//! use pmkit_blk::{create_path, open_path, CreateOptions, EngineOptions};
//! # fn main() -> pmkit_blk::Result<()> {
//! let engine = EngineOptions::default();           // pkey + nt where the CPU has them
//! let dev = create_path("/dev/shm/disk".as_ref(), Some(64 << 20), &CreateOptions::default(), &engine)?;
//! dev.close()?;
//! let dev = open_path("/dev/shm/disk".as_ref(), &engine)?;
//! let mut buf = vec![0u8; 4096];
//! dev.write(8192, &buf, false)?;                   // byte offsets, block-aligned
//! dev.flush()?;                                    // every completed write is durable now
//! dev.write(0, &buf, true)?;                       // FUA: durable on return
//! dev.read(8192, &mut buf)?;
//! dev.trim(0, 4096)?;                              // reads back zeroes
//! dev.write_zeroes(4096, 4096, false)?;
//! println!("{} x {}", dev.capacity(), dev.block_size());
//! println!("{}", serde_json::to_string(&dev.stats()).unwrap());
//! dev.close()?;                                    // drains, flushes, marks clean
//! # Ok(()) }
//! ```
//!
//! - [`Device<M>`] is generic over `pmkit_media::Media` (a `pmkit_media::Region`, or the crash
//!   simulator), created with [`Device::create`] or opened with [`Device::open`]. Every method
//!   takes `&self`; share it between threads with an `Arc`. Overlapping concurrent writes are
//!   serialized by striped per-page locks.
//! - [`EngineOptions`] holds every run-time option (protection, write scheme, staging buffers,
//!   subpage, write-verify, speed emulation); [`CreateOptions`] what is fixed at creation
//!   (block size, checksums). Both are plain structs with no command-line parser.
//! - [`create_path`], [`open_path`], [`inspect_path`], [`check_path`] work on a file or
//!   device-dax path.
//! - Errors are [`BlkError`]; [`BlkError::errno`] maps them for protocols.
//!
//! The on-media layout, the guarantees and what a crash can leave are in `docs/blk.md`.

// Layers, each using only those above it in this list:
// error, options, superblock (geometry and slots), map (atomic map format), and
// media's guard (protection) <- stats <- data_path <- atomic <- blocks <- batch <- device, format <- path; check <- map.
pub mod atomic;
mod batch;
mod blocks;
pub mod check;
mod data_path;
mod device;
pub mod error;
mod format;
pub mod map;
pub mod options;
mod path;
pub mod stats;
pub mod superblock;

pub use check::{check, CheckReport, Finding, Severity};
pub use device::{Device, DeviceInfo};
pub use error::{BlkError, Result};
pub use map::MapScan;
pub use options::{BatchOptions, CreateOptions, EngineOptions};
pub use path::{check_path, create_path, inspect_path, open_path, open_read_only_elsewhere};
pub use pmkit_media::guard::{auto as default_protect, View};
pub use pmkit_media::Protect;
pub use pmkit_media::WriteScheme;
pub use stats::{BatchStats, Latency, Stats};
pub use superblock::{Found, Layout, Superblock};
