//! The pool as this process reaches it: mounted here on the first call under the prefix
//! (unmounted at exit), or, when another process holds it, through its server (`pmkit fs
//! serve`), with the connection handed over at fork and exec; and [`enter`], the boundary every
//! served call goes through.

use crate::busy::Busy;
use crate::config::{config, warn, Config};
use pmkit_cabi::set_errno;
use pmkit_fs::posix::{Fd, Posix};
use pmkit_fs::{Fs, MountOptions};
use pmkit_fs_share::{Client, PoolApi};
use pmkit_media::{Region, RegionOptions};
use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{OnceLock, RwLock};

/// The pool as this process reaches it.
pub(crate) enum Backend {
    /// Mounted here: this process holds the pool alone (`flock`), calls run in place.
    Local(Posix<Region>),
    /// Served by another process (`pmkit fs serve`): each call goes to the server, which runs
    /// it on this process's session; many processes, forked children too, share the pool.
    Remote(Box<Client>),
}

impl Backend {
    pub(crate) fn api(&self) -> &dyn PoolApi {
        match self {
            Backend::Local(p) => p,
            Backend::Remote(c) => c.as_ref(),
        }
    }
}

type Pool = RwLock<Option<Backend>>;

/// The longest pool path a relative path joined to the current directory may make: 16 times
/// PATH_MAX (ENAMETOOLONG beyond; the kernel has no such bound, but a shim holding the current
/// directory as a string needs one).
const JOINED_PATH_MAX: usize = 16 * libc::PATH_MAX as usize;

/// The mounted pool, or the errno every call under the prefix gets.
static POOL: OnceLock<Result<Pool, c_int>> = OnceLock::new();
/// Set in a child of fork of a process that mounted the pool itself: the parent owns it.
static FORKED: AtomicBool = AtomicBool::new(false);
static FORK_WARNED: AtomicBool = AtomicBool::new(false);

extern "C" fn after_fork_child() {
    FORKED.store(true, Ordering::SeqCst);
}

/// Run `f` on the pool's client, if the pool is served to this process by a server.
fn with_client(f: impl FnOnce(&Client)) {
    let _b = Busy::new();
    if let Some(Ok(p)) = POOL.get() {
        if let Ok(g) = p.read() {
            if let Some(Backend::Remote(c)) = g.as_ref() {
                f(c);
            }
        }
    }
}

extern "C" fn remote_fork_prepare() {
    with_client(Client::fork_prepare);
}

extern "C" fn remote_fork_parent() {
    with_client(Client::fork_parent);
}

extern "C" fn remote_fork_child() {
    with_client(Client::fork_child);
}

extern "C" fn at_exit() {
    if FORKED.load(Ordering::SeqCst) {
        return;
    }
    let _b = Busy::new();
    if let Some(Ok(p)) = POOL.get() {
        // Descriptors still open are closed by the unmount; the pool is marked clean. (A
        // client's session ends when its connection closes, at exit.)
        let taken = p.write().map(|mut g| g.take());
        if let Ok(Some(Backend::Local(posix))) = taken {
            drop(posix.unmount());
        }
    }
}

fn mount(c: &Config) -> Result<Pool, c_int> {
    let fail = |code: c_int, msg: String| {
        warn(&format!("{}: {msg}", c.pool.display()));
        code
    };
    // As the C ABI's pmfs_mount: PMFS_PROTECT, PMFS_BARRIER_NS, PMFS_FULL_WALK.
    let o = MountOptions::from_env().map_err(|e| fail(libc::EINVAL, e))?;
    let region = Region::open(&c.pool, &RegionOptions::default())
        .map_err(|e| fail(libc::EIO, format!("cannot open the pool: {e}")))?;
    match region.claim(true) {
        Ok(()) => {}
        Err(e @ pmkit_media::MediaError::InUse { .. }) => {
            drop(region);
            return connect(c).map_err(|why| {
                fail(
                    libc::EBUSY,
                    format!(
                        "{e}; and no server answered ({why}): serve the pool to processes with `pmkit fs \
                         serve {}` or `pmkit fs mount` (not read-only)",
                        c.pool.display()
                    ),
                )
            });
        }
        Err(e) => return Err(fail(libc::EIO, format!("cannot lock the pool: {e}"))),
    }
    let (fs, _) = Fs::mount(region, &o).map_err(|e| fail(e.errno(), format!("mount: {e}")))?;
    // SAFETY: registering handlers of ours that only store an atomic / unmount under the
    // guard; both live as long as the process (this library is never unloaded).
    unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_child));
        libc::atexit(at_exit);
    }
    let p = Posix::new(fs);
    // The kernel limits the string a call passes, not that string joined to the current
    // directory: each string is checked against PATH_MAX where it is copied in, and the joined
    // path may be longer, up to this explicit bound.
    p.set_path_max(JOINED_PATH_MAX);
    // Permissions are checked as the kernel would for this process (docs/fs.md).
    p.set_cred(Some(crate::ids::current()));
    Ok(RwLock::new(Some(Backend::Local(p))))
}

