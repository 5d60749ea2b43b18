//! Recovery and checking: the scan that validates the header, the Object Table and the PMO
//! Sync Table before anything is written, and what it reports.

use super::Pool;
use crate::alloc::Extents;
use crate::error::{ObjError, Result};
use crate::layout::{self, Descriptor, Geometry, Intent, ENTRY, HEADER_LEN, SYNC_LEN};
use pmkit_media::{Domain, Fence, Flush, Media};
use std::collections::HashMap;

/// What `open` had to do to make the pool consistent.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Recovery {
    /// A committed multi-object sync was rolled forward: (entry, word) applied.
    pub rolled_forward: Vec<(u64, u64)>,
    /// Live objects found.
    pub objects: usize,
}

/// Result of a read-only consistency check.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CheckReport {
    pub geometry: Option<Geometry>,
    pub objects: usize,
    pub bytes_used: u64,
    /// A committed multi-object sync that `open` would roll forward.
    pub pending_intent: Option<Vec<(u64, u64)>>,
    pub errors: Vec<String>,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }
}

/// What a table scan found.
pub(super) struct Scan {
    /// Live objects: (table entry, published word, descriptor).
    pub(super) found: Vec<(usize, u64, Descriptor)>,
    /// The object area with every live object's extent taken.
    pub(super) extents: Extents,
    /// A committed intent record (to roll forward).
    pub(super) intent: Option<Intent>,
    /// Sequence number of the last intent record written.
    pub(super) seq: u64,
    pub(super) errors: Vec<String>,
    /// The first structure the media could not return: (what, first bad byte). Also one of
    /// `errors`; `open` reports it as [`ObjError::BadMedia`] (EIO) rather than corruption.
    pub(super) bad_media: Option<(String, u64)>,
}

impl Scan {
    /// A scan of an empty pool (after format).
    pub(super) fn empty(geometry: &Geometry) -> Scan {
        Scan {
            found: vec![],
            extents: Extents::new(geometry.area_off, geometry.area_len),
            intent: None,
            seq: 0,
            errors: vec![],
            bad_media: None,
        }
    }

    /// Whether `[off, off+len)`, holding `what`, can be read; if not, the media error is
    /// recorded as a problem of the scan.
    fn readable<M: Media>(
        &mut self,
        media: &M,
        off: usize,
        len: usize,
        what: impl FnOnce() -> String,
    ) -> bool {
        let Err(error) = super::check_readable(media, off, len, what) else {
            return true;
        };
        if let ObjError::BadMedia { what, media_off } = &error {
            self.errors.push(format!(
                "{what}: unreadable (media error at offset {media_off:#x})"
            ));
            self.bad_media.get_or_insert((what.clone(), *media_off));
        }
        false
    }

    /// The first problem found, as the error `open` returns.
    pub(super) fn first_error(&self) -> Result<()> {
        let Some(first) = self.errors.first() else {
            return Ok(());
        };
        if let Some((what, media_off)) = &self.bad_media {
            return Err(ObjError::BadMedia {
                what: what.clone(),
                media_off: *media_off,
            });
        }
        let more = if self.errors.len() > 1 {
            format!(" (and {} more problems)", self.errors.len() - 1)
        } else {
            String::new()
        };
        Err(ObjError::Corrupt(format!("{first}{more}")))
    }
}

