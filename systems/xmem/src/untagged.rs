//! Profiles of an unmodified program, from a `valgrind --tool=lackey --trace-mem=yes` log
//! (`pmkit xmem profile` runs valgrind and saves what this finds), in the format
//! `XMem::load_profiles` and `pmkit xmem place` read.
//!
//! An unmodified program has no tags, so accesses are grouped by address: each named range
//! (`--tag NAME=START-END`) is one data structure (the program's own log of its allocations can
//! name them); the rest are cut into windows of the region size and runs of adjacent touched
//! windows become one structure each, named by their address range (a large `malloc` is its own
//! `mmap`, so big arrays come out as ranges of their own).
//!
//! What lackey loses: it logs addresses, never the loaded values, so the classifier's pointer
//! chasing rule (a load whose value points at a later access's line) cannot fire. Linked lists,
//! trees and hash chains come out as random (or streaming), and their benefit is underrated.

use crate::cache::Cache;
use crate::classify::{self, Access, BUFFER};
use crate::profiles::{self, Saved};
use crate::trace::{parse_lackey_rw, Counts};
use std::collections::BTreeMap;
use std::io::BufRead;

/// A user-named address range.
#[derive(Clone, Debug)]
pub struct NamedRange {
    pub name: String,
    pub start: u64,
    pub end: u64,
}

/// `NAME=START-END` (hex with 0x, or decimal), END exclusive.
pub fn parse_range(s: &str) -> Result<NamedRange, String> {
    let (name, range) = s.split_once('=').ok_or_else(|| {
        format!("{s:?}: expected NAME=START-END, e.g. hash=0x7f0000000000-0x7f0004000000")
    })?;
    let (a, b) = range
        .split_once('-')
        .ok_or_else(|| format!("{s:?}: expected START-END after '='"))?;
    let num = |t: &str| {
        let t = t.trim();
        match t.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => t.parse(),
        }
        .map_err(|_| format!("{t:?} is not an address (0x... or decimal)"))
    };
    let (start, end) = (num(a)?, num(b)?);
    if !profiles::valid_name(name) || end <= start {
        return Err(format!(
            "{s:?}: the name must be non-empty and START below END"
        ));
    }
    Ok(NamedRange {
        name: name.to_owned(),
        start,
        end,
    })
}

/// Where an access is counted: a named range's region, or an address window.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Key {
    Named(usize, u64),
    Window(u64),
}

/// What `profile` found: per structure, its profile and how many accesses it had.
pub struct Profiled {
    pub tags: Vec<(Saved, u64)>,
    /// Data accesses read from the log, and whether `max` cut it short.
    pub accesses: u64,
    pub truncated: bool,
}

pub struct Classifier<'a> {
    ranges: &'a [NamedRange],
    shift: u32,
    buf: Vec<Access>,
    counts: BTreeMap<Key, Counts>,
    accesses: u64,
    /// A cache model in front: only misses are counted (`Tracer::with_cache`'s profile).
    cache: Option<Cache>,
    missed: Vec<bool>,
    /// The pattern classifier, which remembers streams from one buffer to the next.
    classifier: classify::Classifier,
}

impl<'a> Classifier<'a> {
    pub fn new(ranges: &'a [NamedRange], region_size: u64) -> Classifier<'a> {
        assert!(region_size.is_power_of_two());
        Classifier {
            ranges,
            shift: region_size.trailing_zeros(),
            buf: Vec::with_capacity(BUFFER),
            counts: BTreeMap::new(),
            accesses: 0,
            cache: None,
            missed: Vec::new(),
            classifier: classify::Classifier::new(),
        }
    }

    /// Count only the accesses that miss `cache`.
    pub fn with_cache(mut self, cache: Cache) -> Classifier<'a> {
        self.cache = Some(cache);
        self
    }

    fn push(&mut self, a: Access, store: bool) {
        if let Some(c) = &mut self.cache {
            let t = c.touch(a.addr, store);
            self.missed.push(!t.hit);
            if let Some(wb) = t.writeback {
                let key = self.key(wb);
                self.counts.entry(key).or_default().writebacks += 1;
            }
        }
        self.buf.push(a);
        self.accesses += 1;
        if self.buf.len() == BUFFER {
            self.flush();
        }
    }

    /// Classify the buffer (the thesis's 4096 accesses, in log order) and count.
    fn flush(&mut self) {
        let labels = match self.cache {
            Some(_) => self.classifier.label_misses(&mut self.buf, &self.missed),
            None => self.classifier.classify(&mut self.buf),
        };
        self.missed.clear();
        for (addr, p) in labels {
            let key = self.key(addr);
            self.counts.entry(key).or_default().by_pattern[p as usize] += 1;
        }
        self.buf.clear();
    }

    /// Where an access to `addr` is counted.
    fn key(&self, addr: u64) -> Key {
        match self
            .ranges
            .iter()
            .position(|r| (r.start..r.end).contains(&addr))
        {
            Some(i) => Key::Named(i, (addr - self.ranges[i].start) >> self.shift),
            None => Key::Window(addr >> self.shift),
        }
    }

    /// Read a lackey log, at most `max` data accesses; `Ok(true)` when `max` cut it short.
    pub fn read(&mut self, r: impl BufRead, max: u64) -> std::io::Result<bool> {
        for line in r.lines() {
            let line = line?;
            for (a, store) in parse_lackey_rw(&line) {
                if self.accesses >= max {
                    return Ok(true);
                }
                self.push(a, store);
            }
        }
        Ok(false)
    }

    /// Group the counts into structures with at least `min_accesses` classified accesses.
    pub fn finish(mut self, min_accesses: u64, truncated: bool) -> Profiled {
        self.flush();
        let region = 1u64 << self.shift;
        // (name, regions, summed counts)
        let mut groups: Vec<(String, u64, Counts)> = Vec::new();
        for (i, r) in self.ranges.iter().enumerate() {
            let mut sum = Counts::default();
            for (_, c) in self
                .counts
                .range(Key::Named(i, 0)..=Key::Named(i, u64::MAX))
            {
                sum.add(c);
            }
            groups.push((r.name.clone(), (r.end - r.start).div_ceil(region), sum));
        }
        let mut run: Option<(u64, u64, Counts)> = None;
        let close = |run: Option<(u64, u64, Counts)>, groups: &mut Vec<_>| {
            if let Some((first, last, sum)) = run {
                let name = format!(
                    "0x{:x}-0x{:x}",
                    first << self.shift,
                    (last + 1) << self.shift
                );
                groups.push((name, last - first + 1, sum));
            }
        };
        for (k, c) in &self.counts {
            let Key::Window(w) = *k else { continue };
            run = match run {
                Some((first, last, mut sum)) if last + 1 == w => {
                    sum.add(c);
                    Some((first, w, sum))
                }
                other => {
                    close(other, &mut groups);
                    Some((w, w, *c))
                }
            };
        }
        close(run, &mut groups);
        let tags = groups
            .into_iter()
            .filter(|g| g.2.by_pattern.iter().sum::<u64>() >= min_accesses.max(1))
            .map(|(name, regions, sum)| {
                let total = sum.by_pattern.iter().sum();
                let per = |n: u64| n as f64 / regions as f64;
                let saved = Saved {
                    name,
                    f: sum.by_pattern.map(per),
                    writebacks: per(sum.writebacks),
                    regions,
                };
                (saved, total)
            })
            .collect();
        Profiled {
            tags,
            accesses: self.accesses,
            truncated,
        }
    }
}
