//! Crash points (what a power failure at one moment can leave) and the enumeration of their
//! images, with the keys that replay each one.

use crate::{Domain, LINE};
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

/// How crash images are chosen and how the simulated media behaves in the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashOpts {
    /// Enumerate every image while at most this many lines have pending stores.
    pub k: usize,
    /// Seed of the random images taken beyond `k` (recorded in every key).
    pub seed: u64,
    /// Random images drawn per crash point beyond `k` (plus the all-none and all-persisted ones).
    pub random_images: usize,
    /// Never enumerate more than this many images at one crash point: beyond it, sample as if
    /// more than `k` lines were pending (a line with many pending stores multiplies the count).
    pub max_exhaustive: usize,
    /// Split write-back and non-temporal stores into aligned 8-byte words (finer tearing).
    pub word_stores: bool,
    /// Persistence domain of the simulated media (and of the images handed to checks).
    pub domain: Domain,
    /// Violations kept in a [`super::CrashReport`] (all are counted).
    pub max_violations: usize,
}

impl Default for CrashOpts {
    fn default() -> Self {
        CrashOpts {
            k: 12,
            seed: 0,
            random_images: 256,
            max_exhaustive: 1 << 16,
            word_stores: false,
            domain: Domain::Adr,
            max_violations: 64,
        }
    }
}

/// Names one crash image: the seed of the run, the crash point (the fence the crash came just
/// before; the workload's fence count for the crash at its end) and, per line with pending
/// stores, how many of them (a prefix, in program order) reached the media. Lines not named
/// kept none. Printed as `s<seed>f<fence>:<line>.<prefix>,...` (`:-` for none).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CrashKey {
    pub seed: u64,
    pub fence: u64,
    /// `(line index, stores kept)`, sorted by line, every prefix > 0.
    pub choices: Vec<(usize, usize)>,
}

impl std::fmt::Display for CrashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s{}f{}:", self.seed, self.fence)?;
        if self.choices.is_empty() {
            return f.write_str("-");
        }
        for (i, (line, prefix)) in self.choices.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{line}.{prefix}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("crash key {key:?}: {why} (expected the form s0f12:3.1,17.2 or s0f12:-)")]
pub struct KeyParseError {
    pub key: String,
    pub why: String,
}

impl std::str::FromStr for CrashKey {
    type Err = KeyParseError;
    fn from_str(s: &str) -> Result<Self, KeyParseError> {
        let bad = |why: &str| KeyParseError {
            key: s.into(),
            why: why.into(),
        };
        let rest = s
            .trim()
            .strip_prefix('s')
            .ok_or_else(|| bad("does not start with 's'"))?;
        let (seed, rest) = rest.split_once('f').ok_or_else(|| bad("no 'f<fence>'"))?;
        let (fence, list) = rest
            .split_once(':')
            .ok_or_else(|| bad("no ':' before the line list"))?;
        let seed = seed.parse().map_err(|_| bad("seed is not a number"))?;
        let fence = fence.parse().map_err(|_| bad("fence is not a number"))?;
        let mut choices = vec![];
        if list != "-" {
            for item in list.split(',') {
                let (l, p) = item
                    .split_once('.')
                    .ok_or_else(|| bad("a choice is not <line>.<prefix>"))?;
                let l = l.parse().map_err(|_| bad("a line is not a number"))?;
                let p = p.parse().map_err(|_| bad("a prefix is not a number"))?;
                choices.push((l, p));
            }
        }
        Ok(CrashKey {
            seed,
            fence,
            choices,
        })
    }
}

/// Why a key could not be turned into an image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error(
        "crash key names fence {fence} but the workload issued only {fences} fences; replay with \
         the workload and options of the run that printed the key"
    )]
    FenceNotReached { fence: u64, fences: u64 },
    #[error(
        "crash key names line {line}, which has no pending stores at fence {fence}; the workload \
         or options differ from the run that printed the key"
    )]
    NotPending { line: usize, fence: u64 },
    #[error(
        "crash key keeps {prefix} stores of line {line} but only {stores} are pending at fence \
         {fence}; the workload or options differ from the run that printed the key"
    )]
    PrefixTooLong {
        line: usize,
        prefix: usize,
        stores: usize,
        fence: u64,
    },
    #[error("crash key names line {line} twice")]
    Duplicate { line: usize },
}