/// The pool is held by another process: use its server, if one serves it.
fn connect(c: &Config) -> Result<Pool, String> {
    // The pool file opened for reading and writing is this process's proof of access.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&c.pool)
        .map_err(|e| format!("cannot open the pool for writing: {e}"))?;
    let client = Client::connect(
        &c.pool,
        std::os::fd::AsRawFd::as_raw_fd(&file),
        Some(crate::ids::current()),
        JOINED_PATH_MAX,
    )
    .map_err(|e| e.to_string())?;
    remote_fork_handlers();
    Ok(RwLock::new(Some(Backend::Remote(Box::new(client)))))
}

fn remote_fork_handlers() {
    // SAFETY: registering handlers of ours that hand the connection over at fork; they live as
    // long as the process (this library is never unloaded).
    unsafe {
        libc::pthread_atfork(
            Some(remote_fork_prepare),
            Some(remote_fork_parent),
            Some(remote_fork_child),
        );
    }
}

/// Use `client`, a session inherited across exec, as this process's pool (before any call);
/// `locked`: the session holds locks from before exec. False if the pool was already set up.
pub(crate) fn adopt(client: Client, locked: bool) -> bool {
    let set = POOL.set(Ok(RwLock::new(Some(Backend::Remote(Box::new(client))))));
    if set.is_ok() {
        remote_fork_handlers();
        if locked {
            with_client(Client::took_locks);
        }
        with_client(|c| {
            let _ = c.set_cred(Some(crate::ids::current()));
        });
    }
    set.is_ok()
}

/// Whether `fd` is the shim's connection to the pool's server, which the program must not
/// close (its `close` succeeds and closes nothing).
pub(crate) fn is_own(fd: c_int) -> bool {
    if fd < 0 {
        return false;
    }
    let mut own = false;
    with_client(|c| own = c.socket() == fd);
    own
}

/// The shim's connection to the pool's server, or -1.
pub(crate) fn own_socket() -> c_int {
    let mut own = -1;
    with_client(|c| own = c.socket());
    own
}

/// The program is about to put another file on number `fd`: if it is the shim's connection,
/// move the connection elsewhere first.
pub(crate) fn make_room(fd: c_int) {
    if is_own(fd) {
        with_client(Client::move_socket);
    }
}

/// The server connection the next program of an exec adopts, when a server serves the pool
/// to this process (`Client::session_for_exec`).
pub(crate) fn exec_socket(spawn: bool) -> Option<(c_int, Option<std::os::fd::OwnedFd>)> {
    let mut out = None;
    with_client(|c| out = c.session_for_exec(spawn));
    out
}

/// Whether the server's session has taken a lock (`Client::holds_locks`): the next program
/// of an exec is told, so that its closes go at once.
pub(crate) fn exec_locked() -> bool {
    let mut locked = false;
    with_client(|c| locked = c.holds_locks());
    locked
}

/// Run `f` on the pool if it is mounted (not mounting it).
pub(crate) fn with_mounted(f: impl FnOnce(&dyn PoolApi)) {
    let _b = Busy::new();
    if let Some(Ok(pool)) = POOL.get() {
        if let Ok(g) = pool.read() {
            if let Some(p) = g.as_ref() {
                f(p.api());
            }
        }
    }
}

/// Run a served call: `f` gets the pool; an error sets errno and gives `err`. A child of
/// fork of a process that mounted the pool itself, a pool that failed to mount, one unmounted
/// at exit, and a panic are errors too.
pub(crate) fn enter<T>(err: T, f: impl FnOnce(&dyn PoolApi) -> Result<T, c_int>) -> T {
    let _b = Busy::new();
    let r = if FORKED.load(Ordering::SeqCst) {
        if !FORK_WARNED.swap(true, Ordering::SeqCst) {
            warn(
                "a child of fork cannot use a pool its parent mounted alone: EIO (run `pmkit fs serve POOL` to share the pool between processes)",
            );
        }
        Err(libc::EIO)
    } else {
        match config().map(|c| POOL.get_or_init(|| mount(c))) {
            None => Err(libc::EIO),
            Some(Err(e)) => Err(*e),
            Some(Ok(pool)) => match pool.read() {
                Ok(g) => match g.as_ref() {
                    Some(p) => catch_unwind(AssertUnwindSafe(|| f(p.api()))).unwrap_or_else(|_| {
                        warn("internal error (a bug: it panicked): EIO");
                        Err(libc::EIO)
                    }),
                    None => Err(libc::EIO), // unmounted at exit
                },
                Err(_) => Err(libc::EIO),
            },
        }
    };
    match r {
        Ok(v) => v,
        Err(code) => {
            set_errno(code);
            err
        }
    }
}

/// Close pool descriptor `fd` (the last number standing for it went away).
pub(crate) fn close_pool_fd(fd: Fd) {
    if FORKED.load(Ordering::SeqCst) {
        return; // the parent's descriptor; the child only drops its number
    }
    let _b = Busy::new();
    if let Some(Ok(p)) = POOL.get() {
        if let Ok(g) = p.read() {
            if let Some(p) = g.as_ref() {
                let _ = p.api().close(fd);
            }
        }
    }
}
