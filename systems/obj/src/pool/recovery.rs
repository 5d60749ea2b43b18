//! Recovery and checking: the scan that validates the header, the Object Table and the PMO
//! Sync Table before anything is written, and what it reports.

use super::Pool;
use crate::alloc::Extents;
use crate::error::{ObjError, Result};
use crate::layout::{self, Descriptor, Geometry, Intent, ENTRY, HEADER_LEN, LIVE, SYNC_LEN};
use pmkit_media::Media;
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
    pub(super) found: Vec<(usize, u64, Descriptor)>,
    pub(super) extents: Extents,
    pub(super) intent: Option<Intent>,
    pub(super) seq: u64,
    pub(super) errors: Vec<String>,
}

pub(super) fn scan<M: Media>(media: &M, geometry: &Geometry) -> Scan {
    let mut s = Scan {
        found: vec![],
        extents: Extents::new(geometry.area_off, geometry.area_len),
        intent: None,
        seq: 0,
        errors: vec![],
    };
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut e = [0u8; ENTRY];
    for i in 0..geometry.max_objects as usize {
        let off = geometry.entry_off(i);
        let state = media.load_u64(off);
        if state == 0 {
            continue;
        }
        if state & LIVE == 0 || layout::state_generation(state) == 0 {
            s.errors.push(format!(
                "object table entry {i}: invalid published word {state:#018x}"
            ));
            continue;
        }
        media.read(off, &mut e);
        let d = match Descriptor::decode(i, &e, geometry) {
            Ok(d) => d,
            Err(err) => {
                s.errors.push(problem(err));
                continue;
            }
        };
        if let Some(j) = names.insert(d.name.clone(), i) {
            s.errors.push(format!(
                "object table entries {j} and {i} have the same name {:?}",
                d.name
            ));
            continue;
        }
        if !s.extents.take(d.offset, 2 * d.cap) {
            s.errors.push(format!(
                "object table entry {i} ({:?}): extent {:#x}+{} overlaps another object",
                d.name,
                d.offset,
                2 * d.cap
            ));
            continue;
        }
        s.found.push((i, state, d));
    }
    let mut page = vec![0u8; SYNC_LEN];
    media.read(geometry.sync_off as usize, &mut page);
    s.seq = layout::intent_seq(&page);
    let commit = media.load_u64(geometry.sync_off as usize);
    if commit != 0 {
        match Intent::decode(&page) {
            Ok(i) if i.seq != commit => s.errors.push(format!(
                "PMO Sync Table: commit word {commit} does not match the intent record's sequence {}",
                i.seq
            )),
            Ok(i) => {
                for &(entry, word) in &i.items {
                    let known = s.found.iter().any(|(j, _, _)| *j as u64 == entry);
                    if !known || word & LIVE == 0 {
                        s.errors.push(format!(
                            "PMO Sync Table: committed intent names entry {entry} (word {word:#x}), which is not a live object"
                        ));
                    }
                }
                s.intent = Some(i);
            }
            Err(err) => s.errors.push(problem(err)),
        }
    }
    s
}

/// The bare description of a structural problem (without the "corrupt pool" advice).
pub(super) fn problem(e: ObjError) -> String {
    match e {
        ObjError::Corrupt(msg) => msg,
        e => e.to_string(),
    }
}

pub(super) fn read_geometry<M: Media>(media: &M) -> Result<Geometry> {
    if media.len() < HEADER_LEN {
        return Err(ObjError::NotAPool(format!(
            "media of {} bytes is too small for a pool header",
            media.len()
        )));
    }
    let mut h = [0u8; HEADER_LEN];
    media.read(0, &mut h);
    Geometry::decode(&h, media.len())
}

impl<M: Media> Pool<M> {
    /// Check a pool without changing it.
    pub fn check(media: &M) -> CheckReport {
        let geometry = match read_geometry(media) {
            Ok(geometry) => geometry,
            Err(e) => {
                return CheckReport {
                    errors: vec![e.to_string()],
                    ..Default::default()
                }
            }
        };
        let s = scan(media, &geometry);
        CheckReport {
            geometry: Some(geometry),
            objects: s.found.len(),
            bytes_used: geometry.area_len - s.extents.free_bytes(),
            pending_intent: s.intent.map(|i| i.items),
            errors: s.errors,
        }
    }
}
