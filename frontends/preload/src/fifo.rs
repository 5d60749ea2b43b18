//! FIFOs made in the pool, opened through the shim. A pipe's data never belongs in the pool (the
//! kernel keeps none of it on disk either), so each FIFO node stands for a kernel FIFO in a
//! private directory of this process (mode 0700 from `mkdtemp`, made at the first open, removed
//! at exit), named by the node's inode number. An open of the pool path, permission checked by
//! the pool, opens that kernel FIFO with the caller's flags: blocking until the other end opens,
//! O_NONBLOCK's ENXIO for a writer with no reader, the data and `poll` are the kernel's own, and
//! the descriptor survives fork and exec like any pipe. `fstat` of such a descriptor answers the
//! pool node (recognised by the backing FIFO's device and inode, so a dup'd, inherited or reused
//! number never gets another file's attributes).
//! Limit (docs/fs.md): another process reaches the FIFO only through a descriptor it inherits.

use crate::state::enter;
use std::collections::HashMap;
use std::ffi::{c_int, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Whether any pool FIFO was opened in this process: until then an fstat of a pipe (every
/// shell makes them) takes no lock here.
static ANY: AtomicBool = AtomicBool::new(false);

/// The private directory (and the process that made it, the one that removes it at exit), and
/// each backing FIFO's (st_dev, st_ino) → the pool node's inode number.
struct Backing {
    dir: Option<(PathBuf, u32)>,
    nodes: Option<HashMap<(u64, u64), u64>>,
}

static BACKING: Mutex<Backing> = Mutex::new(Backing {
    dir: None,
    nodes: None,
});

/// At most this many FIFO nodes get a backing FIFO in one process (each is a directory entry
/// in the private directory, removed at exit): an explicit bound, as the kernel's own
/// `fs.pipe-max-size`-style limits are.
const MAX_BACKED: usize = 1 << 16;

/// -1 with errno `e`, as a failed call answers.
fn fail(e: c_int) -> c_int {
    crate::state::set_errno(e);
    -1
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The private directory, made on first use.
fn dir(b: &mut Backing) -> Result<PathBuf, c_int> {
    if let Some((d, _)) = &b.dir {
        return Ok(d.clone());
    }
    let base = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let mut template = base
        .join("pmkit-fifo.XXXXXX")
        .as_os_str()
        .as_bytes()
        .to_vec();
    template.push(0);
    // SAFETY: a NUL-terminated, writable template of ours.
    let p = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
    if p.is_null() {
        return Err(errno());
    }
    template.pop();
    let d = PathBuf::from(std::ffi::OsStr::from_bytes(&template));
    b.dir = Some((d.clone(), std::process::id()));
    // SAFETY: registers a plain `extern "C" fn()` of ours.
    unsafe { libc::atexit(remove_dir) };
    Ok(d)
}

/// At exit of the process that made it: the private directory and its FIFOs go (a forked child
/// exiting leaves them to the parent).
extern "C" fn remove_dir() {
    let b = BACKING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((d, pid)) = &b.dir {
        if *pid == std::process::id() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// open(2) of the pool FIFO with inode number `ino` (permission already checked by the pool):
/// the kernel descriptor of its backing FIFO, or -1 with errno set.
pub(crate) fn open(ino: u64, flags: c_int) -> c_int {
    let path = {
        let mut b = BACKING.lock().unwrap_or_else(|e| e.into_inner());
        match dir(&mut b) {
            Ok(d) if b.nodes.as_ref().map_or(0, HashMap::len) < MAX_BACKED => {
                d.join(ino.to_string())
            }
            Ok(_) => return fail(libc::ENFILE),
            Err(e) => return fail(e),
        }
    };
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return fail(libc::EINVAL);
    };
    let mode = libc::S_IFIFO | 0o600;
    // SAFETY: a NUL-terminated path of ours; mknodat(2) of a FIFO in our own directory (the
    // system call itself: the shim's `mknod` is not in the way).
    let made = unsafe { libc::syscall(libc::SYS_mknodat, libc::AT_FDCWD, c.as_ptr(), mode, 0) };
    if made != 0 && errno() != libc::EEXIST {
        return fail(errno());
    }
    // The pool's own flags are not the kernel FIFO's business (O_CREAT made the node already).
    let kflags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
    // Outside the pool's lock: an open of a FIFO waits for the other end.
    let fd =
        real!(open(c.as_ptr(), kflags, 0) as fn(*const libc::c_char, c_int, libc::c_uint) -> c_int);
    if fd >= 0 {
        // The kernel gave out a number the table still holds (a shim descriptor closed past
        // this library, as in `open::openat`): forget it.
        drop(crate::state::remove(fd));
        // SAFETY: all-zero is a valid `struct stat`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat(2) of the descriptor just opened into a local `struct stat`.
        if unsafe { libc::syscall(libc::SYS_fstat, fd, &raw mut st) } == 0 {
            let mut b = BACKING.lock().unwrap_or_else(|e| e.into_inner());
            b.nodes
                .get_or_insert_with(HashMap::new)
                .insert((st.st_dev, st.st_ino), ino);
            ANY.store(true, Ordering::Release);
        }
    }
    fd
}

/// The pool inode a kernel file stands for, when `(dev, ino, mode)` (a kernel fstat's answer)
/// is one of this process's backing FIFOs. Never inside a served call (the shim's own
/// fstats are the kernel's).
fn node_of(dev: u64, ino: u64, mode: u32) -> Option<u64> {
    if mode & libc::S_IFMT != libc::S_IFIFO || !ANY.load(Ordering::Acquire) || crate::state::busy()
    {
        return None;
    }
    let b = BACKING.lock().unwrap_or_else(|e| e.into_inner());
    b.nodes.as_ref()?.get(&(dev, ino)).copied()
}

/// After a successful kernel fstat into `st`: where it described a backing FIFO, the pool
/// node's attributes instead (the kernel's answer stays if the node is gone).
///
/// # Safety
/// `st` valid for one `struct stat`, just filled by the kernel.
pub(crate) unsafe fn fix_stat(st: *mut libc::stat) {
    // SAFETY: the caller's contract.
    let (dev, ino, mode) = unsafe { ((*st).st_dev, (*st).st_ino, (*st).st_mode) };
    if let Some(a) = node_of(dev, ino, mode).and_then(node_attr) {
        // SAFETY: the caller's contract.
        let _ = unsafe { crate::stat::fill_stat(&a, st) };
    }
}

/// The pool node's attributes, or `None` (the node gone): errno as it was, whatever happens.
fn node_attr(node: u64) -> Option<pmkit_fs::Attr> {
    let saved = crate::state::errno();
    let a = enter(None, |p| {
        p.getattr_ino(node).map(Some).map_err(crate::state::en)
    });
    crate::state::set_errno(saved);
    a
}

/// [`fix_stat`] for `statx`.
///
/// # Safety
/// `stx` valid for one `struct statx`, just filled by the kernel.
pub(crate) unsafe fn fix_statx(stx: *mut libc::statx) {
    // SAFETY: the caller's contract.
    let (dev, ino, mode) = unsafe {
        let s = &*stx;
        (
            libc::makedev(s.stx_dev_major, s.stx_dev_minor),
            s.stx_ino,
            u32::from(s.stx_mode),
        )
    };
    if let Some(a) = node_of(dev, ino, mode).and_then(node_attr) {
        // SAFETY: the caller's contract.
        let _ = unsafe { crate::stat::fill_statx(&a, stx) };
    }
}
