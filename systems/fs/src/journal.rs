//! The undo journal: lanes of 64-byte entries with a generation word stored last, the commit
//! protocol and recovery (roll back the uncommitted tail of every lane).

use crate::layout::{put, u64_at, Geometry, BLOCK, LINE};
use crate::pm::Pm;
use parking_lot::{Mutex, MutexGuard};
use pmkit_media::Media;

pub(crate) const DATA: usize = 48;
// One entry is one line: the target offset, the undo bytes, then the word `{gen, len, kind}`,
// stored last (its generation says the line is whole).
const TARGET_AT: usize = 0;
const DATA_AT: usize = 8;
const WORD_AT: usize = 56;
const _: () = assert!(TARGET_AT + 8 == DATA_AT && DATA_AT + DATA == WORD_AT && WORD_AT + 8 == LINE);
pub(crate) const KIND_UNDO: u8 = 1;
pub(crate) const KIND_COMMIT: u8 = 2;

/// One decoded entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub target: u64,
    pub data: [u8; DATA],
    pub gen: u32,
    pub len: u8,
    pub kind: u8,
}

impl Entry {
    pub fn word(&self) -> u64 {
        (self.gen as u64) << 32 | (self.len as u64) << 8 | self.kind as u64
    }
    /// The line's bytes before the word (the word is [`Entry::word`], stored after them).
    pub fn body(&self) -> [u8; WORD_AT] {
        let mut b = [0u8; WORD_AT];
        put(&mut b, TARGET_AT, &self.target.to_le_bytes());
        put(&mut b, DATA_AT, &self.data);
        if cfg!(debug_assertions) {
            let mut line = [0u8; LINE];
            line[..WORD_AT].copy_from_slice(&b);
            line[WORD_AT..].copy_from_slice(&self.word().to_le_bytes());
            debug_assert_eq!(Entry::decode(&line), *self, "decode after encode");
        }
        b
    }
    pub fn decode(b: &[u8; LINE]) -> Entry {
        let (target, word) = (u64_at(b, TARGET_AT), u64_at(b, WORD_AT));
        let mut data = [0u8; DATA];
        data.copy_from_slice(&b[DATA_AT..WORD_AT]);
        Entry {
            target,
            data,
            gen: (word >> 32) as u32,
            len: (word >> 8) as u8,
            kind: word as u8,
        }
    }
    /// Why this entry cannot be a valid entry of a file system with `geo`, if it cannot.
    pub fn invalid(&self, geo: &Geometry) -> Option<String> {
        match self.kind {
            KIND_COMMIT => None,
            KIND_UNDO => {
                let lo = geo.inode_block * BLOCK as u64;
                let hi = geo.blocks * BLOCK as u64;
                let end = self.target.checked_add(self.len as u64);
                if self.len == 0 || self.len as usize > DATA {
                    Some(format!("length {}", self.len))
                } else if self.target < lo || end.is_none_or(|e| e > hi) {
                    Some(format!(
                        "target {} outside the inode table and data",
                        self.target
                    ))
                } else {
                    None
                }
            }
            k => Some(format!("kind {k}")),
        }
    }
}

/// A lane's DRAM state: its generation and where the next transaction starts.
#[derive(Debug)]
pub(crate) struct Lane {
    pub idx: u32,
    pub gen: u32,
    pub head: u32,
}

pub(crate) struct Journal {
    lanes: Vec<Mutex<Lane>>,
}

impl Journal {
    /// Lanes as recovery left them (head 0, generation `gens[l]`).
    pub(crate) fn new(gens: &[u32]) -> Journal {
        let lanes = gens.iter().enumerate();
        Journal {
            lanes: lanes
                .map(|(i, &g)| {
                    Mutex::new(Lane {
                        idx: i as u32,
                        gen: g,
                        head: 0,
                    })
                })
                .collect(),
        }
    }
    /// A lane for this thread: its own (by thread hash) if free, else any free one, else wait.
    pub(crate) fn take(&self) -> MutexGuard<'_, Lane> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::thread::current().id().hash(&mut h);
        let n = self.lanes.len();
        let own = h.finish() as usize % n;
        for k in 0..n {
            if let Some(g) = self.lanes[(own + k) % n].try_lock() {
                return g;
            }
        }
        self.lanes[own].lock()
    }
}

