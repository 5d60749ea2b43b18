//! The drivers (C programs compiled here with `cc -O2`) and what is read around a run of one:
//! its own wall clock and CPU (it prints them), a daemon's CPU from /proc/PID/stat, system calls
//! counted by `strace -c` and instructions counted by valgrind's callgrind.

use anyhow::{bail, ensure, Context, Result};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FSOPS_C: &str = include_str!("../../../drivers/fsops.c");
const NBDOPS_C: &str = include_str!("../../../drivers/nbdops.c");
const PMFS_H: &str = include_str!("../../../../frontends/c/pmfs/include/pmfs.h");

/// The compiled drivers.
pub(super) struct Drivers {
    /// fsops on the POSIX calls.
    pub posix: PathBuf,
    /// fsops on the PMFS C ABI.
    pub pmfs: PathBuf,
    /// nbdops on libnbd (when the NBD layer is measured).
    pub nbd: Option<PathBuf>,
}

/// Where `libpmfs.so` is: `$PMKIT_FS_LIB_DIR`, or beside this binary (cargo puts both in
/// target/release).
fn pmfs_lib_dir() -> Result<PathBuf> {
    let d = match std::env::var_os("PMKIT_FS_LIB_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()?
            .parent()
            .context("the bench binary has no directory")?
            .to_path_buf(),
    };
    ensure!(
        d.join("libpmfs.so").is_file(),
        "libpmfs.so is not in {}: build it (`cargo build --release -p pmkit-libpmfs`) or name its \
         directory in PMKIT_FS_LIB_DIR",
        d.display()
    );
    // Programs linked with -lpmfs load its SONAME, libpmfs.so.0: an install has that name; a
    // cargo target directory gets it here.
    let soname = d.join("libpmfs.so.0");
    if !soname.exists() {
        std::os::unix::fs::symlink("libpmfs.so", &soname)
            .with_context(|| format!("cannot link {}", soname.display()))?;
    }
    Ok(d)
}

