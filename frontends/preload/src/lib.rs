//! An opt-in LD_PRELOAD shim: the POSIX file calls of an unmodified, dynamically linked
//! program on paths under a prefix are served in process from a PMFS pool, with no kernel and
//! no FUSE on the way (the approach of SplitFS's U-Split, Kadekodi et al., SOSP 2019, and of
//! pmemfile). `PMKIT_PRELOAD_POOL=/dev/shm/pool PMKIT_PRELOAD_PREFIX=/mnt/pmfs
//! LD_PRELOAD=libpmkit_preload.so prog ...`; without both variables the library is inert and
//! every call goes to libc. docs/fs.md, "LD_PRELOAD shim", states what is served and the
//! limits (static binaries, fork, exec, mmap, stdio, one process per pool).
//!
//! - `state`: configuration, the pool (mounted on the first call under the prefix), the
//!   table of the shim's descriptors, the reentrancy guard and the call boundary.
//! - `real`: libc's own functions (`dlsym(RTLD_NEXT, ...)`).
//! - `guarded`: reading a path through an untrusted pointer with no system call (a fault in
//!   its one load is an error return), and `sigaction`/`signal`, which keep that handler first.
//! - `shell`: `popen`, `pclose` and `system`, on the shim's `posix_spawn` so the shell keeps
//!   the session.
//! - `locks`: fcntl record locks, flock and lockf, through the pool's lock table.
//! - `sock`: UNIX-domain sockets bound and connected by pool paths; `fifo`: FIFOs made in
//!   the pool, opened as kernel FIFOs of this process.
//! - `stat`: `struct stat`/`statx` as the kernel fills them.
//! - `creds`: the process's ids for the pool's permission checks, and the `set*id` calls
//!   that change them.
//! - `fd`: calls on descriptors; `path`: calls on paths; `cwd`: a current directory
//!   inside the pool; `dir`: directory streams;
//!   `meta`: chmod, times, statfs;
//!   `xattr`: extended attributes (refused).
//!
//! Variadic C functions (`open`, `openat`, `fcntl`) are defined with their optional argument
//! as a fixed one: on x86_64 and aarch64 Linux an integer variadic argument travels in the
//! same register as a fixed one, and it is read only when the flags say it was passed.

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
compile_error!("pmkit-preload supports Linux on x86_64 and aarch64 only (variadic ABI)");

// The C entry points are `pub(crate)`: `#[no_mangle]` exports their symbols, and no Rust
// caller outside this crate exists (the workspace denies unreachable `pub`).
#[macro_use]
mod real;
mod busy;
mod config;
mod creds;
mod cwd;
mod dir;
mod exec;
mod fd;
mod fifo;
mod guarded;
mod hints;
mod ids;
mod image;
mod ioctl;
mod locks;
mod meta;
mod mmap;
mod open;
mod path;
mod pid;
mod pool;
mod popens;
mod realpath;
mod shell;
mod sock;
mod stat;
mod state;
mod stdio;
mod sys;
mod table;
mod temp;
mod vcwd;
mod vec;
mod xattr;
