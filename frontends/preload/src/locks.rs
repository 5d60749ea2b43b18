//! Record locks and `flock` on shim descriptors: fcntl's `F_SETLK`, `F_SETLKW` and `F_GETLK`,
//! their open-file-description forms (`F_OFD_*`), `flock` and `lockf`. They go to the pool's
//! lock table (`Posix::lock`), so processes sharing a served pool conflict as they would on a
//! kernel file system. (The kernel's own locks would act on the shim's placeholder descriptors,
//! which share one anonymous inode: every pool file would conflict with every other.)
//!
//! A wait (`F_SETLKW`, `flock` without `LOCK_NB`, `F_LOCK`) is a loop of tries. Each try that
//! finds the lock taken sleeps, from 100 µs doubling to 20 ms, so no server thread is ever held
//! by a waiter. A signal handled during a sleep ends the wait with EINTR when its handler was
//! installed without SA_RESTART, as the kernel's wait ends (a program that bounds its wait with
//! `alarm` gets control back); with SA_RESTART the handler runs and the wait goes on, as the
//! kernel restarts it (signal(7) lists `F_SETLKW` and `flock` among the calls SA_RESTART
//! restarts).

use crate::state::{en, enter, lookup, own_pid};
use pmkit_fs::posix::{Lock, LockKind, LockScope};
use std::ffi::{c_int, c_long};

/// Try `l` on shim descriptor `fd` until it is granted, or once (`wait` false): 0, or -1 with
/// errno (EAGAIN when taken and not waiting).
fn take(fd: pmkit_fs::posix::Fd, l: Lock, wait: bool) -> c_int {
    let mut nap = std::time::Duration::from_micros(100);
    loop {
        let mut busy = false;
        let r = enter(-1, |p| match p.lock(fd, l) {
            // (through a server the error arrives as its errno)
            Err(e) if wait && e.errno() == libc::EAGAIN => {
                busy = true;
                Err(libc::EAGAIN)
            }
            r => r.map(|_| 0).map_err(en),
        });
        if !busy {
            return r;
        }
        if !sleep(nap) {
            // a handler without SA_RESTART ran: the wait ends as the kernel's does
            crate::state::set_errno(libc::EINTR);
            return -1;
        }
        nap = (nap * 2).min(std::time::Duration::from_millis(20));
    }
}

/// Sleep `d` as a restartable call sleeps: false when a signal handler installed without
/// SA_RESTART ended it. A blocking read of a timerfd is restarted by the kernel after a handler
/// with SA_RESTART and ends with EINTR after one without, which is the rule a lock wait follows;
/// nanosleep ends with EINTR after every handler. (Raw system calls: the shim's own `read` and
/// `close` are the ones this library exports.)
fn sleep(d: std::time::Duration) -> bool {
    // SAFETY: the descriptor is made, read and closed here; the buffers live on this stack.
    unsafe {
        let fd = libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC);
        if fd < 0 {
            // no timerfd: a sleep that every handler ends
            let t = libc::timespec {
                tv_sec: 0,
                tv_nsec: d.as_nanos() as _,
            };
            return libc::nanosleep(&t, std::ptr::null_mut()) == 0;
        }
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: d.as_secs() as _,
                tv_nsec: d.subsec_nanos() as _,
            },
        };
        let mut ticks = 0u64;
        let armed = libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) == 0;
        let r = match armed {
            true => libc::syscall(libc::SYS_read, fd, &mut ticks as *mut u64, 8),
            false => 8,
        };
        let interrupted = r < 0 && *libc::__errno_location() == libc::EINTR;
        libc::syscall(libc::SYS_close, fd);
        !interrupted
    }
}

/// `[start, end)` of a `struct flock`-style range: `whence`'s base plus `start`, `len` bytes
/// (0: to any end; negative: the bytes before).
fn range(
    p: &dyn pmkit_fs_share::PoolApi,
    fd: pmkit_fs::posix::Fd,
    (whence, start, len): (c_int, i64, i64),
) -> Result<(u64, u64), c_int> {
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => p.lseek(fd, 0, pmkit_fs::posix::Whence::Cur).map_err(en)? as i64,
        libc::SEEK_END => p.fstat(fd).map_err(en)?.size as i64,
        _ => return Err(libc::EINVAL),
    };
    let a = base.checked_add(start).ok_or(libc::EOVERFLOW)?;
    let (a, b) = match len {
        0 => (a, i64::MAX),
        l if l > 0 => (a, a.checked_add(l).ok_or(libc::EOVERFLOW)?),
        l => (a.checked_add(l).ok_or(libc::EINVAL)?, a),
    };
    if a < 0 {
        return Err(libc::EINVAL);
    }
    let end = if len == 0 { u64::MAX } else { b as u64 };
    Ok((a as u64, end))
}

