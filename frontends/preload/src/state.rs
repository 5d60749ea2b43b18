//! The shim's state: configuration (read once), the pool (mounted on the first call under the
//! prefix, unmounted at exit), the table of descriptors it handed out, the reentrancy guard,
//! and [`enter`], the boundary every served call goes through.

use pmkit_fs::posix::{Fd, Posix};
use pmkit_fs::{Fs, MountOptions};
use pmkit_fs_share::{Client, PoolApi};
use pmkit_media::{Region, RegionOptions};
use std::collections::HashMap;
use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

pub(crate) use crate::busy::{busy, Busy};

pub(crate) struct Config {
    /// Absolute, normalized (see [`normalize`]), never "/".
    pub prefix: Vec<u8>,
    pub pool: PathBuf,
}

static CONFIG: OnceLock<Option<Config>> = OnceLock::new();

/// The configuration, or None (inert) when `PMKIT_PRELOAD_POOL` or `PMKIT_PRELOAD_PREFIX` is
/// missing or empty.
pub(crate) fn config() -> Option<&'static Config> {
    CONFIG
        .get_or_init(|| {
            let _b = Busy::new();
            let pool = std::env::var_os("PMKIT_PRELOAD_POOL").filter(|v| !v.is_empty());
            let prefix = std::env::var_os("PMKIT_PRELOAD_PREFIX").filter(|v| !v.is_empty());
            let (Some(pool), Some(prefix)) = (pool, prefix) else {
                // Preloaded but not told what to serve: say so once, or a user believes the
                // program ran on the pool while the kernel served every path.
                warn(
                    "PMKIT_PRELOAD_POOL and PMKIT_PRELOAD_PREFIX are not both set: inert, \
                     every path goes to the kernel",
                );
                return None;
            };
            let raw = std::os::unix::ffi::OsStrExt::as_bytes(prefix.as_os_str()).to_vec();
            let prefix = normalize(&raw);
            if raw.first() != Some(&b'/') || prefix == b"/" {
                warn(&format!(
                    "PMKIT_PRELOAD_PREFIX={} must be an absolute path other than /: inert",
                    String::from_utf8_lossy(&raw)
                ));
                return None;
            }
            Some(Config {
                prefix,
                pool: PathBuf::from(pool),
            })
        })
        .as_ref()
}

/// `path` (absolute) with empty and `.` components dropped and `..` applied lexically.
/// A pool path as a name to keep (a descriptor's, the current directory's): without the
/// trailing slashes and the "/." that `route` keeps for the calls that refuse a final dot.
pub(crate) fn kept_path(mut p: Vec<u8>) -> Vec<u8> {
    while p.len() > 1 && (p.ends_with(b"/") || p.ends_with(b"/.")) {
        p.pop();
        if p.ends_with(b"/") && p.len() > 1 {
            p.pop();
        }
    }
    p
}

/// The last component of `path`, trailing slashes ignored (empty for "/" or "").
pub(crate) fn last_component(path: &[u8]) -> &[u8] {
    path.split(|&b| b == b'/')
        .rfind(|c| !c.is_empty())
        .unwrap_or(b"")
}