/// The pending stores of one line at a crash point.
pub(super) struct PendingLine {
    pub(super) line: usize,
    /// Line content after each pending store.
    snaps: Vec<[u8; LINE]>,
    /// `canon[p]`: the smallest prefix leaving the same content as prefix `p` (0 if the content
    /// equals the base), so equal images get equal choices.
    canon: Vec<u16>,
}

impl PendingLine {
    pub(super) fn new(line: usize, base: &[u8], snaps: Vec<[u8; LINE]>) -> PendingLine {
        assert!(!snaps.is_empty() && snaps.len() < u16::MAX as usize);
        let w = base.len();
        let mut canon = vec![0u16];
        for p in 1..=snaps.len() {
            let c = &snaps[p - 1][..w];
            let first = if c == base {
                0
            } else {
                (1..p).find(|&q| snaps[q - 1][..w] == *c).unwrap_or(p)
            };
            canon.push(first as u16);
        }
        PendingLine { line, snaps, canon }
    }

    /// Choices that leave distinct contents: prefix 0 first.
    fn distinct(&self) -> Vec<u16> {
        (0..self.canon.len() as u16)
            .filter(|&p| self.canon[p as usize] == p)
            .collect()
    }
}

/// A crash point: the durable base and the pending stores of every line, detached from the
/// simulator, so images can be built while the workload's state stays where it is.
pub struct CrashPoint {
    fence: u64,
    base: Vec<u8>,
    lines: Vec<PendingLine>,
    /// eADR: index into `lines` of every pending store in program order.
    order: Option<Vec<u32>>,
}

impl CrashPoint {
    pub(super) fn new(
        fence: u64,
        base: Vec<u8>,
        lines: Vec<PendingLine>,
        order: Option<Vec<u32>>,
    ) -> Self {
        CrashPoint {
            fence,
            base,
            lines,
            order,
        }
    }

    /// Fences issued before this crash point.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Lines whose pending stores can change the image.
    pub fn pending_lines(&self) -> usize {
        self.lines.iter().filter(|l| l.distinct().len() > 1).count()
    }

    /// The image that keeps `choices` (`(line, prefix)`; unnamed lines keep nothing).
    pub fn image(&self, choices: &[(usize, usize)]) -> Result<Vec<u8>, ReplayError> {
        let mut seen = HashSet::new();
        let mut picks = Vec::with_capacity(choices.len());
        for &(line, prefix) in choices {
            if !seen.insert(line) {
                return Err(ReplayError::Duplicate { line });
            }
            if prefix == 0 {
                continue;
            }
            let i = self
                .lines
                .binary_search_by_key(&line, |l| l.line)
                .map_err(|_| ReplayError::NotPending {
                    line,
                    fence: self.fence,
                })?;
            let stores = self.lines[i].snaps.len();
            if prefix > stores {
                return Err(ReplayError::PrefixTooLong {
                    line,
                    prefix,
                    stores,
                    fence: self.fence,
                });
            }
            picks.push((i, prefix));
        }
        Ok(self.build(&picks))
    }

    /// Base plus, for each `(index into lines, prefix > 0)`, that prefix's snapshot.
    fn build(&self, picks: &[(usize, usize)]) -> Vec<u8> {
        let mut img = self.base.clone();
        for &(i, prefix) in picks {
            let l = &self.lines[i];
            let s = l.line * LINE;
            let e = (s + LINE).min(img.len());
            img[s..e].copy_from_slice(&l.snaps[prefix - 1][..e - s]);
        }
        img
    }

