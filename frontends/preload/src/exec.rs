//! exec with a pool served by a server: the next program keeps the pool descriptors that have
//! no close-on-exec, as the kernel keeps its own. Before exec, the shim names in the new
//! program's environment (`PMKIT_PRELOAD_INHERIT`) its connection to the server (left open
//! across exec) and, per inherited kernel number, the pool descriptor, flags and path behind
//! it; the next program's shim takes them up before `main` ([`inherit`]) and the server closes
//! the session's other descriptors. `execve`, `execv`, `execvp`, `execvpe`, `posix_spawn` and
//! `posix_spawnp` are served (`popen` and `system` through `shell.rs`); the variadic `execl*`
//! start the next program with a session of its own and no pool descriptors. A pool this
//! process mounted itself (no server) hands nothing over.

use crate::image::{image_of, script_argv, Image};
use crate::state::{self, Busy, Open};
use std::ffi::{c_char, c_int, CStr, CString};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

const VAR: &str = "PMKIT_PRELOAD_INHERIT";

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(h: &str) -> Option<Vec<u8>> {
    h.as_bytes()
        .chunks(2)
        .map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok())
        .collect()
}

/// The variable's value for this process now: `SOCK;cwd=HEXPATH;locked;K,FD,FLAGS,HEXPATH;...`
/// (the current directory when it is in the pool, `locked` when the session has taken locks,
/// then one entry per kept number), and the socket to leave open; `None` without a server.
fn hand_over(spawn: bool) -> Option<(String, c_int, Option<OwnedFd>)> {
    let locked = state::exec_locked();
    let (sock, made) = state::exec_socket(spawn)?;
    let mut v = format!("{sock}");
    if locked {
        v += ";locked";
    }
    if let Some(cwd) = crate::vcwd::get() {
        v += &format!(";cwd={}", hex(&cwd));
    }
    for (k, o) in state::entries() {
        // SAFETY: F_GETFD reads a descriptor's flags; no memory is touched.
        let fdflags = unsafe { libc::fcntl(k, libc::F_GETFD) };
        if fdflags < 0 || fdflags & libc::FD_CLOEXEC != 0 {
            continue;
        }
        v += &format!(";{k},{},{},{}", o.fd.0, o.flags, hex(&o.path));
    }
    Some((v, sock, made))
}

/// `envp` with the hand-over variable set to `value` (any earlier one dropped).
///
/// # Safety
/// `envp` is NULL or a NULL-terminated array of C strings.
unsafe fn with_var(envp: *const *const c_char, value: &str) -> (Vec<CString>, Vec<*const c_char>) {
    let mut owned = Vec::new();
    let mut i = 0;
    while !envp.is_null() {
        // SAFETY: the caller's contract: entries up to the NULL are C strings.
        let e = unsafe { *envp.add(i) };
        if e.is_null() {
            break;
        }
        // SAFETY: as above.
        let s = unsafe { CStr::from_ptr(e) };
        if !s.to_bytes().starts_with(format!("{VAR}=").as_bytes()) {
            owned.push(s.to_owned());
        }
        i += 1;
    }
    owned.push(CString::new(format!("{VAR}={value}")).expect("no NUL in the value"));
    let mut ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    (owned, ptrs)
}

/// What [`prepare`] gives.
type Prepared = ((Vec<CString>, Vec<*const c_char>), c_int, Option<OwnedFd>);

/// The environment with the hand-over (owned strings and the pointer array), the connection
/// left open for the next program (close-on-exec cleared), and the connection made for it, if
/// one was (`spawn`, or a vfork child); `None` without a server.
///
/// # Safety
/// `envp` as in [`with_var`].
unsafe fn prepare(envp: *const *const c_char, spawn: bool) -> Option<Prepared> {
    let _b = Busy::new();
    hand_over(spawn).map(|(value, sock, made)| {
        // SAFETY: the caller's contract on envp.
        let env = unsafe { with_var(envp, &value) };
        // SAFETY: clears close-on-exec on the connection, a descriptor this library owns.
        unsafe { libc::fcntl(sock, libc::F_SETFD, 0) };
        (env, sock, made)
    })
}

/// Run `exec` (which returns only on failure) with the hand-over in the environment.
///
/// # Safety
/// `envp` as in [`with_var`]; `exec` is an exec call on the caller's arguments.
unsafe fn handing_over(
    envp: *const *const c_char,
    exec: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    // SAFETY: the caller's contract on envp.
    let prepared = unsafe { prepare(envp, false) };
    match prepared {
        None => exec(envp),
        Some(((_owned, ptrs), sock, made)) => {
            let r = exec(ptrs.as_ptr());
            let e = state::errno();
            // exec failed: this program goes on, its connection private again (a connection
            // made for the exec is closed, ending its session).
            // SAFETY: as above.
            unsafe { libc::fcntl(sock, libc::F_SETFD, libc::FD_CLOEXEC) };
            drop(made);
            state::set_errno(e);
            r
        }
    }
}

extern "C" {
    static environ: *const *const c_char;
}

/// Most `#!` interpreters one exec goes through (Linux's limit).
const SCRIPT_DEPTH: u32 = 4;

