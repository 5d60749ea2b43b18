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
    pub fn agrees(&self) -> bool {
        self.resolved && self.model_ms != 0.0 && (self.mean_ms > 0.0) == (self.model_ms > 0.0)
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

/// The pairs the measurement ranks, and how many of them `model` ranks alike.
pub(crate) fn ranked_pairs(per_round: &[Vec<f64>], model: &[f64]) -> (usize, usize) {
    let tests = pair_tests(per_round, model);
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