    /// Every distinct image a crash here can leave (exhaustive while few lines are pending, a
    /// seeded sample otherwise), each with its key.
    pub fn images(&self, opts: &CrashOpts) -> CrashImages<'_> {
        let plan = match &self.order {
            Some(order) => self.prefix_plan(order, opts),
            None => self.line_plan(opts),
        };
        CrashImages {
            point: self,
            seed: opts.seed,
            plan,
        }
    }

    fn line_plan(&self, opts: &CrashOpts) -> Plan {
        let mut lines = vec![];
        let mut radix = vec![];
        for (i, l) in self.lines.iter().enumerate() {
            let d = l.distinct();
            if d.len() > 1 {
                lines.push(i);
                radix.push(d);
            }
        }
        let count = radix.iter().try_fold(1usize, |n, d| n.checked_mul(d.len()));
        let exhaustive = lines.len() <= opts.k && count.is_some_and(|n| n <= opts.max_exhaustive);
        let digits = vec![0u16; lines.len()];
        if exhaustive {
            return Plan::Exhaustive {
                lines,
                radix,
                digits,
                done: false,
            };
        }
        // The all-persisted image: each line at the content of its last store.
        let all: Vec<u16> = lines
            .iter()
            .zip(&radix)
            .map(|(&i, d)| {
                let last = *self.lines[i].canon.last().expect("canon has prefix 0");
                d.iter()
                    .position(|&p| p == last)
                    .expect("last content is a distinct choice") as u16
            })
            .collect();
        Plan::Sampled {
            lines,
            radix,
            fixed: vec![all, digits],
            rng: Rng::new(opts.seed, self.fence),
            draws: opts.random_images,
            seen: HashSet::new(),
        }
    }

    fn prefix_plan(&self, order: &[u32], opts: &CrashOpts) -> Plan {
        let n = order.len();
        let picks = if n < opts.max_exhaustive {
            None
        } else {
            let mut rng = Rng::new(opts.seed, self.fence);
            let mut js: Vec<usize> = (0..opts.random_images)
                .map(|_| rng.below(n as u64 + 1) as usize)
                .collect();
            js.extend([0, n]);
            js.sort_unstable();
            js.dedup();
            Some(js)
        };
        Plan::Prefixes {
            counts: vec![0; self.lines.len()],
            cur: vec![0; self.lines.len()],
            j: 0,
            picks,
            next_pick: 0,
            seen: HashSet::new(),
        }
    }

    fn key(&self, seed: u64, picks: &[(usize, usize)]) -> CrashKey {
        let choices = picks
            .iter()
            .map(|&(i, p)| (self.lines[i].line, p))
            .collect();
        CrashKey {
            seed,
            fence: self.fence,
            choices,
        }
    }
}

enum Plan {
    /// Mixed-radix count over each line's distinct choices.
    Exhaustive {
        lines: Vec<usize>,
        radix: Vec<Vec<u16>>,
        digits: Vec<u16>,
        done: bool,
    },
    /// `fixed` images first (popped from the end), then `draws` random digit vectors.
    Sampled {
        lines: Vec<usize>,
        radix: Vec<Vec<u16>>,
        fixed: Vec<Vec<u16>>,
        rng: Rng,
        draws: usize,
        seen: HashSet<u128>,
    },
    /// eADR: every prefix `j` of the store order since the last fence (or the sorted `picks`).
    Prefixes {
        counts: Vec<u16>,
        cur: Vec<u16>,
        j: usize,
        picks: Option<Vec<usize>>,
        next_pick: usize,
        seen: HashSet<u128>,
    },
}

/// Iterator over the images of a [`CrashPoint`]: `(key, image)`, no two images equal.
pub struct CrashImages<'a> {
    point: &'a CrashPoint,
    seed: u64,
    plan: Plan,
}

