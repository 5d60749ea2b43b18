//! Bandwidth queueing in level 3. The per-access model (`model.rs`) already bounds an access by
//! the slow tier's bandwidth (`L(random) ≥ device line / BW`), which is right when the device is
//! saturated and wrong below it: a busy device makes each miss wait in its queue first. The
//! thesis's HMEP throttled the memory controller so this waiting happened in hardware; here it
//! is modelled per window of the trace (4,096 accesses, a few µs), where bursts show:
//! - the window's time is its share of the fast-only time (by accesses) plus its share of the
//!   modelled stalls (by slow misses);
//! - the device is busy `reads · line / read BW + writes · line / write BW` of it (writes:
//!   the dirty lines the cache model evicted in the window: a line stored to again and again
//!   while the cache holds it is written once, when it leaves; `line` is the device's internal
//!   line for random and chase misses and lone lines written back, 64 bytes for streaming misses
//!   and runs of adjacent lines written back, which share it), so it is utilised
//!   `ρ = busy / time`;
//! - each slow read waits an M/D/1 queue's `ρ / (2 (1 − ρ)) · service` (ρ capped at 0.95), but
//!   never behind more than the MLP − 1 other requests a core keeps in flight, and overlapped
//!   MLP-fold as independent misses are; posted writes wait for nothing;
//! - a window that needs the device longer than it lasts takes the device's time
//!   (`busy − time` more): the bandwidth bound.
//!
//! The extra of the windows, summed, is added to the prediction. Placements are by unit, the
//! windows by structure, so a structure's traffic counts on the slow tier by the share of its
//! misses its slow units hold (`share[s]`), spread evenly over its windows.

use crate::model::Model;
use crate::sim::Windows;
use serde::Serialize;

/// Utilisation above which the M/D/1 wait is taken at this value (the bandwidth bound takes
/// over near saturation, where the queue formula diverges).
pub const RHO_CAP: f64 = 0.95;

/// What the queue needs to know of a slow tier.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bandwidth {
    pub read_gbs: f64,
    pub write_gbs: f64,
    /// Bytes the device moves per access (its internal line, at least 64).
    pub line_bytes: f64,
    /// Independent misses in flight (the fast tier's measured chase / random).
    pub mlp: f64,
}

impl Bandwidth {
    pub fn of(m: &Model) -> Bandwidth {
        Bandwidth {
            read_gbs: m.slow_read_gbs,
            write_gbs: m.slow_write_gbs,
            line_bytes: m.line_bytes.max(64.0),
            mlp: m.mlp.max(1.0),
        }
    }
}

/// What queueing adds to one traced pass whose fast-only time is `fast_ns` and whose modelled
/// slow stalls are `stall_ns`, with `share[s]` of structure s's traffic on the slow tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Queueing {
    /// Extra ns: waiting in the queue, and beyond it where a window exceeds the bandwidth.
    pub extra_ns: f64,
    /// Windows whose traffic needed the device longer than they lasted.
    pub saturated_windows: u64,
    /// The busiest window's utilisation.
    pub peak_utilisation: f64,
}

