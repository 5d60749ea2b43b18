//! Level 2 and 3 instrumentation for real programs: what an X-Mem application reports to the
//! trace simulator: every access of its kernels, with
//! the structure (tag index), the address, whether it stored, and the loaded value when that value
//! is an address or an index into an array (given as the address it indexes), so the classifier
//! can see pointer chasing. Timed runs use `()`, which compiles
//! every call away; traced runs use [`Sim`] (level 3); emulated runs use [`Epoch`] (level 2).

use crate::epoch::Epoch;
use crate::sim::Sim;

pub trait Probe {
    /// One access of structure `s` at `addr`; `value` is the loaded address for pointer loads
    /// and 0 otherwise.
    fn access(&mut self, s: usize, addr: u64, value: u64, store: bool);

    /// A load of a value that is not an address.
    #[inline(always)]
    fn touch<T>(&mut self, s: usize, at: &T) {
        self.access(s, at as *const T as u64, 0, false);
    }

    /// A store.
    #[inline(always)]
    fn store<T>(&mut self, s: usize, at: &T) {
        self.access(s, at as *const T as u64, 0, true);
    }

    /// A load of an address, or of an index the code turns into one (`value`: the address it
    /// leads to), so the classifier sees which misses wait on a miss.
    #[inline(always)]
    fn load_ptr<T>(&mut self, s: usize, at: &T, value: u64) {
        self.access(s, at as *const T as u64, value, false);
    }
}

impl Probe for () {
    #[inline(always)]
    fn access(&mut self, _: usize, _: u64, _: u64, _: bool) {}
}

impl Probe for Sim {
    #[inline]
    fn access(&mut self, s: usize, addr: u64, value: u64, store: bool) {
        Sim::access_rw(self, s, addr, value, store);
    }
}

impl Probe for Epoch {
    #[inline]
    fn access(&mut self, s: usize, addr: u64, value: u64, _store: bool) {
        Epoch::access(self, s, addr, value);
    }
}