impl CrashImages<'_> {
    /// Whether every distinct image is produced (not a sample).
    pub fn is_exhaustive(&self) -> bool {
        match &self.plan {
            Plan::Exhaustive { .. } => true,
            Plan::Sampled { .. } => false,
            Plan::Prefixes { picks, .. } => picks.is_none(),
        }
    }

    /// The next choice list as `(index into point.lines, prefix > 0)`.
    fn next_picks(&mut self) -> Option<Vec<(usize, usize)>> {
        let point = self.point;
        match &mut self.plan {
            Plan::Exhaustive {
                lines,
                radix,
                digits,
                done,
            } => {
                if *done {
                    return None;
                }
                let picks = to_picks(lines, radix, digits);
                // Increment the mixed-radix counter; wrapping past the top ends it.
                *done = true;
                for (d, r) in digits.iter_mut().zip(radix.iter()) {
                    *d += 1;
                    if (*d as usize) < r.len() {
                        *done = false;
                        break;
                    }
                    *d = 0;
                }
                Some(picks)
            }
            Plan::Sampled {
                lines,
                radix,
                fixed,
                rng,
                draws,
                seen,
            } => loop {
                let digits = if let Some(f) = fixed.pop() {
                    f
                } else if *draws > 0 {
                    *draws -= 1;
                    radix
                        .iter()
                        .map(|r| rng.below(r.len() as u64) as u16)
                        .collect()
                } else {
                    return None;
                };
                if seen.insert(hash128(&digits)) {
                    return Some(to_picks(lines, radix, &digits));
                }
            },
            Plan::Prefixes {
                counts,
                cur,
                j,
                picks,
                next_pick,
                seen,
            } => {
                let order = point.order.as_deref().expect("prefix plans are eADR");
                while *j <= order.len() {
                    if *j > 0 {
                        let i = order[*j - 1] as usize;
                        counts[i] += 1;
                        cur[i] = point.lines[i].canon[counts[i] as usize];
                    }
                    let at = *j;
                    *j += 1;
                    if let Some(p) = picks {
                        if p.get(*next_pick) != Some(&at) {
                            continue;
                        }
                        *next_pick += 1;
                    }
                    if seen.insert(hash128(cur)) {
                        let picks = cur
                            .iter()
                            .enumerate()
                            .filter(|(_, &p)| p > 0)
                            .map(|(i, &p)| (i, p as usize))
                            .collect();
                        return Some(picks);
                    }
                }
                None
            }
        }
    }
}

fn to_picks(lines: &[usize], radix: &[Vec<u16>], digits: &[u16]) -> Vec<(usize, usize)> {
    lines
        .iter()
        .zip(radix)
        .zip(digits)
        .filter(|(_, &d)| d > 0)
        .map(|((&i, r), &d)| (i, r[d as usize] as usize))
        .collect()
}

impl Iterator for CrashImages<'_> {
    type Item = (CrashKey, Vec<u8>);
    fn next(&mut self) -> Option<Self::Item> {
        let picks = self.next_picks()?;
        Some((self.point.key(self.seed, &picks), self.point.build(&picks)))
    }
}

/// Two independent 64-bit SipHashes: dedup of sampled choices without keeping them.
fn hash128(v: &[u16]) -> u128 {
    let h = |salt: u8| {
        let mut s = DefaultHasher::new();
        salt.hash(&mut s);
        v.hash(&mut s);
        s.finish()
    };
    ((h(0) as u128) << 64) | h(1) as u128
}

/// splitmix64: tiny, and fixed forever, so a seed picks the same images in every version.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64, fence: u64) -> Rng {
        let mut r = Rng(fence);
        let mix = r.next();
        Rng(seed ^ mix)
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift; `n > 0`).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sampled images must not change between versions: pin the generator.
    #[test]
    fn rng_is_pinned() {
        let mut r = Rng::new(0, 0);
        let got: Vec<u64> = (0..3).map(|_| r.next()).collect();
        let mut again = Rng::new(0, 0);
        assert_eq!(got, (0..3).map(|_| again.next()).collect::<Vec<_>>());
        assert_eq!(
            Rng(0).next(),
            0xE220_A839_7B1D_CDAF,
            "splitmix64 reference value"
        );
        assert_ne!(Rng::new(1, 0).next(), Rng::new(0, 0).next());
        assert_ne!(Rng::new(0, 1).next(), Rng::new(0, 0).next());
        let mut r = Rng::new(3, 4);
        assert!((0..1000).all(|_| r.below(7) < 7));
    }

    #[test]
    fn equal_contents_share_a_choice() {
        let base = [0u8; LINE];
        let (mut a, mut b) = ([0u8; LINE], [0u8; LINE]);
        a[0] = 1;
        b[0] = 2;
        // Contents after each store: a, b, a, base, b.
        let l = PendingLine::new(3, &base, vec![a, b, a, base, b]);
        assert_eq!(l.canon, vec![0, 1, 2, 1, 0, 2]);
        assert_eq!(l.distinct(), vec![0, 1, 2]);
    }
}