/// fcntl's lock commands on shim descriptor `fd`; `None` for any other command.
pub(crate) fn fcntl(fd: c_int, cmd: c_int, arg: c_long) -> Option<c_int> {
    let (scope, wait, test) = match cmd {
        libc::F_SETLK => (LockScope::Process, false, false),
        libc::F_SETLKW => (LockScope::Process, true, false),
        libc::F_GETLK => (LockScope::Process, false, true),
        libc::F_OFD_SETLK => (LockScope::Description, false, false),
        libc::F_OFD_SETLKW => (LockScope::Description, true, false),
        libc::F_OFD_GETLK => (LockScope::Description, false, true),
        _ => return None,
    };
    let o = lookup(fd)?;
    let ptr = arg as *mut libc::flock;
    let size = std::mem::size_of::<libc::flock>();
    if ptr.is_null() || crate::guarded::check(ptr.cast(), size, test).is_err() {
        crate::state::set_errno(libc::EFAULT);
        return Some(-1);
    }
    // SAFETY: checked readable (and writable for the tests) above; the caller's flock.
    let f = unsafe { ptr.read() };
    let kind = match f.l_type as c_int {
        libc::F_RDLCK => LockKind::Read,
        libc::F_WRLCK => LockKind::Write,
        libc::F_UNLCK if !test => LockKind::Unlock,
        _ => {
            crate::state::set_errno(libc::EINVAL);
            return Some(-1);
        }
    };
    let r = enter(None, |p| {
        if scope == LockScope::Description && f.l_pid != 0 {
            return Err(libc::EINVAL);
        }
        range(p, o.fd, (f.l_whence as c_int, f.l_start, f.l_len)).map(Some)
    });
    let Some((start, end)) = r else {
        return Some(-1); // errno set by `enter`
    };
    let pid = match scope {
        LockScope::Process => own_pid(),
        _ => -1,
    };
    let l = Lock {
        kind,
        scope,
        start,
        end,
        pid,
    };
    if !test {
        return Some(take(o.fd, l, wait));
    }
    let found = enter(None, |p| Ok(Some(p.test_lock(o.fd, l).map_err(en)?)));
    Some(match found {
        None => -1,
        Some(held) => {
            // SAFETY: checked writable above.
            unsafe { ptr.write(answer(f, held)) };
            0
        }
    })
}

/// F_GETLK's answer in the caller's `struct flock`: the lock in the way, or `F_UNLCK`.
fn answer(mut f: libc::flock, held: Option<Lock>) -> libc::flock {
    let Some(h) = held else {
        f.l_type = libc::F_UNLCK as _;
        return f;
    };
    f.l_type = match h.kind {
        LockKind::Write => libc::F_WRLCK,
        _ => libc::F_RDLCK,
    } as _;
    f.l_whence = libc::SEEK_SET as _;
    f.l_start = h.start as i64;
    f.l_len = if h.end == u64::MAX {
        0
    } else {
        (h.end - h.start) as i64
    };
    f.l_pid = h.pid;
    f
}

/// # Safety
/// flock(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    let Some(o) = lookup(fd) else {
        return real!(flock(fd, op) as fn(c_int, c_int) -> c_int);
    };
    let kind = match op & !libc::LOCK_NB {
        libc::LOCK_SH => LockKind::Read,
        libc::LOCK_EX => LockKind::Write,
        libc::LOCK_UN => LockKind::Unlock,
        _ => {
            crate::state::set_errno(libc::EINVAL);
            return -1;
        }
    };
    let l = Lock {
        kind,
        scope: LockScope::Flock,
        start: 0,
        end: u64::MAX,
        pid: -1,
    };
    let r = take(o.fd, l, op & libc::LOCK_NB == 0);
    if r < 0 && crate::state::errno() == libc::EAGAIN {
        crate::state::set_errno(libc::EWOULDBLOCK);
    }
    r
}

/// # Safety
/// lockf(3)'s contract (glibc's calls fcntl past this library).
#[no_mangle]
pub(crate) unsafe extern "C" fn lockf(fd: c_int, cmd: c_int, len: i64) -> c_int {
    let Some(o) = lookup(fd) else {
        return real!(lockf(fd, cmd, len) as fn(c_int, c_int, i64) -> c_int);
    };
    let Some((start, end)) = enter(None, |p| range(p, o.fd, (libc::SEEK_CUR, 0, len)).map(Some))
    else {
        return -1; // errno set by `enter`
    };
    let l = |kind| Lock {
        kind,
        scope: LockScope::Process,
        start,
        end,
        pid: own_pid(),
    };
    match cmd {
        libc::F_LOCK => take(o.fd, l(LockKind::Write), true),
        libc::F_TLOCK => take(o.fd, l(LockKind::Write), false),
        libc::F_ULOCK => take(o.fd, l(LockKind::Unlock), false),
        libc::F_TEST => {
            let found = enter(None, |p| {
                Ok(Some(p.test_lock(o.fd, l(LockKind::Write)).map_err(en)?))
            });
            match found {
                Some(None) => 0,
                Some(Some(_)) => {
                    crate::state::set_errno(libc::EACCES);
                    -1
                }
                None => -1,
            }
        }
        _ => {
            crate::state::set_errno(libc::EINVAL);
            -1
        }
    }
}