pub(crate) fn normalize(path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::with_capacity(path.len() + 1);
    for c in parts {
        out.push(b'/');
        out.extend_from_slice(c);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// One line on stderr, prefixed with the library's name.
pub(crate) fn warn(msg: &str) {
    let _b = Busy::new();
    let line = format!("pmkit-preload: {msg}\n");
    // SAFETY: a write of our own buffer; the guard sends it to libc.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// The pool as this process reaches it.
pub(crate) enum Backend {
    /// Mounted here: this process holds the pool alone (`flock`), calls run in place.
    Local(Posix<Region>),
    /// Served by another process (`pmkit fs serve`): each call goes to the server, which runs
    /// it on this process's session; many processes, forked children too, share the pool.
    Remote(Client),
}

impl Backend {
    pub(crate) fn api(&self) -> &dyn PoolApi {
        match self {
            Backend::Local(p) => p,
            Backend::Remote(c) => c,
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
                        "{e}; and no server answered ({why}): run `pmkit fs serve {}` to share                          the pool between processes",
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
    Ok(RwLock::new(Some(Backend::Remote(client))))
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
/// false if the pool was already set up.
pub(crate) fn adopt(client: Client) -> bool {
    let set = POOL.set(Ok(RwLock::new(Some(Backend::Remote(client)))));
    if set.is_ok() {
        remote_fork_handlers();
        with_client(|c| {
            let _ = c.set_cred(Some(crate::ids::current()));
        });
    }
    set.is_ok()
}

/// The server connection's descriptor, when a server serves the pool to this process.
pub(crate) fn client_socket() -> Option<c_int> {
    let mut out = None;
    with_client(|c| out = c.socket());
    out
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
                "a child of fork cannot use a pool its parent mounted alone: EIO (run                  `pmkit fs serve POOL` to share the pool between processes)",
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

pub(crate) use pmkit_cabi::{errno, set_errno};

/// `mode` less the process's umask, as the kernel applies it to a file or directory it
/// creates.
pub(crate) fn umasked(mode: u32) -> u32 {
    // Nothing to clear (every open without O_CREAT): no need for the two system calls that
    // read the mask.
    if mode == 0 {
        return 0;
    }
    // SAFETY: umask only swaps the process's mask; the old one is put back at once.
    let old = unsafe {
        let old = libc::umask(0);
        libc::umask(old);
        old
    };
    mode & !old
}

/// errno of a library error.
pub(crate) fn en(e: pmkit_fs::Error) -> c_int {
    e.errno()
}

/// A descriptor the shim handed out: a kernel descriptor number (an epoll instance, so that
/// the kernel answers any call the shim does not serve with an error, never with data or a
/// change elsewhere) stands for a pool descriptor. dup'd numbers share one `Open`, as they
/// share one open file description in the kernel.
pub(crate) struct Open {
    pub fd: Fd,
    /// open(2)'s flags.
    pub flags: c_int,
    /// The pool path it was opened by (for *at calls relative to a directory).
    pub path: Vec<u8>,
}

impl Drop for Open {
    fn drop(&mut self) {
        if FORKED.load(Ordering::SeqCst) {
            return; // the parent's descriptor; the child only drops its number
        }
        let _b = Busy::new();
        if let Some(Ok(p)) = POOL.get() {
            if let Ok(g) = p.read() {
                if let Some(p) = g.as_ref() {
                    let _ = p.api().close(self.fd);
                }
            }
        }
    }
}

static FDS: Mutex<Option<HashMap<c_int, Arc<Open>>>> = Mutex::new(None);
/// Entries in `FDS`: calls on descriptors skip the lock while it is 0.
static NFDS: AtomicUsize = AtomicUsize::new(0);

/// The shim's descriptor `fd`, if it is one (never while the shim's own code runs).
pub(crate) fn lookup(fd: c_int) -> Option<Arc<Open>> {
    if NFDS.load(Ordering::Acquire) == 0 || busy() {
        return None;
    }
    let g = FDS.lock().ok()?;
    g.as_ref()?.get(&fd).cloned()
}

/// Record `fd` as standing for `o`; an entry it replaces is returned (to drop unlocked).
pub(crate) fn insert(fd: c_int, o: Arc<Open>) -> Option<Arc<Open>> {
    let mut g = FDS.lock().unwrap_or_else(|e| e.into_inner());
    let old = g.get_or_insert_with(HashMap::new).insert(fd, o);
    if old.is_none() {
        NFDS.fetch_add(1, Ordering::AcqRel);
    }
    old
}

/// Every entry of the table.
pub(crate) fn entries() -> Vec<(c_int, Arc<Open>)> {
    let g = FDS.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()
        .map(|m| m.iter().map(|(k, o)| (*k, Arc::clone(o))).collect())
        .unwrap_or_default()
}

/// The numbers in the table.
pub(crate) fn numbers() -> Vec<c_int> {
    if NFDS.load(Ordering::Acquire) == 0 {
        return Vec::new();
    }
    let g = FDS.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref()
        .map(|m| m.keys().copied().collect())
        .unwrap_or_default()
}

/// Forget `fd`; its entry is returned (dropping the last one closes the pool descriptor).
pub(crate) fn remove(fd: c_int) -> Option<Arc<Open>> {
    if NFDS.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut g = FDS.lock().unwrap_or_else(|e| e.into_inner());
    let old = g.as_mut()?.remove(&fd);
    if old.is_some() {
        NFDS.fetch_sub(1, Ordering::AcqRel);
    }
    old
}

/// This process's id, asked once (glibc's `getpid` is a system call) and forgotten in the child
/// of a fork (a `pthread_atfork` handler), so the copy below reads this process and no other.
/// A `vfork` child (or `posix_spawn`'s) shares the parent's memory, so the parent's id reads the
/// same bytes; a raw `clone` without `CLONE_VM` is outside what the shim supports (docs/fs.md).
fn own_pid() -> libc::pid_t {
    static PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn forget() {
        PID.store(0, Ordering::Relaxed);
    }
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: registers a handler that only stores an atomic; this library is never unloaded.
    ONCE.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(forget));
    });
    // SAFETY: getpid cannot fail.
    let p = unsafe { libc::getpid() };
    PID.store(p, Ordering::Relaxed);
    p
}

thread_local! {
    /// The calling thread's stack `(low, high)` from `pthread_getattr_np`, asked once per
    /// thread (`(0, 0)`: unknown, do not use).
    static STACK: std::cell::Cell<Option<(usize, usize)>> = const { std::cell::Cell::new(None) };
}

fn thread_stack() -> (usize, usize) {
    if let Some(r) = STACK.with(|c| c.get()) {
        return r;
    }
    let _b = Busy::new(); // glibc reads /proc/self/maps for the main thread
                          // SAFETY: a zeroed attr filled by pthread_getattr_np for the calling thread, read, destroyed.
    let r = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        let mut r = (0, 0);
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) == 0 {
            let (mut addr, mut size) = (std::ptr::null_mut(), 0usize);
            if libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0 && size > 0 {
                r = (addr as usize, addr as usize + size);
            }
            libc::pthread_attr_destroy(&mut attr);
        }
        r
    };
    STACK.with(|c| c.set(Some(r)));
    r
}

/// The string at `ptr` with no system call, when it lies on the calling thread's live stack:
/// between this frame (a local's address: at or above the stack pointer) and the top of the
/// thread's stack, memory the thread is running on, so mapped and readable. A pointer anywhere
/// else (heap, data, another thread's stack, a signal or coroutine stack outside the thread's
/// own, unmapped memory) gets `None`, and the caller reads it with `process_vm_readv`. C
/// programs often build paths in stack buffers (`char path[PATH_MAX]`). The one case this does
/// not cover: a pointer into part of the thread's own live stack that the program made
/// unreadable itself (`mprotect` of its stack to `PROT_NONE`), where a load faults.
fn copy_from_stack(ptr: *const libc::c_char) -> Option<Vec<u8>> {
    let here = 0u8;
    let sp = std::hint::black_box(&here) as *const u8 as usize;
    let (lo, hi) = thread_stack();
    let p = ptr as usize;
    if !(lo <= sp && sp <= p && p < hi) {
        return None;
    }
    // SAFETY: `[p, hi)` lies between the current frame and the top of the running thread's stack
    // (checked above), which is mapped and readable while the thread runs on it; `hi` is a page
    // boundary.
    unsafe { copy_before(ptr, hi) }
}

/// The NUL-terminated string at `ptr` if it ends before `hi` and within `PATH_MAX` bytes.
///
/// # Safety
/// `[ptr, hi)` must be mapped and readable, `hi` a page boundary (libc's vector loads stay
/// inside the pages of the range).
unsafe fn copy_before(ptr: *const libc::c_char, hi: usize) -> Option<Vec<u8>> {
    let len = (hi - ptr as usize).min(libc::PATH_MAX as usize);
    // SAFETY: the caller's contract.
    let n = unsafe { libc::strnlen(ptr, len) };
    if n == len {
        return None;
    }
    let mut out = vec![0u8; n];
    // SAFETY: `n` < `len` bytes of the readable range, into our own buffer of `n` bytes.
    unsafe { std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), out.as_mut_ptr(), n) };
    Some(out)
}

