//! Runs a list of works on one target that is up: the library in process, fio (under the shim
//! for [`Target::Shim`]) on the others; create + unlink in process on the kernel's file systems
//! and in a child of this binary under the shim. Counts, where this process can see them, the
//! persistence fences of the library and the flushes the PM device under ext4 on attach takes.

use super::job::{self, Job, Measured};
use super::library;
use crate::fs::targets::{Target, Up};
use anyhow::{bail, Context, Result};
use std::fs::OpenOptions;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// One thing to measure.
#[derive(Clone, Copy, Debug)]
pub(super) enum Work {
    Io(Job),
    /// Create (open O_CREAT|O_EXCL + close) and unlink empty files for this many ms.
    CreateUnlink {
        ms: u64,
    },
}

impl Work {
    pub(super) fn label(&self) -> String {
        match self {
            Work::Io(j) => j.label(),
            Work::CreateUnlink { .. } => "create+unlink".into(),
        }
    }
}

/// What one work measured, with the fences (library) or device flushes (ext4 on attach) per
/// operation where they can be counted.
#[derive(Clone, Copy, Debug)]
pub(super) struct Done {
    pub m: Measured,
    pub fences_per_op: Option<f64>,
}

/// Prefill a `file_bytes` file on `t` (up as `up`, mounted on `mnt`) and run `works` on it in
/// order. The file stays between works, so every job finds it filled.
pub(super) fn run(
    t: Target,
    up: &Up,
    mnt: &Path,
    file_bytes: u64,
    works: &[Work],
) -> Result<Vec<Done>> {
    if t == Target::Library {
        let p = up.open_library()?;
        let r = run_library(&p, file_bytes, works);
        drop(p.unmount());
        return r;
    }
    let env = up.env()?;
    let file = mnt.join("data");
    job::prefill_fio(&file, file_bytes, &env)?;
    let mut out = vec![];
    for (i, w) in works.iter().enumerate() {
        let before = up.device_writes().map(|d| d.1);
        let (m, ops) = match w {
            Work::Io(j) => {
                let m = job::run_fio(&file, j, &env)?;
                (m, m.iops * j.ms as f64 / 1e3)
            }
            Work::CreateUnlink { ms } => {
                let dir = mnt.join(format!("meta{i}"));
                let m = if t == Target::Shim {
                    create_unlink_child(&dir, *ms, &env)?
                } else {
                    std::fs::create_dir(&dir)?;
                    let m = create_unlink(&dir, *ms);
                    std::fs::remove_dir(&dir)?;
                    m?
                };
                (m, m.iops * *ms as f64 / 1e3)
            }
        };
        let after = up.device_writes().map(|d| d.1);
        let fences_per_op = before
            .zip(after)
            .map(|(b, a)| (a - b) as f64 / ops.max(1.0));
        out.push(Done { m, fences_per_op });
    }
    if t != Target::Shim {
        // Under the shim the file is in the pool, which `down` removes.
        std::fs::remove_file(&file).with_context(|| format!("removing {}", file.display()))?;
    }
    Ok(out)
}

fn run_library(p: &library::Lib, file_bytes: u64, works: &[Work]) -> Result<Vec<Done>> {
    let fd = library::prefill(p, file_bytes)?;
    let mut out = vec![];
    for (i, w) in works.iter().enumerate() {
        let before = p.fs().counters().fences;
        let m = match w {
            Work::Io(j) => library::run(p, fd, j, 0x9e37_79b9 + i as u64)?,
            Work::CreateUnlink { ms } => library::create_unlink(p, *ms)?,
        };
        let fences = p.fs().counters().fences - before;
        let secs = match w {
            Work::Io(j) => j.ms,
            Work::CreateUnlink { ms } => *ms,
        } as f64
            / 1e3;
        let ops = (m.iops * secs).max(1.0);
        out.push(Done {
            m,
            fences_per_op: Some(fences as f64 / ops),
        });
    }
    p.close(fd)?;
    Ok(out)
}

/// Create and unlink empty files in `dir` for `ms` milliseconds through the calling process's
/// system calls (or, under the shim, its library).
pub(super) fn create_unlink(dir: &Path, ms: u64) -> Result<Measured> {
    let limit = Duration::from_millis(ms);
    let t = Instant::now();
    let mut ops = 0u64;
    while t.elapsed() < limit {
        let f = dir.join(format!("m{ops}"));
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&f)
            .with_context(|| format!("creating {}", f.display()))?;
        std::fs::remove_file(&f).with_context(|| format!("unlinking {}", f.display()))?;
        ops += 1;
    }
    Ok(Measured::of(ops, 0, t.elapsed().as_secs_f64()))
}

/// The hidden flag of `fs-barrier` that runs [`create_unlink`] in a child under the shim.
pub(super) const CHILD_FLAG: &str = "--child-create-unlink";

/// [`create_unlink`] in `dir` in a child of this binary (`fs-barrier --child-create-unlink
/// DIR --ms MS`) under `env` (the shim), which prints the operations per second.
fn create_unlink_child(dir: &Path, ms: u64, env: &[(String, String)]) -> Result<Measured> {
    let o = Command::new(std::env::current_exe()?)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .arg("fs-barrier")
        .arg(CHILD_FLAG)
        .arg(dir)
        .arg("--ms")
        .arg(ms.to_string())
        .output()
        .context("starting the create+unlink child under the shim")?;
    if !o.status.success() {
        bail!(
            "create+unlink under the shim failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let out = String::from_utf8_lossy(&o.stdout);
    let iops: f64 = out
        .trim()
        .parse()
        .with_context(|| format!("the create+unlink child printed {out:?}"))?;
    Ok(Measured { iops, mb_s: 0.0 })
}

/// The child's side: make `dir` (through the shim, in the pool), run the loop, remove `dir`
/// and print the rate.
pub(super) fn child(dir: &Path, ms: u64) -> Result<()> {
    std::fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    let m = create_unlink(dir, ms)?;
    std::fs::remove_dir(dir)?;
    println!("{}", m.iops);
    Ok(())
}
