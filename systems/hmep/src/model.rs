//! `L(p, m)`: the stall per access of each pattern on each tier, from a preset and this
//! machine's calibration (the X-Mem model's input, thesis §4.4):
//! - `L(chase, m) = lat(m)`: a dependent miss pays all of it;
//! - `L(random, m) = max(lat(m) / MLP, bytes / BW(m))`: independent misses overlap MLP-fold, or
//!   the device's bandwidth bounds them (each access moves at least the device's line);
//! - `L(stream, m) = max(lat(m) / PF, 64 B / BW(m))`: the prefetchers hide latency PF-fold.
//!
//! MLP and PF are this machine's own (`chase / random` and `chase / sequential`, measured), so
//! the slow tier keeps the fast tier's overlap and only its latency and bandwidth change, which
//! is HMEP's assumption too ("prefetchers work as well as on remote memory").

use crate::calib::Tier;
use crate::error::Result;
use crate::preset::{Mode, Preset};
use pmkit_xmem::place::{Latencies, Pattern, PerPattern};
use serde::Serialize;

/// A preset resolved on one machine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Model {
    pub preset: String,
    pub mode: Mode,
    /// The fast tier's measured backing.
    pub fast_backing: String,
    /// Memory-level parallelism and prefetch gain measured on the fast tier.
    pub mlp: f64,
    pub pf: f64,
    /// The slow tier's dependent-miss latency (ns) after the mode.
    pub slow_latency_ns: f64,
    pub slow_read_gbs: f64,
    pub slow_write_gbs: f64,
    /// Bytes the slow device moves per access (its internal line, at least 64).
    pub line_bytes: f64,
    /// ns per access, indexed by `Pattern as usize`.
    pub fast: PerPattern,
    pub slow: PerPattern,
    /// ns per 64-byte line written to the slow tier, at random (whole device lines) and in order.
    pub slow_write_random_ns: f64,
    pub slow_write_seq_ns: f64,
    /// ns per 64-byte line written to the fast tier (its measured write stream).
    pub fast_write_ns: f64,
}

impl Model {
    pub fn new(p: &Preset, fast: &Tier, mode: Option<Mode>) -> Result<Model> {
        p.validate()?;
        let lat = p.latency_ns(fast.chase_ns, mode)?;
        let mlp = (fast.chase_ns / fast.random_ns).max(1.0);
        let pf = (fast.chase_ns / fast.seq_ns).max(1.0);
        let rbw = p.read_bw_gbs(fast.read_gbs);
        let wbw = p.write_bw_gbs(fast.write_gbs);
        // GB/s is bytes per ns.
        let moved = p.line_bytes.max(64) as f64;
        let mut slow = [0.0; 3];
        slow[Pattern::PointerChase as usize] = lat;
        slow[Pattern::Random as usize] = (lat / mlp).max(moved / rbw);
        slow[Pattern::Streaming as usize] = (lat / pf).max(64.0 / rbw);
        let mut fast_l = [0.0; 3];
        fast_l[Pattern::PointerChase as usize] = fast.chase_ns;
        fast_l[Pattern::Random as usize] = fast.random_ns;
        fast_l[Pattern::Streaming as usize] = fast.seq_ns;
        // Never faster than the memory the model runs on.
        for i in 0..3 {
            slow[i] = slow[i].max(fast_l[i]);
        }
        Ok(Model {
            preset: p.name.clone(),
            mode: mode.unwrap_or(p.mode),
            fast_backing: fast.backing.clone(),
            mlp,
            pf,
            slow_latency_ns: lat,
            slow_read_gbs: rbw,
            slow_write_gbs: wbw,
            line_bytes: moved,
            fast: fast_l,
            slow,
            slow_write_random_ns: moved / wbw,
            slow_write_seq_ns: 64.0 / wbw,
            fast_write_ns: (64.0 / fast.write_gbs).min(moved / wbw),
        })
    }

    /// The placement model's input (X-Mem's `Latencies`), with the write term: a line written
    /// back costs its device time, a whole device line on the slow tier (a writeback is a lone
    /// line: what evictions from a cache give).
    pub fn latencies(&self) -> Latencies {
        Latencies {
            fast: self.fast,
            slow: self.slow,
            fast_write: self.fast_write_ns,
            slow_write: self.slow_write_random_ns,
        }
    }
}
