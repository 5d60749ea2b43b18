//! Per-page CRCs of object data (checksummed pools, [`super::PoolOptions::checksum`]).
//!
//! Each 4 KiB page of the object area has a CRC32C in the page CRC table (see `layout.rs`), so
//! each slot of an object has a table of its own. A sync writes the CRCs of the pages it writes
//! into the *target* slot's table, flushed with the data and before the fence, so the one
//! publication (a persisted word or a committed intent) makes data and CRCs current together.
//! Every read of the published slot that hands data out (attach fill, read-only PM attach, a PM
//! shadow's catch-up, `read_published`) compares each page with its CRC and fails with
//! [`ObjError::Checksum`] instead of returning it.

use super::{check_readable, Pool};
use crate::error::{ObjError, Result};
use crate::layout::{Descriptor, Geometry, CRC_ENTRY, PAGE};
use pmkit_media::Media;

/// The CRC of one page of data.
#[inline]
pub(super) fn page_crc(page: &[u8]) -> u32 {
    crc32c::crc32c(page)
}

/// The CRC stored for page `page` of `slot` of `descriptor`.
fn stored_crc<M: Media>(
    media: &M,
    geometry: &Geometry,
    descriptor: &Descriptor,
    slot: u8,
    page: usize,
) -> Result<u32> {
    let off = geometry.crc_entry_off(descriptor.slot_off(slot) + page * PAGE);
    check_readable(media, off, CRC_ENTRY, || {
        format!(
            "the page CRC of object {:?} (slot {slot}) page {page}",
            descriptor.name
        )
    })?;
    let mut bytes = [0u8; CRC_ENTRY];
    media.read(off, &mut bytes);
    Ok(u32::from_le_bytes(bytes))
}

/// Compare `data` (page `page` of `slot`) with its stored CRC.
pub(super) fn verify_page<M: Media>(
    media: &M,
    geometry: &Geometry,
    descriptor: &Descriptor,
    slot: u8,
    page: usize,
    data: &[u8],
) -> Result<()> {
    debug_assert_eq!(data.len(), PAGE, "CRCs cover whole pages");
    let stored = stored_crc(media, geometry, descriptor, slot, page)?;
    let computed = page_crc(data);
    if stored != computed {
        return Err(ObjError::Checksum {
            object: descriptor.name.clone(),
            slot,
            page: page as u64,
            stored,
            computed,
        });
    }
    Ok(())
}

/// Read page `page` of `slot` into `buf` and compare it with its CRC (a media error there is
/// [`ObjError::BadMedia`]). The caller has the slot readable.
pub(super) fn read_page<M: Media>(
    media: &M,
    geometry: &Geometry,
    descriptor: &Descriptor,
    slot: u8,
    page: usize,
    buf: &mut [u8; PAGE],
) -> Result<()> {
    let off = descriptor.slot_off(slot) + page * PAGE;
    check_readable(media, off, PAGE, || {
        format!("object {:?} (slot {slot})", descriptor.name)
    })?;
    media.read(off, buf);
    verify_page(media, geometry, descriptor, slot, page, buf)
}

/// Every page of `slot` of `descriptor` that does not match its CRC, as `check` findings
/// (pages the media cannot return are left to the media checks).
pub(super) fn findings<M: Media>(
    media: &M,
    geometry: &Geometry,
    index: usize,
    descriptor: &Descriptor,
    slot: u8,
) -> Vec<String> {
    let mut found = vec![];
    let mut buf = [0u8; PAGE];
    for page in 0..descriptor.cap as usize / PAGE {
        match read_page(media, geometry, descriptor, slot, page, &mut buf) {
            Ok(()) | Err(ObjError::BadMedia { .. }) => {}
            Err(ObjError::Checksum {
                stored, computed, ..
            }) => found.push(format!(
                "object table entry {index} ({:?}): slot {slot} page {page}: data checksum \
                 mismatch (stored {stored:#010x}, computed {computed:#010x})",
                descriptor.name
            )),
            Err(error) => found.push(error.to_string()),
        }
    }
    found
}

impl<M: Media> Pool<M> {
    /// Whether this pool's object pages carry CRCs.
    pub fn checksum(&self) -> bool {
        self.geometry.checksum()
    }
}
