//! The streams `popen` opened (`shell.rs`), and closing one: by `pclose`, or by `fclose`
//! (`stdio.rs`), since glibc's `pclose` is its `fclose`.

use std::ffi::c_int;
use std::sync::Mutex;

/// A stream from `popen` and what closing it needs: (stream, parent's descriptor, child).
static OPEN: Mutex<Vec<(usize, c_int, libc::pid_t)>> = Mutex::new(Vec::new());

pub(crate) fn lock() -> std::sync::MutexGuard<'static, Vec<(usize, c_int, libc::pid_t)>> {
    OPEN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Close a stream of `popen`'s and reap its shell: the shell's wait status. None when `f`
/// is not one. `fclose` comes here too: glibc's `pclose` is its `fclose`, so programs that
/// close a popen stream with `fclose` still reap the shell.
pub(crate) fn close(f: *mut libc::FILE) -> Option<c_int> {
    let (_, _, pid) = {
        let mut v = lock();
        let i = v.iter().position(|&(p, _, _)| p == f as usize)?;
        v.swap_remove(i)
    };
    // SAFETY: a live stream of ours (found in the table, removed from it once, so this
    // library's `fclose` passes it on to libc's).
    unsafe { libc::fclose(f) };
    Some(wait(pid))
}

/// waitpid that goes on through EINTR: the child's status, or -1 with errno set.
pub(crate) fn wait(pid: libc::pid_t) -> c_int {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status into our local.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return status;
        }
        if r < 0 && crate::state::errno() != libc::EINTR {
            return -1;
        }
    }
}
