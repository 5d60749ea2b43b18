//! A format 7 pool's words as earlier formats store them, for the tests that relabel a new pool
//! as an older format: sizes without their check and tree pointers bare. The pools these tests
//! make are small (the fixed inode table only, no grown blocks).

use pmkit_fs::layout::{Geometry, BLOCK};
use pmkit_media::Media;

/// The bits of a pointer word that are the pointer, and of a size word that are the size.
const PTR: u64 = ((1 << 40) - 1) | (1 << 63);
const SIZE: u64 = (1 << 40) - 1;
/// Byte offsets in an inode (`inode.rs`): the size word, the root pointer and the height.
const SIZE_AT: usize = 0;
const ROOT_AT: usize = 16;
const HEIGHT_AT: usize = 24;

fn word<M: Media>(m: &M, at: usize) -> u64 {
    let mut b = [0u8; 8];
    m.read(at, &mut b);
    u64::from_le_bytes(b)
}

/// Strip format 7's checks from every inode of the fixed table and every tree node they reach.
pub(crate) fn unseal<M: Media>(m: &M, geo: &Geometry) {
    for ino in 0..geo.inodes as u64 {
        let at = geo.inode_off(ino);
        m.write(at + SIZE_AT, &(word(m, at + SIZE_AT) & SIZE).to_le_bytes());
        let mut h = [0u8; 1];
        m.read(at + HEIGHT_AT, &mut h);
        unseal_tree(m, geo, word(m, at + ROOT_AT), h[0]);
    }
}

fn unseal_tree<M: Media>(m: &M, geo: &Geometry, node: u64, level: u8) {
    let huge = level == 1 && node & 1 << 63 != 0;
    if level == 0 || node == 0 || huge || !geo.is_data(node) {
        return;
    }
    for s in 0..BLOCK / 8 {
        let at = node as usize * BLOCK + s * 8;
        let bare = word(m, at) & PTR;
        m.write(at, &bare.to_le_bytes());
        unseal_tree(m, geo, bare, level - 1);
    }
}
