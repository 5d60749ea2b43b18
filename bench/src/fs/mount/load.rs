//! The load generator of `bench fs`: threads making plain system calls (through `std::fs`) in
//! a mounted directory, each thread in its own subdirectory, every phase started by all
//! threads together (a barrier) and timed per thread; a phase's rate is all threads' operations
//! over the slowest thread's time.

use anyhow::{ensure, Context, Result};
use hdrhistogram::Histogram;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// How much each thread does.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub(super) struct Counts {
    /// 4 KiB appends, each followed by fsync.
    pub appends: usize,
    /// Files created, then stat'ed, renamed and unlinked.
    pub files: usize,
    /// Passes of `stat` over the files (the later ones find what a cache kept).
    pub stat_passes: usize,
    /// open + 4 KiB read + close, over [`READ_FILES`] small files; as many opens and closes
    /// alone, and 4 KiB `pread`s of one open file: the two halves of an open + read, timed
    /// apart so a gap to another file system can be placed.
    pub reads: usize,
}

/// Small files each thread reads back in the read workload.
pub(super) const READ_FILES: usize = 64;

/// The workloads, in the order they run.
pub(super) const WORKLOADS: [&str; 8] = [
    "append 4K+fsync",
    "create",
    "stat",
    "open+read 4K",
    "open+close",
    "pread 4K",
    "rename",
    "unlink",
];

/// One workload's result for all threads together.
#[derive(Clone, Debug)]
pub(super) struct Measured {
    pub workload: &'static str,
    pub ops_per_s: f64,
    /// Latency percentiles (p50, p99) in microseconds, for the append workload.
    pub latency_us: Option<(f64, f64)>,
}

/// What one thread measured in one phase.
struct PhaseTime {
    ops: usize,
    time: Duration,
    hist: Option<Histogram<u64>>,
}

/// Run every workload with `threads` threads under `dir` (in `dir/t{threads}-{k}`), and remove
/// what they made.
pub(super) fn run(dir: &Path, threads: usize, c: Counts) -> Result<Vec<Measured>> {
    ensure!((1..=64).contains(&threads), "1 to 64 threads");
    let barrier = Barrier::new(threads);
    let per_thread: Vec<Vec<PhaseTime>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                let sub = dir.join(format!("t{threads}-{k}"));
                let barrier = &barrier;
                s.spawn(move || thread(&sub, c, barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a load thread panicked"))
            .collect::<Result<Vec<_>>>()
    })?;
    let mut out = vec![];
    for (i, &workload) in WORKLOADS.iter().enumerate() {
        let ops: usize = per_thread.iter().map(|p| p[i].ops).sum();
        let slowest = per_thread
            .iter()
            .map(|p| p[i].time)
            .max()
            .unwrap_or_default();
        let mut hist: Option<Histogram<u64>> = None;
        for p in &per_thread {
            if let Some(h) = &p[i].hist {
                match &mut hist {
                    Some(all) => all.add(h).context("merging latency histograms")?,
                    None => hist = Some(h.clone()),
                }
            }
        }
        out.push(Measured {
            workload,
            ops_per_s: ops as f64 / slowest.as_secs_f64().max(1e-9),
            latency_us: hist.map(|h| {
                (
                    h.value_at_quantile(0.5) as f64 / 1e3,
                    h.value_at_quantile(0.99) as f64 / 1e3,
                )
            }),
        });
    }
    Ok(out)
}

/// Time `ops` operations of one phase, started together with the other threads.
fn phase(
    barrier: &Barrier,
    ops: usize,
    mut op: impl FnMut(usize) -> Result<()>,
) -> Result<PhaseTime> {
    barrier.wait();
    let t = Instant::now();
    for i in 0..ops {
        op(i)?;
    }
    Ok(PhaseTime {
        ops,
        time: t.elapsed(),
        hist: None,
    })
}