/// Read and validate the whole table and the Sync Table; writes nothing.
pub(super) fn scan<M: Media>(media: &M, geometry: &Geometry) -> Scan {
    let mut scan = Scan::empty(geometry);
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut entry = [0u8; ENTRY];
    for index in 0..geometry.max_objects as usize {
        let off = geometry.entry_off(index);
        // Whether the entry is live is in it: an unreadable entry is a problem even if free.
        if !scan.readable(media, off, ENTRY, || format!("object table entry {index}")) {
            continue;
        }
        let word = media.load_u64(off);
        if word == 0 {
            continue;
        }
        if !layout::state_valid(word) {
            scan.errors.push(format!(
                "object table entry {index}: invalid published word {word:#018x}"
            ));
            continue;
        }
        media.read(off, &mut entry);
        let descriptor = match Descriptor::decode(index, &entry, geometry) {
            Ok(descriptor) => descriptor,
            Err(error) => {
                scan.errors.push(problem(error));
                continue;
            }
        };
        if let Some(other) = names.insert(descriptor.name.clone(), index) {
            scan.errors.push(format!(
                "object table entries {other} and {index} have the same name {:?}",
                descriptor.name
            ));
            continue;
        }
        if !scan.extents.take(descriptor.offset, 2 * descriptor.cap) {
            scan.errors.push(format!(
                "object table entry {index} ({:?}): extent {:#x}+{} overlaps another object",
                descriptor.name,
                descriptor.offset,
                2 * descriptor.cap
            ));
            continue;
        }
        scan.found.push((index, word, descriptor));
    }
    // The Sync Table is read as far as it is used: its head (commit word, sequence, count,
    // CRC) always, the items only of a committed intent. The rest of the page may hold stale
    // items, which a media error there does not concern.
    let sync_off = geometry.sync_off as usize;
    let sync_what = || "PMO Sync Table".to_string();
    if !scan.readable(media, sync_off, layout::S_ITEMS, sync_what) {
        return scan;
    }
    let mut page = vec![0u8; SYNC_LEN];
    media.read(sync_off, &mut page[..layout::S_ITEMS]);
    scan.seq = layout::intent_seq(&page);
    let commit = media.load_u64(sync_off);
    if commit != 0 {
        // A count out of range reads no items; `Intent::decode` reports it.
        let items = layout::intent_count(&page).min(layout::MAX_SYNC);
        let len = layout::S_ITEMS + 16 * items;
        if !scan.readable(media, sync_off, len, sync_what) {
            return scan;
        }
        media.read(sync_off, &mut page[..len]);
        match Intent::decode(&page) {
            Ok(intent) if intent.seq != commit => scan.errors.push(format!(
                "PMO Sync Table: commit word {commit} does not match the intent record's sequence {}",
                intent.seq
            )),
            Ok(intent) => {
                for &(entry, word) in &intent.items {
                    let known = scan.found.iter().any(|(index, _, _)| *index as u64 == entry);
                    // Rolling forward stores the word as is: it must be one `scan` accepts.
                    if !known || !layout::state_valid(word) {
                        scan.errors.push(format!(
                            "PMO Sync Table: committed intent names entry {entry} (word {word:#x}), which is not a live object"
                        ));
                    }
                }
                scan.intent = Some(intent);
            }
            Err(error) => scan.errors.push(problem(error)),
        }
    }
    scan
}

/// Apply a committed intent found by `scan` (which must have no errors): store each word,
/// then retire the intent. Idempotent, so a crash here is recovered by the next open. Returns
/// the (entry, word) pairs applied.
pub(super) fn roll_forward<M: Media>(
    media: &M,
    geometry: &Geometry,
    scan: &mut Scan,
) -> Vec<(u64, u64)> {
    debug_assert!(scan.errors.is_empty(), "roll forward only a clean scan");
    let Some(intent) = scan.intent.take() else {
        return vec![];
    };
    for &(entry, word) in &intent.items {
        let off = geometry.entry_off(entry as usize);
        media.store_u64(off, word);
        if media.domain() == Domain::Adr {
            media.flush(off, 8, Flush::best());
        }
        if let Some(found) = scan.found.iter_mut().find(|found| found.0 as u64 == entry) {
            found.1 = word;
        }
    }
    media.fence(Fence::Sfence);
    media.persist_u64(geometry.sync_off as usize, 0);
    intent.items
}

/// The bare description of a structural problem (without the "corrupt pool" advice).
fn problem(error: ObjError) -> String {
    match error {
        ObjError::Corrupt(message) => message,
        error => error.to_string(),
    }
}

pub(super) fn read_geometry<M: Media>(media: &M) -> Result<Geometry> {
    if media.len() < HEADER_LEN {
        return Err(ObjError::NotAPool(format!(
            "media of {} bytes is too small for a pool header",
            media.len()
        )));
    }
    super::check_readable(media, 0, HEADER_LEN, || "the pool header".to_string())?;
    let mut header = [0u8; HEADER_LEN];
    media.read(0, &mut header);
    Geometry::decode(&header, media.len())
}

impl<M: Media> Pool<M> {
    /// Check a pool without changing it.
    pub fn check(media: &M) -> CheckReport {
        let geometry = match read_geometry(media) {
            Ok(geometry) => geometry,
            Err(error) => {
                return CheckReport {
                    errors: vec![error.to_string()],
                    ..Default::default()
                }
            }
        };
        let mut scan = scan(media, &geometry);
        if geometry.checksum() {
            // The slot each object will be published from once `open` has rolled forward.
            let pending = scan.intent.as_ref().map(|intent| intent.items.clone());
            for (index, word, descriptor) in &scan.found {
                let word = pending
                    .iter()
                    .flatten()
                    .find(|(entry, _)| *entry == *index as u64)
                    .map_or(*word, |&(_, word)| word);
                let slot = layout::state_slot(word);
                let found = super::checksum::findings(media, &geometry, *index, descriptor, slot);
                scan.errors.extend(found);
            }
        }
        CheckReport {
            geometry: Some(geometry),
            objects: scan.found.len(),
            bytes_used: geometry.area_len - scan.extents.free_bytes(),
            pending_intent: scan.intent.map(|intent| intent.items),
            errors: scan.errors,
        }
    }
}
