//! One fio-style job (thesis Fig. 13's cells and Fig. 15c's writes) and how it runs under fio:
//! the command line, the prefill of the file every job works on, and fio's numbers. The library
//! runs the same job in process ([`super::library`]) with the same pattern.

use crate::host::fio_json;
use anyhow::{ensure, Context, Result};
use serde::Serialize;
use std::path::Path;
use std::process::Command;

/// Access pattern of a job: fio's `--rw`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Pattern {
    SeqRead,
    RandRead,
    SeqWrite,
    RandWrite,
}

impl Pattern {
    pub(super) const ALL: [Pattern; 4] = [
        Pattern::SeqRead,
        Pattern::RandRead,
        Pattern::SeqWrite,
        Pattern::RandWrite,
    ];

    /// fio's name of the pattern (`--rw`).
    pub(super) fn fio(self) -> &'static str {
        match self {
            Pattern::SeqRead => "read",
            Pattern::RandRead => "randread",
            Pattern::SeqWrite => "write",
            Pattern::RandWrite => "randwrite",
        }
    }

    pub(super) fn write(self) -> bool {
        matches!(self, Pattern::SeqWrite | Pattern::RandWrite)
    }

    pub(super) fn random(self) -> bool {
        matches!(self, Pattern::RandRead | Pattern::RandWrite)
    }
}

/// Bytes written between two fdatasyncs in Fig. 13 (the thesis's fio setting).
pub(super) const SYNC_BYTES: u64 = 256 << 10;

/// One timed job on one file: fio `--rw=PATTERN --bs=BS --size=FILE --fdatasync=SYNC_EVERY`.
#[derive(Clone, Copy, Debug, Serialize)]
pub(super) struct Job {
    pub pattern: Pattern,
    /// Bytes per read or write.
    pub bs: u64,
    /// fdatasync after every this many writes (0: never; reads never sync).
    pub sync_every: u64,
    /// Size of the file the job works in (prefilled).
    pub file_bytes: u64,
    /// Run time.
    pub ms: u64,
}

impl Job {
    /// A Fig. 13 cell: fdatasync every [`SYNC_BYTES`] written (every write from 256 KiB up).
    pub(super) fn fig13(pattern: Pattern, bs: u64, file_bytes: u64, ms: u64) -> Job {
        Job {
            pattern,
            bs,
            sync_every: if pattern.write() {
                (SYNC_BYTES / bs).max(1)
            } else {
                0
            },
            file_bytes,
            ms,
        }
    }

    /// A write job with fdatasync after each write (the 64-byte goal, Fig. 15c).
    pub(super) fn synced(pattern: Pattern, bs: u64, file_bytes: u64, ms: u64) -> Job {
        assert!(pattern.write(), "only writes sync");
        Job {
            pattern,
            bs,
            sync_every: 1,
            file_bytes,
            ms,
        }
    }

    /// The row label: `randwrite 64B`, with `+fdatasync` when every write syncs.
    pub(super) fn label(&self) -> String {
        let each = if self.sync_every == 1 {
            "+fdatasync"
        } else {
            ""
        };
        format!("{} {}{each}", self.pattern.fio(), size_label(self.bs))
    }

    /// Blocks in the file: offsets are multiples of `bs` below `file_bytes`.
    pub(super) fn blocks(&self) -> u64 {
        (self.file_bytes / self.bs).max(1)
    }
}

/// `64B`, `4K`, `256K`.
pub(super) fn size_label(b: u64) -> String {
    if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else {
        format!("{b}B")
    }
}

/// What one run of a job measured.
#[derive(Clone, Copy, Debug, Serialize)]
pub(super) struct Measured {
    pub iops: f64,
    /// Bytes moved per second, in MB/s (10^6).
    pub mb_s: f64,
}

impl Measured {
    pub(super) fn of(ops: u64, bs: u64, secs: f64) -> Measured {
        let secs = secs.max(1e-9);
        Measured {
            iops: ops as f64 / secs,
            mb_s: (ops * bs) as f64 / secs / 1e6,
        }
    }
}

/// fio's common arguments: one thread, `psync` (pread/pwrite at the job's offsets), buffered
/// I/O (the page cache of the kernel file systems stays in the path, as in the thesis), no
/// preallocation call, no page-cache invalidation before the job (a prefilled file's pages stay
/// cached) and JSON output.
fn fio(file: &Path, env: &[(String, String)]) -> Command {
    let mut c = Command::new("fio");
    c.envs(env.iter().map(|(k, v)| (k, v)))
        .arg("--name=j")
        .arg(format!("--filename={}", file.display()))
        .args([
            "--ioengine=psync",
            "--thread",
            "--numjobs=1",
            "--fallocate=none",
            "--invalidate=0",
            "--output-format=json",
        ]);
    c
}

