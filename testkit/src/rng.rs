//! Seeded randomness a failure can replay: the seed comes from `PMKIT_SEED` when set, else the
//! test's own default, and a test that panics prints it with the way to run it again.

use rand::rngs::SmallRng;
use rand::SeedableRng;

/// The variable that fixes the seed.
pub const SEED_VAR: &str = "PMKIT_SEED";

/// A random generator that names its seed when the test using it fails.
pub struct Seeded {
    pub seed: u64,
    pub rng: SmallRng,
    what: String,
}

impl Seeded {
    /// A generator whose seed is `PMKIT_SEED` when set, else `default`: CI replays the same
    /// cases every run, and a person can try others.
    pub fn from_env_or(what: &str, default: u64) -> Seeded {
        let seed = match std::env::var(SEED_VAR) {
            Ok(s) => s
                .parse()
                .unwrap_or_else(|_| panic!("{SEED_VAR}={s}: not a number")),
            Err(_) => default,
        };
        Seeded::with_seed(what, seed)
    }

    /// A generator with a fixed seed (still printed on failure).
    pub fn with_seed(what: &str, seed: u64) -> Seeded {
        Seeded {
            seed,
            rng: SmallRng::seed_from_u64(seed),
            what: what.to_string(),
        }
    }
}

impl Drop for Seeded {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "{}: seed {} (replay with {SEED_VAR}={} and the same test)",
                self.what, self.seed, self.seed
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn one_seed_gives_one_sequence() {
        let mut a = Seeded::with_seed("a", 7);
        let mut b = Seeded::with_seed("b", 7);
        let x: Vec<u64> = (0..4).map(|_| a.rng.gen()).collect();
        let y: Vec<u64> = (0..4).map(|_| b.rng.gen()).collect();
        assert_eq!(x, y);
    }
}
