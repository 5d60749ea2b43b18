//! pmkit-hmep: emulating slower memory honestly on machines that have none (no PM, no PMU, one
//! NUMA node). The thesis's HMEP stalled cores from hardware counters and throttled the memory
//! controller; neither is available here, so every slow-memory number this crate produces comes
//! from a model, and says which:
//! - [`preset`]: slow memories as their sources measured them (the thesis's HMEP settings, Intel
//!   Optane DC PMM, CXL-attached DRAM), with the sources, in absolute, ratio and delta modes;
//! - [`calib`]: this machine's memory per access pattern and backing (`pmkit hmep calibrate`);
//! - [`model`]: a preset resolved against a calibration into the stall per access of each
//!   pattern on each tier, which is X-Mem's placement input;
//! - [`sim`] over [`cache`] and [`tlb`]: emulation level 3, a traced run's misses per pattern
//!   and page walks per page size, per structure and per 4 KiB page, from which any placement's
//!   time is predicted, with [`queue`]'s bandwidth queueing per window of the trace for slow
//!   tiers of lower bandwidth;
//! - [`epoch`]: emulation level 2, the epoch emulator: instrumented code reports its accesses,
//!   sampled cache and TLB models estimate the slow structures' misses and walks, and the thread
//!   spins the modelled stall at each epoch's end, less the emulator's own cost.

/// The cache model (X-Mem's profiler filters with it too, so it lives there).
pub use pmkit_xmem::cache;
pub mod calib;
pub mod epoch;
pub mod error;
pub mod mem;
pub mod model;
pub mod preset;
pub mod probe;
pub mod queue;
pub mod report;
pub mod sim;
pub mod tlb;

pub use error::{HmepError, Result};