/// Fill `file` (made if missing) to `bytes` with 256 KiB sequential writes and an fdatasync at
/// the end, through fio under `env` (the shim's variables, or none).
pub(super) fn prefill_fio(file: &Path, bytes: u64, env: &[(String, String)]) -> Result<()> {
    let mut c = fio(file, env);
    c.args(["--rw=write", "--bs=256k", "--end_fsync=1"])
        .arg(format!("--size={bytes}"));
    let v = fio_json(&mut c).with_context(|| format!("prefilling {}", file.display()))?;
    let j = &v["jobs"][0];
    ensure!(
        j["error"] == 0,
        "fio prefill of {}: error {}",
        file.display(),
        j["error"]
    );
    let written = j["write"]["io_bytes"].as_u64().unwrap_or(0);
    ensure!(
        written >= bytes,
        "fio prefill wrote {written} of {bytes} bytes"
    );
    Ok(())
}

/// Run `job` on the prefilled `file` through fio under `env`. Random offsets are uniform over
/// the file's blocks, drawn with replacement (`--norandommap`, as the library's loop draws
/// them); sequential ones wrap at the end of the file.
pub(super) fn run_fio(file: &Path, job: &Job, env: &[(String, String)]) -> Result<Measured> {
    let mut c = fio(file, env);
    c.arg(format!("--rw={}", job.pattern.fio()))
        .arg(format!("--bs={}", job.bs))
        .arg(format!("--size={}", job.file_bytes))
        .arg(format!("--runtime={}ms", job.ms))
        .args(["--time_based", "--norandommap", "--randrepeat=0"]);
    if job.sync_every > 0 {
        c.arg(format!("--fdatasync={}", job.sync_every));
    }
    let v = fio_json(&mut c).with_context(|| format!("fio {}", job.label()))?;
    let j = &v["jobs"][0];
    ensure!(j["error"] == 0, "fio {}: error {}", job.label(), j["error"]);
    let side = &j[if job.pattern.write() { "write" } else { "read" }];
    let iops = side["iops"].as_f64().unwrap_or(0.0);
    let bw = side["bw_bytes"].as_f64().unwrap_or(0.0);
    ensure!(
        iops > 0.0 && bw > 0.0,
        "fio {} did no I/O: {side}",
        job.label()
    );
    Ok(Measured {
        iops,
        mb_s: bw / 1e6,
    })
}

/// A small, fast generator of random block numbers (xorshift64*): the library's loop must not
/// spend more per offset than fio does.
pub(super) struct Offsets {
    state: u64,
    next_seq: u64,
}

impl Offsets {
    pub(super) fn new(seed: u64) -> Offsets {
        Offsets {
            state: seed | 1,
            next_seq: 0,
        }
    }

    /// The next offset of `job`: uniform over its blocks, or the next block, wrapping.
    pub(super) fn next(&mut self, job: &Job) -> u64 {
        let blocks = job.blocks();
        let b = if job.pattern.random() {
            self.state ^= self.state >> 12;
            self.state ^= self.state << 25;
            self.state ^= self.state >> 27;
            self.state.wrapping_mul(0x2545_f491_4f6c_dd1d) % blocks
        } else {
            let b = self.next_seq % blocks;
            self.next_seq = b + 1;
            b
        };
        b * job.bs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fig13_syncs_every_256k_written() {
        let j = Job::fig13(Pattern::RandWrite, 64, 1 << 20, 10);
        assert_eq!(j.sync_every, 4096);
        assert_eq!(
            Job::fig13(Pattern::SeqWrite, 256 << 10, 1 << 20, 10).sync_every,
            1
        );
        assert_eq!(Job::fig13(Pattern::SeqRead, 64, 1 << 20, 10).sync_every, 0);
        assert_eq!(j.label(), "randwrite 64B");
        let s = Job::synced(Pattern::RandWrite, 4096, 1 << 20, 10);
        assert_eq!(s.label(), "randwrite 4K+fdatasync");
    }

    #[test]
    fn offsets_stay_in_the_file_and_wrap() {
        let j = Job::fig13(Pattern::SeqRead, 4096, 3 * 4096, 10);
        let mut o = Offsets::new(7);
        let v: Vec<u64> = (0..4).map(|_| o.next(&j)).collect();
        assert_eq!(v, [0, 4096, 8192, 0]);
        let r = Job::fig13(Pattern::RandWrite, 64, 1 << 20, 10);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let off = o.next(&r);
            assert!(off.is_multiple_of(64) && off + 64 <= 1 << 20);
            seen.insert(off);
        }
        // 10,000 uniform draws with replacement from 16,384 blocks hit about
        // 16384 * (1 - e^(-10000/16384)) = 7,490 of them.
        assert!(seen.len() > 7200, "spread over the file: {}", seen.len());
    }
}
