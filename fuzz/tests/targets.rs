//! Every fuzz target on stable, without libFuzzer: each committed seed in `seeds/<target>/`,
//! then deterministic pseudo-random inputs and mutations of the seeds (fixed xorshift seed, so
//! a run is reproducible). A panic fails the test; the failing input is written to a file and
//! the message says how to replay it.
//!
//! - `PMKIT_FUZZ_CASES=N`: generated inputs per target (default per target below);
//! - `PMKIT_FUZZ_REPLAY=FILE`: run only that input through the selected targets.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// xorshift64*: tiny, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

const INTERESTING: [u64; 10] = [
    0,
    1,
    0x7f,
    0xff,
    0x1000,
    0x8000_0000,
    u32::MAX as u64,
    i64::MAX as u64,
    u64::MAX,
    u64::MAX - 4095,
];

/// A mutation of `base` (with `other` for splicing): a few edits of the kinds libFuzzer makes.
fn mutate(rng: &mut Rng, base: &[u8], other: &[u8], max_len: usize) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..1 + rng.below(6) {
        match rng.below(8) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(v.len() + 1);
                let n = 1 + rng.below(16);
                let ins = rng.bytes(n);
                v.splice(i..i, ins);
            }
            3 if !v.is_empty() => {
                let i = rng.below(v.len());
                let n = 1 + rng.below(16.min(v.len() - i));
                v.drain(i..i + n);
            }
            4 if v.len() >= 8 => {
                let i = rng.below(v.len() - 7);
                let w = INTERESTING[rng.below(INTERESTING.len())];
                let w = if rng.next() & 1 == 0 {
                    w
                } else {
                    w.swap_bytes()
                };
                v[i..i + 8].copy_from_slice(&w.to_le_bytes());
            }
            5 if !other.is_empty() => {
                let i = rng.below(v.len() + 1);
                let j = rng.below(other.len());
                let n = 1 + rng.below(other.len() - j);
                v.truncate(i);
                v.extend_from_slice(&other[j..j + n]);
            }
            6 => v.truncate(rng.below(v.len() + 1)),
            _ => {
                let n = rng.below(32);
                let tail = rng.bytes(n);
                v.extend_from_slice(&tail);
            }
        }
    }
    v.truncate(max_len);
    v
}

fn seeds(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("seed folder {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seeds in {}", dir.display());
    files
        .into_iter()
        .map(|p| {
            let data = std::fs::read(&p).unwrap();
            (p, data)
        })
        .collect()
}

/// Run one input; on a panic save it and fail with the way to replay it.
fn run_one(target: &str, f: fn(&[u8]), what: &str, data: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| f(data))).is_ok() {
        return;
    }
    let file = std::env::temp_dir().join(format!(
        "pmkit-fuzz-{target}-{}.bin",
        what.replace(['/', ' '], "_")
    ));
    let saved = std::fs::write(&file, data)
        .map(|()| format!("saved to {}", file.display()))
        .unwrap_or_else(|e| format!("not saved ({e})"));
    panic!(
        "fuzz target {target} panicked on {what} ({} bytes, {saved}).\n\
         Replay: PMKIT_FUZZ_REPLAY={} cargo test --manifest-path fuzz/Cargo.toml --locked -- {target}\n\
         or, with nightly: cargo +nightly fuzz run {target} {}\n\
         input: {:02x?}",
        data.len(),
        file.display(),
        file.display(),
        &data[..data.len().min(256)]
    );
}

/// The seeds, then `cases` generated inputs of at most `max_len` bytes.
fn fuzz(target: &str, cases: usize, max_len: usize) {
    let f = pmkit_fuzz::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap()
        .1;
    if let Some(file) = std::env::var_os("PMKIT_FUZZ_REPLAY") {
        let data = std::fs::read(&file).unwrap();
        run_one(target, f, "the replayed input", &data);
        return;
    }
    let start = Instant::now();
    let seeds = seeds(target);
    for (path, data) in &seeds {
        let name = path.file_name().unwrap().to_string_lossy();
        run_one(target, f, &format!("seed {name}"), data);
    }
    let cases = std::env::var("PMKIT_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(cases);
    // One fixed stream per target, so a failing case number always means the same input.
    let name_hash = target.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    let mut rng = Rng::new(0x706d_6b69_745f_667a ^ name_hash);
    for case in 0..cases {
        let data = if case % 4 == 0 {
            let n = rng.below(max_len + 1).min(rng.below(max_len + 1));
            rng.bytes(n)
        } else {
            let base = &seeds[rng.below(seeds.len())].1;
            let other = &seeds[rng.below(seeds.len())].1;
            mutate(&mut rng, base, other, max_len)
        };
        run_one(target, f, &format!("case {case}"), &data);
    }
    eprintln!(
        "{target}: {} seeds and {cases} generated inputs in {:.1?}",
        seeds.len(),
        start.elapsed()
    );
}

#[test]
fn nbd_server() {
    fuzz("nbd_server", 20_000, 2048);
}

#[test]
fn nbd_starttls() {
    fuzz("nbd_starttls", 5_000, 1024);
}

#[test]
fn blk_superblock() {
    fuzz("blk_superblock", 20_000, 512);
}

#[test]
fn blk_image() {
    fuzz("blk_image", 10_000, 512);
}

#[test]
fn obj_pool() {
    fuzz("obj_pool", 10_000, 4096);
}

#[test]
fn fs_image() {
    fuzz("fs_image", 3_000, 4096);
}

#[test]
fn fs_repair() {
    fuzz("fs_repair", 3_000, 4096);
}