fn cc(args: &[&std::ffi::OsStr], what: &str, hint: &str) -> Result<()> {
    let o = Command::new("cc")
        .args(["-O2", "-Wall"])
        .args(args)
        .output()
        .with_context(|| format!("running cc to build {what}: install gcc"))?;
    ensure!(
        o.status.success(),
        "cc failed to build {what} ({hint}):\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(())
}

/// Compile the drivers into `dir`.
pub(super) fn build(dir: &Path, nbd: bool) -> Result<Drivers> {
    let src = dir.join("fsops.c");
    std::fs::write(&src, FSOPS_C)?;
    std::fs::write(dir.join("pmfs.h"), PMFS_H)?;
    let posix = dir.join("fsops");
    cc(
        &[src.as_os_str(), "-o".as_ref(), posix.as_os_str()],
        "fsops",
        "a C compiler and libc headers",
    )?;
    let lib = pmfs_lib_dir()?;
    let pmfs = dir.join("fsops_pmfs");
    let rpath = format!("-Wl,-rpath,{}", lib.display());
    let libdir = format!("-L{}", lib.display());
    let inc = format!("-I{}", dir.display());
    cc(
        &[
            "-DPMFS_LIB".as_ref(),
            inc.as_ref(),
            src.as_os_str(),
            libdir.as_ref(),
            rpath.as_ref(),
            "-lpmfs".as_ref(),
            "-o".as_ref(),
            pmfs.as_os_str(),
        ],
        "fsops on the PMFS C ABI",
        "libpmfs.so",
    )?;
    let nbd = if nbd {
        let src = dir.join("nbdops.c");
        std::fs::write(&src, NBDOPS_C)?;
        let exe = dir.join("nbdops");
        cc(
            &[
                src.as_os_str(),
                "-lnbd".as_ref(),
                "-o".as_ref(),
                exe.as_os_str(),
            ],
            "nbdops",
            "libnbd's header and library: apt-get install libnbd-dev",
        )?;
        Some(exe)
    } else {
        None
    };
    Ok(Drivers { posix, pmfs, nbd })
}

/// A daemon's user and system CPU seconds so far (all its threads), from /proc/PID/stat.
pub(super) fn cpu_secs(pid: u32) -> Result<(f64, f64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (in parentheses, which may hold spaces).
    let rest = &s[s.rfind(')').context("bad /proc stat")? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let hz = (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64;
    Ok((f[11].parse::<f64>()? / hz, f[12].parse::<f64>()? / hz))
}

/// What one driver run gave.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Outcome {
    /// The driver's wall clock over its N operations, ns.
    pub ns: f64,
    /// Its own CPU over them, µs.
    pub user_us: f64,
    pub sys_us: f64,
    /// The daemon's CPU from "go" to the driver's exit, µs (user, system).
    pub daemon_us: Option<(f64, f64)>,
}

/// `strace -f -c -o FILE -p PID`, attached to a running daemon until [`Strace::stop`].
pub(super) struct Strace {
    child: Child,
    out: PathBuf,
}

impl Strace {
    /// Attach to every thread of `pid`; returns once all of them are traced.
    pub(super) fn attach(pid: u32, out: &Path) -> Result<Strace> {
        let child = Command::new("strace")
            .args(["-f", "-c", "-o"])
            .arg(out)
            .arg("-p")
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting strace: install strace")?;
        let s = Strace {
            child,
            out: out.into(),
        };
        let t = Instant::now();
        loop {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))?;
            let mut all = true;
            for task in tasks {
                let st = std::fs::read_to_string(task?.path().join("status")).unwrap_or_default();
                let traced = st
                    .lines()
                    .find_map(|l| l.strip_prefix("TracerPid:"))
                    .is_some_and(|v| v.trim() != "0");
                all &= traced;
            }
            if all {
                return Ok(s);
            }
            ensure!(
                t.elapsed() < Duration::from_secs(20),
                "strace did not attach to every thread of {pid} within 20 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Detach (SIGINT) and read the counts.
    pub(super) fn stop(mut self) -> Result<Counts> {
        // SAFETY: kill with a valid signal on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        self.child.wait()?;
        strace_counts(&self.out)
    }
}

/// System calls by name, and their total.
#[derive(Debug, Clone, Default)]
pub(super) struct Counts {
    pub total: u64,
    pub by_name: BTreeMap<String, u64>,
}

/// Parse `strace -c`'s table: `% time, seconds, usecs/call, calls, [errors], syscall`.
pub(super) fn strace_counts(file: &Path) -> Result<Counts> {
    let s = std::fs::read_to_string(file)
        .with_context(|| format!("reading strace's counts {}", file.display()))?;
    let mut c = Counts::default();
    for l in s.lines() {
        let t: Vec<&str> = l.split_whitespace().collect();
        if t.len() < 5 || t[0].parse::<f64>().is_err() {
            continue;
        }
        let Ok(calls) = t[3].parse::<u64>() else {
            continue;
        };
        let name = t[t.len() - 1];
        if name == "total" {
            c.total = calls;
        } else {
            c.by_name.insert(name.to_string(), calls);
        }
    }
    Ok(c)
}

/// The instructions (Ir) a callgrind output file counted.
pub(super) fn callgrind_ir(file: &Path) -> Result<u64> {
    let s = std::fs::read_to_string(file)
        .with_context(|| format!("reading callgrind's output {}", file.display()))?;
    s.lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no totals in {}", file.display()))
}

/// A daemon running under callgrind, its counts read for a window: [`Window::zero`] at the
/// start, [`Window::dump`] at the end (`callgrind_control`, which valgrind answers even while
/// the daemon waits in a system call). Its setup (mkfs, mount) and teardown are never counted.
pub(super) struct Window {
    pid: u32,
    out: PathBuf,
    dumps: usize,
}

impl Window {
    /// The daemon `pid`, started with [`callgrind`]`(out)`.
    pub(super) fn new(pid: u32, out: &Path) -> Window {
        Window {
            pid,
            out: out.into(),
            dumps: 0,
        }
    }

    fn control(&self, flag: &str) -> Result<()> {
        let o = Command::new("callgrind_control")
            .arg(flag)
            .arg(self.pid.to_string())
            .output()
            .context("running callgrind_control: install valgrind")?;
        ensure!(
            o.status.success(),
            "callgrind_control {flag} {} failed: {}",
            self.pid,
            String::from_utf8_lossy(&o.stderr)
        );
        Ok(())
    }

    pub(super) fn zero(&self) -> Result<()> {
        self.control("-z")
    }

    /// Instructions since the last zero (callgrind writes them to OUT.1, OUT.2, ...).
    pub(super) fn dump(&mut self) -> Result<u64> {
        self.control("-d")?;
        self.dumps += 1;
        let f = PathBuf::from(format!("{}.{}", self.out.display(), self.dumps));
        let t = Instant::now();
        while !f.is_file() && t.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // The dump is complete when its totals line is there.
        loop {
            match callgrind_ir(&f) {
                Ok(v) => return Ok(v),
                Err(e) if t.elapsed() > Duration::from_secs(30) => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// valgrind's command line for callgrind writing to `out`.
pub(super) fn callgrind(out: &Path) -> Vec<String> {
    vec![
        "valgrind".into(),
        "-q".into(),
        "--tool=callgrind".into(),
        format!("--callgrind-out-file={}", out.display()),
        "--dump-instr=no".into(),
    ]
}

/// Run drivers (`cmds`, with the file each one's stderr goes to; stdout and stdin taken here),
/// one or several at once (`--clients`): wait for each one's "ready", call `at_go` (which may
/// attach a tracer), read the daemon's CPU, say go to each in turn, read each one's result and
/// wait for it to exit, read the daemon's CPU again (it covers them all).
pub(super) fn run_drivers(
    cmds: Vec<(&mut Command, PathBuf)>,
    daemon: Option<u32>,
    at_go: impl FnOnce() -> Result<()>,
) -> Result<Vec<Outcome>> {
    let mut running = Vec::with_capacity(cmds.len());
    for (cmd, log) in cmds {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {cmd:?}"))?;
        let out = BufReader::new(child.stdout.take().context("driver stdout")?);
        running.push((format!("{cmd:?}"), log, child, out));
    }
    let said = |log: &Path| std::fs::read_to_string(log).unwrap_or_default();
    let mut line = String::new();
    for (what, log, child, out) in &mut running {
        line.clear();
        out.read_line(&mut line)?;
        if line.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not get ready: {line}{}", said(log));
        }
    }
    at_go()?;
    let d0 = daemon.map(cpu_secs).transpose()?;
    for (_, _, child, _) in &mut running {
        child
            .stdin
            .take()
            .context("driver stdin")?
            .write_all(b"go\n")?;
    }
    let mut lines = Vec::with_capacity(running.len());
    for (what, log, child, out) in &mut running {
        let mut line = String::new();
        out.read_line(&mut line)?;
        let st = child.wait()?;
        ensure!(st.success(), "{what} failed ({st}): {}", said(log));
        lines.push(line);
    }
    let d1 = daemon.map(cpu_secs).transpose()?;
    let daemon_us = match (d0, d1) {
        (Some(a), Some(b)) => Some(((b.0 - a.0) * 1e6, (b.1 - a.1) * 1e6)),
        _ => None,
    };
    lines
        .iter()
        .map(|l| {
            let mut o = outcome(l)?;
            o.daemon_us = daemon_us;
            Ok(o)
        })
        .collect()
}

/// One driver's result line: `ns=.. user_us=.. sys_us=..`.
fn outcome(line: &str) -> Result<Outcome> {
    let mut o = Outcome::default();
    for kv in line.split_whitespace() {
        let (k, v) = kv.split_once('=').context("bad driver output")?;
        let v: f64 = v.parse()?;
        match k {
            "ns" => o.ns = v,
            "user_us" => o.user_us = v,
            "sys_us" => o.sys_us = v,
            _ => {}
        }
    }
    ensure!(
        o.ns > 0.0 || line.contains("ns=0"),
        "bad driver output: {line}"
    );
    Ok(o)
}
