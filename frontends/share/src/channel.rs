//! A session's shared-memory channel: a memory file the client makes and both processes map,
//! holding one request and one reply slot and a sequence word for each. A call is a copy in, a
//! sequence store, and a wait for the other side's sequence: polled for a while (no system
//! call while the other side answers quickly), then a futex sleep. The socket stays beside it
//! for descriptors (fork) and for noticing that the other side is gone.
//!
//! The other process may change the mapping at any time: its bytes are only copied out with
//! raw-pointer copies (never made a Rust slice), and only the header's words are read in place,
//! as atomics.

use crate::shm::Shm;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The header page: one word per cache line.
const HDR: usize = 4096;
const REQ_SEQ: usize = 0;
const REP_SEQ: usize = 64;
const REQ_LEN: usize = 128;
const REP_LEN: usize = 192;
/// 1 while the server sleeps on `REQ_SEQ` (the client wakes it).
const SERVER_SLEEPS: usize = 256;
/// 1 while the client sleeps on `REP_SEQ`.
const CLIENT_SLEEPS: usize = 320;
/// Each slot holds one frame.
const SLOT: usize = crate::conn::MAX_FRAME;
const LEN: usize = HDR + 2 * SLOT;

/// Polls of the word before a wait starts yielding the CPU between polls (a few microseconds:
/// an answer from a side running on another CPU comes within them).
const SPIN_POLLS: u32 = 2000;

/// The shortest poll (see [`Channel::adapt`]): 5 µs.
const POLL_FLOOR_NS: u64 = 5_000;

/// How long a sleeper sleeps before it looks whether the other side is gone.
const CHECK_EVERY: Duration = Duration::from_millis(100);

pub(crate) struct Channel {
    shm: Shm,
    /// The most a wait polls before it sleeps.
    spin: Duration,
    /// How long a wait polls now, in nanoseconds, adapted to what the waits meet (see
    /// [`Channel::adapt`]).
    poll_ns: AtomicU64,
}

/// The other side is gone (its socket closed).
fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        "the other side of the channel is gone",
    )
}

impl Channel {
    /// A new channel (the client's side): its memory file, to pass to the server.
    pub(crate) fn create(spin: Duration) -> io::Result<Channel> {
        Ok(Channel::with(Shm::create(c"pmkit-channel", LEN)?, spin))
    }