/// A lane's header word: its generation in the high half, its head (the next entry) in the low.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub gen: u32,
    pub head: u32,
}

impl Header {
    pub(crate) fn read<M: Media>(pm: &Pm<M>, geo: &Geometry, lane: u32) -> Header {
        let w = pm.read_u64(geo.lane_off(lane));
        Header {
            gen: (w >> 32) as u32,
            head: w as u32,
        }
    }
    pub(crate) fn word(self) -> u64 {
        let w = (self.gen as u64) << 32 | self.head as u64;
        debug_assert_eq!((w >> 32, w as u32), (self.gen as u64, self.head));
        w
    }
}

/// The generation in the last word of entry `i` of `lane` (read alone: recovery's and repair's
/// check for entries ahead of their header).
pub(crate) fn entry_gen<M: Media>(pm: &Pm<M>, geo: &Geometry, lane: u32, i: u32) -> u32 {
    (pm.read_u64(entry_off(geo, lane, i) + WORD_AT) >> 32) as u32
}

pub(crate) fn entry_off(geo: &Geometry, lane: u32, i: u32) -> usize {
    assert!(i < geo.lane_entries);
    geo.lane_off(lane) + (1 + i as usize) * LINE
}

fn write_entry<M: Media>(pm: &Pm<M>, off: usize, e: &Entry) {
    // word last: a matching generation means the line is whole
    pm.write_line(off, &e.body(), e.word());
    pm.flush(off, LINE);
}

fn set_header<M: Media>(pm: &Pm<M>, geo: &Geometry, lane: &Lane) {
    let off = geo.lane_off(lane.idx);
    let h = Header {
        gen: lane.gen,
        head: lane.head,
    };
    pm.store_u64(off, h.word());
    pm.flush(off, 8);
}

/// Start a new generation in `lane` at head 0 and make it durable.
fn bump<M: Media>(pm: &Pm<M>, geo: &Geometry, lane: &mut Lane) {
    if lane.gen == u32::MAX {
        // Generations would repeat: clear every entry first.
        let off = entry_off(geo, lane.idx, 0);
        pm.write(off, &vec![0u8; geo.lane_entries as usize * LINE]);
        pm.flush(off, geo.lane_entries as usize * LINE);
        pm.fence();
        lane.gen = 0;
    }
    lane.gen += 1;
    lane.head = 0;
    set_header(pm, geo, lane);
    pm.fence();
}

/// Entries a set of undo ranges takes.
pub(crate) fn entries_for(undo: &[(usize, Vec<u8>)]) -> usize {
    undo.iter().map(|(_, old)| old.len().div_ceil(DATA)).sum()
}

/// Run one transaction in `lane`: log `undo` (target, original bytes), fence, `apply` (the
/// in-place and fresh writes, flushed), fence, commit entry, fence. The caller has checked that
/// the entries fit (`entries_for(undo) < lane_entries`).
pub(crate) fn run<M: Media>(
    pm: &Pm<M>,
    geo: &Geometry,
    lane: &mut Lane,
    undo: &[(usize, Vec<u8>)],
    apply: impl FnOnce(),
) {
    let n = entries_for(undo) as u32;
    assert!(
        n < geo.lane_entries,
        "transaction of {n} entries in a lane of {}",
        geo.lane_entries
    );
    if lane.head + n + 1 > geo.lane_entries {
        bump(pm, geo, lane);
    }
    let mut i = lane.head;
    for (target, old) in undo {
        for (k, chunk) in old.chunks(DATA).enumerate() {
            let mut data = [0u8; DATA];
            data[..chunk.len()].copy_from_slice(chunk);
            let e = Entry {
                target: (target + k * DATA) as u64,
                data,
                gen: lane.gen,
                len: chunk.len() as u8,
                kind: KIND_UNDO,
            };
            write_entry(pm, entry_off(geo, lane.idx, i), &e);
            i += 1;
        }
    }
    pm.note_journal((n as u64 + 1) * LINE as u64);
    pm.note_tx();
    if n > 0 && !pm.faults.skip_log_fence {
        pm.fence();
    }
    apply();
    if !pm.faults.skip_apply_fence {
        pm.fence();
    }
    let commit = Entry {
        target: 0,
        data: [0; DATA],
        gen: lane.gen,
        len: 0,
        kind: KIND_COMMIT,
    };
    write_entry(pm, entry_off(geo, lane.idx, i), &commit);
    pm.fence();
    lane.head = i + 1;
    set_header(pm, geo, lane); // made durable by the next fence; recovery skips committed runs
}

