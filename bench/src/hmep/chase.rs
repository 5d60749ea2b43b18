//! Level 2's own check on the real tier pair: a dependent chase over one random cycle through
//! every line of an X-Mem structure far larger than the cache (the calibration's chase, as an
//! X-Mem user). Each load misses and waits for the one before, so the slow tier's extra latency
//! (ΔL chase, tens of ns) is far above the emulator's own cost per access (a few ns): the one
//! access pattern where level 2 can be checked against wall clock here. Timed three ways: on
//! the fast tier, on the slow tier, and on the fast tier with the structure emulated slow.

use anyhow::{Context, Result};
use pmkit_hmep::epoch::{self, Epoch};
use pmkit_hmep::mem::Rng;
use pmkit_hmep::probe::Probe;
use pmkit_xmem::{Config, Tier, XMem, XSlice};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

const WORDS_PER_LINE: usize = 8;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ChaseCheck {
    pub bytes: usize,
    pub steps: u64,
    /// ns per dependent load, medians over the rounds.
    pub fast_ns: f64,
    pub slow_ns: f64,
    pub emulated_ns: f64,
    /// Level 3's figure for the same chase: fast + ΔL chase (every load a chase miss).
    pub predicted_ns: f64,
    /// (emulated − slow) / slow and (predicted − slow) / slow, in percent.
    pub emulated_error_pct: f64,
    pub predicted_error_pct: f64,
    /// The emulator's cost per access, taken off (count-only against plain, on the fast tier).
    pub overhead_ns: f64,
    pub unpaid_ns_per_access: f64,
}

struct Cycle<'a> {
    next: XSlice<'a, u64>,
}

impl Cycle<'_> {
    /// Follow the cycle `steps` loads from line 0 through `p`: each load reports the address it
    /// loaded, so the emulator's classifier sees the chase.
    fn chase<P: Probe>(&self, steps: u64, p: &mut P) -> u64 {
        let base = self.next.as_ptr() as u64;
        let mut at = 0u64;
        for _ in 0..steps {
            // Each load's index is the value the one before loaded: the loads cannot overlap.
            let w = &self.next[at as usize * WORDS_PER_LINE];
            let next = *w;
            p.load_ptr(0, w, base + next * (WORDS_PER_LINE as u64 * 8));
            at = next;
        }
        at
    }
}

/// Run the check on an X-Mem of one `bytes` region under `dir`.
pub(crate) fn run(
    dir: &Path,
    bytes: usize,
    steps: u64,
    rounds: usize,
    delta_chase_ns: f64,
    cfg: &dyn Fn(f64, bool) -> epoch::Config,
) -> Result<ChaseCheck> {
    let pm = dir.join(format!("pmkit-hmep-chase-{}.pm", std::process::id()));
    let _ = std::fs::remove_file(&pm);
    let mut c = Config::new(&pm, bytes as u64, bytes as u64);
    c.region_size = bytes;
    c.thp = true;
    let x = XMem::new(c).context("starting X-Mem for the chase")?;
    let lines = bytes / 64 - 1; // the allocator keeps a little of the region
    let lines = 1usize << lines.ilog2();
    let mut next = XSlice::new_in(&x, x.tag("chase")?, lines * WORDS_PER_LINE, 0u64)?;
    // Sattolo's algorithm: one cycle through every line.
    let mut order: Vec<u64> = (0..lines as u64).collect();
    let mut r = Rng(0x5eed);
    for i in (1..lines).rev() {
        let j = (r.next_u64() % i as u64) as usize;
        order.swap(i, j);
    }
    for (i, &o) in order.iter().enumerate() {
        next[i * WORDS_PER_LINE] = o;
    }
    let cyc = Cycle { next };
    let region = x.regions()[0].index;
    let time = |p: &mut dyn FnMut(u64) -> u64| {
        p(steps / 10);
        let t = Instant::now();
        std::hint::black_box(p(steps));
        t.elapsed().as_nanos() as f64 / steps as f64
    };
    let (mut fast, mut slow, mut count, mut emu) = (vec![], vec![], vec![], vec![]);
    let mut overhead = 0.0;
    let mut unpaid = 0.0;
    for _ in 0..rounds {
        x.move_region(region, Tier::Slow)?;
        slow.push(time(&mut |n| cyc.chase(n, &mut ())));
        x.move_region(region, Tier::Fast)?;
        fast.push(time(&mut |n| cyc.chase(n, &mut ())));
        let mut e = Epoch::new(cfg(0.0, true), 1);
        count.push(time(&mut |n| cyc.chase(n, &mut e)));
        overhead = (median(&count) - median(&fast)).max(0.0);
        let mut e = Epoch::new(cfg(overhead, false), 1);
        emu.push(time(&mut |n| cyc.chase(n, &mut e)));
        let st = e.finish();
        unpaid = st.unpaid_ns / st.accesses.max(1) as f64;
    }
    drop(cyc);
    drop(x);
    let (f, s, e) = (median(&fast), median(&slow), median(&emu));
    let predicted = f + delta_chase_ns;
    Ok(ChaseCheck {
        bytes: lines * 64,
        steps,
        fast_ns: f,
        slow_ns: s,
        emulated_ns: e,
        predicted_ns: predicted,
        emulated_error_pct: (e - s) / s * 100.0,
        predicted_error_pct: (predicted - s) / s * 100.0,
        overhead_ns: overhead,
        unpaid_ns_per_access: unpaid,
    })
}

fn median(v: &[f64]) -> f64 {
    crate::report::median(v.iter().copied())
}
