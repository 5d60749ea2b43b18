//! Instrumented-code hooks for the classifier: a [`Tracer`] logs every access made through it
//! (address, and for loads of 8-byte words the loaded value), classifies each full buffer of
//! [`BUFFER`] accesses with the thesis's rules and adds the counts to the access's region.
//! Per-region counts roll up into per-tag profiles with `XMem::apply_profile`.
//!
//! A tracer belongs to one thread (`&mut self`); merge the counts of several with [`merge`].
//! Only accesses made through `load`/`store` are seen: this is the thesis's Pin profiler
//! done by hand in the code that owns the data structures.

use crate::classify::{self, Access, BUFFER};
use std::collections::BTreeMap;

/// Counts by pattern (indexed by `Pattern as usize`) per region index.
pub type RegionCounts = BTreeMap<usize, [u64; 3]>;

/// Values a tracer can log: 8-byte words give their value (a possible pointer), narrower ones 0.
pub trait Word: Copy {
    fn word(self) -> u64;
}

macro_rules! word {
    ($($t:ty => $e:expr),* $(,)?) => { $(impl Word for $t { fn word(self) -> u64 { $e(self) } })* };
}
word!(u64 => |v| v, usize => |v| v as u64, i64 => |v| v as u64, f64 => |_| 0,
      u32 => |_| 0, i32 => |_| 0, u16 => |_| 0, i16 => |_| 0, u8 => |_| 0, i8 => |_| 0,
      f32 => |_| 0, bool => |_| 0);

impl<T> Word for *const T {
    fn word(self) -> u64 {
        self as usize as u64
    }
}
impl<T> Word for *mut T {
    fn word(self) -> u64 {
        self as usize as u64
    }
}

pub struct Tracer<F: Fn(u64) -> Option<usize>> {
    buf: Vec<Access>,
    counts: RegionCounts,
    region_of: F,
    logged: u64,
}

impl<F: Fn(u64) -> Option<usize>> Tracer<F> {
    /// A tracer that files each classified access under `region_of(address)` (accesses outside
    /// every region are classified with the rest of the buffer but not counted).
    pub fn new(region_of: F) -> Tracer<F> {
        Tracer {
            buf: Vec::with_capacity(BUFFER),
            counts: RegionCounts::new(),
            region_of,
            logged: 0,
        }
    }

    /// Load `*r` and log it with the loaded value.
    pub fn load<T: Word>(&mut self, r: &T) -> T {
        let v = *r;
        self.log(r as *const T as u64, v.word());
        v
    }

    /// Store `v` into `*r` and log the address (stores reveal no pointer to follow).
    pub fn store<T: Word>(&mut self, r: &mut T, v: T) {
        *r = v;
        self.log(r as *const T as u64, 0);
    }

    fn log(&mut self, addr: u64, value: u64) {
        self.buf.push(Access { addr, value });
        self.logged += 1;
        if self.buf.len() == BUFFER {
            self.flush();
        }
    }

    /// Classify what is buffered now (also done whenever the buffer fills).
    pub fn flush(&mut self) {
        for (addr, p) in classify::classify(&mut self.buf) {
            if let Some(r) = (self.region_of)(addr) {
                self.counts.entry(r).or_insert([0; 3])[p as usize] += 1;
            }
        }
        self.buf.clear();
    }

    /// Accesses logged so far.
    pub fn logged(&self) -> u64 {
        self.logged
    }

    /// Flush and hand over the per-region counts.
    pub fn finish(mut self) -> RegionCounts {
        self.flush();
        std::mem::take(&mut self.counts)
    }
}

/// Add `other`'s counts into `into` (tracers of several threads).
pub fn merge(into: &mut RegionCounts, other: &RegionCounts) {
    for (r, c) in other {
        let e = into.entry(*r).or_insert([0; 3]);
        for (sum, &n) in e.iter_mut().zip(c) {
            *sum += n;
        }
    }
}
