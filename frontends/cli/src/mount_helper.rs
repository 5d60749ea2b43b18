//! `mount.fuse.pmkit`: the helper `mount -t fuse.pmkit POOL DIR -o OPTS` and `/etc/fstab` lines
//! run (mount(8) looks for `/sbin/mount.TYPE`). It is the `pmkit` executable under another name
//! (a link): it turns the `-o` options into `pmkit fs mount`'s, starts that daemon in its own
//! session, passes its messages on until the file system is mounted, then exits 0 and leaves the
//! daemon serving, with its later messages in syslog. `umount DIR` (or `pmkit fs umount DIR`)
//! stops the daemon, which marks the pool clean.

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// The names the helper answers to (mount(8) runs `mount.fuse.pmkit`; `mount.pmkit` serves
/// `mount -t pmkit`).
pub(crate) const NAMES: [&str; 2] = ["mount.fuse.pmkit", "mount.pmkit"];

/// mount(8)'s exit statuses for helpers.
const USAGE: u8 = 1;
const MOUNT_FAILED: u8 = 32;

#[derive(Parser)]
#[command(
    name = "mount.fuse.pmkit",
    version,
    about = "Mount a PMFS pool for mount(8) and /etc/fstab (type fuse.pmkit)",
    long_about = "Mount a PMFS pool for mount(8) and /etc/fstab: `mount -t fuse.pmkit POOL DIR -o \
                  OPTIONS`, or the fstab line `POOL DIR fuse.pmkit OPTIONS 0 0`. Starts `pmkit fs \
                  mount` as a daemon, returns once the file system is mounted, and sends the \
                  daemon's later messages to syslog. `umount DIR` stops it; the pool is then \
                  marked clean.",
    after_long_help = OPTIONS_HELP
)]
pub(crate) struct HelperArgs {
    /// The pool: a file made by `pmkit fs mkfs`, or a device-dax device.
    pool: PathBuf,
    /// The mount point: an existing directory.
    dir: PathBuf,
    /// Mount options, comma-separated (may be given more than once); see MOUNT OPTIONS below.
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// Sloppy: ignore options this helper does not know instead of refusing them.
    #[arg(short = 's')]
    sloppy: bool,
    /// Fake: check the arguments and print the command, but mount nothing.
    #[arg(short = 'f')]
    fake: bool,
    /// Do not write /etc/mtab (accepted for mount(8); the kernel's mount table is the only one).
    #[arg(short = 'n')]
    no_mtab: bool,
    /// Verbose: print the `pmkit fs mount` command it runs.
    #[arg(short = 'v')]
    verbose: bool,
    /// The type mount(8) was given (fuse.pmkit or pmkit); any other is refused.
    #[arg(short = 't', value_name = "TYPE")]
    fstype: Option<String>,
}

const OPTIONS_HELP: &str = "Mount options:

threads=N, transport=auto|dev|uring, protect=MODE, cache=none|short|long, stats=FILE, barrier_ns=N, atime=MODE, stop_grace=SECONDS: as the `pmkit fs mount` options of the same name.

atomic, checksum, full_walk: as --atomic, --checksum and --full-walk. ro: --read-only (rw is the default). noatime, relatime, strictatime: --atime.

log=syslog|FILE: where the daemon's messages go once mounted (default syslog).

Accepted and ignored, as other file systems do, or already true of PMFS: defaults, auto, noauto, user, nouser, users, owner, group, nofail, _netdev, dev, nodev, suid, nosuid, exec, noexec, async, sync, dirsync (PMFS is durable on return), allow_other, default_permissions (always on), x-* and comment=* (for systemd and other tools).

Exit status: 0 mounted; 1 wrong arguments or options; 32 the mount failed (the reason is printed).";

/// Run as `mount.fuse.pmkit` (argv[0] is one of [`NAMES`]).
pub(crate) fn main() -> ExitCode {
    let args = match HelperArgs::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let cmd = match command(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mount.fuse.pmkit: {e:#}");
            return ExitCode::from(USAGE);
        }
    };
    if args.verbose || args.fake {
        eprintln!("mount.fuse.pmkit: {}", shown(&cmd));
    }
    if args.fake {
        return ExitCode::SUCCESS;
    }
    match run(cmd, args.verbose) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mount.fuse.pmkit: {}: {e:#}", args.dir.display());
            ExitCode::from(MOUNT_FAILED)
        }
    }
}

/// Generic mount options every file system accepts, and those already true of PMFS (durable on
/// return, permissions checked by the kernel, open to every user as root mounts it).
const IGNORED: &[&str] = &[
    "",
    "defaults",
    "rw",
    "auto",
    "noauto",
    "user",
    "nouser",
    "users",
    "owner",
    "group",
    "nofail",
    "_netdev",
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "exec",
    "noexec",
    "async",
    "sync",
    "dirsync",
    "allow_other",
    "default_permissions",
];

/// Options with a value that are `pmkit fs mount`'s of the same name (`_` for `-`).
const VALUED: &[&str] = &[
    "threads",
    "transport",
    "protect",
    "cache",
    "stats",
    "barrier_ns",
    "atime",
    "stop_grace",
];

