//! A copy-on-write view of media: reads fall through, writes stay in DRAM. `check` runs the
//! mount's recovery and walk on it, so it never writes the media it checks.

use parking_lot::Mutex;
use pmkit_media::{Domain, Fence, Flush, Media, LINE};
use std::collections::BTreeMap;

pub(crate) struct Overlay<'a, M> {
    under: &'a M,
    lines: Mutex<BTreeMap<usize, [u8; LINE]>>,
}

impl<'a, M: Media> Overlay<'a, M> {
    pub(crate) fn new(under: &'a M) -> Overlay<'a, M> {
        Overlay {
            under,
            lines: Mutex::new(BTreeMap::new()),
        }
    }
}

impl<M: Media> Media for Overlay<'_, M> {
    fn len(&self) -> usize {
        self.under.len()
    }
    fn domain(&self) -> Domain {
        self.under.domain()
    }
    fn first_bad(&self, off: usize, len: usize) -> Option<usize> {
        self.under.first_bad(off, len)
    }
    fn read(&self, off: usize, dst: &mut [u8]) {
        self.under.read(off, dst);
        let lines = self.lines.lock();
        let end = off + dst.len();
        for (&l, data) in lines.range(off / LINE * LINE..end) {
            let (a, b) = (l.max(off), (l + LINE).min(end));
            if a < b {
                dst[a - off..b - off].copy_from_slice(&data[a - l..b - l]);
            }
        }
    }
    fn write(&self, off: usize, src: &[u8]) {
        let mut lines = self.lines.lock();
        let end = off + src.len();
        let mut l = off / LINE * LINE;
        while l < end {
            let line = lines.entry(l).or_insert_with(|| {
                let mut b = [0u8; LINE];
                self.under.read(l, &mut b);
                b
            });
            let (a, b) = (l.max(off), (l + LINE).min(end));
            line[a - l..b - l].copy_from_slice(&src[a - off..b - off]);
            l += LINE;
        }
    }
    fn write_nt(&self, off: usize, src: &[u8]) {
        self.write(off, src)
    }
    fn flush(&self, _off: usize, _len: usize, _how: Flush) {}
    fn fence(&self, _kind: Fence) {}
    fn sync_pages(&self, _off: usize, _len: usize) -> pmkit_media::Result<()> {
        Ok(())
    }
    fn load_u64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        u64::from_le_bytes(b)
    }
    fn store_u64(&self, off: usize, v: u64) {
        self.write(off, &v.to_le_bytes())
    }
    fn cas_u64(&self, off: usize, current: u64, new: u64) -> Result<u64, u64> {
        let v = self.load_u64(off);
        if v == current {
            self.store_u64(off, new);
            Ok(v)
        } else {
            Err(v)
        }
    }
    fn cas_u128(&self, off: usize, current: u128, new: u128) -> Result<u128, u128> {
        let mut b = [0u8; 16];
        self.read(off, &mut b);
        let v = u128::from_le_bytes(b);
        if v == current {
            self.write(off, &new.to_le_bytes());
            Ok(v)
        } else {
            Err(v)
        }
    }
}
