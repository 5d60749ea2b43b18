//! `pmkit fs mount POOL DIR` and `pmkit fs umount DIR`: run a PMFS FUSE session until the
//! directory is unmounted or the daemon gets SIGTERM/SIGINT/SIGHUP, then let the session finish
//! its requests and mark the pool clean. A stale mount left by a daemon that died (every access
//! gives ENOTCONN) is detached before mounting again.

use crate::pmfs::cache::CacheMode;
use crate::pmfs::stats::OpStats;
use crate::pmfs::PmfsOps;
use crate::uring::{self, Transport};
use pmkit_fs::{DataMode, Fs, Protect, Recovery};
use pmkit_media::{Region, RegionOptions};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The FUSE subtype asked for (the kernel shows it only when mounted through fusermount:
/// mounts are recognised by their source, `pmkit-fs[PID]:POOL`, instead).
pub const SUBTYPE: &str = "pmkit-fs";

#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("{0}")]
    Pool(String),
    #[error("{dir}: {why}")]
    Dir { dir: PathBuf, why: String },
    #[error("{0}")]
    Fs(#[from] pmkit_fs::Error),
    #[error("FUSE: {0}")]
    Fuse(String),
}

type Result<T> = std::result::Result<T, MountError>;

#[derive(Clone, Debug)]
pub struct MountOptions {
    /// FUSE worker threads (each with its own /dev/fuse clone).
    pub threads: usize,
    pub protect: Option<Protect>,
    pub data: DataMode,
    /// Files created by this mount carry data checksums (`--checksum`; see
    /// `pmkit_fs::MountOptions::checksum`).
    pub checksum: bool,
    /// Emulated barrier latency (see `pmkit_fs::MountOptions::barrier_ns`).
    pub barrier_ns: u64,
    /// What the kernel may cache (`--cache`).
    pub cache: CacheMode,
    /// How requests reach the daemon (`--transport`): the io_uring queues (a queue per CPU,
    /// `threads` does not apply to them) or /dev/fuse.
    pub transport: Transport,
    /// Walk and check the whole pool even after a clean unmount (see
    /// `pmkit_fs::MountOptions::full_walk`).
    pub full_walk: bool,
    /// When reads store access times (`--atime`).
    pub atime: pmkit_fs::Atime,
    /// A read-only mount (`--read-only`): the kernel refuses every change (and the handlers
    /// too), and reads store no access time. The pool is still opened for writing: a mount
    /// after a crash replays the journal, and every mount keeps the clean flag.
    pub read_only: bool,
    /// After a stop signal, how long requests in flight may go without progress before the
    /// daemon aborts the connection (`--stop-grace`; see [`STOP_GRACE`]).
    pub stop_grace: Duration,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            threads: 4,
            protect: None,
            data: DataMode::InPlace,
            checksum: false,
            barrier_ns: 0,
            cache: CacheMode::default(),
            transport: Transport::Auto,
            full_walk: false,
            atime: pmkit_fs::Atime::default(),
            read_only: false,
            stop_grace: STOP_GRACE,
        }
    }
}

/// One line of /proc/self/mountinfo: mount point, file system type, source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    pub dir: PathBuf,
    pub fstype: String,
    pub source: String,
    /// The minor number of the mount's device, which for FUSE names its connection in fusectl
    /// (read from mountinfo: a `stat` of a FUSE mount is a request to its daemon).
    pub conn: Option<u64>,
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let digits = std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(digits, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// The mount at `dir` (an absolute path), if any (the last one: it is the visible one).
pub fn mount_at(dir: &Path) -> Option<MountEntry> {
    mounts().into_iter().rfind(|m| m.dir == dir)
}

/// The PMFS mounts serving `pool` (by their source, `pmkit-fs[PID]:POOL`).
pub fn mounts_of(pool: &Path) -> Vec<MountEntry> {
    let pool = std::fs::canonicalize(pool).unwrap_or(pool.to_path_buf());
    let want = format!("]:{}", pool.display());
    mounts()
        .into_iter()
        .filter(|m| is_pmfs(m) && m.source.ends_with(&want))
        .collect()
}

fn mounts() -> Vec<MountEntry> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|&x| x == "-")?;
            let at = PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(f.get(4)?)));
            let conn = f.get(2).and_then(|d| d.split_once(':')?.1.parse().ok());
            Some(MountEntry {
                conn,
                dir: at,
                fstype: f.get(sep + 1)?.to_string(),
                source: String::from_utf8_lossy(&unescape(f.get(sep + 2)?)).into_owned(),
            })
        })
        .collect()
}