fn thread(sub: &Path, c: Counts, barrier: &Barrier) -> Result<Vec<PhaseTime>> {
    // A failing thread still meets every barrier, or the others would wait forever: run the
    // phases, and on an error keep waiting at the barriers that are left.
    let mut done = 0;
    let r = phases(sub, c, barrier, &mut done);
    for _ in done..WORKLOADS.len() {
        barrier.wait();
    }
    let _ = fs::remove_dir_all(sub);
    r
}

fn phases(sub: &Path, c: Counts, barrier: &Barrier, done: &mut usize) -> Result<Vec<PhaseTime>> {
    fs::create_dir(sub).with_context(|| format!("creating {}", sub.display()))?;
    let name = |p: &str, i: usize| -> PathBuf { sub.join(format!("{p}{i:06}")) };
    let mut out = vec![];
    let mut next = |r: Result<PhaseTime>, out: &mut Vec<PhaseTime>| -> Result<()> {
        *done += 1;
        out.push(r?);
        Ok(())
    };

    // 4 KiB append + fsync, each timed.
    let block = vec![0x5au8; 4096];
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let r = (|| -> Result<PhaseTime> {
        barrier.wait();
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(sub.join("append"))?;
        let t = Instant::now();
        for _ in 0..c.appends {
            let s = Instant::now();
            f.write_all(&block)?;
            f.sync_all()?;
            hist.record(s.elapsed().as_nanos().max(1) as u64)?;
        }
        Ok(PhaseTime {
            ops: c.appends,
            time: t.elapsed(),
            hist: Some(hist),
        })
    })();
    next(r.context("append + fsync"), &mut out)?;
    fs::remove_file(sub.join("append"))?;

    let r = phase(barrier, c.files, |i| {
        File::create(name("f", i))?;
        Ok(())
    });
    next(r.context("create"), &mut out)?;

    let r = phase(barrier, c.files * c.stat_passes, |i| {
        let m = fs::metadata(name("f", i % c.files))?;
        ensure!(m.len() == 0, "a new file is empty");
        Ok(())
    });
    next(r.context("stat"), &mut out)?;

    // The read workload's files, written before its phase (not timed).
    for i in 0..READ_FILES {
        fs::write(name("r", i), &block)?;
    }
    let mut buf = vec![0u8; 4096];
    let r = phase(barrier, c.reads, |i| {
        File::open(name("r", i % READ_FILES))?.read_exact(&mut buf)?;
        Ok(())
    });
    next(r.context("open + read"), &mut out)?;
    ensure!(buf == block, "read back what was written");
    let r = phase(barrier, c.reads, |i| {
        drop(File::open(name("r", i % READ_FILES))?);
        Ok(())
    });
    next(r.context("open + close"), &mut out)?;
    let open = File::open(name("r", 0))?;
    let r = phase(barrier, c.reads, |_| {
        std::os::unix::fs::FileExt::read_exact_at(&open, &mut buf, 0)?;
        Ok(())
    });
    next(r.context("pread"), &mut out)?;
    drop(open);
    for i in 0..READ_FILES {
        fs::remove_file(name("r", i))?;
    }

    let r = phase(barrier, c.files, |i| {
        fs::rename(name("f", i), name("g", i))?;
        Ok(())
    });
    next(r.context("rename"), &mut out)?;

    let r = phase(barrier, c.files, |i| {
        fs::remove_file(name("g", i))?;
        Ok(())
    });
    next(r.context("unlink"), &mut out)?;
    fs::remove_dir(sub)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_measured_and_nothing_left() {
        let dir = tempfile::tempdir().unwrap();
        let c = Counts {
            appends: 5,
            files: 20,
            stat_passes: 2,
            reads: 10,
        };
        let m = run(dir.path(), 2, c).unwrap();
        assert_eq!(m.len(), WORKLOADS.len());
        for x in &m {
            assert!(x.ops_per_s > 0.0, "{x:?}");
        }
        let (p50, p99) = m[0].latency_us.unwrap();
        assert!(p50 > 0.0 && p99 >= p50);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
