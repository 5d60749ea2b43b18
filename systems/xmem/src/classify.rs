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
//!
//! One departure from the thesis, in rule 2: a pointer counts only when the load that gave it
//! waited for memory, that is when its line is chased itself or a stream prefetcher would not
//! have fetched it ahead (the line its page first touched just before it is not the line
//! below, in the buffer's time order). An index array scanned in order (a CSR graph's offsets
//! in PageRank) is prefetched, so the loads it leads to start as early as independent ones; the
//! same index read at random places (a BFS frontier vertex's offsets) makes a miss wait on a
//! miss. Callers report an index load's value as the address it indexes, so both reach this
//! rule. A list laid out in address order and walked in that order is prefetched as well and
//! counts as streaming. Two rules follow from the same question: only a line's first pointer
//! in a buffer waits on its miss (the line's other pointers are in the core with it, so what
//! they point to overlaps), and a [`Classifier`] keeps each streaming page's head from one
//! buffer to the next, so a scan does not restart at every buffer's boundary.

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

/// Classify one buffer with no memory of earlier ones: the kept accesses (one per cache line,
/// in address order) with their pattern. The buffer is sorted in place.
pub fn classify(buf: &mut [Access]) -> Vec<(u64, Pattern)> {
    Classifier::new().classify(buf)
}

/// Pages whose stream head a [`Classifier`] remembers between buffers (direct-mapped).
pub const HISTORY_PAGES: usize = 4096;

const LINES_PER_PAGE: u64 = 4096 / LINE;

/// The classifier over a sequence of buffers: it remembers the last line each page's stream
/// reached, so a scan that crosses a buffer's boundary stays a prefetched scan.
pub struct Classifier {
    /// Per slot (a page number's hash): the page and the last line first touched in it.
    heads: Vec<(u64, u64)>,
}

impl Default for Classifier {
    fn default() -> Classifier {
        Classifier::new()
    }
}

impl Classifier {
    pub fn new() -> Classifier {
        Classifier {
            heads: vec![(u64::MAX, 0); HISTORY_PAGES],
        }
    }

