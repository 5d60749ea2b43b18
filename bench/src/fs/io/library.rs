//! The jobs in process, through the PMFS library (`pmkit_fs::posix`, [`Target::Library`]): the
//! loop fio runs, written against `Posix` with fio's pattern (same file size, uniform random
//! block offsets drawn with replacement or sequential ones wrapping at the end, fdatasync after
//! the same number of writes), and the create + unlink loop of Fig. 15c.
//!
//! [`Target::Library`]: crate::fs::targets::Target::Library

use super::job::{Job, Measured, Offsets};
use anyhow::{ensure, Context, Result};
use pmkit_fs::posix::{Fd, Posix};
use std::time::{Duration, Instant};

pub(super) type Lib = Posix<pmkit_media::Region>;

/// The file every job works in, in the pool.
const FILE: &[u8] = b"/data";

/// Operations between two looks at the clock: the clock costs about as much as a 64-byte
/// write; fio reads it about as often for its latency figures.
const CLOCK_EVERY: u64 = 8;

/// Open the job file (made if missing) and fill it to `bytes` with 256 KiB sequential writes
/// and an fdatasync at the end, as fio's prefill does.
pub(super) fn prefill(p: &Lib, bytes: u64) -> Result<Fd> {
    let fd = p
        .open(FILE, libc::O_RDWR | libc::O_CREAT, 0o644)
        .context("library: opening /data")?;
    let chunk = vec![0xa5u8; 256 << 10];
    let mut off = 0;
    while off < bytes {
        let n = chunk.len().min((bytes - off) as usize);
        let w = p.pwrite(fd, &chunk[..n], off).context("library prefill")?;
        ensure!(w == n, "library prefill: short write {w} of {n}");
        off += n as u64;
    }
    p.fsync(fd).context("library prefill: fdatasync")?;
    Ok(fd)
}

/// Run `job` on `fd` (prefilled to the job's file size) for `job.ms`.
pub(super) fn run(p: &Lib, fd: Fd, job: &Job, seed: u64) -> Result<Measured> {
    let mut buf = vec![0x5au8; job.bs as usize];
    let mut offs = Offsets::new(seed);
    let limit = Duration::from_millis(job.ms);
    let write = job.pattern.write();
    let (mut ops, mut since_sync) = (0u64, 0u64);
    let t = Instant::now();
    loop {
        let off = offs.next(job);
        let n = if write {
            p.pwrite(fd, &buf, off)
        } else {
            p.pread(fd, &mut buf, off)
        }
        .with_context(|| format!("library {} at {off}", job.label()))?;
        ensure!(
            n == buf.len(),
            "library {}: short I/O at {off}",
            job.label()
        );
        ops += 1;
        if write && job.sync_every > 0 {
            since_sync += 1;
            if since_sync == job.sync_every {
                p.fsync(fd).context("library fdatasync")?;
                since_sync = 0;
            }
        }
        if ops % CLOCK_EVERY == 0 && t.elapsed() >= limit {
            break;
        }
    }
    Ok(Measured::of(ops, job.bs, t.elapsed().as_secs_f64()))
}

/// Create and unlink empty files (`/m{i}`) for `ms` milliseconds; one operation is a create
/// (open O_CREAT|O_EXCL + close) and the unlink of that file.
pub(super) fn create_unlink(p: &Lib, ms: u64) -> Result<Measured> {
    let limit = Duration::from_millis(ms);
    let t = Instant::now();
    let mut ops = 0u64;
    while t.elapsed() < limit {
        let name = format!("/m{ops}");
        let fd = p
            .open(
                name.as_bytes(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o644,
            )
            .with_context(|| format!("library: creating {name}"))?;
        p.close(fd)?;
        p.unlink(name.as_bytes())
            .with_context(|| format!("library: unlinking {name}"))?;
        ops += 1;
    }
    Ok(Measured::of(ops, 0, t.elapsed().as_secs_f64()))
}