/// execve of `path`, a program in the pool or the kernel's (see `image.rs`).
///
/// # Safety
/// execve(2)'s contract.
unsafe fn exec_image(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    depth: u32,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { image_of(path, true) } {
        Err(e) => {
            state::set_errno(e);
            -1
        }
        Ok(Image::Kernel) => {
            let exec = |env| {
                real!(execve(path, argv, env)
                    as fn(
                        *const c_char,
                        *const *const c_char,
                        *const *const c_char,
                    ) -> c_int)
            };
            // SAFETY: the caller's contract, forwarded.
            unsafe { handing_over(envp, exec) }
        }
        Ok(Image::Script { .. }) if depth >= SCRIPT_DEPTH => {
            state::set_errno(libc::ELOOP);
            -1
        }
        Ok(Image::Script { interp, arg }) => {
            // SAFETY: the caller's contract on argv.
            let v = unsafe { script_argv(&interp, arg.as_ref(), path, argv) };
            // SAFETY: a C string and a NULL-terminated array that live across the call.
            unsafe { exec_image(interp.as_ptr(), v.as_ptr(), envp, depth + 1) }
        }
        Ok(Image::Memory(m)) => {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&m);
            let exec = |env: *const *const c_char| {
                // SAFETY: execveat of the memory file (AT_EMPTY_PATH: the file itself) with the
                // caller's arguments; it returns only on failure.
                unsafe {
                    libc::syscall(
                        libc::SYS_execveat,
                        fd,
                        c"".as_ptr(),
                        argv,
                        env,
                        libc::AT_EMPTY_PATH,
                    ) as c_int
                }
            };
            // SAFETY: the caller's contract, forwarded.
            unsafe { handing_over(envp, exec) }
        }
    }
}

/// # Safety
/// execve(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { exec_image(path, argv, envp, 0) }
}

/// # Safety
/// execv(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's contract; `environ` is the process's environment.
    unsafe { execve(path, argv, environ) }
}

/// # Safety
/// execvpe(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // A name with a slash is not searched for: it may be the pool's.
    // SAFETY: the caller's contract: a C string.
    if !file.is_null() && unsafe { CStr::from_ptr(file) }.to_bytes().contains(&b'/') {
        // SAFETY: the caller's contract.
        return unsafe { exec_image(file, argv, envp, 0) };
    }
    let exec = |env| {
        real!(execvpe(file, argv, env)
            as fn(
                *const c_char,
                *const *const c_char,
                *const *const c_char,
            ) -> c_int)
    };
    // SAFETY: the caller's contract, forwarded.
    unsafe { handing_over(envp, exec) }
}

/// # Safety
/// execvp(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's contract; `environ` is the process's environment.
    unsafe { execvpe(file, argv, environ) }
}

type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *mut c_char,
    *const *mut c_char,
) -> c_int;

/// libc's posix_spawnp (`search`) or posix_spawn.
fn real_spawn(search: bool) -> SpawnFn {
    let name = if search {
        "posix_spawnp\0"
    } else {
        "posix_spawn\0"
    };
    // SAFETY: libc's posix_spawn and posix_spawnp have this prototype.
    unsafe { std::mem::transmute::<usize, SpawnFn>(crate::real::lookup(name)) }
}

/// posix_spawn (or posix_spawnp, `search`) of `path`, a program in the pool or the kernel's.
///
/// # Safety
/// posix_spawn(3)'s contract.
#[allow(clippy::too_many_arguments)]
unsafe fn spawn_image(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
    search: bool,
    depth: u32,
) -> c_int {
    // A name without a slash is searched for in PATH (the kernel's directories).
    // SAFETY: the caller's contract: a C string.
    let slash = !path.is_null() && unsafe { CStr::from_ptr(path) }.to_bytes().contains(&b'/');
    let image = if search && !slash {
        Ok(Image::Kernel)
    } else {
        // SAFETY: the caller's contract.
        unsafe { image_of(path, false) }
    };
    let real = real_spawn(search);
    match image {
        Err(e) => e,
        Ok(Image::Kernel) => {
            // SAFETY: the caller's arguments, forwarded.
            let spawn = |env: *const *const c_char| unsafe {
                real(pid, path, actions, attr, argv, env.cast())
            };
            // SAFETY: the caller's contract, forwarded.
            unsafe { spawning(envp.cast(), spawn) }
        }
        Ok(Image::Script { .. }) if depth >= SCRIPT_DEPTH => libc::ELOOP,
        Ok(Image::Script { interp, arg }) => {
            // SAFETY: the caller's contract on argv.
            let v = unsafe { script_argv(&interp, arg.as_ref(), path, argv.cast()) };
            // SAFETY: a C string and a NULL-terminated array that live across the call.
            unsafe {
                spawn_image(
                    pid,
                    interp.as_ptr(),
                    actions,
                    attr,
                    v.as_ptr().cast(),
                    envp,
                    false,
                    depth + 1,
                )
            }
        }
        Ok(Image::Memory(m)) => {
            // The child inherits the memory file (no close-on-exec) and runs it by its /proc
            // name; this process's copy is closed after the spawn.
            let name = CString::new(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&m)
            ))
            .expect("no NUL");
            // SAFETY: the caller's arguments with the memory file's name.
            let spawn = |env: *const *const c_char| unsafe {
                real(pid, name.as_ptr(), actions, attr, argv, env.cast())
            };
            // SAFETY: the caller's contract, forwarded.
            let r = unsafe { spawning(envp.cast(), spawn) };
            drop(m);
            r
        }
    }
}