pub fn queueing(
    w: &Windows,
    share: &[f64],
    fast_ns: f64,
    stall_ns: f64,
    bw: &Bandwidth,
) -> Queueing {
    assert_eq!(share.len(), w.structures, "a share per structure");
    assert!(bw.read_gbs > 0.0 && bw.write_gbs > 0.0 && bw.mlp >= 1.0);
    let n = w.structures;
    let mut q = Queueing::default();
    if w.is_empty() || n == 0 {
        return q;
    }
    let slow_of = |v: &[u32], i: usize| -> f64 {
        (0..n).map(|s| v[i * n + s] as f64 * share[s]).sum::<f64>()
    };
    let total_accesses: f64 = w.accesses.iter().map(|&a| a as f64).sum();
    let reads_of = |i: usize| slow_of(&w.misses, i) + slow_of(&w.stream_misses, i);
    let total_reads: f64 = (0..w.len()).map(reads_of).sum();
    // GB/s is bytes per ns. In-order lines share the device's line: 64 bytes each.
    let (read_s, write_s) = (bw.line_bytes / bw.read_gbs, bw.line_bytes / bw.write_gbs);
    let (read_seq_s, write_seq_s) = (64.0 / bw.read_gbs, 64.0 / bw.write_gbs);
    for i in 0..w.len() {
        let reads = reads_of(i);
        let writes = slow_of(&w.written_lines, i) + slow_of(&w.written_seq_lines, i);
        if reads + writes == 0.0 {
            continue;
        }
        let mut time = fast_ns * w.accesses[i] as f64 / total_accesses;
        if total_reads > 0.0 {
            time += stall_ns * reads / total_reads;
        }
        let busy = slow_of(&w.misses, i) * read_s
            + slow_of(&w.stream_misses, i) * read_seq_s
            + slow_of(&w.written_lines, i) * write_s
            + slow_of(&w.written_seq_lines, i) * write_seq_s;
        let rho = busy / time.max(f64::MIN_POSITIVE);
        q.peak_utilisation = q.peak_utilisation.max(rho);
        let r = rho.min(RHO_CAP);
        let service = busy / (reads + writes);
        // At most MLP requests are in flight (a closed queue), so none waits behind more than
        // MLP − 1 others: with MLP 1 there is no queue, only the bandwidth bound.
        let queued = (r / (2.0 * (1.0 - r))).min(bw.mlp - 1.0);
        let wait = reads * queued * service / bw.mlp;
        let bound = busy - time;
        if bound > wait {
            q.saturated_windows += 1;
        }
        q.extra_ns += wait.max(bound);
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(misses: &[u32], written: &[u32]) -> Windows {
        Windows {
            structures: 1,
            accesses: vec![4096; misses.len()],
            misses: misses.to_vec(),
            stream_misses: vec![0; misses.len()],
            written_lines: written.to_vec(),
            written_seq_lines: vec![0; misses.len()],
        }
    }

    const BW: Bandwidth = Bandwidth {
        read_gbs: 10.0,
        write_gbs: 5.0,
        line_bytes: 64.0,
        mlp: 4.0,
    };

    #[test]
    fn an_idle_device_adds_nothing_a_busy_one_waits_a_full_one_bounds() {
        // Nothing slow: nothing added.
        let w = windows(&[100, 100], &[0, 0]);
        assert_eq!(queueing(&w, &[0.0], 1e6, 0.0, &BW).extra_ns, 0.0);
        // 100 reads of 6.4 ns service in a 5,000 ns window each: ρ = 0.128, a short wait.
        let q = queueing(&w, &[1.0], 10_000.0, 0.0, &BW);
        let rho: f64 = 100.0 * 6.4 / 5000.0;
        let want = 2.0 * 100.0 * rho / (2.0 * (1.0 - rho)) * 6.4 / 4.0;
        assert!((q.extra_ns - want).abs() < 1e-6, "{q:?} {want}");
        assert_eq!(q.saturated_windows, 0);
        assert!((q.peak_utilisation - rho).abs() < 1e-9);
        // 1,000 reads in a 1,000 ns window: the device needs 6,400 ns, so the window takes it.
        let w = windows(&[1000], &[0]);
        let q = queueing(&w, &[1.0], 1000.0, 0.0, &BW);
        assert_eq!(q.saturated_windows, 1);
        assert!((q.extra_ns - (6400.0 - 1000.0)).abs() < 1e-6, "{q:?}");
        // One request in flight: no queue at all, only the bound.
        let one = Bandwidth { mlp: 1.0, ..BW };
        let q = queueing(&windows(&[100], &[0]), &[1.0], 5000.0, 0.0, &one);
        assert_eq!(q.extra_ns, 0.0);
        // Half the traffic slow: half the reads in the queue.
        let half = queueing(&windows(&[100], &[0]), &[0.5], 5000.0, 0.0, &BW);
        let rho: f64 = 50.0 * 6.4 / 5000.0;
        assert!((half.extra_ns - 50.0 * rho / (2.0 * (1.0 - rho)) * 6.4 / 4.0).abs() < 1e-6);
    }

    #[test]
    fn writes_load_the_device_but_do_not_wait_and_bursts_cost_more_than_their_average() {
        // Writes alone: busy, but nothing waits below saturation.
        let q = queueing(&windows(&[0], &[100]), &[1.0], 100_000.0, 0.0, &BW);
        assert_eq!(q.extra_ns, 0.0);
        assert!(q.peak_utilisation > 0.0);
        // The same 1,000 reads in one window of two against spread over both.
        let burst = queueing(&windows(&[1000, 0], &[0, 0]), &[1.0], 20_000.0, 0.0, &BW);
        let even = queueing(&windows(&[500, 500], &[0, 0]), &[1.0], 20_000.0, 0.0, &BW);
        assert!(burst.extra_ns > even.extra_ns, "{burst:?} {even:?}");
        // Overlap: twice the MLP, half the waiting (below the in-flight cap).
        let mlp8 = Bandwidth { mlp: 8.0, ..BW };
        let o = queueing(&windows(&[500, 500], &[0, 0]), &[1.0], 20_000.0, 0.0, &mlp8);
        assert!((o.extra_ns * 2.0 - even.extra_ns).abs() < 1e-6);
        // In-order reads move 64 bytes of a 256-byte device line each: a quarter of the busy
        // time of random ones.
        let wide = Bandwidth {
            line_bytes: 256.0,
            ..BW
        };
        let mut seq = windows(&[0], &[0]);
        seq.stream_misses = vec![1000];
        let q_seq = queueing(&seq, &[1.0], 10_000.0, 0.0, &wide);
        let q_rand = queueing(&windows(&[1000], &[0]), &[1.0], 10_000.0, 0.0, &wide);
        assert!((q_rand.peak_utilisation - 4.0 * q_seq.peak_utilisation).abs() < 1e-9);
    }
}