/// What recovery did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// Uncommitted transactions rolled back.
    pub rolled_back: u32,
    /// Undo entries applied.
    pub entries: u32,
    /// Committed transactions found past a head whose update had not reached the media.
    pub committed_seen: u32,
}

impl std::fmt::Display for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.rolled_back == 0 && self.committed_seen == 0 {
            return f.write_str("nothing to undo");
        }
        write!(
            f,
            "{} unfinished transaction(s) rolled back ({} undo entries), {} committed",
            self.rolled_back, self.entries, self.committed_seen
        )
    }
}

/// Roll back every lane's uncommitted tail and start a new generation in every lane. Returns the
/// new generations, or the problems that make the journal unusable (nothing written then).
pub(crate) fn recover<M: Media>(
    pm: &Pm<M>,
    geo: &Geometry,
) -> Result<(Vec<u32>, Replay), Vec<String>> {
    let mut problems = Vec::new();
    let mut undo: Vec<Vec<Entry>> = Vec::new();
    let mut heads = Vec::new();
    let mut rep = Replay::default();
    for l in 0..geo.lanes {
        let Header { gen, head } = Header::read(pm, geo, l);
        heads.push(gen);
        let mut pending = Vec::new();
        // head == lane_entries is a full lane (its next transaction wraps it)
        if head > geo.lane_entries {
            problems.push(format!(
                "journal lane {l}: head {head} beyond its {} entries",
                geo.lane_entries
            ));
            undo.push(pending);
            continue;
        }
        // Entries never carry a later generation than their lane's header (the header is bumped
        // and fenced before the first entry of a generation is written). One that does means the
        // header went back: a later transaction's head could reach that stale entry, and the
        // next recovery would roll back an old operation.
        let ahead = (0..geo.lane_entries)
            .map(|i| entry_gen(pm, geo, l, i))
            .max()
            .filter(|&g| g > gen);
        if let Some(g) = ahead {
            problems.push(format!(
                "journal lane {l}: entries of generation {g}, ahead of its header's {gen}"
            ));
            undo.push(pending);
            continue;
        }
        for i in head..geo.lane_entries {
            let mut b = [0u8; LINE];
            pm.read(entry_off(geo, l, i), &mut b);
            let e = Entry::decode(&b);
            if e.gen != gen || gen == 0 {
                break;
            }
            if let Some(why) = e.invalid(geo) {
                problems.push(format!("journal lane {l} entry {i}: garbage ({why})"));
                break;
            }
            if e.kind == KIND_COMMIT {
                rep.committed_seen += 1;
                pending.clear();
            } else {
                pending.push(e);
            }
        }
        undo.push(pending);
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    for pending in &undo {
        if !pending.is_empty() {
            rep.rolled_back += 1;
        }
        for e in pending.iter().rev() {
            pm.write(e.target as usize, &e.data[..e.len as usize]);
            pm.flush(e.target as usize, e.len as usize);
            rep.entries += 1;
        }
    }
    if rep.entries > 0 {
        pm.fence();
    }
    let mut gens = Vec::new();
    for (l, gen) in heads.into_iter().enumerate() {
        let mut lane = Lane {
            idx: l as u32,
            gen,
            head: 0,
        };
        bump(pm, geo, &mut lane);
        gens.push(lane.gen);
    }
    Ok((gens, rep))
}
