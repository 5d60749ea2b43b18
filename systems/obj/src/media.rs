//! What the object store needs from media beyond [`Media`]: page rights (to make detached and
//! read-only objects inaccessible) and addresses (for raw pointers handed to C). A real
//! [`Region`] has both; the crash simulator has neither, and the same pool code runs on both.

use pmkit_media::protect::{Access as Rights, Pkey};
use pmkit_media::{Media, MediaError, Region};

pub trait ObjMedia: Media {
    /// Set the page rights of `[off, off+len)`. Media without page tables ignore it.
    fn set_rights(&self, off: usize, len: usize, rights: Rights) -> Result<(), MediaError> {
        let _ = (off, len, rights);
        Ok(())
    }
    /// Set the page rights of `[off, off+len)` and tag the pages with protection key `key`
    /// (`None`: the default key). Media without page tables ignore it.
    fn set_rights_key(
        &self,
        off: usize,
        len: usize,
        rights: Rights,
        key: Option<&Pkey>,
    ) -> Result<(), MediaError> {
        let _ = (off, len, rights, key);
        Ok(())
    }
    /// Address of byte `off` if the media is mapped memory.
    fn addr(&self, off: usize, len: usize) -> Option<*mut u8> {
        let _ = (off, len);
        None
    }
}

impl ObjMedia for Region {
    fn set_rights(&self, off: usize, len: usize, rights: Rights) -> Result<(), MediaError> {
        self.set_access(off, len, rights)
    }
    fn set_rights_key(
        &self,
        off: usize,
        len: usize,
        rights: Rights,
        key: Option<&Pkey>,
    ) -> Result<(), MediaError> {
        self.set_access_key(off, len, rights, key)
    }
    fn addr(&self, off: usize, len: usize) -> Option<*mut u8> {
        Some(self.ptr_at(off, len))
    }
}

impl<M: ObjMedia + ?Sized> ObjMedia for std::sync::Arc<M> {
    fn set_rights(&self, off: usize, len: usize, rights: Rights) -> Result<(), MediaError> {
        (**self).set_rights(off, len, rights)
    }
    fn set_rights_key(
        &self,
        off: usize,
        len: usize,
        rights: Rights,
        key: Option<&Pkey>,
    ) -> Result<(), MediaError> {
        (**self).set_rights_key(off, len, rights, key)
    }
    fn addr(&self, off: usize, len: usize) -> Option<*mut u8> {
        (**self).addr(off, len)
    }
}

impl ObjMedia for pmkit_media::crashsim::CrashSim {}

/// A borrowed media as media: lets a pool run on media it does not own (a crash simulator
/// handed to a check closure, a region shared with another layer).
pub struct ByRef<'a, M: ?Sized>(pub &'a M);

impl<M: Media + ?Sized> Media for ByRef<'_, M> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn domain(&self) -> pmkit_media::Domain {
        self.0.domain()
    }
    fn read(&self, off: usize, dst: &mut [u8]) {
        self.0.read(off, dst)
    }
    fn write(&self, off: usize, src: &[u8]) {
        self.0.write(off, src)
    }
    fn write_nt(&self, off: usize, src: &[u8]) {
        self.0.write_nt(off, src)
    }
    unsafe fn write_nt_from(&self, off: usize, src: *const u8, len: usize) {
        self.0.write_nt_from(off, src, len)
    }
    unsafe fn read_into(&self, off: usize, dst: *mut u8, len: usize) {
        self.0.read_into(off, dst, len)
    }
    fn flush(&self, off: usize, len: usize, how: pmkit_media::Flush) {
        self.0.flush(off, len, how)
    }
    fn fence(&self, kind: pmkit_media::Fence) {
        self.0.fence(kind)
    }
    fn sync_pages(&self, off: usize, len: usize) -> pmkit_media::Result<()> {
        self.0.sync_pages(off, len)
    }
    fn load_u64(&self, off: usize) -> u64 {
        self.0.load_u64(off)
    }
    fn store_u64(&self, off: usize, v: u64) {
        self.0.store_u64(off, v)
    }
    fn cas_u64(&self, off: usize, current: u64, new: u64) -> std::result::Result<u64, u64> {
        self.0.cas_u64(off, current, new)
    }
    fn cas_u128(&self, off: usize, current: u128, new: u128) -> std::result::Result<u128, u128> {
        self.0.cas_u128(off, current, new)
    }
}

impl<M: ObjMedia + ?Sized> ObjMedia for ByRef<'_, M> {
    fn set_rights(&self, off: usize, len: usize, rights: Rights) -> Result<(), MediaError> {
        self.0.set_rights(off, len, rights)
    }
    fn set_rights_key(
        &self,
        off: usize,
        len: usize,
        rights: Rights,
        key: Option<&Pkey>,
    ) -> Result<(), MediaError> {
        self.0.set_rights_key(off, len, rights, key)
    }
    fn addr(&self, off: usize, len: usize) -> Option<*mut u8> {
        self.0.addr(off, len)
    }
}