/// The `pmkit fs mount` command line for these arguments.
fn command(a: &HelperArgs) -> Result<Vec<String>> {
    if let Some(t) = a.fstype.as_deref() {
        if !matches!(t, "fuse.pmkit" | "pmkit") {
            bail!("type {t}: this helper mounts fuse.pmkit");
        }
    }
    // mount(8) may run the helper from anywhere; the daemon runs in / (it must not hold the
    // directory it was started in), so the paths are made absolute here.
    let pool = std::path::absolute(&a.pool).context("the pool's path")?;
    let dir = std::path::absolute(&a.dir).context("the mount point's path")?;
    let mut cmd = vec!["fs".into(), "mount".into(), text(&pool)?, text(&dir)?];
    let mut log = "syslog".to_string();
    for opt in a.options.iter().flat_map(|o| o.split(',')) {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        match (key, value) {
            (k, None) if IGNORED.contains(&k) => {}
            (k, _) if k.starts_with("x-") || k == "comment" => {}
            ("ro", None) => cmd.push("--read-only".into()),
            ("atomic", None) => cmd.push("--atomic".into()),
            ("checksum", None) => cmd.push("--checksum".into()),
            ("full_walk", None) => cmd.push("--full-walk".into()),
            ("noatime" | "relatime" | "strictatime", None) => {
                cmd.extend(["--atime".into(), key.into()]);
            }
            // The helper's stderr is gone once it returns: the daemon's messages need a home.
            ("log", Some("stderr")) => {
                bail!("log=stderr: the helper exits once mounted; use syslog or a file")
            }
            ("log", Some(v)) => log = v.into(),
            (k, Some(v)) if VALUED.contains(&k) => {
                cmd.extend([format!("--{}", k.replace('_', "-")), v.into()]);
            }
            _ if a.sloppy => {}
            _ => bail!(
                "unknown mount option {opt:?} (`man mount.fuse.pmkit` lists them; -s ignores \
                 unknown ones)"
            ),
        }
    }
    debug_assert!(cmd.len() >= 4 && cmd[..2] == ["fs", "mount"]);
    cmd.extend(["--log".into(), log]);
    Ok(cmd)
}

fn text(p: &Path) -> Result<String> {
    p.to_str()
        .map(str::to_string)
        .with_context(|| format!("{}: not UTF-8", p.display()))
}

fn shown(cmd: &[String]) -> String {
    format!("pmkit {}", cmd.join(" "))
}

/// Start the daemon in its own session and wait until it says it serves (the mount is up) or
/// ends (the mount failed).
fn run(cmd: Vec<String>, verbose: bool) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the pmkit executable")?;
    let mut c = Command::new(exe);
    c.args(&cmd)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent: the daemon
    // leaves the caller's session, so the caller's terminal hanging up does not stop it.
    unsafe {
        c.pre_exec(|| {
            libc::setsid();
            Ok(())
        })
    };
    let mut child = c.spawn().context("cannot start `pmkit fs mount`")?;
    let (out, err) = (child.stdout.take(), child.stderr.take());
    // Its stderr is kept until the daemon points it at the log (the pipe then ends), and shown
    // when the mount fails or with -v: a mount that works says nothing, as mount(8) expects.
    let said = err.map(|err| {
        std::thread::spawn(move || {
            BufReader::new(err)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<_>>()
        })
    });
    let ready = out.is_some_and(|out| {
        BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.starts_with(crate::fs_mount::READY))
    });
    let ended = if ready {
        None
    } else {
        Some(child.wait().context("waiting for `pmkit fs mount`")?)
    };
    let said = said.and_then(|t| t.join().ok()).unwrap_or_default();
    if verbose || ended.is_some() {
        for line in said {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }
    debug_assert!(ready != ended.is_some(), "served, or ended before");
    match ended {
        None => Ok(()),
        Some(status) => bail!("`pmkit fs mount` ended before mounting ({status})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> HelperArgs {
        HelperArgs::try_parse_from(std::iter::once("mount.fuse.pmkit").chain(args.iter().copied()))
            .unwrap()
    }

    #[test]
    fn options_become_the_daemons_flags() {
        let a = parse(&[
            "/p",
            "/m",
            "-o",
            "rw,noauto,threads=2,cache=short,ro,noatime,x-systemd.automount",
            "-o",
            "atomic",
        ]);
        let c = command(&a).unwrap();
        assert_eq!(
            c.join(" "),
            "fs mount /p /m --threads 2 --cache short --read-only --atime noatime --atomic --log syslog"
        );
    }

    /// Each option passed on by name is a flag of `pmkit fs mount`: the two cannot drift apart.
    #[test]
    fn passed_options_are_flags_of_fs_mount() {
        use clap::CommandFactory;
        let cli = crate::Cli::command();
        let mount = cli
            .find_subcommand("fs")
            .and_then(|fs| fs.find_subcommand("mount"))
            .unwrap();
        for k in VALUED
            .iter()
            .chain(&["atomic", "checksum", "full_walk", "read_only", "log"])
        {
            let flag = k.replace('_', "-");
            assert!(
                mount.get_arguments().any(|a| a.get_long() == Some(&flag)),
                "pmkit fs mount has no --{flag}"
            );
        }
    }

    #[test]
    fn unknown_options_are_refused_unless_sloppy() {
        assert!(command(&parse(&["/p", "/m", "-o", "bogus"])).is_err());
        assert!(command(&parse(&["/p", "/m", "-s", "-o", "bogus"])).is_ok());
        assert!(command(&parse(&["/p", "/m", "-t", "ext4"])).is_err());
        let c = command(&parse(&["/p", "/m", "-o", "log=/var/log/x,barrier_ns=5"])).unwrap();
        assert_eq!(
            c.join(" "),
            "fs mount /p /m --barrier-ns 5 --log /var/log/x"
        );
    }
}
