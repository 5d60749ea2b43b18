//! Fuzz targets for pmkit's decoders of untrusted bytes, as plain library functions.
//!
//! Each `pub fn NAME(data: &[u8])` takes one input and must return without panicking: every
//! decoder answers Ok or a typed error. The same functions run in two ways:
//!
//! - `tests/targets.rs` (stable, CI): the committed seeds in `seeds/NAME/`, then a few thousand
//!   deterministic pseudo-random and mutated inputs per target;
//! - `fuzz_targets/NAME.rs` (`cargo +nightly fuzz run NAME`): coverage-guided, with libFuzzer.
//!
//! The targets:
//! - [`nbd_server`]: the NBD handshake and request parser, fed everything a client sends;
//! - [`nbd_starttls`]: the handshake with TLS offered or required: options before STARTTLS,
//!   STARTTLS, and whatever the client sends after it (into OpenSSL's handshake);
//! - [`blk_superblock`]: the block device's superblock slots and the layout they describe;
//! - [`blk_image`]: a whole block device image (plain, checksummed or atomic) with bytes
//!   changed, through `check`, the atomic map scan, `open` and a read of every block;
//! - [`obj_pool`]: a whole object pool image with bytes or structures changed, through
//!   `Pool::check`, `Pool::open` and a read of every object;
//! - [`fs_image`]: the file system's structure decoders on raw bytes, and whole file system
//!   images with bytes changed, through `check`, `mount`, a walk, a few operations and `check`;
//! - [`fs_repair`]: the same images through `repair`: never a panic, and clean afterwards (check,
//!   mount, use) or the problems left reported.

mod blk;
mod fs;
mod input;
mod nbd;
mod obj;

pub use blk::{blk_image, blk_superblock};
pub use fs::{fs_image, fs_repair};
pub use nbd::{nbd_server, nbd_starttls};
pub use obj::obj_pool;

/// A fuzz target: takes any bytes, returns (a panic is a bug found).
pub type Target = fn(&[u8]);

/// Every target by name, for the stable test runner.
pub const TARGETS: [(&str, Target); 7] = [
    ("nbd_server", nbd_server),
    ("nbd_starttls", nbd_starttls),
    ("blk_superblock", blk_superblock),
    ("blk_image", blk_image),
    ("obj_pool", obj_pool),
    ("fs_image", fs_image),
    ("fs_repair", fs_repair),
];
