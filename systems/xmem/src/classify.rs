//! The offline access classifier of the thesis (§4.5.1, Fig. 23), over one buffer of logged
//! accesses (address, loaded value):
//!
//! 1. sort by address and drop repeats of a cache line (assumed cached);
//! 2. **pointer chasing**: access `j` when some access `i` on another cache line loaded a value
//!    that points into `j`'s line (the thesis compares the value with `j`'s address; since repeats
//!    of a line are dropped, the comparison here is by line, which equals the thesis's rule when
//!    the pointer targets the accessed word and also catches a `next` field not at offset 0);
//! 3. **streaming**: the remaining accesses inside some window of 8 consecutive accesses (in
//!    address order) whose 7 strides are equal;
//! 4. **random**: the rest.
//!
//! Pointer chasing takes precedence over streaming: a list whose nodes happen to sit at equal
//! distances is still chased one dependent load at a time.

use crate::place::Pattern;

/// Cache-line size the rules use.
pub const LINE: u64 = 64;
/// The streaming window.
pub const WINDOW: usize = 8;
/// Accesses per buffer, as the thesis's profiler used.
pub const BUFFER: usize = 4096;

/// One logged access: its address and the 8-byte value loaded or stored (0 when not a word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub addr: u64,
    pub value: u64,
}

/// Classify one buffer: the kept accesses (one per cache line, in address order) with their
/// pattern. The buffer is sorted in place.
pub fn classify(buf: &mut [Access]) -> Vec<(u64, Pattern)> {
    buf.sort_unstable_by_key(|a| a.addr);
    // Every loaded value, with the line it was loaded from, sorted by the line it points into.
    let mut targets: Vec<(u64, u64)> = buf
        .iter()
        .filter(|a| a.value != 0)
        .map(|a| (a.value / LINE, a.addr / LINE))
        .collect();
    targets.sort_unstable();
    let mut kept: Vec<u64> = buf.iter().map(|a| a.addr).collect();
    kept.dedup_by_key(|a| *a / LINE);
    let mut out: Vec<(u64, Pattern)> = kept
        .iter()
        .map(|&addr| {
            let line = addr / LINE;
            let lo = targets.partition_point(|t| t.0 < line);
            let chased = targets[lo..]
                .iter()
                .take_while(|t| t.0 == line)
                .any(|t| t.1 != line);
            let p = if chased {
                Pattern::PointerChase
            } else {
                Pattern::Random
            };
            (addr, p)
        })
        .collect();
    if kept.len() >= WINDOW {
        for s in 0..=kept.len() - WINDOW {
            let w = &kept[s..s + WINDOW];
            let stride = w[1] - w[0];
            if w.windows(2).all(|p| p[1] - p[0] == stride) {
                for o in &mut out[s..s + WINDOW] {
                    if o.1 == Pattern::Random {
                        o.1 = Pattern::Streaming;
                    }
                }
            }
        }
    }
    out
}

/// Counts by pattern (indexed by `Pattern as usize`) of a classified buffer.
pub fn tally(labels: &[(u64, Pattern)]) -> [u64; 3] {
    let mut c = [0; 3];
    for (_, p) in labels {
        c[*p as usize] += 1;
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};

    const BASE: u64 = 0x7f00_0000_0000;

    /// A linked list walk: nodes of `node` bytes at random places in a 256 MiB span, each load
    /// reads the `next` field at `field` bytes into the node, whose value is the next node.
    fn chase(rng: &mut SmallRng, node: u64, field: u64) -> Vec<Access> {
        let nodes: Vec<u64> = (0..BUFFER)
            .map(|_| BASE + rng.gen_range(0..(256u64 << 20) / node) * node)
            .collect();
        (0..BUFFER)
            .map(|i| Access {
                addr: nodes[i] + field,
                value: nodes.get(i + 1).copied().unwrap_or(0),
            })
            .collect()
    }

    /// An array scan with a fixed stride, loading data (not addresses).
    fn stride(rng: &mut SmallRng, stride: u64) -> Vec<Access> {
        let start = BASE + rng.gen_range(0..1u64 << 20) * 8;
        (0..BUFFER as u64)
            .map(|i| Access {
                addr: start + i * stride,
                value: rng.gen_range(0..1000),
            })
            .collect()
    }

    /// Independent random loads over 256 MiB.
    fn random(rng: &mut SmallRng) -> Vec<Access> {
        (0..BUFFER)
            .map(|_| Access {
                addr: BASE + rng.gen_range(0..(256u64 << 20) / 8) * 8,
                value: rng.gen(),
            })
            .collect()
    }

    fn share(buf: &mut [Access], want: Pattern) -> f64 {
        let labels = classify(buf);
        let right = labels.iter().filter(|l| l.1 == want).count();
        right as f64 / labels.len() as f64
    }

    #[test]
    fn labels_synthetic_traces_at_least_95_percent_right() {
        let mut rng = SmallRng::seed_from_u64(19);
        for round in 0..20 {
            for (node, field) in [(64, 0), (64, 8), (128, 16), (32, 0)] {
                let s = share(&mut chase(&mut rng, node, field), Pattern::PointerChase);
                assert!(
                    s >= 0.95,
                    "chase node {node} field {field} round {round}: {s}"
                );
            }
            for st in [8, 64, 72, 256, 4096] {
                let s = share(&mut stride(&mut rng, st), Pattern::Streaming);
                assert!(s >= 0.95, "stride {st} round {round}: {s}");
            }
            let s = share(&mut random(&mut rng), Pattern::Random);
            assert!(s >= 0.95, "random round {round}: {s}");
        }
    }

    #[test]
    fn a_shuffled_list_in_an_array_is_chasing_not_streaming() {
        // Nodes contiguous in an array (equal distances once sorted) but linked in random order.
        let mut rng = SmallRng::seed_from_u64(7);
        let mut order: Vec<u64> = (0..BUFFER as u64).collect();
        order.shuffle(&mut rng);
        let mut buf: Vec<Access> = (0..BUFFER)
            .map(|i| Access {
                addr: BASE + order[i] * 64,
                value: order.get(i + 1).map_or(0, |n| BASE + n * 64),
            })
            .collect();
        assert!(share(&mut buf, Pattern::PointerChase) >= 0.99);
    }

    #[test]
    fn repeats_of_a_line_count_once_and_a_value_in_its_own_line_is_not_a_chase() {
        let mut buf = vec![
            Access {
                addr: BASE,
                value: BASE + 8,
            }, // points into its own line
            Access {
                addr: BASE + 8,
                value: 0,
            },
            Access {
                addr: BASE + 4096,
                value: 0,
            },
        ];
        let labels = classify(&mut buf);
        assert_eq!(labels.len(), 2);
        assert_eq!(tally(&labels), [0, 2, 0]);
        // Fewer than a window of equal strides is not streaming.
        let mut short: Vec<Access> = (0..7)
            .map(|i| Access {
                addr: BASE + i * 64,
                value: 0,
            })
            .collect();
        assert_eq!(tally(&classify(&mut short)), [0, 7, 0]);
        let mut eight: Vec<Access> = (0..8)
            .map(|i| Access {
                addr: BASE + i * 64,
                value: 0,
            })
            .collect();
        assert_eq!(tally(&classify(&mut eight)), [0, 0, 8]);
    }
}