    /// The server's side of a client's channel.
    pub(crate) fn open(fd: OwnedFd, spin: Duration) -> io::Result<Channel> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        Ok(Channel::with(Shm::open(fd, LEN, prot)?, spin))
    }

    fn with(shm: Shm, spin: Duration) -> Channel {
        Channel {
            shm,
            spin,
            poll_ns: AtomicU64::new(spin.as_nanos() as u64 / 2),
        }
    }

    pub(crate) fn fd(&self) -> &OwnedFd {
        self.shm.fd()
    }

    fn word(&self, at: usize) -> &AtomicU32 {
        debug_assert!(at + 4 <= HDR && at.is_multiple_of(64));
        // SAFETY: `at` is a word inside the header page of the live mapping, 4-aligned (the
        // mapping is page-aligned); other processes change it only atomically.
        unsafe { &*self.shm.base().add(at).cast::<AtomicU32>() }
    }

    fn put(&self, slot: usize, len_at: usize, bytes: &[u8]) -> io::Result<()> {
        if bytes.len() > SLOT {
            return Err(io::Error::other(format!(
                "a frame of {} bytes is over the channel's {SLOT}",
                bytes.len()
            )));
        }
        // SAFETY: the slot lies inside the mapping and holds SLOT bytes; a raw copy into memory
        // the other side reads only after the sequence store below.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.shm.base().add(slot), bytes.len())
        };
        self.word(len_at)
            .store(bytes.len() as u32, Ordering::Relaxed);
        Ok(())
    }

    fn take(&self, slot: usize, len_at: usize) -> io::Result<Vec<u8>> {
        let n = self.word(len_at).load(Ordering::Relaxed) as usize;
        if n > SLOT {
            return Err(io::Error::other(format!(
                "a frame of {n} bytes in the channel"
            )));
        }
        let mut out = vec![0u8; n];
        // SAFETY: `n` <= SLOT bytes of the slot inside the mapping, copied out raw (the other
        // side may write them meanwhile: then the bytes decode badly, never unsafely).
        unsafe { std::ptr::copy_nonoverlapping(self.shm.base().add(slot), out.as_mut_ptr(), n) };
        Ok(out)
    }

    /// Wait until the word at `seq` is no longer `old`: polled, then asleep with `sleeps` set;
    /// `alive` is asked between sleeps. The new value.
    fn wait(
        &self,
        seq: usize,
        old: u32,
        sleeps: usize,
        alive: &dyn Fn() -> bool,
    ) -> io::Result<u32> {
        let w = self.word(seq);
        let t = Instant::now();
        let limit = Duration::from_nanos(self.poll_ns.load(Ordering::Relaxed));
        let mut polls = 0u32;
        loop {
            let v = w.load(Ordering::Acquire);
            if v != old {
                self.adapt(Some(t.elapsed()));
                return Ok(v);
            }
            if t.elapsed() >= limit {
                self.adapt(None);
                break;
            }
            polls += 1;
            if polls < SPIN_POLLS {
                std::hint::spin_loop();
            } else {
                // The other side may need this CPU (more runnable threads than CPUs): give it.
                // SAFETY: sched_yield has no arguments and cannot fail in a way that matters.
                unsafe { libc::sched_yield() };
            }
        }
        loop {
            self.word(sleeps).store(1, Ordering::SeqCst);
            let v = w.load(Ordering::SeqCst);
            if v != old {
                self.word(sleeps).store(0, Ordering::Relaxed);
                return Ok(v);
            }
            futex_wait(w, old, CHECK_EVERY);
            self.word(sleeps).store(0, Ordering::Relaxed);
            let v = w.load(Ordering::Acquire);
            if v != old {
                return Ok(v);
            }
            if !alive() {
                return Err(gone());
            }
        }
    }

    /// Adapt the poll to what a wait met, as an adaptive mutex does: an answer that came
    /// during the poll after `t` keeps the poll at least twice that (plus the floor), up to the
    /// most; a wait that had to sleep halves it, down to the floor. So a client and a server that
    /// answer each other within microseconds poll, and processes that wait for the CPU (more
    /// of them than CPUs) soon sleep instead of taking it from the side they wait for.
    fn adapt(&self, hit: Option<Duration>) {
        let now = self.poll_ns.load(Ordering::Relaxed);
        let max = self.spin.as_nanos() as u64;
        let next = match hit {
            Some(t) => now.max(2 * t.as_nanos() as u64 + POLL_FLOOR_NS),
            None => now / 2,
        };
        self.poll_ns
            .store(next.clamp(POLL_FLOOR_NS.min(max), max), Ordering::Relaxed);
    }

    /// Publish the word at `seq` as `v` and wake the other side if it sleeps.
    fn signal(&self, seq: usize, v: u32, sleeps: usize) {
        let w = self.word(seq);
        w.store(v, Ordering::SeqCst);
        if self.word(sleeps).load(Ordering::SeqCst) != 0 {
            futex_wake(w);
        }
    }

    /// The client's call: `req` in, the reply out.
    pub(crate) fn call(&self, req: &[u8], alive: &dyn Fn() -> bool) -> io::Result<Vec<u8>> {
        self.put(HDR, REQ_LEN, req)?;
        let s = self.word(REQ_SEQ).load(Ordering::Relaxed).wrapping_add(1);
        let before = self.word(REP_SEQ).load(Ordering::Acquire);
        self.signal(REQ_SEQ, s, SERVER_SLEEPS);
        let got = self.wait(REP_SEQ, before, CLIENT_SLEEPS, alive)?;
        if got != s {
            return Err(io::Error::other(format!(
                "reply {got} to request {s}: the channel is out of step"
            )));
        }
        self.take(HDR + SLOT, REP_LEN)
    }

    /// The server's wait for the next request after `last`: its sequence and bytes.
    pub(crate) fn next(&self, last: u32, alive: &dyn Fn() -> bool) -> io::Result<(u32, Vec<u8>)> {
        let s = self.wait(REQ_SEQ, last, SERVER_SLEEPS, alive)?;
        Ok((s, self.take(HDR, REQ_LEN)?))
    }

    /// The server's reply to request `s`.
    pub(crate) fn reply(&self, s: u32, rep: &[u8]) -> io::Result<()> {
        self.put(HDR + SLOT, REP_LEN, rep)?;
        self.signal(REP_SEQ, s, CLIENT_SLEEPS);
        Ok(())
    }

    /// The request sequence now (the server starts after it).
    pub(crate) fn request_seq(&self) -> u32 {
        self.word(REQ_SEQ).load(Ordering::Acquire)
    }
}

fn futex_wait(w: &AtomicU32, old: u32, d: Duration) {
    let ts = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a word of a shared mapping (not private: two processes) with a
    // timeout; it returns at once if the word is no longer `old`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            w.as_ptr(),
            libc::FUTEX_WAIT,
            old,
            &ts as *const libc::timespec,
        )
    };
}

fn futex_wake(w: &AtomicU32) {
    // SAFETY: FUTEX_WAKE of the waiters on a word of a shared mapping.
    unsafe { libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}
