//! Per-operation statistics of the PMFS mount (`pmkit fs mount --stats FILE`): for each kind of
//! FUSE request, how many were served, how many failed, their time in the library, and the PM
//! traffic they made: bytes journaled, fences, transactions and bytes stored (the thesis's
//! Table 3 per operation). The traffic comes from the library's per-thread counters
//! ([`pmkit_fs::thread_counters`]) read before and after each request, so it is exact even with
//! several FUSE threads at once.

use pmkit_fs::{thread_counters, Counters};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// The kinds of request counted, in the order they are reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Lookup,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    Statfs,
    Xattr,
    Create,
    Fallocate,
    Lseek,
    CopyRange,
}

impl Op {
    /// Whether the operation changes the file system (a read-only mount answers EROFS).
    pub fn modifies(self) -> bool {
        matches!(
            self,
            Op::Setattr
                | Op::Mknod
                | Op::Mkdir
                | Op::Unlink
                | Op::Rmdir
                | Op::Symlink
                | Op::Rename
                | Op::Link
                | Op::Write
                | Op::Create
                | Op::Fallocate
                | Op::CopyRange
        )
    }
}

const OPS: [(Op, &str); 25] = [
    (Op::Lookup, "lookup"),
    (Op::Getattr, "getattr"),
    (Op::Setattr, "setattr"),
    (Op::Readlink, "readlink"),
    (Op::Mknod, "mknod"),
    (Op::Mkdir, "mkdir"),
    (Op::Unlink, "unlink"),
    (Op::Rmdir, "rmdir"),
    (Op::Symlink, "symlink"),
    (Op::Rename, "rename"),
    (Op::Link, "link"),
    (Op::Open, "open"),
    (Op::Read, "read"),
    (Op::Write, "write"),
    (Op::Flush, "flush"),
    (Op::Release, "release"),
    (Op::Fsync, "fsync"),
    (Op::Opendir, "opendir"),
    (Op::Readdir, "readdir"),
    (Op::Statfs, "statfs"),
    (Op::Xattr, "xattr"),
    (Op::Create, "create"),
    (Op::Fallocate, "fallocate"),
    (Op::Lseek, "lseek"),
    (Op::CopyRange, "copy_file_range"),
];

#[derive(Default)]
struct Row {
    ops: AtomicU64,
    errors: AtomicU64,
    ns: AtomicU64,
    journal_bytes: AtomicU64,
    fences: AtomicU64,
    transactions: AtomicU64,
    bytes_written: AtomicU64,
}

/// The table, one row per [`Op`].
#[derive(Default)]
pub struct OpStats {
    rows: [Row; OPS.len()],
    /// Requests started and finished: a request in flight that makes no progress for long is
    /// stuck (what a stopping daemon watches for).
    started: AtomicU64,
    finished: AtomicU64,
}

/// One request being timed; [`Timing::done`] records it.
pub struct Timing<'a> {
    row: &'a Row,
    finished: &'a AtomicU64,
    start: Instant,
    before: Counters,
}

impl OpStats {
    /// Start timing one request of kind `op` (in the thread that serves it).
    pub fn start(&self, op: Op) -> Timing<'_> {
        self.started.fetch_add(1, Relaxed);
        Timing {
            row: &self.rows[op as usize],
            finished: &self.finished,
            start: Instant::now(),
            before: thread_counters(),
        }
    }

    /// Requests in the library now, and requests finished so far.
    pub fn progress(&self) -> (u64, u64) {
        let finished = self.finished.load(Relaxed);
        let started = self.started.load(Relaxed);
        (started.saturating_sub(finished), finished)
    }

    /// A snapshot: the rows with at least one request, in [`Op`] order.
    pub fn snapshot(&self) -> Vec<OpRow> {
        OPS.iter()
            .zip(&self.rows)
            .filter(|(_, r)| r.ops.load(Relaxed) > 0)
            .map(|((_, name), r)| {
                let ops = r.ops.load(Relaxed);
                let per = |v: &AtomicU64| v.load(Relaxed) as f64 / ops as f64;
                OpRow {
                    op: name,
                    ops,
                    errors: r.errors.load(Relaxed),
                    mean_us: per(&r.ns) / 1e3,
                    journal_bytes: r.journal_bytes.load(Relaxed),
                    fences: r.fences.load(Relaxed),
                    transactions: r.transactions.load(Relaxed),
                    bytes_written: r.bytes_written.load(Relaxed),
                    journal_bytes_per_op: per(&r.journal_bytes),
                    fences_per_op: per(&r.fences),
                }
            })
            .collect()
    }
}

impl Timing<'_> {
    /// Record the request: `ok` is whether it succeeded.
    pub fn done(self, ok: bool) {
        let c = thread_counters().since(self.before);
        let r = self.row;
        self.finished.fetch_add(1, Relaxed);
        r.ops.fetch_add(1, Relaxed);
        if !ok {
            r.errors.fetch_add(1, Relaxed);
        }
        r.ns.fetch_add(self.start.elapsed().as_nanos() as u64, Relaxed);
        r.journal_bytes.fetch_add(c.journal_bytes, Relaxed);
        r.fences.fetch_add(c.fences, Relaxed);
        r.transactions.fetch_add(c.transactions, Relaxed);
        r.bytes_written.fetch_add(c.bytes_written, Relaxed);
    }
}

/// What `pmkit fs mount --stats FILE` writes: the totals over every request since mount (the
/// mount's own recovery and unmount are not requests, so not counted) and the table.
#[derive(Clone, Debug, Serialize)]
pub struct MountStats {
    pub requests: u64,
    pub fences: u64,
    pub journal_bytes: u64,
    pub transactions: u64,
    pub bytes_written: u64,
    pub ops: Vec<OpRow>,
}

impl MountStats {
    pub fn new(table: &OpStats) -> MountStats {
        let ops = table.snapshot();
        let sum = |f: fn(&OpRow) -> u64| ops.iter().map(f).sum();
        MountStats {
            requests: sum(|r| r.ops),
            fences: sum(|r| r.fences),
            journal_bytes: sum(|r| r.journal_bytes),
            transactions: sum(|r| r.transactions),
            bytes_written: sum(|r| r.bytes_written),
            ops,
        }
    }
}

/// One row of the snapshot (JSON field names are the keys of `--stats`).
#[derive(Clone, Debug, Serialize)]
pub struct OpRow {
    pub op: &'static str,
    pub ops: u64,
    pub errors: u64,
    /// Mean time in the library per request, microseconds (not the kernel's or FUSE's share).
    pub mean_us: f64,
    pub journal_bytes: u64,
    pub fences: u64,
    pub transactions: u64,
    pub bytes_written: u64,
    pub journal_bytes_per_op: f64,
    pub fences_per_op: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_enum_order() {
        for (i, (op, _)) in OPS.iter().enumerate() {
            assert_eq!(*op as usize, i);
        }
    }

    #[test]
    fn a_request_is_counted_in_its_row_only() {
        let s = OpStats::default();
        s.start(Op::Mkdir).done(true);
        s.start(Op::Mkdir).done(false);
        let rows = s.snapshot();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].op, rows[0].ops, rows[0].errors), ("mkdir", 2, 1));
    }
}
