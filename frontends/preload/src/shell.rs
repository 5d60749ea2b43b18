//! `popen`, `pclose` and `system`: glibc starts their `/bin/sh` with its own internal spawn,
//! past this library's `posix_spawn`, so the shell would begin with a fresh session: no pool
//! descriptors and not the caller's current directory in the pool (Kconfig's `$(shell ...)`
//! ran in the wrong directory). They are built here on [`crate::exec::posix_spawn`], which hands
//! the session over, and behave as glibc's: the shell is `/bin/sh -c -- COMMAND`, a popen child
//! closes the streams of earlier popens, `system` ignores SIGINT and SIGQUIT and blocks
//! SIGCHLD while it waits. Without a configured pool they are libc's.

use std::ffi::{c_char, c_int, CString};

extern "C" {
    static environ: *const *mut c_char;
}

/// The shell's argument vector for `cmd`, as glibc's: `sh -c -- cmd`.
fn shell_argv(cmd: &CString) -> [*mut c_char; 5] {
    [
        c"sh".as_ptr().cast_mut(),
        c"-c".as_ptr().cast_mut(),
        c"--".as_ptr().cast_mut(),
        cmd.as_ptr().cast_mut(),
        std::ptr::null_mut(),
    ]
}

/// Spawn the shell on `cmd` with `actions` and `attr` (either may be NULL); the child's pid, or
/// the error number posix_spawn gave.
fn spawn_shell(
    cmd: &CString,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
) -> Result<libc::pid_t, c_int> {
    let argv = shell_argv(cmd);
    let mut pid: libc::pid_t = 0;
    // SAFETY: a C string path, a NULL-terminated argv that outlives the call, the process's
    // environment, and actions/attr initialized by the caller (or NULL).
    let r = unsafe {
        crate::exec::posix_spawn(
            &mut pid,
            c"/bin/sh".as_ptr(),
            actions,
            attr,
            argv.as_ptr().cast(),
            environ.cast(),
        )
    };
    if r == 0 {
        Ok(pid)
    } else {
        Err(r)
    }
}

/// # Safety
/// popen(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn popen(cmd: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    if crate::state::config().is_none() || cmd.is_null() || mode.is_null() {
        return real!(popen(cmd, mode) as fn(*const c_char, *const c_char) -> *mut libc::FILE);
    }
    // SAFETY: the caller's contract: C strings.
    let (cmd, m) = unsafe {
        (
            std::ffi::CStr::from_ptr(cmd),
            std::ffi::CStr::from_ptr(mode),
        )
    };
    let m = m.to_bytes();
    let reading = match m.first() {
        Some(b'r') => true,
        Some(b'w') => false,
        _ => {
            crate::state::set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
    };
    let cloexec = m.contains(&b'e');
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `ends`.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return std::ptr::null_mut();
    }
    let (ours, theirs, target) = if reading {
        (ends[0], ends[1], 1)
    } else {
        (ends[1], ends[0], 0)
    };
    let r = popen_spawn(cmd.to_owned(), theirs, target);
    // SAFETY: closes the child's end, ours to close; the child has its copy.
    unsafe { libc::close(theirs) };
    let pid = match r {
        Ok(pid) => pid,
        Err(e) => {
            // SAFETY: our end, never handed out.
            unsafe { libc::close(ours) };
            crate::state::set_errno(e);
            return std::ptr::null_mut();
        }
    };
    if !cloexec {
        // SAFETY: clears close-on-exec on our own end, as glibc's popen does without 'e'.
        unsafe { libc::fcntl(ours, libc::F_SETFD, 0) };
    }
    let fmode = if reading { c"r" } else { c"w" };
    // SAFETY: our pipe end and a C string mode.
    let f = unsafe { libc::fdopen(ours, fmode.as_ptr()) };
    if f.is_null() {
        let e = crate::state::errno();
        // SAFETY: our end; the child is reaped so that it does not linger as a zombie.
        unsafe { libc::close(ours) };
        crate::popens::wait(pid);
        crate::state::set_errno(e);
        return f;
    }
    crate::popens::lock().push((f as usize, ours, pid));
    f
}