/// Where the process's brk heap starts (`/proc/self/stat` field 47, read once; 0: unknown).
fn start_brk() -> usize {
    static START: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *START.get_or_init(|| {
        let _b = Busy::new(); // the read below must not come back through the shim
        std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| {
                // Fields after the command name (which may hold spaces) start at field 3.
                let rest = &s[s.rfind(')')? + 1..];
                rest.split_whitespace().nth(47 - 3)?.parse().ok()
            })
            .unwrap_or(0)
    })
}

/// The string at `ptr` with no system call, when it lies in the brk heap (where malloc puts a
/// single-threaded program's small strings: `find` and `grep` build their paths there): from
/// the heap's start to the current break, memory the kernel keeps mapped and writable (the
/// break is page-aligned in the mapping). `None` elsewhere. Not covered, as for the stack: a
/// pointer into heap memory the program itself made unreadable with `mprotect`, or freed and
/// trimmed away by another thread during the call (a use after free in the program).
fn copy_from_brk(ptr: *const libc::c_char) -> Option<Vec<u8>> {
    let lo = start_brk();
    // SAFETY: sbrk(0) only reads glibc's cached break (no system call after the first).
    let brk = unsafe { libc::sbrk(0) } as usize;
    let p = ptr as usize;
    if lo == 0 || brk == usize::MAX || !(lo <= p && p < brk) {
        return None;
    }
    // SAFETY: `[p, page_align(brk))` lies in the heap the kernel keeps mapped (checked above).
    unsafe { copy_before(ptr, (brk + 4095) & !4095) }
}