    fn slot(page: u64) -> usize {
        (page.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize % HISTORY_PAGES
    }

    /// The line this page's stream reached in an earlier buffer.
    fn head(&self, page: u64) -> Option<u64> {
        let (p, line) = self.heads[Classifier::slot(page)];
        (p == page).then_some(line)
    }

    /// Classify one buffer (see [`classify`]) and remember its pages' stream heads.
    pub fn classify(&mut self, buf: &mut [Access]) -> Vec<(u64, Pattern)> {
        let first = first_touches(buf);
        let prefetched = self.prefetched(&first);
        // Pointers to another line, (source line, when loaded, target line), in time order.
        let pointers: Vec<(u64, u32, u64)> = buf
            .iter()
            .enumerate()
            .filter(|(_, a)| a.value != 0 && a.value / LINE != a.addr / LINE)
            .map(|(t, a)| (a.addr / LINE, t as u32, a.value / LINE))
            .collect();
        buf.sort_unstable_by_key(|a| a.addr);
        let mut kept: Vec<u64> = buf.iter().map(|a| a.addr).collect();
        kept.dedup_by_key(|a| *a / LINE);
        debug_assert_eq!(first.len(), kept.len());
        let index = |line: u64| kept.partition_point(|a| *a / LINE < line);
        // Pointer edges between kept lines, (source, when, target) by index; a value pointing
        // outside the buffer's lines is no edge.
        let mut edges: Vec<(u32, u32, u32)> = pointers
            .iter()
            .filter_map(|&(src, t, dst)| {
                let d = index(dst);
                let hit = kept.get(d).is_some_and(|k| *k / LINE == dst);
                hit.then(|| (index(src) as u32, t, d as u32))
            })
            .collect();
        // One pointer per source line waits on its miss: the first one loaded. The line's
        // other pointers (an edge list's further entries, or a later visit to a cached line)
        // are in the core together with it, so what they point to overlaps.
        edges.sort_unstable();
        edges.dedup_by_key(|e| e.0);
        let edges: Vec<(u32, u32)> = edges.iter().map(|e| (e.0, e.2)).collect();
        let chased = chased(&edges, &prefetched);
        let streaming = strided(&kept);
        kept.iter()
            .enumerate()
            .map(|(i, &addr)| {
                let p = if chased[i] {
                    Pattern::PointerChase
                } else if streaming[i] {
                    Pattern::Streaming
                } else {
                    Pattern::Random
                };
                (addr, p)
            })
            .collect()
    }

    /// Classify a buffer and label each access that `missed` a cache model (`missed[i]` for
    /// `buf[i]`, in log order) with its line's pattern: one label per miss, not per line.
    pub fn label_misses(&mut self, buf: &mut [Access], missed: &[bool]) -> Vec<(u64, Pattern)> {
        assert_eq!(buf.len(), missed.len(), "a miss flag per access");
        // Classifying reorders the buffer: keep the misses' addresses apart.
        let misses: Vec<u64> = buf
            .iter()
            .zip(missed)
            .filter(|(_, &m)| m)
            .map(|(a, _)| a.addr)
            .collect();
        let labels = self.classify(buf);
        misses
            .into_iter()
            .map(|addr| {
                let line = addr / LINE;
                let i = labels.partition_point(|l| l.0 / LINE < line);
                let p = labels
                    .get(i)
                    .filter(|l| l.0 / LINE == line)
                    .map_or(Pattern::Random, |l| l.1);
                (addr, p)
            })
            .collect()
    }

    /// Per line (in line order): whether a stream prefetcher would have fetched it before its
    /// first access, because the line its 4 KiB page first touched just before it (in this
    /// buffer or, for the page's first line here, in an earlier one) is the line below; a
    /// page's lowest line continues the page below's stream. Then remember each page's head.
    fn prefetched(&mut self, first: &[(u64, u32)]) -> Vec<bool> {
        let mut by_page: Vec<(u64, u32, u32)> = first
            .iter()
            .enumerate()
            .map(|(i, &(line, t))| (line / LINES_PER_PAGE, t, i as u32))
            .collect();
        by_page.sort_unstable();
        let mut out = vec![false; first.len()];
        for (k, cur) in by_page.iter().enumerate() {
            let (line, t) = first[cur.2 as usize];
            let i = cur.2 as usize;
            out[i] = match k.checked_sub(1).map(|j| by_page[j]) {
                Some(prev) if prev.0 == cur.0 => first[prev.2 as usize].0 + 1 == line,
                // The stream reached this line or the one below in an earlier buffer.
                _ if self.head(cur.0).is_some_and(|h| h == line || h + 1 == line) => true,
                _ if line.is_multiple_of(LINES_PER_PAGE) && line > 0 => {
                    // The page below's last line, touched earlier in this buffer or before it.
                    (i > 0 && first[i - 1].0 + 1 == line && first[i - 1].1 < t)
                        || self.head(cur.0 - 1) == Some(line - 1)
                }
                _ => false,
            };
        }
        // Remember the pages that stream (more than one line here, or a line that continued
        // a stream), so the lone lines of random loads do not push them out of the table.
        for (k, cur) in by_page.iter().enumerate() {
            let last_of_page = by_page.get(k + 1).is_none_or(|n| n.0 != cur.0);
            let alone = k == 0 || by_page[k - 1].0 != cur.0;
            if last_of_page && (!alone || out[cur.2 as usize]) {
                self.heads[Classifier::slot(cur.0)] = (cur.0, first[cur.2 as usize].0);
            }
        }
        out
    }
}

/// Each line's first access in the buffer, as (line, position in time), in line order.
fn first_touches(buf: &[Access]) -> Vec<(u64, u32)> {
    let mut first: Vec<(u64, u32)> = buf
        .iter()
        .enumerate()
        .map(|(t, a)| (a.addr / LINE, t as u32))
        .collect();
    first.sort_unstable();
    first.dedup_by_key(|f| f.0);
    first
}

/// Which kept lines (sorted) sit in a window of [`WINDOW`] equal strides.
fn strided(kept: &[u64]) -> Vec<bool> {
    let mut s = vec![false; kept.len()];
    if kept.len() >= WINDOW {
        for i in 0..=kept.len() - WINDOW {
            let w = &kept[i..i + WINDOW];
            let stride = w[1] - w[0];
            if w.windows(2).all(|p| p[1] - p[0] == stride) {
                s[i..i + WINDOW].fill(true);
            }
        }
    }
    s
}

/// The chased lines: the largest set in which every line has a pointer from a line that is
/// chased itself or was not prefetched. A pointer in a line a stream prefetcher brought in (an
/// index array scanned in order) reaches the core before it is needed, so what it points to
/// overlaps like any independent load, unless the line holding it waited on a pointer itself.
/// `edges` are (source, target) line indices, sorted by source; `prefetched` is per line.
fn chased(edges: &[(u32, u32)], prefetched: &[bool]) -> Vec<bool> {
    let n = prefetched.len();
    let mut chased = vec![false; n];
    // Per line, the pointers into it whose source still holds it chased.
    let mut holds = vec![0u32; n];
    for &(_, t) in edges {
        chased[t as usize] = true;
        holds[t as usize] += 1;
    }
    // Prefetched lines nothing chases hold nothing; dropping one may free what it points to.
    let mut dropped: Vec<u32> = (0..n as u32)
        .filter(|&i| prefetched[i as usize] && !chased[i as usize])
        .collect();
    while let Some(s) = dropped.pop() {
        let from = edges.partition_point(|e| e.0 < s);
        for &(_, t) in edges[from..].iter().take_while(|e| e.0 == s) {
            let t = t as usize;
            holds[t] -= 1;
            if holds[t] == 0 && chased[t] {
                chased[t] = false;
                if prefetched[t] {
                    dropped.push(t as u32);
                }
            }
        }
    }
    chased
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

    /// A CSR walk: `n` vertices' offsets (8-byte words at `OFF`), each leading to its edge list
    /// in `COLS` (one line each), whose entries lead to a vertex's line in `VTX`. `order` gives
    /// the vertices visited; each load reports the address its value indexes.
    fn csr(rng: &mut SmallRng, order: &[u64]) -> Vec<Access> {
        const OFF: u64 = BASE;
        const COLS: u64 = BASE + (64 << 20);
        const VTX: u64 = BASE + (128 << 20);
        let mut buf = Vec::new();
        for &v in order {
            let list = COLS + v * 64;
            buf.push(Access {
                addr: OFF + v * 8,
                value: list,
            });
            let u = rng.gen_range(0..1u64 << 20);
            buf.push(Access {
                addr: list,
                value: VTX + u * 64,
            });
            buf.push(Access {
                addr: VTX + u * 64,
                value: 0,
            });
        }
        buf
    }

    fn share_in(labels: &[(u64, Pattern)], lo: u64, len: u64, want: Pattern) -> f64 {
        let of: Vec<_> = labels
            .iter()
            .filter(|l| (lo..lo + len).contains(&l.0))
            .collect();
        assert!(!of.is_empty());
        of.iter().filter(|l| l.1 == want).count() as f64 / of.len() as f64
    }

    /// A CSR walk over `order`, classified: per array (offsets, edge lists, vertex data) the
    /// share of its lines labelled with the pattern `want` gives for it.
    fn csr_shares(seed: u64, order: &[u64], want: [Pattern; 3]) -> [f64; 3] {
        let labels = classify(&mut csr(&mut SmallRng::seed_from_u64(seed), order));
        let arrays = [BASE, BASE + (64 << 20), BASE + (128 << 20)];
        [0, 1, 2].map(|i| share_in(&labels, arrays[i], 64 << 20, want[i]))
    }

    #[test]
    fn pointers_from_an_index_scanned_in_order_are_not_chased() {
        // PageRank's pull loop: offsets in order, so the edge lists stream and the vertex data
        // they index is random; nothing waits on a miss.
        let order: Vec<u64> = (0..BUFFER as u64 / 3).collect();
        let s = csr_shares(
            3,
            &order,
            [Pattern::Streaming, Pattern::Streaming, Pattern::Random],
        );
        assert!(s[0] >= 0.99 && s[1] >= 0.99 && s[2] >= 0.95, "{s:?}");
    }

    #[test]
    fn pointers_from_an_index_read_at_random_are_chased() {
        // BFS's frontier: offsets at random vertices, so each edge list waits on an offsets
        // miss and each vertex's data on an edge-list miss.
        let mut rng = SmallRng::seed_from_u64(4);
        let order: Vec<u64> = (0..BUFFER as u64 / 3)
            .map(|_| rng.gen_range(0..1u64 << 20))
            .collect();
        let chase = Pattern::PointerChase;
        let s = csr_shares(4, &order, [Pattern::Random, chase, chase]);
        assert!(s[0] >= 0.95 && s[1] >= 0.99 && s[2] >= 0.95, "{s:?}");
    }

    #[test]
    fn a_scan_stays_prefetched_across_buffers() {
        // PageRank's loop over four buffers: alone, each buffer's first offsets and edge lines
        // look like demand misses and chase what they point to; a classifier that remembers
        // the pages' streams does not.
        let mut rng = SmallRng::seed_from_u64(5);
        let order: Vec<u64> = (0..4 * BUFFER as u64 / 3).collect();
        let trace = csr(&mut rng, &order);
        let mut c = Classifier::new();
        let (mut alone, mut remembered) = (0, 0);
        for (k, chunk) in trace.chunks(BUFFER).enumerate() {
            let chased = |l: Vec<(u64, Pattern)>| tally(&l)[Pattern::PointerChase as usize];
            let with = chased(c.classify(&mut chunk.to_vec()));
            if k > 0 {
                alone += chased(classify(&mut chunk.to_vec()));
                remembered += with;
            }
        }
        assert!(alone > 0);
        assert_eq!(remembered, 0, "alone {alone}");
    }

    #[test]
    fn only_the_first_pointer_of_a_line_that_waited_is_chased() {
        // A line at a random place holding 8 pointers to random lines, loaded one after the
        // other: one waits on the line's miss, the other seven are in flight with it.
        let mut rng = SmallRng::seed_from_u64(6);
        let mut buf = Vec::new();
        for _ in 0..BUFFER / 16 {
            let src = BASE + rng.gen_range(0..1u64 << 20) * 64;
            for w in 0..8 {
                let dst = BASE + (1 << 30) + rng.gen_range(0..1u64 << 22) * 64;
                buf.push(Access {
                    addr: src + w * 8,
                    value: dst,
                });
                buf.push(Access {
                    addr: dst,
                    value: 0,
                });
            }
        }
        let labels = classify(&mut buf);
        let targets = BUFFER as f64 / 16.0 * 8.0;
        let chased = tally(&labels)[Pattern::PointerChase as usize] as f64;
        assert!(
            (chased - targets / 8.0).abs() <= 2.0,
            "{chased} of {targets}"
        );
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
