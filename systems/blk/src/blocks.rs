//! Where a logical block lives on PM: in place (the plain device) or wherever the atomic map
//! names (`--atomic`). The two personalities share one [`DataPath`]; the device, and the
//! pt-batch drain below it, see only [`Blocks`].

use crate::atomic::AtomicMap;
use crate::data_path::DataPath;
use crate::error::Result;
use pmkit_media::Media;

/// The device's personality, fixed at creation.
pub(crate) enum Mode {
    /// Block `b` is at `layout.block_off(b)`; a torn write is possible across a crash.
    Plain,
    /// Every block write is all-or-nothing, through the map.
    Atomic(AtomicMap),
}

/// The block store: the data path and the personality on top of it.
pub(crate) struct Blocks<M: Media> {
    pub(crate) path: DataPath<M>,
    pub(crate) mode: Mode,
}

impl<M: Media> Blocks<M> {
    /// Write blocks `b0..`. The caller holds their stripes exclusively (or, in pt-batch, their
    /// buffer mutexes). With `fua` they are durable when this returns; without, after the next
    /// [`Blocks::barrier`].
    #[inline]
    pub(crate) fn write(&self, b0: u64, src: &[u8], fua: bool) -> Result<()> {
        match &self.mode {
            Mode::Plain => self.path.write_blocks(b0, src, fua),
            Mode::Atomic(map) => map.write(&self.path, b0, src, fua),
        }
    }

    /// Read blocks `b0..`. The caller holds their stripes shared (or their buffer mutexes).
    /// On an error `dst` holds zeroes, never part of the data.
    #[inline]
    pub(crate) fn read(&self, b0: u64, dst: &mut [u8]) -> Result<()> {
        match &self.mode {
            Mode::Plain => self.path.read_blocks(b0, dst),
            Mode::Atomic(map) => map.read(&self.path, b0, dst),
        }
    }

    /// Make every completed write durable: settle the atomic lanes, then the scheme's barrier.
    /// The caller has waited for writes in flight.
    pub(crate) fn barrier(&self) -> Result<()> {
        if let Mode::Atomic(map) = &self.mode {
            map.settle_all(&self.path)?;
        }
        self.path.barrier()
    }

    pub(crate) fn atomic(&self) -> Option<&AtomicMap> {
        match &self.mode {
            Mode::Plain => None,
            Mode::Atomic(map) => Some(map),
        }
    }
}