/// The popen child: `theirs` becomes its `target` (0 or 1), earlier popen streams closed.
fn popen_spawn(cmd: CString, theirs: c_int, target: c_int) -> Result<libc::pid_t, c_int> {
    let mut actions = std::mem::MaybeUninit::<libc::posix_spawn_file_actions_t>::uninit();
    // SAFETY: initializes the actions object, destroyed below.
    if unsafe { libc::posix_spawn_file_actions_init(actions.as_mut_ptr()) } != 0 {
        return Err(libc::ENOMEM);
    }
    let a = actions.as_mut_ptr();
    // SAFETY: `a` is initialized; the descriptors are numbers the child closes or moves.
    let r = unsafe {
        let mut r = libc::posix_spawn_file_actions_adddup2(a, theirs, target);
        for &(_, fd, _) in crate::popens::lock().iter() {
            if r == 0 && fd != target {
                r = libc::posix_spawn_file_actions_addclose(a, fd);
            }
        }
        r
    };
    let pid = if r == 0 {
        spawn_shell(&cmd, a, std::ptr::null())
    } else {
        Err(r)
    };
    // SAFETY: destroys the object initialized above.
    unsafe { libc::posix_spawn_file_actions_destroy(a) };
    pid
}

/// # Safety
/// pclose(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn pclose(f: *mut libc::FILE) -> c_int {
    crate::popens::close(f).unwrap_or_else(|| real!(pclose(f) as fn(*mut libc::FILE) -> c_int))
}

/// # Safety
/// system(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn system(cmd: *const c_char) -> c_int {
    if crate::state::config().is_none() || cmd.is_null() {
        return real!(system(cmd) as fn(*const c_char) -> c_int);
    }
    // SAFETY: the caller's contract: a C string.
    let cmd = unsafe { std::ffi::CStr::from_ptr(cmd) }.to_owned();
    // SAFETY: plain signal-state calls on locals, restored before returning.
    unsafe {
        let mut ignore: libc::sigaction = std::mem::zeroed();
        ignore.sa_sigaction = libc::SIG_IGN;
        let (mut old_int, mut old_quit) = (std::mem::zeroed(), std::mem::zeroed());
        libc::sigaction(libc::SIGINT, &ignore, &mut old_int);
        libc::sigaction(libc::SIGQUIT, &ignore, &mut old_quit);
        let (mut chld, mut old_mask) = (std::mem::zeroed(), std::mem::zeroed());
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, &mut old_mask);
        // The child gets the signals' defaults (where the caller did not ignore them) and the
        // caller's mask.
        let mut defaults = std::mem::zeroed();
        libc::sigemptyset(&mut defaults);
        if old_int.sa_sigaction != libc::SIG_IGN {
            libc::sigaddset(&mut defaults, libc::SIGINT);
        }
        if old_quit.sa_sigaction != libc::SIG_IGN {
            libc::sigaddset(&mut defaults, libc::SIGQUIT);
        }
        let mut attr = std::mem::MaybeUninit::uninit();
        libc::posix_spawnattr_init(attr.as_mut_ptr());
        let a = attr.as_mut_ptr();
        libc::posix_spawnattr_setsigdefault(a, &defaults);
        libc::posix_spawnattr_setsigmask(a, &old_mask);
        libc::posix_spawnattr_setflags(
            a,
            (libc::POSIX_SPAWN_SETSIGDEF | libc::POSIX_SPAWN_SETSIGMASK) as libc::c_short,
        );
        let status = match spawn_shell(&cmd, std::ptr::null(), a) {
            Ok(pid) => crate::popens::wait(pid),
            // As glibc: a shell that could not start is a shell that exited 127.
            Err(_) => 127 << 8,
        };
        libc::posix_spawnattr_destroy(a);
        libc::sigaction(libc::SIGINT, &old_int, std::ptr::null_mut());
        libc::sigaction(libc::SIGQUIT, &old_quit, std::ptr::null_mut());
        libc::sigprocmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
        status
    }
}
