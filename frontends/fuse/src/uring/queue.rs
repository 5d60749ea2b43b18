//! One FUSE io_uring queue per CPU: a thread pinned to its CPU, its own io_uring (128-byte
//! SQEs, as `IORING_OP_URING_CMD` on /dev/fuse requires) and up to [`QUEUE_DEPTH`] ring
//! entries (see `Shape` for where they go),
//! each a header buffer and a payload buffer registered with the kernel once. A request
//! arrives as the completion of an entry's command; the reply is written into the same
//! buffers and sent with the command that fetches the entry's next request
//! (COMMIT_AND_FETCH): one `io_uring_enter` per batch instead of a `read` and a `writev`
//! per request, and the kernel queues a request on the queue of the CPU that issued it.

use super::buffers::Slots;
use crate::abi;
use crate::answer::Handler;
use crate::file::MAX_IO;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{mpsc, Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Ring entries per thread (by default all on its own CPU's queue): requests it can hold at
/// once. Each holds a payload buffer of the largest request (1 MiB), so 32 entries are
/// 32 MiB per thread.
pub const QUEUE_DEPTH: usize = 32;

/// Why the io_uring transport could not start.
#[derive(Debug, thiserror::Error)]
pub enum UringError {
    #[error("FUSE io_uring queue {qid}: {what}: {err}")]
    Queue {
        qid: u16,
        what: &'static str,
        err: std::io::Error,
    },
}

fn queue_err(qid: u16, what: &'static str) -> impl FnOnce(std::io::Error) -> UringError {
    move |err| UringError::Queue { qid, what, err }
}

/// The running queues.
pub struct Queues {
    threads: Vec<JoinHandle<()>>,
}

impl Queues {
    /// Wait up to `limit` for every queue thread to end (the kernel ends their commands when
    /// the FUSE connection goes away); `false` if some were still running.
    pub fn join(self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.threads.iter().any(|t| !t.is_finished()) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.threads.into_iter().for_each(|t| {
            let _ = t.join();
        });
        true
    }
}

/// The kernel makes one queue per possible CPU (`nr_cpu_ids`) and uses io_uring only once
/// every one of them has an entry.
fn possible_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim()
                .split([',', '-'])
                .filter_map(|n| n.parse::<usize>().ok())
                .max()
        })
        .map(|m| m + 1)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Start a queue per CPU on the FUSE connection `fd` (after an INIT that granted
/// `FUSE_OVER_IO_URING`), answering with `handler`. Returns once every queue has registered its
/// entries, or with the first queue's error.
pub(crate) fn start<H: Handler>(fd: BorrowedFd<'_>, handler: Arc<H>) -> Result<Queues, UringError> {
    let n = possible_cpus().min(u16::MAX as usize) as u16;
    let plans = Shape::from_env(n).plans(n);
    // Every thread registers its spill entries before any registers its own queue's (see
    // `Shape`): the kernel hands out a queue's most recently added free entry first.
    let spilled = Arc::new(Barrier::new(plans.len()));
    let (tx, rx) = mpsc::channel();
    let mut threads = vec![];
    let count = plans.len();
    for (i, plan) in plans.into_iter().enumerate() {
        let id = i as u16;
        let home = plan.home;
        let fd = fd.try_clone_to_owned().map_err(queue_err(id, "dup"))?;
        let (handler, tx, spilled) = (handler.clone(), tx.clone(), spilled.clone());
        let t = std::thread::Builder::new()
            .name(match home {
                Some(q) => format!("fuse-uring-{q}"),
                None => format!("fuse-uring-h{i}"),
            })
            .spawn(move || match Queue::new(fd, id, plan, &spilled) {
                Ok(mut q) => {
                    let _ = tx.send(Ok(()));
                    q.serve(&*handler)
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            })
            .map_err(queue_err(id, "spawn"))?;
        threads.push(t);
    }
    drop(tx);
    for r in rx.iter().take(count) {
        r?;
    }
    Ok(Queues { threads })
}

/// How many ring entries each queue thread registers, and on which queues. The
/// kernel queues a request on the queue of the CPU that issued it and hands it to that queue's
/// most recently freed entry. With only its own queue's entries (the default), a thread serves
/// everything issued on its CPU, so an asynchronous issuer (the loop driver's worker under
/// `pmkit attach`) and the chain behind it (this thread, the block completion, the
/// application) can end up taking turns on one CPU while the others idle. Two ways out, both
/// experiments selected by environment variables (docs/RESULTS.md, "One CPU's queue"):
/// `spill` entries that each pinned thread registers on the other queues, and unpinned
/// `helpers` whose entries are all on other threads' queues. Spill entries are registered
/// before any thread registers its `local` ones, so a queue's own entries are handed out
/// first; but an entry that served goes back to the head of its queue's free list, so after
/// one burst a lone request can keep going to another CPU.
#[derive(Debug, Clone, Copy)]
struct Shape {
    local: usize,
    spill: usize,
    /// Unpinned threads whose entries are all spill entries, round-robin over the queues.
    helpers: usize,
    helper_depth: usize,
}

impl Shape {
    /// Entries a thread registers in all: each holds a payload buffer of the largest request
    /// (1 MiB), so this is also the MiB of buffers per thread.
    const MAX: usize = QUEUE_DEPTH;
    /// Most helper threads.
    const MAX_HELPERS: usize = 8;

    /// The default: every thread's entries on its own CPU's queue.
    const OWN_QUEUE: Shape = Shape {
        local: Self::MAX,
        spill: 0,
        helpers: 0,
        helper_depth: 8,
    };

    fn from_env(queues: u16) -> Shape {
        let var = |k: &str, d: usize| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let d = Self::OWN_QUEUE;
        let local = var("PMKIT_FUSE_URING_LOCAL", d.local).clamp(1, Self::MAX);
        let spill = if queues > 1 {
            var("PMKIT_FUSE_URING_SPILL", d.spill).min(Self::MAX - local)
        } else {
            0
        };
        let helpers = var("PMKIT_FUSE_URING_HELPERS", d.helpers).min(Self::MAX_HELPERS);
        let helper_depth = var("PMKIT_FUSE_URING_HELPER_DEPTH", d.helper_depth).clamp(1, Self::MAX);
        Shape {
            local,
            spill,
            helpers,
            helper_depth,
        }
    }
}

/// One queue thread's part: the CPU it is pinned to (None: the scheduler's choice) and the
/// queue of each of its entries, its `spill` entries (on other threads' queues) first.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    home: Option<u16>,
    qids: Vec<u16>,
    spill: usize,
}

impl Shape {
    /// The threads for `n` queues: one pinned thread per queue, then the helpers.
    fn plans(&self, n: u16) -> Vec<Plan> {
        let n = n.max(1) as usize;
        let others = (n - 1).max(1);
        let mut plans: Vec<Plan> = (0..n)
            .map(|q| {
                let spill = if n > 1 { self.spill } else { 0 };
                let mut qids: Vec<u16> = (0..spill)
                    .map(|i| ((q + 1 + i % others) % n) as u16)
                    .collect();
                qids.extend(std::iter::repeat_n(q as u16, self.local));
                Plan {
                    home: Some(q as u16),
                    qids,
                    spill,
                }
            })
            .collect();
        plans.extend((0..self.helpers).map(|h| {
            let qids: Vec<u16> = (0..self.helper_depth)
                .map(|i| ((h + i) % n) as u16)
                .collect();
            Plan {
                home: None,
                spill: qids.len(),
                qids,
            }
        }));
        plans
    }
}

struct Queue {
    // Dropped first: closing the ring cancels the entries' commands before their buffers go.
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// The kernel queue each entry is registered on.
    entry_qids: Vec<u16>,
    /// Entry `i`'s header and payload buffers.
    slots: Arc<Slots>,
    /// Each entry's (header, payload) iovecs, as REGISTER hands them to the kernel; boxed so
    /// they stay put.
    iovs: Box<[[libc::iovec; 2]]>,
    fd: OwnedFd,
    qid: u16,
    /// Completions seen while registering, served first.
    early: Vec<(u64, i32)>,
}

impl Queue {
    fn new(fd: OwnedFd, qid: u16, plan: Plan, spilled: &Barrier) -> Result<Queue, UringError> {
        let Plan { home, qids, spill } = plan;
        // Experiment knob (attach qd16): PMKIT_FUSE_URING_PIN=0 leaves the queue
        // threads to the scheduler.
        if let Some(cpu) = home {
            if std::env::var("PMKIT_FUSE_URING_PIN").as_deref() != Ok("0") {
                pin_to_cpu(cpu as usize);
            }
        }
        let depth = qids.len();
        // Completions are only reaped by this thread, in io_uring_enter: let the kernel run
        // their task work then, not interrupt us for each (needs 6.1; plain ring otherwise).
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(depth as u32)
            .or_else(|_| IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(depth as u32))
            .map_err(queue_err(qid, "io_uring_setup"));
        let ring = match ring {
            Ok(r) => r,
            Err(e) => {
                spilled.wait();
                return Err(e);
            }
        };
        let huge = std::env::var("PMKIT_FUSE_URING_THP").as_deref() != Ok("0");
        let slots = match Slots::new(depth, abi::HEADER_LEN, MAX_IO as usize, huge) {
            Ok(s) => Arc::new(s),
            Err(e) => {
                spilled.wait();
                return Err(queue_err(qid, "map the entries' buffers")(e));
            }
        };
        let iovs = (0..depth).map(|i| slots.iovecs(i)).collect();
        let mut q = Queue {
            ring,
            entry_qids: qids,
            slots,
            iovs,
            fd,
            qid,
            early: vec![],
        };
        let first = q.register(0..spill);
        spilled.wait();
        first?;
        q.register(spill..depth)?;
        Ok(q)
    }

    /// Register entries `range` with the kernel (each joins the head of its queue's free list).
    fn register(&mut self, range: std::ops::Range<usize>) -> Result<(), UringError> {
        if range.is_empty() {
            return Ok(());
        }
        for idx in range {
            let sqe = register_sqe(
                self.fd.as_raw_fd(),
                self.entry_qids[idx],
                self.iovs[idx].as_ptr(),
                idx as u64,
            );
            // SAFETY: the SQE points at this entry's iovecs and, through them, its buffers,
            // all owned by `self`, which outlives the ring (dropped first).
            unsafe { self.ring.submission().push(&sqe) }
                .expect("one SQE per entry fits a ring of as many");
        }
        let qid = self.qid;
        self.ring
            .submit()
            .map_err(queue_err(qid, "register entries"))?;
        // A refused REGISTER completes at once with an error.
        let before = self.early.len();
        self.early
            .extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        if let Some(&(_, res)) = self.early[before..].iter().find(|(_, r)| *r < 0) {
            return Err(queue_err(qid, "register entries")(
                std::io::Error::from_raw_os_error(-res),
            ));
        }
        Ok(())
    }

    /// Serve requests until the connection ends.
    fn serve<H: Handler>(&mut self, handler: &H) {
        let mut done = std::mem::take(&mut self.early);
        done.reserve(self.entry_qids.len());
        let mut in_kernel = self.entry_qids.len();
        let mut work: Vec<u32> = Vec::with_capacity(self.entry_qids.len());
        let mut replies: Vec<(u32, u64)> = Vec::with_capacity(self.entry_qids.len());

        loop {
            for &(idx, res) in &done {
                if res < 0 {
                    // ENOTCONN/ENODEV: unmounted or aborted; anything else loses this entry.
                    in_kernel -= 1;
                    if res == -libc::ENOTCONN || res == -libc::ENODEV || in_kernel == 0 {
                        return;
                    }
                    tracing::warn!(
                        "FUSE io_uring queue {}: entry {idx}: errno {}",
                        self.qid,
                        -res
                    );
                    continue;
                }
                work.push(idx as u32);
            }
            replies.clear();
            replies.extend(work.drain(..).map(|i| {
                // SAFETY: entry `i`'s request has completed and its reply is not yet sent: this
                // thread alone holds it until the COMMIT_AND_FETCH below.
                (i, unsafe { self.slots.answer(handler, i as usize) })
            }));
            for &(idx, commit_id) in &replies {
                let sqe = opcode::UringCmd80::new(
                    types::Fd(self.fd.as_raw_fd()),
                    abi::CMD_COMMIT_AND_FETCH,
                )
                .cmd(abi::cmd_req(commit_id, self.entry_qids[idx as usize]))
                .build()
                .user_data(idx as u64);
                // SAFETY: the command names a registered entry, whose buffers (in
                // `self.slots`) outlive the ring.
                unsafe { self.ring.submission().push(&sqe) }
                    .expect("one SQE per entry fits a ring of as many");
            }
            done.clear();
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => {
                    tracing::warn!("FUSE io_uring queue {}: {e}", self.qid);
                    return;
                }
            }
            done.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        }
    }
}