/// # Safety
/// posix_spawn(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe { spawn_image(pid, path, actions, attr, argv, envp, false, 0) }
}

/// # Safety
/// posix_spawnp(3)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    unsafe { spawn_image(pid, file, actions, attr, argv, envp, true, 0) }
}

/// Run `spawn` (posix_spawn: the child runs exec inside libc, past this library) with a new
/// session's connection and the hand-over in the environment; the connection is the child's
/// alone once it runs (closed here either way). The file actions are the kernel's: a pool
/// descriptor they move (`adddup2`) is handed over only where the parent has it at that number.
///
/// # Safety
/// `envp` as in [`with_var`].
unsafe fn spawning(
    envp: *const *const c_char,
    spawn: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    // SAFETY: the caller's contract on envp.
    let prepared = unsafe { prepare(envp, true) };
    match prepared {
        None => spawn(envp),
        Some(((_owned, ptrs), _, made)) => {
            let r = spawn(ptrs.as_ptr());
            drop(made); // the child holds its own copy
            r
        }
    }
}

/// The constructor: read the configuration, mark the shim ready, and take up what the program
/// before exec handed over, all before `main` runs.
extern "C" fn inherit() {
    let _b = Busy::new();
    // The configuration is read here, under the guard: its allocations may be the program's
    // first, and an allocator that initializes then calls back into libc (see `busy.rs`).
    let configured = state::config().is_some();
    crate::pid::init();
    crate::busy::ready();
    if !configured {
        return;
    }
    let Some(value) = std::env::var_os(VAR) else {
        return;
    };
    // Not for the programs this one starts: their descriptors are theirs to hand over.
    std::env::remove_var(VAR);
    let value = value.to_string_lossy().into_owned();
    let mut parts = value.split(';');
    let Some(sock) = parts.next().and_then(|s| s.parse::<c_int>().ok()) else {
        return;
    };
    let parts: Vec<&str> = parts.collect();
    let cwd = parts.iter().find_map(|p| unhex(p.strip_prefix("cwd=")?));
    let entries: Vec<_> = parts.iter().filter_map(|e| parse_entry(e)).collect();
    let keep: Vec<_> = entries.iter().map(|(_, (fd, _, _))| *fd).collect();
    // SAFETY: the number named by the program before exec, left open for this one; adopt
    // checks it is a server's connection before using it, and owns it from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(sock) };
    let pool = &state::config().expect("configured (above)").pool;
    let client = match pmkit_fs_share::Client::adopt(fd, &keep, pool) {
        Ok(c) => c,
        Err(e) => {
            state::warn(&format!(
                "the pool descriptors from before exec are lost: {e}"
            ));
            return;
        }
    };
    if !state::adopt(client, parts.contains(&"locked")) {
        return;
    }
    if cwd.is_some() {
        crate::vcwd::set(cwd);
    }
    // dup'd numbers share one open file description, as before exec. (An `Open` closes its
    // pool descriptor when dropped: one is made per descriptor, none thrown away.)
    let mut shared: Vec<Arc<Open>> = Vec::new();
    for (k, (fd, flags, path)) in entries {
        let a = match shared.iter().find(|s| s.fd == fd) {
            Some(a) => Arc::clone(a),
            None => {
                let a = Arc::new(Open { fd, flags, path });
                shared.push(Arc::clone(&a));
                a
            }
        };
        drop(state::insert(k, a));
        if k <= 2 {
            crate::stdio::adopt_standard(k);
        }
    }
}

/// An inherited number's pool descriptor, open flags and path.
type Entry = (pmkit_fs::posix::Fd, c_int, Vec<u8>);

/// One inherited number: `K,FD,FLAGS,HEXPATH`.
fn parse_entry(e: &str) -> Option<(c_int, Entry)> {
    let mut f = e.split(',');
    let k = f.next()?.parse().ok()?;
    let fd = pmkit_fs::posix::Fd(f.next()?.parse().ok()?);
    let flags = f.next()?.parse().ok()?;
    let path = unhex(f.next()?)?;
    Some((k, (fd, flags, path)))
}

/// Run [`inherit`] when the library is loaded.
#[used]
#[link_section = ".init_array"]
static INHERIT: extern "C" fn() = inherit;

// The variadic `execl`, `execlp` and `execle`: `execl.c` reads their argument lists (stable
// Rust has no C variadics) and calls this library's `execv`, `execvp` and `execve`. The public
// names are exported here, as jumps that leave the caller's registers and stack as they were.
extern "C" {
    fn pmkit_execl();
    fn pmkit_execlp();
    fn pmkit_execle();
}

variadic!(execl => pmkit_execl);
variadic!(execlp => pmkit_execlp);
variadic!(execle => pmkit_execle);