/// `dir` made absolute without touching it (a stale FUSE mount point cannot be resolved: its
/// parent is).
pub fn absolute(dir: &Path) -> Result<PathBuf> {
    let bad = |why: String| MountError::Dir {
        dir: dir.to_path_buf(),
        why,
    };
    let name = dir
        .file_name()
        .ok_or_else(|| bad("not a directory name".into()))?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let parent = std::fs::canonicalize(parent).map_err(|e| bad(e.to_string()))?;
    Ok(parent.join(name))
}

/// Whether `m` is a PMFS FUSE mount.
pub fn is_pmfs(m: &MountEntry) -> bool {
    m.fstype.starts_with("fuse") && m.source.starts_with("pmkit-fs[")
}

/// The daemon's pid, from the mount's source (`pmkit-fs[PID]:POOL`).
pub fn daemon_pid(m: &MountEntry) -> Option<i32> {
    let rest = m.source.strip_prefix("pmkit-fs[")?;
    rest.split_once(']')?.0.parse().ok()
}

/// A FUSE mount whose daemon is gone. For a PMFS mount, whether the daemon named in the source
/// still runs decides: after a kill -9 over io_uring the kernel tears the connection down
/// only once the ring's exit work has run, and a request in that window waits and then ends with
/// ECONNABORTED, not ENOTCONN. Otherwise asked with `statfs`, which always reaches the daemon (a
/// `stat` may be answered from the kernel's attribute cache).
fn is_stale(dir: &Path, m: &MountEntry) -> bool {
    // A live daemon's mount is not stale, and is not asked: a daemon with a request stuck
    // would leave the `statfs` waiting behind it (over io_uring, every request of that CPU's
    // queue does), and the command that asked with it.
    if let Some(pid) = daemon_pid(m) {
        return !alive(pid);
    }
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: an all-zero statfs is a valid out-buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-buffer.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    r != 0
        && matches!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ENOTCONN | libc::ECONNABORTED)
        )
}

