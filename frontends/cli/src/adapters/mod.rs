//! The PMBD block device adapted to each front end's trait: the front ends do not know the block
//! device, nor each other, so this crate (which knows all three) holds the glue.

mod fuse;
mod nbd;

pub use fuse::BlkDisk;
pub use nbd::{PmbdBackend, SECTOR};