/// The main program's readable loaded segments (ELF `PT_LOAD` with `PF_R`), rounded out to
/// pages: its string literals, globals and static buffers. The loader maps them for the life of
/// the process (a program is never unloaded), so they stay readable. Read once.
fn image_segments() -> &'static [(usize, usize)] {
    static SEGS: std::sync::OnceLock<Vec<(usize, usize)>> = std::sync::OnceLock::new();
    unsafe extern "C" fn first_object(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        out: *mut libc::c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid `info` for the call; `out` is the Vec we passed.
        let (info, out) = unsafe { (&*info, &mut *out.cast::<Vec<(usize, usize)>>()) };
        for k in 0..info.dlpi_phnum as usize {
            // SAFETY: `dlpi_phdr` holds `dlpi_phnum` program headers.
            let ph = unsafe { &*info.dlpi_phdr.add(k) };
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_R != 0 && ph.p_memsz > 0 {
                let lo = info.dlpi_addr as usize + ph.p_vaddr as usize;
                let hi = lo + ph.p_memsz as usize;
                out.push((lo & !4095, (hi + 4095) & !4095));
            }
        }
        1 // the first object is the main program: stop
    }
    SEGS.get_or_init(|| {
        let _b = Busy::new();
        let mut v: Vec<(usize, usize)> = Vec::new();
        // SAFETY: the callback only reads the headers the loader hands it and pushes to `v`,
        // which outlives the call.
        unsafe { libc::dl_iterate_phdr(Some(first_object), (&mut v as *mut Vec<_>).cast()) };
        v
    })
}

/// The string at `ptr` with no system call, when it lies in the main program's loaded image
/// (a literal, a global, a static buffer: postmark builds its paths in one).
fn copy_from_image(ptr: *const libc::c_char) -> Option<Vec<u8>> {
    let p = ptr as usize;
    let &(_, hi) = image_segments()
        .iter()
        .find(|&&(lo, hi)| lo <= p && p < hi)?;
    // SAFETY: `[p, hi)` lies in a readable segment of the main program, mapped for the life
    // of the process; `hi` is a page boundary.
    unsafe { copy_before(ptr, hi) }
}

/// Copy the NUL-terminated string at `ptr` (at most `PATH_MAX` bytes) without trusting the
/// pointer: in place where it is provably readable (the stack, the brk heap, the program's
/// image), else by the guarded routine (`guarded`: a fault is an error, not a crash), else (no
/// guarded routine here) with `process_vm_readv` on this process, one page at a time, which
/// answers EFAULT for memory that is not readable. `None`: unreadable, or no NUL within
/// `PATH_MAX` bytes.
pub(crate) fn copy_c_string(ptr: *const libc::c_char) -> Option<Vec<u8>> {
    copy_path(ptr).ok()
}

/// [`copy_c_string`], or why not, as the kernel would answer: EFAULT (not readable, or NULL),
/// ENAMETOOLONG (no NUL within `PATH_MAX` bytes).
pub(crate) fn copy_path(ptr: *const libc::c_char) -> Result<Vec<u8>, libc::c_int> {
    if ptr.is_null() {
        return Err(libc::EFAULT);
    }
    if let Some(v) = copy_from_stack(ptr)
        .or_else(|| copy_from_brk(ptr))
        .or_else(|| copy_from_image(ptr))
    {
        return Ok(v);
    }
    if let Some(r) = crate::guarded::copy(ptr, libc::PATH_MAX as usize) {
        return r;
    }
    const PAGE: usize = 4096;
    let mut out = Vec::new();
    let mut at = ptr as usize;
    while out.len() < libc::PATH_MAX as usize {
        let chunk = PAGE - at % PAGE;
        let mut buf = vec![0u8; chunk];
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: chunk,
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: chunk,
        };
        // SAFETY: the kernel copies from our own address space into `buf`, which is ours and
        // `chunk` bytes long; an unreadable source is an error return, never a fault.
        let n = unsafe { libc::process_vm_readv(own_pid(), &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(libc::EFAULT);
        }
        let n = n as usize;
        if let Some(z) = buf[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..z]);
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
        at += n;
    }
    Err(libc::ENAMETOOLONG)
}

