//! Which pairs of tags a measurement ranks, and whether a model ranks them alike.
//!
//! Each round gives one figure per tag (a paired difference taken within the round). A pair
//! of tags counts as ranked only when a paired t-test on their per-round differences rejects
//! "no difference" at the two-sided 1% level. The earlier rule, "every round puts the pair in
//! the same order", let pure noise through: with three rounds a pair of equal tags passes it
//! one time in four, so about 9 of xkv's 36 pairs were "ranked" whatever the tiers did.

use serde::Serialize;

/// Two-sided 1% critical values of Student's t, by degrees of freedom 1..=30.
const T_99: [f64; 30] = [
    63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012,
    2.977, 2.947, 2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779,
    2.771, 2.763, 2.756, 2.750,
];

/// The critical |t| for `df` degrees of freedom (the normal's 2.576 above 30).
fn t_critical(df: usize) -> f64 {
    assert!(df >= 1, "a t-test needs two or more rounds");
    T_99.get(df - 1).copied().unwrap_or(2.576)
}

/// One pair of tags: the measured difference a − b, its t statistic, and the model's order.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub(crate) struct PairTest {
    pub a: usize,
    pub b: usize,
    /// Mean over rounds of (a − b), ms.
    pub mean_ms: f64,
    /// Standard error of that mean, ms.
    pub stderr_ms: f64,
    pub t: f64,
    /// The test resolves the pair: |t| above the 1% critical value.
    pub resolved: bool,
    /// The model's a − b (ms), to compare in sign.
    pub model_ms: f64,
}

impl PairTest {
    /// The model orders a resolved pair as the measurement does (a tie in the model does not).
    pub(crate) fn agrees(&self) -> bool {
        self.resolved && self.model_ms != 0.0 && (self.mean_ms > 0.0) == (self.model_ms > 0.0)
    }
}

/// Spearman's rank correlation of `measured` with `model`, and its one-sided p-value: the
/// share of the orderings of the measured ranks that correlate with the model's at least as
/// well (all of them up to 9 tags, else 200,000 drawn with a fixed seed). It judges a ranking
/// as a whole where no single pair is resolved: nine tags whose costs each sit within the noise
/// can still be ordered like the model far more often than chance allows.
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub(crate) struct RankCorrelation {
    pub rho: f64,
    pub p: f64,
}

pub(crate) fn spearman(measured: &[f64], model: &[f64]) -> RankCorrelation {
    assert_eq!(measured.len(), model.len(), "one figure per tag");
    let n = measured.len();
    assert!((3..=64).contains(&n), "3 to 64 tags");
    let (a, b) = (ranks(measured), ranks(model));
    let rho = pearson(&a, &b);
    let mut perm: Vec<usize> = (0..n).collect();
    let (mut hits, mut total) = (0u64, 0u64);
    let mut count = |perm: &[usize]| {
        let shuffled: Vec<f64> = perm.iter().map(|&i| a[i]).collect();
        total += 1;
        hits += u64::from(pearson(&shuffled, &b) >= rho - 1e-12);
    };
    if n <= 9 {
        // Heap's algorithm: every ordering once.
        let mut c = vec![0usize; n];
        count(&perm);
        let mut i = 0;
        while i < n {
            if c[i] < i {
                perm.swap(if i % 2 == 0 { 0 } else { c[i] }, i);
                count(&perm);
                c[i] += 1;
                i = 0;
            } else {
                c[i] = 0;
                i += 1;
            }
        }
    } else {
        let mut x: u64 = 0x5eed_5eed;
        for _ in 0..200_000 {
            for k in (1..n).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                perm.swap(k, (x % (k as u64 + 1)) as usize);
            }
            count(&perm);
        }
    }
    RankCorrelation {
        rho,
        p: hits as f64 / total as f64,
    }
}

/// Ranks from 0, ties given their average rank.
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut o: Vec<usize> = (0..v.len()).collect();
    o.sort_by(|&i, &j| v[i].total_cmp(&v[j]));
    let mut r = vec![0.0; v.len()];
    let mut k = 0;
    while k < o.len() {
        let mut e = k;
        while e + 1 < o.len() && v[o[e + 1]] == v[o[k]] {
            e += 1;
        }
        for &i in &o[k..=e] {
            r[i] = (k + e) as f64 / 2.0;
        }
        k = e + 1;
    }
    r
}

fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
    if va == 0.0 || vb == 0.0 {
        0.0
    } else {
        cov / (va * vb).sqrt()
    }
}

/// Sample standard deviation (NaN below two values).
pub(crate) fn sd(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return f64::NAN;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// The standard deviation pooled over groups, each about its own mean.
pub(crate) fn pooled_sd(groups: &[Vec<f64>]) -> f64 {
    let (mut ss, mut df) = (0.0, 0usize);
    for g in groups.iter().filter(|g| g.len() >= 2) {
        let mean = g.iter().sum::<f64>() / g.len() as f64;
        ss += g.iter().map(|x| (x - mean).powi(2)).sum::<f64>();
        df += g.len() - 1;
    }
    if df == 0 {
        f64::NAN
    } else {
        (ss / df as f64).sqrt()
    }
}

/// Every pair's test. `per_round[t][r]` is tag t's figure in round r; `model[t]` the model's.
pub(crate) fn pair_tests(per_round: &[Vec<f64>], model: &[f64]) -> Vec<PairTest> {
    assert_eq!(per_round.len(), model.len(), "one model figure per tag");
    let mut out = vec![];
    for a in 0..per_round.len() {
        for b in a + 1..per_round.len() {
            let d: Vec<f64> = per_round[a]
                .iter()
                .zip(&per_round[b])
                .map(|(x, y)| x - y)
                .collect();
            let n = d.len();
            let mean = d.iter().sum::<f64>() / n.max(1) as f64;
            let (stderr, t, resolved) = if n < 3 {
                (f64::NAN, f64::NAN, false)
            } else {
                let var = d.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
                let se = (var / n as f64).sqrt();
                let t = if se > 0.0 {
                    mean / se
                } else if mean != 0.0 {
                    f64::INFINITY.copysign(mean)
                } else {
                    0.0
                };
                (se, t, t.abs() > t_critical(n - 1))
            };
            out.push(PairTest {
                a,
                b,
                mean_ms: mean,
                stderr_ms: stderr,
                t,
                resolved,
                model_ms: model[a] - model[b],
            });
        }
    }
    out
}

/// Of `tests`, the pairs the measurement resolves, and how many of those the model orders alike.
pub(crate) fn counts(tests: &[PairTest]) -> (usize, usize) {
    (
        tests.iter().filter(|p| p.resolved).count(),
        tests.iter().filter(|p| p.agrees()).count(),
    )
}

/// Each factor's main effect in a full 2^k design: `runs[i]` is the figure of the run whose
/// set bits of `i` name the factors on (the slow tags). The effect of factor t is the mean of
/// the runs with t on less the mean of those with it off, so all 2^k runs inform every
/// factor's estimate: its standard error is half that of one run against another.
pub(crate) fn main_effects(runs: &[f64], factors: usize) -> Vec<f64> {
    assert_eq!(runs.len(), 1 << factors, "one run per placement");
    let half = (runs.len() / 2) as f64;
    (0..factors)
        .map(|t| {
            let signed: f64 = runs
                .iter()
                .enumerate()
                .map(|(i, x)| if i & (1 << t) != 0 { *x } else { -*x })
                .sum();
            signed / half
        })
        .collect()
}

/// Print the resolved pairs (the measured difference ± its standard error, t, the model's
/// difference and whether it orders them alike), then how many were not resolved.
pub(crate) fn print(tests: &[PairTest], tags: &[&str]) {
    for p in tests.iter().filter(|p| p.resolved) {
        println!(
            "    {:>10} − {:<10} measured {:>+8.2} ± {:>6.2} ms (t {:>+6.1}), model {:>+8.2} ms: {}",
            tags[p.a],
            tags[p.b],
            p.mean_ms,
            p.stderr_ms,
            p.t,
            p.model_ms,
            if p.agrees() { "same order" } else { "OTHER ORDER" }
        );
    }
    let open: Vec<&PairTest> = tests.iter().filter(|p| !p.resolved).collect();
    if let Some(top) = open.iter().max_by(|x, y| x.t.abs().total_cmp(&y.t.abs())) {
        println!(
            "    {} pairs unresolved (largest |t| {:.1}: {} − {})",
            open.len(),
            top.t.abs(),
            tags[top.a],
            tags[top.b]
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pairs the measurement ranks, and how many of them `model` ranks alike.
    fn ranked_pairs(per_round: &[Vec<f64>], model: &[f64]) -> (usize, usize) {
        counts(&pair_tests(per_round, model))
    }

    #[test]
    fn only_pairs_the_t_test_resolves_are_ranked() {
        // Tag 0 above tag 1 by 4-5 ms in every round; tag 2 swings by 9 ms against both.
        let rounds = vec![
            vec![5.0, 6.0, 7.0, 6.0],
            vec![1.0, 2.0, 2.5, 1.5],
            vec![0.0, 9.0, 3.0, 8.0],
        ];
        assert_eq!(ranked_pairs(&rounds, &[2.0, 1.0, 0.0]), (1, 1));
        assert_eq!(ranked_pairs(&rounds, &[1.0, 2.0, 0.0]), (1, 0));
        // A tie in the model agrees with nothing; two rounds rank nothing.
        assert_eq!(ranked_pairs(&rounds, &[1.0, 1.0, 0.0]), (1, 0));
        let two: Vec<Vec<f64>> = rounds.iter().map(|r| r[..2].to_vec()).collect();
        assert_eq!(ranked_pairs(&two, &[2.0, 1.0, 0.0]), (0, 0));
    }

    #[test]
    fn the_same_order_in_every_round_is_not_enough() {
        // Three rounds, the same sign each time, but a mean small against the spread: the old
        // rule ranked this pair, the test does not.
        let rounds = vec![vec![10.0, 1.0, 30.0], vec![9.0, 0.5, 1.0]];
        let t = &pair_tests(&rounds, &[1.0, 0.0])[0];
        assert!(!t.resolved, "{t:?}");
        assert!(t.mean_ms > 0.0);
    }

    #[test]
    fn spearman_of_a_ranking_and_its_exact_p() {
        // The same order: rho 1, and 1 of 4! orderings does as well.
        let c = spearman(&[1.0, 5.0, 9.0, 20.0], &[0.1, 0.2, 0.3, 0.4]);
        assert!((c.rho - 1.0).abs() < 1e-12);
        assert!((c.p - 1.0 / 24.0).abs() < 1e-12, "{c:?}");
        // Reversed: rho −1, every ordering does at least as well.
        let c = spearman(&[4.0, 3.0, 2.0, 1.0], &[1.0, 2.0, 3.0, 4.0]);
        assert!((c.rho + 1.0).abs() < 1e-12);
        assert_eq!(c.p, 1.0);
        // Ties take their average rank; nine tags are enumerated (9! orderings).
        assert_eq!(ranks(&[2.0, 1.0, 2.0]), vec![1.5, 0.0, 1.5]);
        let m: Vec<f64> = (0..9).map(f64::from).collect();
        let c = spearman(&m, &m);
        assert!((c.p - 1.0 / 362_880.0).abs() < 1e-12, "{c:?}");
    }

    #[test]
    fn pooled_sd_takes_each_group_about_its_own_mean() {
        assert_eq!(sd(&[1.0, 3.0]), 2f64.sqrt());
        // Two groups far apart, each with the same spread: the pooled figure is that spread.
        let g = vec![vec![1.0, 3.0], vec![101.0, 103.0]];
        assert_eq!(pooled_sd(&g), 2f64.sqrt());
        assert!(sd(&[1.0]).is_nan());
    }

    #[test]
    fn main_effects_of_an_additive_design_are_its_terms() {
        // 100 + 10 per unit of factor 0 on, 3 of factor 1, 0 of factor 2.
        let runs: Vec<f64> = (0..8)
            .map(|i| 100.0 + 10.0 * (i & 1) as f64 + 3.0 * ((i >> 1) & 1) as f64)
            .collect();
        assert_eq!(main_effects(&runs, 3), vec![10.0, 3.0, 0.0]);
    }

    #[test]
    fn noise_alone_is_rarely_ranked() {
        // Equal tags with seeded noise: at the 1% level about 1 pair in 100 passes.
        let mut x: u64 = 0x5eed;
        let mut noise = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2001) as f64 / 100.0 - 10.0
        };
        let tags = 10;
        let per_round: Vec<Vec<f64>> = (0..tags)
            .map(|_| (0..5).map(|_| noise()).collect())
            .collect();
        let (ranked, _) = ranked_pairs(&per_round, &vec![0.0; tags]);
        assert!(ranked <= 3, "{ranked} of 45 pairs of equal tags ranked");
    }
}