/// The REGISTER command for one entry: its header and payload iovecs at `iov`.
fn register_sqe(fd: i32, qid: u16, iov: *const libc::iovec, idx: u64) -> squeue::Entry128 {
    let sqe = opcode::UringCmd80::new(types::Fd(fd), abi::CMD_REGISTER)
        .cmd(abi::cmd_req(0, qid))
        .addr(Some(iov as u64))
        .build()
        .user_data(idx);
    // The kernel also wants the iovec count in the SQE's `len`, which the io-uring crate's
    // UringCmd80 has no setter for.
    // SAFETY: Entry128 is #[repr(C)]: the 64-byte `io_uring_sqe`, then the 64 bytes that
    // extend its command area; any bytes are a valid value of either type.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    // io_uring_sqe.len: the iovec count.
    raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
    // SAFETY: as above, back to the same type.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

/// Run this thread on `cpu` only: its queue gets the requests issued on that CPU. Best
/// effort (a cpuset may forbid it; requests are then served from another CPU).
fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET stays within it for cpu <
    // CPU_SETSIZE (checked); sched_setaffinity reads the set we own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu < libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_default_every_entry_is_on_its_own_threads_queue() {
        let plans = Shape::OWN_QUEUE.plans(2);
        assert_eq!(plans.len(), 2);
        for (q, p) in plans.iter().enumerate() {
            assert_eq!(p.home, Some(q as u16));
            assert_eq!(p.spill, 0);
            assert_eq!(p.qids, vec![q as u16; QUEUE_DEPTH]);
        }
    }

    #[test]
    fn spill_entries_come_first_and_go_round_the_other_queues() {
        let shape = Shape {
            local: 2,
            spill: 4,
            helpers: 1,
            helper_depth: 3,
        };
        let plans = shape.plans(3);
        assert_eq!(plans[0].qids, vec![1, 2, 1, 2, 0, 0]);
        assert_eq!(plans[2].qids, vec![0, 1, 0, 1, 2, 2]);
        assert!(plans[..3].iter().all(|p| p.spill == 4));
        // The helper: unpinned, every entry a spill entry, round-robin over all queues.
        assert_eq!(
            plans[3],
            Plan {
                home: None,
                qids: vec![0, 1, 2],
                spill: 3
            }
        );
        // One CPU: nowhere to spill.
        assert_eq!(shape.plans(1)[0].qids, vec![0, 0]);
    }
}
