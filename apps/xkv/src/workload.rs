//! An ETC-like request stream, seeded (the same requests every run): 16-byte keys, each key with
//! a fixed value size drawn from [`VALUE_SIZES`] (over 90% of values at most 512 B, the larger
//! ones about half the bytes, as Atikoglu et al. measured Facebook's ETC pool, "Workload
//! Analysis of a Large-Scale Key-Value Store", SIGMETRICS 2012), 95% GETs and 5% SETs, keys drawn
//! by a Zipf law (YCSB's generator, Gray et al., "Quickly Generating Billion-Record Synthetic
//! Databases", SIGMOD 1994; theta 0 = uniform, as memcaslap draws). The memcaslap configuration
//! ([`memcaslap_config`]) has the same sizes and mix.

use crate::store::HEADER;

/// Key bytes (every key is exactly this long).
pub const KEY_LEN: usize = 16;

/// Value sizes: (smallest, largest, share of keys), uniform within a range. The largest keeps
/// header + key + value within the 8192 B class.
pub const VALUE_SIZES: [(usize, usize, f64); 8] = [
    (16, 64, 0.30),
    (65, 128, 0.25),
    (129, 256, 0.20),
    (257, 512, 0.16),
    (513, 1024, 0.04),
    (1025, 2048, 0.025),
    (2049, 4096, 0.015),
    (4097, 8192 - HEADER - KEY_LEN, 0.01),
];

/// Share of SETs in the run phase.
pub const SET_SHARE: f64 = 0.05;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Get,
    Set,
}

#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub op: Op,
    pub key: u32,
}

/// splitmix64: small, fast, seeded.
#[derive(Clone)]
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The key of id `k`: "xkv:" and 12 hex digits.
pub fn key(k: u32) -> [u8; KEY_LEN] {
    let mut out = *b"xkv:000000000000";
    let mut v = k as u64;
    for i in (4..KEY_LEN).rev() {
        out[i] = b"0123456789abcdef"[(v & 15) as usize];
        v >>= 4;
    }
    out
}