fn umount2(dir: &Path, flags: i32) -> std::io::Result<()> {
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a NUL-terminated path; umount2 reads it and nothing else.
    if unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Detach a stale FUSE mount at `dir` (its daemon is gone). `Ok(None)`: there was none.
pub fn clean_stale(dir: &Path) -> Result<Option<String>> {
    let Some(m) = mount_at(dir) else {
        return Ok(None);
    };
    let bad = |why: String| MountError::Dir {
        dir: dir.to_path_buf(),
        why,
    };
    if !m.fstype.starts_with("fuse") || !is_stale(dir, &m) {
        if is_pmfs(&m) {
            return Err(bad(format!(
                "already mounted by a live daemon ({}); run `pmkit fs umount {}` first",
                m.source,
                dir.display()
            )));
        }
        return Ok(None);
    }
    umount2(dir, libc::MNT_DETACH).map_err(|e| {
        bad(format!(
            "a stale FUSE mount ({}) is in the way and cannot be detached ({e}); run `umount -l {}`",
            m.source,
            dir.display()
        ))
    })?;
    Ok(Some(format!(
        "detached a stale FUSE mount of {} on {} (its daemon had died)",
        m.source,
        dir.display()
    )))
}

/// A mounted PMFS being served.
pub struct Served {
    pub dir: PathBuf,
    pub recovery: Recovery,
    pub protection: (Protect, String),
    pub notes: Vec<String>,
    /// The transport in use: `Dev` or `Uring`.
    pub transport: Transport,
    fs: Arc<Fs<Region>>,
    stats: Arc<OpStats>,
    session: crate::dev::Workers,
    /// The io_uring queues, when the transport is `Uring`; they hold the handlers (and so the
    /// file system) until the connection ends.
    uring: Option<uring::Queues>,
    /// The FUSE connection (fusectl), to abort when a request cannot be answered.
    conn: Option<u64>,
    /// Shim processes served beside the kernel (`peers.rs`); stopped before the unmount.
    peers: Option<pmkit_fs_share::Server<Region>>,
    /// `MountOptions::stop_grace`.
    stop_grace: Duration,
}

/// After a stop signal, how long requests in flight may go without progress before the daemon
/// aborts the connection (their callers get ECONNABORTED instead of waiting for good; the
/// default of `MountOptions::stop_grace`), and how long its threads then have to end before it
/// exits without them, leaving the pool to recovery.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
const ABORT_GRACE: Duration = Duration::from_secs(5);

/// Mount `pool` on `dir` and start serving it. Call with SIGTERM, SIGINT and SIGHUP blocked
/// (see [`block_signals`]) so that the session threads never take them.
pub fn mount(pool: &Path, dir: &Path, o: &MountOptions) -> Result<Served> {
    let dir = absolute(dir)?;
    // Before touching the pool: `--transport uring` where the kernel has it off.
    let want_uring = o.transport.wants_uring().map_err(MountError::Fuse)?;
    let mut notes = Vec::new();
    notes.extend(clean_stale(&dir)?);
    if !dir.is_dir() {
        let why = if dir.exists() {
            "not a directory"
        } else {
            "does not exist (make it with mkdir)"
        };
        return Err(MountError::Dir {
            dir,
            why: why.into(),
        });
    }
    let region = Region::open(pool, &RegionOptions::default())
        .map_err(|e| MountError::Pool(format!("{}: cannot open: {e}", pool.display())))?;
    region
        .claim(true)
        .map_err(|e| MountError::Pool(e.to_string()))?;
    notes.extend(region.notes().iter().cloned());
    let mo = pmkit_fs::MountOptions {
        data: o.data,
        checksum: o.checksum,
        protect: o.protect,
        barrier_ns: o.barrier_ns,
        full_walk: o.full_walk,
        atime: match o.read_only {
            true => pmkit_fs::Atime::Noatime,
            false => o.atime,
        },
        ..Default::default()
    };
    let (fs, recovery) = Fs::mount(region, &mo).map_err(|e| match e {
        // name the pool in the one command that repairs it
        pmkit_fs::Error::Damaged { problems } => MountError::Pool(format!(
            "{}: {}",
            pool.display(),
            pmkit_fs::damaged_text(&problems, &pool.display().to_string())
        )),
        e => e.into(),
    })?;
    let (p, why) = fs.protection();
    let protection = (p, why.to_string());
    let fs = Arc::new(fs);
    let pool_abs = std::fs::canonicalize(pool).unwrap_or(pool.to_path_buf());
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        fuser::MountOption::FSName(format!(
            "pmkit-fs[{}]:{}",
            std::process::id(),
            pool_abs.display()
        )),
        fuser::MountOption::Subtype(SUBTYPE.into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    if o.read_only {
        cfg.mount_options.push(fuser::MountOption::RO);
    }
    cfg.acl = fuser::SessionACL::All;
    let stats = Arc::new(OpStats::default());
    let ops = Arc::new(
        PmfsOps::new(Arc::clone(&fs), o.cache, Arc::clone(&stats)).with_read_only(o.read_only),
    );
    let (served, granted) = crate::dev::Served::new(Arc::clone(&ops), want_uring);
    let give_back = |fs: Arc<Fs<Region>>, why: String| {
        // Nothing was served: give the pool back clean.
        if let Ok(fs) = Arc::try_unwrap(fs) {
            drop(fs.unmount());
        }
        MountError::Fuse(why)
    };
    // Session::new mounts and completes INIT, which says whether io_uring was granted; the
    // queues register before the /dev/fuse workers start (`dev::Workers`, which hold the
    // session: dropping it unmounts).
    let session = match fuser::Session::new(served, &dir, &cfg) {
        Ok(s) => s,
        Err(e) => {
            drop(ops);
            return Err(give_back(fs, format!("{}: {e}", dir.display())));
        }
    };
    let mut queues = None;
    if granted.load(Ordering::Acquire) {
        match uring::start(session.as_fd(), Arc::clone(&ops)) {
            Ok(q) => queues = Some(q),
            Err(e) if o.transport == Transport::Uring => {
                drop((session, ops));
                return Err(give_back(fs, e.to_string()));
            }
            Err(e) => tracing::warn!("{e}; serving /dev/fuse instead"),
        }
    } else if want_uring && o.transport == Transport::Uring {
        drop((session, ops));
        return Err(give_back(fs, uring::NOT_OFFERED.into()));
    }
    // Notifications to the kernel go through a descriptor of the mount's own.
    let peer_dev = match o.read_only {
        true => None,
        false => session.as_fd().try_clone_to_owned().ok(),
    };
    let transport = if queues.is_some() {
        Transport::Uring
    } else {
        Transport::Dev
    };
    let session = match crate::dev::Workers::start(session, Arc::clone(&ops), o.threads) {
        Ok(s) => s,
        Err(e) => return Err(MountError::Fuse(format!("{}: {e}", dir.display()))),
    };
    // From mountinfo, not a `stat` of the mount: that would be a request to this daemon,
    // made before its session threads may have started to answer it.
    let conn = mount_at(&dir).and_then(|m| m.conn);
    // A read-only mount serves no shim process: a client could change the pool.
    let peers = peer_dev.and_then(|dev| super::peers::serve(&fs, ops, dev, pool));
    Ok(Served {
        dir,
        recovery,
        protection,
        notes,
        transport,
        fs,
        stats,
        session,
        uring: queues,
        conn,
        peers,
        stop_grace: o.stop_grace,
    })
}

/// Block SIGTERM, SIGINT and SIGHUP in the calling thread (and the threads it starts later),
/// so that [`Served::run`] takes them with `sigtimedwait`.
pub fn block_signals() {
    // SAFETY: sigset manipulation on a local set, then pthread_sigmask of this thread.
    unsafe {
        let set = stop_set();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

fn stop_set() -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is a valid value to initialize with sigemptyset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t owned here.
    unsafe {
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
    }
    set
}

/// Wait up to `d` for a stop signal; the signal number, if one came.
fn wait_signal(d: Duration) -> Option<i32> {
    let set = stop_set();
    let ts = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    // SAFETY: valid set and timeout; no siginfo wanted.
    let s = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
    (s > 0).then_some(s)
}

/// How a served mount ended.
#[derive(Debug)]
pub struct Ended {
    /// The signal that asked for the stop (`None`: unmounted from outside).
    pub signal: Option<i32>,
    /// The unmount was lazy: files were open when the signal came.
    pub lazy: bool,
    /// Why the pool could not be marked clean (a write to PM failed during the mount; the
    /// next mount recovers it), or `None`: it was.
    pub not_clean: Option<String>,
}

impl Served {
    /// The per-request statistics, live (for `--stats`).
    pub fn op_stats(&self) -> Arc<OpStats> {
        Arc::clone(&self.stats)
    }

    /// Whether shim processes may use the pool beside the mount (`peers.rs`).
    pub fn serves_peers(&self) -> bool {
        self.peers.is_some()
    }

    /// The library's counters since mount (bytes journaled, fences, transactions, bytes
    /// written to PM): what the benchmark reads around each operation.
    pub fn counters(&self) -> pmkit_fs::Counters {
        self.fs.counters()
    }

    /// Serve until `dir` is unmounted (by `pmkit fs umount`, `umount`, `fusermount -u`) or a
    /// stop signal comes (then unmount it; lazily when it is busy, serving the open files until
    /// they are closed). Then wait for the session's requests, and mark the pool clean.
    pub fn run(self, mut log: impl FnMut(&str)) -> Result<Ended> {
        let mut ended = Ended {
            signal: None,
            lazy: false,
            not_clean: None,
        };
        // After a stop signal: requests in flight that make no progress for STOP_GRACE are
        // stuck (open files of a lazy unmount with no request pending are not).
        let mut stopping = false;
        let mut progress = (self.stats.progress(), Instant::now());
        let mut aborted: Option<Instant> = None;
        while !self.session.is_finished() {
            if stopping {
                let now = self.stats.progress();
                if now.0 == 0 || now != progress.0 {
                    progress = (now, Instant::now());
                }
                if aborted.is_none() && progress.1.elapsed() >= self.stop_grace {
                    log(&format!(
                        "{} request(s) unanswered for {:?} after the stop: aborting the FUSE \
                         connection (their callers get ECONNABORTED)",
                        now.0, self.stop_grace
                    ));
                    abort_connection(self.conn, &mut log);
                    aborted = Some(Instant::now());
                }
                if aborted.is_some_and(|t| t.elapsed() >= ABORT_GRACE) {
                    return Err(MountError::Fuse(
                        "a request handler never returned; exiting without it: the pool is \
                         left to recovery at the next mount"
                            .into(),
                    ));
                }
            }
            let Some(sig) = wait_signal(Duration::from_millis(200)) else {
                continue;
            };
            if ended.signal.is_some() {
                log("still waiting for open files on the detached mount to be closed");
                continue;
            }
            ended.signal = Some(sig);
            stopping = true;
            match umount2(&self.dir, 0) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    log(&format!(
                        "{} is busy: detaching it; serving the open files until they close",
                        self.dir.display()
                    ));
                    ended.lazy = true;
                    umount2(&self.dir, libc::MNT_DETACH).map_err(|e| MountError::Dir {
                        dir: self.dir.clone(),
                        why: format!("cannot unmount: {e}"),
                    })?;
                }
                // Unmounted from outside at the same moment: the session ends by itself.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => {
                    return Err(MountError::Dir {
                        dir: self.dir.clone(),
                        why: format!("cannot unmount: {e}"),
                    })
                }
            }
        }
        let Served {
            fs,
            session,
            uring,
            conn,
            peers,
            stop_grace,
            ..
        } = self;
        // The shim's processes first: their sessions end, closing what they held.
        if let Some(p) = peers {
            if p.clients() > 0 {
                log(&format!(
                    "ending {} shim process session(s): their calls fail with EIO from now on",
                    p.clients()
                ));
            }
            drop(p.stop());
        }
        session
            .join()
            .map_err(|e| MountError::Fuse(format!("session: {e}")))?;
        // The kernel ends the queues' commands when the connection goes (ENOTCONN).
        if let Some(q) = uring {
            if !q.join(stop_grace) {
                // A queue thread is stuck in a handler: free its caller, then leave.
                abort_connection(conn, &mut log);
                return Err(MountError::Fuse(
                    "a FUSE io_uring queue did not end with the connection (its request is \
                     aborted); the pool is left to recovery at the next mount"
                        .into(),
                ));
            }
        }
        // The session's threads and the queues are joined and their handlers dropped: this is
        // the last handle, and no request is in flight.
        let fs = Arc::try_unwrap(fs)
            .map_err(|_| MountError::Fuse("the file system is still shared".into()))?;
        ended.not_clean = fs.write_failure();
        drop(fs.unmount());
        Ok(ended)
    }
}

