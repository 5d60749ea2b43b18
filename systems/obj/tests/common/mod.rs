//! Helpers the object-store tests share: recognisable data, publishing it, and finding it on
//! the simulated media without assuming the layout.
#![allow(dead_code)]

use pmkit_media::crashsim::{CrashSim, POISON_FILL};
use pmkit_obj::{Access, Pool, Tracking};

/// A byte pattern no slot holds by chance (no zeroes, no poison fill bytes).
pub(crate) fn marker(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7 + seed as usize) % 251) as u8 + 1)
        .map(|b| if b == POISON_FILL { 1 } else { b })
        .collect()
}

/// Write `data` at `off` of `name` and publish it.
pub(crate) fn put(pool: &Pool<&CrashSim>, name: &str, off: u64, data: &[u8]) {
    let h = pool
        .attach_with(name, Access::ReadWrite, Tracking::Explicit)
        .unwrap();
    h.write(off, data).unwrap();
    h.sync().unwrap();
    h.detach().unwrap();
}

/// Media offset of `data`, found by searching the image (the tests do not assume the layout).
pub(crate) fn media_off_of(sim: &CrashSim, data: &[u8]) -> usize {
    sim.image()
        .windows(data.len())
        .position(|w| w == data)
        .expect("the marker is on the media")
}
