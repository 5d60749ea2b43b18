//! The kernels' timed runs for `hmep-validate`: plain, each iteration timed on its own, and
//! under level 2's epoch emulator.

use super::placement_name;
use crate::report::median;
use anyhow::{ensure, Result};
use pmkit_hmep::epoch::{self, Epoch, Stats as EpochStats};
use pmkit_hmep::probe::Probe;
use pmkit_xgraph::Graph;
use std::time::Instant;

/// Level 2's runs of one kernel: per placement (mask order) the wall-clock ms of each round and
/// the last round's emulator statistics, and the overhead measurement.
pub(super) struct Emulated {
    pub ms: Vec<Vec<f64>>,
    pub stats: Vec<EpochStats>,
    /// ns per access the emulator costs (count-only runs against plain all-fast runs).
    pub overhead_ns: f64,
}

/// The kernels' parameters the timed runs use.
pub(super) struct Kernels {
    pub root: u32,
    pub reached: usize,
    pub iters: usize,
    pub bfs_runs: usize,
}

/// One timed PageRank run (`iters` iterations after a warm one) through probe `p`: each
/// iteration's ms, and the last iteration's rank sum.
pub(super) fn time_pagerank<P: Probe>(
    g: &mut Graph,
    k: &Kernels,
    p: &mut P,
    warm: &mut dyn FnMut(&mut P),
) -> (Vec<f64>, f64) {
    g.reset_ranks();
    g.pagerank_iter(p);
    warm(p);
    g.reset_ranks();
    let mut sum = 0.0;
    let each = (0..k.iters)
        .map(|_| {
            let t = Instant::now();
            sum = g.pagerank_iter(p);
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    (each, sum)
}

/// One timed BFS run (`bfs_runs` searches after a warm one) through probe `p`: each search's
/// ms.
pub(super) fn time_bfs<P: Probe>(
    g: &mut Graph,
    k: &Kernels,
    p: &mut P,
    warm: &mut dyn FnMut(&mut P),
) -> Result<Vec<f64>> {
    g.bfs(k.root, p);
    warm(p);
    (0..k.bfs_runs)
        .map(|_| {
            let t = Instant::now();
            let got = g.bfs(k.root, p);
            ensure!(got == k.reached, "BFS reached {got}, traced {}", k.reached);
            Ok(t.elapsed().as_secs_f64() * 1e3)
        })
        .collect()
}

/// A whole timed run's ms from its iterations' (the emulator pays its stalls at epoch ends,
/// which need not fall inside the iteration that owed them, so level 2 is judged on sums).
pub(super) fn total(each: Vec<f64>) -> f64 {
    each.iter().sum()
}

/// A run's figure from its iterations': the median iteration times their number.
pub(super) fn typical(each: &[f64]) -> f64 {
    median(each.iter().copied()) * each.len() as f64
}

/// Level 2: the emulator's own cost (count-only runs with every tag slow, against plain runs),
/// then every placement emulated on the fast tier, rounds rotated. PageRank's and BFS's.
pub(super) fn emulate(
    g: &mut Graph,
    k: &Kernels,
    masks: &[[bool; 3]],
    rounds: usize,
    cfg: &dyn Fn(f64, bool) -> epoch::Config,
    step: &dyn Fn(&str),
) -> Result<(Emulated, Emulated)> {
    let reset = &mut |e: &mut Epoch| e.reset_counts();
    let (mut plain, mut count) = ([vec![], vec![]], [vec![], vec![]]);
    let mut accesses = [0u64; 2];
    for _ in 0..rounds {
        step("the emulator's own cost");
        plain[0].push(total(time_pagerank(g, k, &mut (), &mut |_| {}).0));
        plain[1].push(total(time_bfs(g, k, &mut (), &mut |_| {})?));
        let mut e = Epoch::new(cfg(0.0, true), 7);
        count[0].push(total(time_pagerank(g, k, &mut e, reset).0));
        accesses[0] = e.finish().accesses;
        let mut e = Epoch::new(cfg(0.0, true), 7);
        count[1].push(total(time_bfs(g, k, &mut e, reset)?));
        accesses[1] = e.finish().accesses;
        step("the emulator's own cost");
    }
    let overhead: Vec<f64> = (0..2)
        .map(|i| {
            let extra = median(count[i].iter().copied()) - median(plain[i].iter().copied());
            (extra * 1e6 / accesses[i].max(1) as f64).max(0.0)
        })
        .collect();
    let mut out: Vec<Emulated> = overhead
        .iter()
        .map(|&o| Emulated {
            ms: vec![vec![]; masks.len()],
            stats: vec![EpochStats::default(); masks.len()],
            overhead_ns: o,
        })
        .collect();
    for r in 0..rounds {
        for j in 0..masks.len() {
            let i = (j + r) % masks.len();
            step(&placement_name(&masks[i]));
            let bits = masks[i]
                .iter()
                .enumerate()
                .fold(0u64, |b, (s, &slow)| b | (u64::from(slow) << s));
            let mut e = Epoch::new(cfg(overhead[0], false), bits);
            out[0].ms[i].push(total(time_pagerank(g, k, &mut e, reset).0));
            out[0].stats[i] = e.finish();
            let mut e = Epoch::new(cfg(overhead[1], false), bits);
            out[1].ms[i].push(total(time_bfs(g, k, &mut e, reset)?));
            out[1].stats[i] = e.finish();
        }
    }
    let bfs = out.pop().expect("two kernels");
    let pr = out.pop().expect("two kernels");
    Ok((pr, bfs))
}