/// Abort the mount's FUSE connection, saying what came of it.
fn abort_connection(conn: Option<u64>, log: &mut dyn FnMut(&str)) {
    match conn.map(crate::fusectl::abort) {
        Some(Ok(())) => log("FUSE connection aborted"),
        Some(Err(e)) => log(&e),
        None => log("the FUSE connection is unknown: cannot abort it"),
    }
}

/// `pmkit fs umount DIR`: unmount a PMFS FUSE mount and wait (up to `wait`) for its daemon to
/// mark the pool clean and exit. A stale mount (daemon dead) is detached.
pub fn umount(dir: &Path, wait: Duration) -> Result<String> {
    let dir = absolute(dir)?;
    let bad = |why: String| MountError::Dir {
        dir: dir.clone(),
        why,
    };
    let m = mount_at(&dir).ok_or_else(|| bad("not a mount point".into()))?;
    if !is_pmfs(&m) {
        return Err(bad(format!(
            "not a pmkit fs mount (it is {} from {})",
            m.fstype, m.source
        )));
    }
    if is_stale(&dir, &m) {
        umount2(&dir, libc::MNT_DETACH).map_err(|e| bad(format!("cannot detach: {e}")))?;
        return Ok(format!(
            "detached a stale mount of {} (its daemon had died; the next mount recovers the pool)",
            m.source
        ));
    }
    let conn = m.conn;
    let pid = daemon_pid(&m);
    let mut how = "unmounted";
    if let Err(e) = umount2(&dir, 0) {
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(bad(format!("cannot unmount: {e}")));
        }
        let holders = crate::holders::of_mount(&dir);
        match pid {
            // Busy, and no process here holds it: a request in flight the daemon has not
            // answered (or a holder in another mount namespace). The daemon's own stop
            // handles both: it detaches the mount, serves what is open until it is closed,
            // and aborts requests that make no progress.
            Some(pid) if holders.is_empty() => {
                // SAFETY: kill(2) of the pid in the mount's source; it touches no memory.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                how = "busy with no holder here: asked its daemon to stop (SIGTERM)";
            }
            _ => {
                let who = crate::holders::describe(&holders);
                return Err(bad(format!("busy (held by {who})")));
            }
        }
    }
    let Some(pid) = pid else {
        return Ok(format!("{how} {}", m.source));
    };
    let deadline = Instant::now() + wait;
    while alive(pid) {
        if Instant::now() >= deadline {
            // A request the daemon cannot answer holds it: free the callers, and ask the daemon
            // to stop (it exits within its own grace, leaving the pool to recovery).
            let mut said = String::new();
            abort_connection(conn, &mut |m: &str| said = m.to_string());
            // SAFETY: kill(2) of the pid in the mount's source; it touches no memory.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            return Err(bad(format!(
                "{how}, but daemon {pid} has not exited after {wait:?}: {said}; sent it \
                 SIGTERM (the pool is recovered at the next mount if it exits unclean)"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Said from the pool itself, not assumed: a daemon whose writes to PM failed, or that
    // left a stuck request behind, exits without marking it clean.
    let pool = m.source.split_once("]:").map(|(_, p)| PathBuf::from(p));
    let clean = pool
        .as_deref()
        .and_then(|p| Region::open_read_only(p).ok())
        .and_then(|r| pmkit_fs::superblock(&r).ok())
        .map(|sb| sb.clean);
    match clean {
        Some(true) => Ok(format!(
            "unmounted {}; daemon {pid} marked the pool clean and exited",
            m.source
        )),
        Some(false) => Err(bad(format!(
            "{how} {}; daemon {pid} exited WITHOUT marking the pool clean (its log says \
             why): the next mount recovers it; `pmkit fs check` tells its state",
            m.source
        ))),
        None => Ok(format!(
            "{how} {}; daemon {pid} exited (the pool's state could not be read)",
            m.source
        )),
    }
}

/// Whether process `pid` is running (a zombie, exited but not yet reaped by its parent, is
/// not).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command, which is in parentheses and may hold anything.
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_and_daemon_pids_parse() {
        assert_eq!(unescape(r"/a\040b\134c"), b"/a b\\c");
        assert_eq!(unescape(r"plain\0"), b"plain\\0");
        let m = MountEntry {
            dir: "/x".into(),
            fstype: "fuse".into(),
            source: "pmkit-fs[4242]:/dev/shm/p".into(),
            conn: None,
        };
        assert_eq!(daemon_pid(&m), Some(4242));
        assert!(is_pmfs(&m));
        let other = MountEntry {
            source: "pmkit".into(),
            ..m
        };
        assert_eq!(daemon_pid(&other), None);
        assert!(!is_pmfs(&other));
        let root = mount_at(Path::new("/")).expect("/ is a mount point");
        let dev = std::os::unix::fs::MetadataExt::dev(&std::fs::metadata("/").unwrap());
        assert_eq!(
            root.conn,
            Some(libc::minor(dev) as u64),
            "the device from mountinfo"
        );
        assert!(alive(std::process::id() as i32));
        assert!(!alive(i32::MAX));
    }
}
