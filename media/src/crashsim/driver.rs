//! The crash driver: run a workload on a [`CrashSim`], crash it at every fence and at its end,
//! and run a check (recovery + invariants) on every image; and replay of one image from its key.

use super::point::{CrashKey, CrashOpts, CrashPoint, ReplayError};
use super::CrashSim;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a driver run checked and what it found.
#[derive(Debug, Clone, Default)]
pub struct CrashReport {
    /// Fences the workload issued.
    pub fences: u64,
    /// Crash points taken: one per fence plus one at the end.
    pub crash_points: u64,
    /// Crash points whose images were enumerated exhaustively / sampled.
    pub exhaustive_points: u64,
    pub sampled_points: u64,
    /// Images checked.
    pub images: u64,
    /// Most lines pending (with stores that change the image) at one crash point.
    pub max_pending_lines: usize,
    /// Violations found (all of them) ...
    pub violation_count: u64,
    /// ... and the first [`CrashOpts::max_violations`], with the key that replays each.
    pub violations: Vec<(CrashKey, String)>,
    /// Wall time of the whole run (workload and checks).
    pub elapsed: Duration,
}

impl CrashReport {
    pub fn is_clean(&self) -> bool {
        self.violation_count == 0
    }

    pub fn images_per_sec(&self) -> f64 {
        self.images as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Panic listing the first violations with their keys, if there were any.
    pub fn assert_clean(&self) {
        if !self.is_clean() {
            panic!("{self}");
        }
    }
}

impl std::fmt::Display for CrashReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "crash check: {} violations in {} images at {} crash points ({} fences, {} exhaustive, {} sampled, \
             at most {} pending lines) in {:.2?} ({:.0} images/s)",
            self.violation_count,
            self.images,
            self.crash_points,
            self.fences,
            self.exhaustive_points,
            self.sampled_points,
            self.max_pending_lines,
            self.elapsed,
            self.images_per_sec()
        )?;
        const SHOWN: usize = 10;
        for (key, msg) in self.violations.iter().take(SHOWN) {
            write!(f, "\n  {key}: {msg}")?;
        }
        if self.violation_count > SHOWN as u64 {
            write!(
                f,
                "\n  ... and {} more",
                self.violation_count - SHOWN as u64
            )?;
        }
        if !self.is_clean() {
            write!(
                f,
                "\n  replay one: crashsim::replay(len, &opts, &\"<key>\".parse().unwrap(), workload) gives the image"
            )?;
        }
        Ok(())
    }
}

fn new_sim(image: Vec<u8>, opts: &CrashOpts) -> CrashSim {
    CrashSim::from_image(image)
        .with_domain(opts.domain)
        .with_word_stores(opts.word_stores)
}

/// Run `workload` on a fresh all-zero [`CrashSim`] of `len` bytes. At every fence (the crash
/// comes just before the fence takes effect) and after the workload returns, take every crash
/// image and run `check` on a fresh `CrashSim::from_image(image)`.
///
/// `check` runs synchronously inside the workload's fence call, so state the workload shares
/// with it (e.g. an `Arc<Mutex<_>>` of what was acknowledged) reflects the crash point. A check
/// that returns `Err` or panics is a violation, reported with the key that [`replay`] turns back
/// into the image. Checks may nest: a check can call [`check_every_fence_from`] on its image to
/// crash again during recovery (put the inner key into the error message).
pub fn check_every_fence<W, C>(len: usize, opts: &CrashOpts, workload: W, check: C) -> CrashReport
where
    W: FnOnce(&Arc<CrashSim>),
    C: FnMut(&Arc<CrashSim>) -> Result<(), String> + Send,
{
    check_every_fence_from(vec![0; len], opts, workload, check)
}

/// [`check_every_fence`] starting from `image` instead of zeroes.
pub fn check_every_fence_from<W, C>(
    image: Vec<u8>,
    opts: &CrashOpts,
    workload: W,
    mut check: C,
) -> CrashReport
where
    W: FnOnce(&Arc<CrashSim>),
    C: FnMut(&Arc<CrashSim>) -> Result<(), String> + Send,
{
    let start = Instant::now();
    let sim = Arc::new(new_sim(image, opts));
    let mut run = Run {
        opts,
        check: &mut check,
        report: CrashReport::default(),
    };
    {
        let mut hook = |s: &CrashSim| run.crash_point(s);
        let _installed = sim.install_hook(&mut hook);
        workload(&sim);
    }
    run.crash_point(&sim);
    run.report.fences = sim.fences();
    run.report.elapsed = start.elapsed();
    run.report
}

struct Run<'a, C> {
    opts: &'a CrashOpts,
    check: &'a mut C,
    report: CrashReport,
}

impl<C: FnMut(&Arc<CrashSim>) -> Result<(), String>> Run<'_, C> {
    fn crash_point(&mut self, sim: &CrashSim) {
        let point = sim.crash_point();
        let images = point.images(self.opts);
        let r = &mut self.report;
        r.crash_points += 1;
        if images.is_exhaustive() {
            r.exhaustive_points += 1;
        } else {
            r.sampled_points += 1;
        }
        r.max_pending_lines = r.max_pending_lines.max(point.pending_lines());
        for (key, image) in images {
            self.report.images += 1;
            let after = Arc::new(new_sim(image, self.opts));
            let msg = match catch_unwind(AssertUnwindSafe(|| (self.check)(&after))) {
                Ok(Ok(())) => continue,
                Ok(Err(msg)) => msg,
                Err(payload) => format!("check panicked: {}", panic_message(&*payload)),
            };
            self.report.violation_count += 1;
            if self.report.violations.len() < self.opts.max_violations {
                self.report.violations.push((key, msg));
            }
        }
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".into()
    }
}

/// Rebuild the image named by `key`: run `workload` on a fresh all-zero media of `len` bytes
/// with the same `opts` (domain, word stores) as the run that printed the key, and take the
/// image at the key's crash point. Deterministic for single-threaded workloads.
pub fn replay<W: FnOnce(&Arc<CrashSim>)>(
    len: usize,
    opts: &CrashOpts,
    key: &CrashKey,
    workload: W,
) -> Result<Vec<u8>, ReplayError> {
    replay_from(vec![0; len], opts, key, workload)
}

/// [`replay`] for a run of [`check_every_fence_from`] that started from `image`.
pub fn replay_from<W: FnOnce(&Arc<CrashSim>)>(
    image: Vec<u8>,
    opts: &CrashOpts,
    key: &CrashKey,
    workload: W,
) -> Result<Vec<u8>, ReplayError> {
    let sim = Arc::new(new_sim(image, opts));
    let mut found: Option<CrashPoint> = None;
    {
        let mut hook = |s: &CrashSim| {
            if found.is_none() && s.fences() == key.fence {
                found = Some(s.crash_point());
            }
        };
        let _installed = sim.install_hook(&mut hook);
        workload(&sim);
    }
    let fences = sim.fences();
    let point = match found {
        Some(p) => p,
        None if key.fence == fences => sim.crash_point(),
        None => {
            return Err(ReplayError::FenceNotReached {
                fence: key.fence,
                fences,
            })
        }
    };
    point.image(&key.choices)
}
