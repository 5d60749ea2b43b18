//! xgraph: an R-MAT graph as an X-Mem user, with GraphMat's three structures each under its own
//! tag (adjacency: CSR offsets and neighbours; vertex data: ranks, inverse degrees, BFS parents;
//! messages: PageRank contributions and the BFS frontiers), running pull PageRank and top-down
//! BFS. Every access can go through a [`Probe`] so one traced run feeds the simulator; the timed
//! runs use `()` (compiled away).

use anyhow::{ensure, Result};
use pmkit_hmep::probe::Probe;
use pmkit_xmem::{XMem, XSlice};

/// The tags, in structure-index order.
pub const TAGS: [&str; 3] = ["adjacency", "vertex", "messages"];
const ADJ: usize = 0;
const VTX: usize = 1;
const MSG: usize = 2;

pub struct Graph<'a> {
    pub n: usize,
    pub edges: usize,
    offsets: XSlice<'a, u64>,
    cols: XSlice<'a, u32>,
    rank: XSlice<'a, f64>,
    inv_deg: XSlice<'a, f64>,
    parent: XSlice<'a, u32>,
    contrib: XSlice<'a, f64>,
    frontier: XSlice<'a, u32>,
    next: XSlice<'a, u32>,
}

/// The address of `s[i]`, for a probe: an index load reports the address it leads to, so the
/// classifier can tell a miss that waits on a miss (`i` may be one past the end: a list's end).
fn at<T>(s: &[T], i: usize) -> u64 {
    s.as_ptr() as u64 + (i * std::mem::size_of::<T>()) as u64
}

/// xorshift64*, seeded: the same graph every run.
struct Rng(u64);
impl Rng {
    fn f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// R-MAT edges (a, b, c = 0.57, 0.19, 0.19: Graph500's) over 2^scale vertices, `factor` per
/// vertex.
fn rmat(scale: u32, factor: usize, seed: u64) -> Vec<(u32, u32)> {
    let (a, b, c) = (0.57, 0.19, 0.19);
    let mut r = Rng(seed | 1);
    (0..(factor << scale))
        .map(|_| {
            let (mut s, mut d) = (0u32, 0u32);
            for bit in 0..scale {
                let x = r.f64();
                let (sb, db) = if x < a {
                    (0, 0)
                } else if x < a + b {
                    (0, 1)
                } else if x < a + b + c {
                    (1, 0)
                } else {
                    (1, 1)
                };
                s |= sb << bit;
                d |= db << bit;
            }
            (s, d)
        })
        .collect()
}

impl<'a> Graph<'a> {
    /// Generate the graph and lay it out in X-Mem under the three tags.
    pub fn build(x: &'a XMem, scale: u32, factor: usize, seed: u64) -> Result<Graph<'a>> {
        ensure!((4..=26).contains(&scale), "scale {scale}: 4..=26");
        let n = 1usize << scale;
        let edges = rmat(scale, factor, seed);
        let t = |i: usize| x.tag(TAGS[i]);
        // Pull PageRank walks in-edges: CSR by destination, neighbours are sources.
        let mut offsets = XSlice::new_in(x, t(ADJ)?, n + 1, 0u64)?;
        for &(_, d) in &edges {
            offsets[d as usize + 1] += 1;
        }
        for v in 0..n {
            offsets[v + 1] += offsets[v];
        }
        let mut fill: Vec<u64> = offsets[..n].to_vec();
        let mut cols = XSlice::new_in(x, t(ADJ)?, edges.len(), 0u32)?;
        let mut outdeg = vec![0u32; n];
        for &(s, d) in &edges {
            cols[fill[d as usize] as usize] = s;
            fill[d as usize] += 1;
            outdeg[s as usize] += 1;
        }
        let mut inv_deg = XSlice::new_in(x, t(VTX)?, n, 0f64)?;
        for v in 0..n {
            inv_deg[v] = if outdeg[v] == 0 {
                0.0
            } else {
                1.0 / outdeg[v] as f64
            };
        }
        Ok(Graph {
            n,
            edges: edges.len(),
            offsets,
            cols,
            rank: XSlice::new_in(x, t(VTX)?, n, 1.0 / n as f64)?,
            inv_deg,
            parent: XSlice::new_in(x, t(VTX)?, n, u32::MAX)?,
            contrib: XSlice::new_in(x, t(MSG)?, n, 0f64)?,
            frontier: XSlice::new_in(x, t(MSG)?, n, 0u32)?,
            next: XSlice::new_in(x, t(MSG)?, n, 0u32)?,
        })
    }

    /// Reset ranks to uniform.
    pub fn reset_ranks(&mut self) {
        let r = 1.0 / self.n as f64;
        self.rank.fill(r);
    }

    /// One pull PageRank iteration (damping 0.85); returns the rank sum (≈ 1 less dangling).
    pub fn pagerank_iter<P: Probe>(&mut self, p: &mut P) -> f64 {
        let n = self.n;
        for u in 0..n {
            p.touch(VTX, &self.rank[u]);
            p.touch(VTX, &self.inv_deg[u]);
            p.store(MSG, &self.contrib[u]);
            self.contrib[u] = self.rank[u] * self.inv_deg[u];
        }
        let base = 0.15 / n as f64;
        let mut total = 0.0;
        for v in 0..n {
            let (lo, hi) = (self.offsets[v] as usize, self.offsets[v + 1] as usize);
            p.load_ptr(ADJ, &self.offsets[v + 1], at(&self.cols, hi));
            let mut sum = 0.0;
            for e in lo..hi {
                let u = self.cols[e] as usize;
                p.load_ptr(ADJ, &self.cols[e], at(&self.contrib, u));
                p.touch(MSG, &self.contrib[u]);
                sum += self.contrib[u];
            }
            p.store(VTX, &self.rank[v]);
            self.rank[v] = base + 0.85 * sum;
            total += self.rank[v];
        }
        total
    }

    /// Top-down BFS over the CSR's edges from `root`: vertices reached.
    pub fn bfs<P: Probe>(&mut self, root: u32, p: &mut P) -> usize {
        self.parent.fill(u32::MAX);
        self.parent[root as usize] = root;
        self.frontier[0] = root;
        let (mut len, mut reached) = (1usize, 1usize);
        while len > 0 {
            let mut out = 0;
            for i in 0..len {
                let u = self.frontier[i] as usize;
                p.load_ptr(MSG, &self.frontier[i], at(&self.offsets, u));
                let (lo, hi) = (self.offsets[u] as usize, self.offsets[u + 1] as usize);
                p.load_ptr(ADJ, &self.offsets[u], at(&self.cols, lo));
                for e in lo..hi {
                    let v = self.cols[e] as usize;
                    p.load_ptr(ADJ, &self.cols[e], at(&self.parent, v));
                    p.touch(VTX, &self.parent[v]);
                    if self.parent[v] == u32::MAX {
                        p.store(VTX, &self.parent[v]);
                        self.parent[v] = u as u32;
                        p.store(MSG, &self.next[out]);
                        self.next[out] = v as u32;
                        out += 1;
                    }
                }
            }
            std::mem::swap(&mut self.frontier, &mut self.next);
            reached += out;
            len = out;
        }
        reached
    }

    /// A root with neighbours (the highest in-degree vertex: in the giant component).
    pub fn root(&self) -> u32 {
        (0..self.n)
            .max_by_key(|&v| self.offsets[v + 1] - self.offsets[v])
            .unwrap_or(0) as u32
    }
}
