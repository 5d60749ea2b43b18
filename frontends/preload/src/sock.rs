//! UNIX-domain sockets named by pool paths. `bind` to a path under the prefix makes a socket
//! node in the pool (as the kernel makes one in a directory) and binds the kernel socket to a
//! private abstract name instead; `connect` to that path is sent to the abstract name. So a
//! server and its clients in this process (the pool has one process) talk as they would over
//! a socket file, and the node lists, stats, renames and unlinks like the kernel's.
//! Limits (docs/fs.md): `getsockname` gives the abstract name; another process cannot reach
//! the socket by its path (it cannot open the pool either); datagrams sent with `sendto` to a
//! pool path are not redirected.

use crate::state::{self, en, enter, route, Route};
use std::collections::HashMap;
use std::ffi::{c_int, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The abstract name each bound socket node's inode stands for.
static NAMES: Mutex<Option<HashMap<u64, Vec<u8>>>> = Mutex::new(None);
static NEXT: AtomicU64 = AtomicU64::new(0);

const PATH_AT: usize = std::mem::offset_of!(libc::sockaddr_un, sun_path);

/// The path of an `AF_UNIX` address (not an abstract or unnamed one), read from the caller's
/// memory; `Err(EFAULT)` for memory that cannot be read.
///
/// # Safety
/// `addr` NULL or pointing at `len` bytes the caller says are an address (checked readable).
unsafe fn unix_path(
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> Result<Option<CString>, c_int> {
    let len = len as usize;
    if addr.is_null() || len <= PATH_AT || len > std::mem::size_of::<libc::sockaddr_un>() {
        return Ok(None);
    }
    crate::guarded::check(addr.cast(), len, false)?;
    let mut un: libc::sockaddr_un =
        // SAFETY: all-zero is a valid sockaddr_un.
        unsafe { std::mem::zeroed() };
    // SAFETY: `len` readable bytes (checked) into a local of at least `len` bytes.
    unsafe { std::ptr::copy_nonoverlapping(addr.cast::<u8>(), (&raw mut un).cast::<u8>(), len) };
    if un.sun_family != libc::AF_UNIX as libc::sa_family_t || un.sun_path[0] == 0 {
        return Ok(None);
    }
    let bytes: Vec<u8> = un.sun_path[..len - PATH_AT]
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    Ok(CString::new(bytes).ok())
}

/// An abstract `AF_UNIX` address for `name`.
fn abstract_addr(name: &[u8]) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut un: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    un.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let n = name.len().min(un.sun_path.len() - 1);
    for (d, &s) in un.sun_path[1..=n].iter_mut().zip(name) {
        *d = s as libc::c_char;
    }
    (un, (PATH_AT + 1 + n) as libc::socklen_t)
}

/// Where an address goes: `None` to libc, else the pool path.
///
/// # Safety
/// As [`unix_path`].
unsafe fn pool_path(
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> Result<Option<Vec<u8>>, c_int> {
    // SAFETY: the caller's contract.
    let Some(path) = (unsafe { unix_path(addr, len) })? else {
        return Ok(None);
    };
    // SAFETY: a NUL-terminated string of ours.
    Ok(match unsafe { route(libc::AT_FDCWD, path.as_ptr()) } {
        Route::Pool(p) => Some(p),
        Route::Real => None,
    })
}

/// # Safety
/// bind(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn bind(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { pool_path(addr, len) } {
        Ok(None) => {
            real!(bind(fd, addr, len) as fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int)
        }
        Ok(Some(p)) => bind_pool(fd, p),
        Err(e) => enter(-1, |_| Err(e)),
    }
}

/// bind(2) of socket `fd` to pool path `p`.
fn bind_pool(fd: c_int, p: Vec<u8>) -> c_int {
    // The node first (EADDRINUSE where the name exists, as the kernel answers).
    let ino = enter(None, |fs| {
        let mode = libc::S_IFSOCK | state::umasked(0o777);
        match fs.mknod(&p, mode, 0) {
            Ok(a) => Ok(Some(a.ino)),
            Err(e) if e.errno() == libc::EEXIST => Err(libc::EADDRINUSE),
            Err(e) => Err(en(e)),
        }
    });
    let Some(ino) = ino else { return -1 };
    let name = format!(
        "pmkit-preload/{}/{ino}/{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
    .into_bytes();
    let (un, n) = abstract_addr(&name);
    let r = real!(bind(fd, (&raw const un).cast(), n)
        as fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int);
    if r != 0 {
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        // Not bound: the node goes again, and the call fails as the kernel's bind did.
        return enter(-1, |fs| {
            let _ = fs.unlink(&p);
            Err(e)
        });
    }
    NAMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(ino, name);
    0
}

/// # Safety
/// connect(2)'s contract.
#[no_mangle]
pub(crate) unsafe extern "C" fn connect(
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { pool_path(addr, len) } {
        Ok(None) => {
            real!(connect(fd, addr, len)
                as fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int)
        }
        Ok(Some(p)) => connect_pool(fd, p),
        Err(e) => enter(-1, |_| Err(e)),
    }
}

/// connect(2) of socket `fd` to pool path `p`.
fn connect_pool(fd: c_int, p: Vec<u8>) -> c_int {
    // A node that is not a socket, or one no socket of this process is bound to (made by
    // mknod, or left by an earlier process): nobody listens, ECONNREFUSED as the kernel says.
    let name = enter(None, |fs| {
        let a = fs.stat(&p).map_err(en)?;
        if a.kind != pmkit_fs::Kind::Socket {
            return Err(libc::ECONNREFUSED);
        }
        let names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
        names
            .as_ref()
            .and_then(|m| m.get(&a.ino).cloned())
            .map(Some)
            .ok_or(libc::ECONNREFUSED)
    });
    let Some(name) = name else { return -1 };
    let (un, n) = abstract_addr(&name);
    // Outside the pool's lock: a connect may wait for the listener.
    real!(connect(fd, (&raw const un).cast(), n)
        as fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int)
}