/// Where a path argument goes.
pub(crate) enum Route {
    /// To libc (not under the prefix, the shim inert or busy).
    Real,
    /// To the pool, by this path from its root.
    Pool(Vec<u8>),
}

/// Decide where `path`, relative to `dirfd` when not absolute, goes: under the prefix (after
/// lexical normalization against the current directory, a shim directory descriptor, or a
/// kernel directory descriptor's path from /proc) it is the pool's, elsewhere libc's.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string.
pub(crate) unsafe fn route(dirfd: c_int, path: *const libc::c_char) -> Route {
    if path.is_null() || busy() {
        return Route::Real;
    }
    let Some(c) = config() else {
        return Route::Real;
    };
    // A bad pointer goes to libc, whose system call answers EFAULT as the kernel would; reading
    // it here would crash the program instead.
    let Some(owned) = copy_c_string(path) else {
        return Route::Real;
    };
    let p = &owned[..];
    if p.is_empty() {
        return Route::Real;
    }
    let full = if p[0] == b'/' {
        p.to_vec()
    } else if dirfd == libc::AT_FDCWD {
        let mut v = match crate::vcwd::get() {
            Some(v) => v,
            None => {
                let _b = Busy::new();
                let Ok(cwd) = std::env::current_dir() else {
                    return Route::Real;
                };
                std::os::unix::ffi::OsStrExt::as_bytes(cwd.as_os_str()).to_vec()
            }
        };
        v.push(b'/');
        v.extend_from_slice(p);
        v
    } else if let Some(o) = lookup(dirfd) {
        // Relative to a shim directory: inside the pool whatever `..` says at its root.
        let mut v = o.path.clone();
        v.push(b'/');
        v.extend_from_slice(p);
        let mut n = normalize(&v);
        if p.ends_with(b"/") {
            n.push(b'/');
        }
        return Route::Pool(n);
    } else {
        // A kernel directory descriptor: its path, from /proc (a directory above the prefix,
        // as find and rm -r open them, leads into the pool).
        let _b = Busy::new();
        let Ok(dir) = std::fs::read_link(format!("/proc/self/fd/{dirfd}")) else {
            return Route::Real;
        };
        let mut v = std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()).to_vec();
        if v.first() != Some(&b'/') {
            return Route::Real; // not a directory ("pipe:[...]", "anon_inode:...")
        }
        v.push(b'/');
        v.extend_from_slice(p);
        v
    };
    let n = normalize(&full);
    let rest = if n == c.prefix {
        b"/".to_vec()
    } else if n.starts_with(&c.prefix) && n[c.prefix.len()] == b'/' {
        n[c.prefix.len()..].to_vec()
    } else {
        return Route::Real;
    };
    let mut rest = rest;
    if matches!(last_component(p), b"." | b"..") {
        // "dir/." names dir lexically, but rmdir, unlink and rename refuse it (EINVAL): the
        // pool sees the dot.
        if rest != b"/" {
            rest.push(b'/');
        }
        rest.push(b'.');
    } else if p.ends_with(b"/") && rest != b"/" {
        rest.push(b'/'); // "file/" is ENOTDIR, as the kernel says
    }
    Route::Pool(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_final_dot_is_seen_and_not_kept() {
        assert_eq!(last_component(b"/a/b/."), b".");
        assert_eq!(last_component(b"a/..//"), b"..");
        assert_eq!(last_component(b"/"), b"");
        assert_eq!(last_component(b"a."), b"a.");
        assert_eq!(kept_path(b"/x/.".to_vec()), b"/x");
        assert_eq!(kept_path(b"/.".to_vec()), b"/");
        assert_eq!(kept_path(b"/x/a.".to_vec()), b"/x/a.");
        assert_eq!(kept_path(b"/x//".to_vec()), b"/x");
        assert_eq!(kept_path(b"/".to_vec()), b"/");
    }
}