/// The value size of key `k` (fixed per key, drawn from [`VALUE_SIZES`] by a hash of `k`).
pub fn value_len(k: u32, seed: u64) -> usize {
    let mut r = Rng(seed ^ (k as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let u = r.f64();
    let mut acc = 0.0;
    for &(lo, hi, p) in &VALUE_SIZES {
        acc += p;
        if u < acc {
            return lo + (r.next_u64() % (hi - lo + 1) as u64) as usize;
        }
    }
    let (lo, hi, _) = VALUE_SIZES[VALUE_SIZES.len() - 1];
    lo + (r.next_u64() % (hi - lo + 1) as u64) as usize
}

/// The value bytes for key `k` at version `v`: a byte pattern a reader can check.
pub fn fill_value(buf: &mut [u8], k: u32, v: u32) {
    let b = (k as u8) ^ (v as u8).rotate_left(3);
    for (i, x) in buf.iter_mut().enumerate() {
        *x = b.wrapping_add(i as u8);
    }
}

/// YCSB's Zipf generator over `0..n` (rank 0 most popular), ranks scattered over the ids by a
/// multiplication modulo `n` so popular keys are not neighbours.
pub struct Zipf {
    n: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
}

const SCATTER: u64 = 2_654_435_761; // prime

impl Zipf {
    pub fn new(n: u64, theta: f64) -> Zipf {
        assert!(n >= 2 && (0.0..1.0).contains(&theta));
        let zeta = |m: u64| (1..=m).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2);
        Zipf {
            n,
            theta,
            zetan,
            alpha: 1.0 / (1.0 - theta),
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
        }
    }

    pub fn sample(&self, r: &mut Rng) -> u64 {
        let rank = if self.theta == 0.0 {
            r.next_u64() % self.n
        } else {
            let u = r.f64();
            let uz = u * self.zetan;
            if uz < 1.0 {
                0
            } else if uz < 1.0 + 0.5f64.powf(self.theta) {
                1
            } else {
                ((self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64)
                    .min(self.n - 1)
            }
        };
        debug_assert!(!SCATTER.is_multiple_of(self.n));
        (rank as u128 * SCATTER as u128 % self.n as u128) as u64
    }
}

/// An ETC-like workload over `keys` keys.
pub struct Workload {
    pub keys: u32,
    pub seed: u64,
    pub theta: f64,
}

impl Workload {
    pub fn etc(seed: u64, keys: u32, theta: f64) -> Workload {
        assert!(keys >= 2);
        Workload { keys, seed, theta }
    }

    /// `n` run-phase requests (95% GET, 5% SET), from `seed` and `stream` (different streams of
    /// one workload differ).
    pub fn requests(&self, n: usize, stream: u64) -> Vec<Request> {
        let z = Zipf::new(self.keys as u64, self.theta);
        let mut r = Rng(self.seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        (0..n)
            .map(|_| {
                let op = if r.f64() < SET_SHARE {
                    Op::Set
                } else {
                    Op::Get
                };
                Request {
                    op,
                    key: z.sample(&mut r) as u32,
                }
            })
            .collect()
    }

    pub fn value_len(&self, k: u32) -> usize {
        value_len(k, self.seed)
    }

    /// Mean bytes per item once rounded up to its class (to size a dataset), from a sample.
    pub fn mean_item_bytes(seed: u64) -> f64 {
        let n = 100_000u32;
        let total: usize = (0..n)
            .map(|k| {
                let size = HEADER + KEY_LEN + value_len(k, seed);
                super::CLASSES
                    .iter()
                    .copied()
                    .find(|&c| c >= size)
                    .expect("every value fits the largest class")
            })
            .sum();
        total as f64 / n as f64
    }
}

/// memcaslap's `--cfg_cmd` file for the same mix: 16-byte keys, [`VALUE_SIZES`], 5% set.
pub fn memcaslap_config() -> String {
    let mut s = String::from("key\n16 16 1\nvalue\n");
    for (lo, hi, p) in VALUE_SIZES {
        s += &format!("{lo} {hi} {p}\n");
    }
    s += &format!("cmd\n0 {SET_SHARE}\n1 {}\n", 1.0 - SET_SHARE);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_sizes_are_etc_like() {
        let n = 200_000;
        let lens: Vec<usize> = (0..n).map(|k| value_len(k, 7)).collect();
        let small = lens.iter().filter(|&&l| l <= 512).count() as f64 / n as f64;
        let bytes: usize = lens.iter().sum();
        let big: usize = lens.iter().filter(|&&l| l > 512).sum();
        assert!(small > 0.9, "share of values <= 512 B: {small}");
        let share = big as f64 / bytes as f64;
        assert!(
            (0.4..0.65).contains(&share),
            "bytes in values > 512 B: {share}"
        );
        assert!(lens.iter().all(|&l| l + HEADER + KEY_LEN <= 8192));
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let z = Zipf::new(10_000, 0.99);
        let mut r = Rng(1);
        let mut counts = vec![0u32; 10_000];
        for _ in 0..200_000 {
            counts[z.sample(&mut r) as usize] += 1;
        }
        let mut c = counts.clone();
        c.sort_unstable_by(|a, b| b.cmp(a));
        let top: u32 = c[..100].iter().sum();
        assert!(top > 200_000 / 3, "top 1% of keys got {top} of 200000");
        let u = Zipf::new(10_000, 0.0);
        let mut seen = vec![false; 10_000];
        for _ in 0..200_000 {
            seen[u.sample(&mut r) as usize] = true;
        }
        assert!(seen.iter().filter(|&&s| s).count() > 9_900);
    }

    #[test]
    fn requests_are_seeded_and_mixed() {
        let w = Workload::etc(3, 1000, 0.99);
        let a = w.requests(10_000, 0);
        let b = w.requests(10_000, 0);
        assert!(a
            .iter()
            .zip(&b)
            .all(|(x, y)| x.op == y.op && x.key == y.key));
        let sets = a.iter().filter(|r| r.op == Op::Set).count();
        assert!((300..700).contains(&sets), "{sets} sets in 10000");
        assert_eq!(&key(0x1234), b"xkv:000000001234");
    }
}
