//! `pmkit fs ...`: make, describe and check PMFS file systems (systems/fs, docs/fs.md).

use anyhow::{Context, Result};
use clap::{Args as ClapArgs, Subcommand};
use pmkit::args::parse_size;
use pmkit_fs::{Fs, GeometryHint, MkfsOptions, RepairOptions};
use pmkit_media::{Region, RegionOptions};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(ClapArgs)]
pub(crate) struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Make an empty file system in POOL: a new file of --size bytes, or an existing file or
    /// /dev/daxX.Y device. Refused while POOL is in use (mounted, served, open in a program),
    /// and over an existing pmkit format unless --force.
    Mkfs {
        /// The pool: a file (on a DAX file system for real PM, in /dev/shm for emulated PM)
        /// or a device-dax device.
        pool: PathBuf,
        /// Size of a pool file created here (e.g. 64M, 1G); an existing file keeps its size.
        #[arg(long, value_parser = parse_size)]
        size: Option<u64>,
        /// Format POOL even if it already holds a pmkit file system, device or object pool
        /// (whose contents are then lost).
        #[arg(long)]
        force: bool,
        /// Inodes in the table mkfs lays out. It is not a limit: the table grows into free
        /// blocks (32 inodes each) as files are made, so only space limits the file count.
        /// Default: one per 16 KiB of the pool (as ext4), at least 4096 and at most 1048576.
        #[arg(long)]
        inodes: Option<u32>,
        /// Journal lanes: transactions that can run at once. Default: one per CPU, 8 to 64.
        #[arg(long)]
        lanes: Option<u32>,
        /// 64-byte entries per journal lane.
        #[arg(long, default_value_t = 256)]
        lane_entries: u32,
    },
    /// Show geometry, usage and what each operation costs the journal (reads only).
    Info {
        /// The pool: a file made by `pmkit fs mkfs`, or a device-dax device.
        pool: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Mount POOL on DIR with FUSE and serve it in the foreground until `pmkit fs umount DIR`
    /// or SIGTERM/SIGINT; then the pool is marked clean. A stale mount on DIR is detached.
    Mount {
        /// The pool: a file made by `pmkit fs mkfs`, or a device-dax device.
        pool: PathBuf,
        /// The mount point: an existing directory.
        dir: PathBuf,
        /// FUSE worker threads on /dev/fuse (the io_uring transport has one queue per CPU).
        #[arg(long, default_value_t = 4)]
        threads: usize,
        /// How FUSE requests reach the daemon: uring (FUSE over io_uring, a queue per CPU;
        /// needs the kernel's /sys/module/fuse/parameters/enable_uring = Y), dev (/dev/fuse,
        /// --threads workers), auto (uring where the kernel offers it, else dev).
        #[arg(long, value_name = "auto|dev|uring", default_value_t = pmkit_fuse::uring::Transport::Auto)]
        transport: pmkit_fuse::uring::Transport,
        #[arg(long, value_name = "MODE", default_value = "auto", help = pmkit::args::PROTECT_HELP)]
        protect: pmkit::args::ProtectArg,
        /// Files created by this mount are atomic: every write all-or-nothing (copy-on-write),
        /// not in place. Per file: the xattr `user.pmkit.atomic` ("1"/"0") shows and sets it.
        #[arg(long)]
        atomic: bool,
        /// Files created by this mount carry data checksums: a block the media changed reads
        /// as EIO, never as its changed bytes, and `pmkit fs check` names it; their writes are
        /// copy-on-write (docs/fs.md, "Data checksums"). Per file: the xattr
        /// `user.pmkit.checksum` ("1"/"0") shows and sets it. Needs a pool of format 6 or later.
        #[arg(long)]
        checksum: bool,
        /// Keep per-request statistics as JSON in FILE (rewritten every second and at
        /// unmount): per kind of request, count, errors, mean time in the library, bytes
        /// journaled, fences, transactions and bytes stored.
        #[arg(long, value_name = "FILE")]
        stats: Option<PathBuf>,
        /// Emulate a slower persistence barrier: every fence takes at least N more
        /// nanoseconds (0-1000000).
        #[arg(long, value_name = "N", default_value_t = 0)]
        barrier_ns: u64,
        /// What the kernel may cache: none, short (attributes and names 1 s), long
        /// (attributes, names and missing names 1 h, pages kept across opens; the default: a
        /// returned write is on PM), or writeback (long, and the kernel's write-back cache: a
        /// write returns from the page cache and is durable after fsync or close, as on a
        /// disk file system). See docs/fs.md.
        #[arg(long, default_value_t = pmkit_fuse::pmfs::cache::CacheMode::default())]
        cache: pmkit_fuse::pmfs::cache::CacheMode,
        /// Walk and check every tree at mount even after a clean unmount, instead of loading
        /// the allocator that unmount saved (a mount after a crash always walks).
        #[arg(long)]
        full_walk: bool,
        /// When reads store access times: relatime (when the last access is not after the last
        /// change, or a day old, as Linux's default), noatime (never) or strictatime (every
        /// read).
        #[arg(long, default_value = "relatime", value_parser = parse_atime)]
        atime: pmkit_fs::Atime,
        /// Mount read-only: every change is refused (EROFS) and reads store no access time.
        /// A pool not unmounted clean still has its journal replayed at mount.
        #[arg(long)]
        read_only: bool,
        /// After a stop (SIGTERM, `pmkit fs umount`), how many seconds requests in flight may
        /// make no progress before the daemon aborts the FUSE connection (their callers get
        /// ECONNABORTED) and exits without marking the pool clean.
        #[arg(long, value_name = "SECONDS", default_value_t = pmkit_fuse::pmfs::mount::STOP_GRACE.as_secs())]
        stop_grace: u64,
        /// Where messages go once the file system is mounted: stderr (unchanged), syslog, or a
        /// file (appended). Messages before that (errors that stop the mount) always go to
        /// stderr. The mount helper (`mount -t fuse.pmkit`) passes syslog.
        #[arg(long, value_name = "DEST", default_value = "stderr")]
        log: pmkit::daemon_log::LogDest,
    },
    /// Serve POOL to every process that uses it through the LD_PRELOAD shim, in the
    /// foreground until SIGTERM/SIGINT; then the pool is marked clean. With it running, any
    /// number of processes (forked children too) use the pool at once (docs/fs-sharing.md).
    Serve {
        /// The pool: a file made by `pmkit fs mkfs`, or a device-dax device.
        pool: PathBuf,
        #[arg(long, value_name = "MODE", default_value = "auto", help = pmkit::args::PROTECT_HELP)]
        protect: pmkit::args::ProtectArg,
        /// Walk and check every tree at mount even after a clean unmount.
        #[arg(long)]
        full_walk: bool,
        /// Files created through the server carry data checksums (as `pmkit fs mount
        /// --checksum`).
        #[arg(long)]
        checksum: bool,
    },
    /// Unmount a `pmkit fs mount` and wait for its daemon to mark the pool clean.
    Umount {
        /// The mount point: an existing directory.
        dir: PathBuf,
        /// Seconds to wait for the daemon to exit.
        #[arg(long, default_value_t = 60)]
        wait: u64,
    },
    /// Grow POOL (a file, not mounted, unmounted clean) to SIZE: the file is extended and the
    /// file system takes the new space. The inode table keeps its size; a format 2 pool becomes
    /// format 3. Shrinking is not supported.
    Resize {
        /// The pool file.
        pool: PathBuf,
        /// The new size (e.g. 2G): larger than the pool's.
        #[arg(long, value_parser = parse_size)]
        size: u64,
    },
    /// Check a file system without changing it; exit status 1 if it has problems, 4 if only
    /// data damage (files with data checksums whose blocks do not match: the pool mounts, those
    /// reads answer EIO). With --repair, fix what can be fixed (the pool must not be mounted);
    /// exit status 1 if problems remain.
    Check {
        /// The pool: a file made by `pmkit fs mkfs`, or a device-dax device.
        pool: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Fix the problems found (each fix crash-safe; see docs/fs.md, Repair).
        #[arg(long)]
        repair: bool,
        /// With --repair, when both superblocks are bad: the pool's mkfs numbers
        /// LANES,ENTRIES,INODES (the --lanes, --lane-entries and --inodes it was made with).
        #[arg(long, value_parser = parse_geometry, requires = "repair")]
        geometry: Option<GeometryHint>,
    },
}

fn parse_atime(s: &str) -> std::result::Result<pmkit_fs::Atime, String> {
    pmkit_fs::Atime::parse(s).ok_or_else(|| "relatime, noatime or strictatime".into())
}

/// Open a pool to read it: read-only, refused when it holds another pmkit kind.
fn open_ro(path: &Path) -> Result<Region> {
    let r =
        Region::open_read_only(path).with_context(|| format!("{}: cannot open", path.display()))?;
    crate::identify::expect(path, &r, crate::identify::Kind::Fs)?;
    Ok(r)
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    match a.cmd {
        Cmd::Mkfs {
            pool,
            size,
            force,
            inodes,
            lanes,
            lane_entries,
        } => {
            let target = crate::format_target::Target {
                path: &pool,
                size,
                force,
                opts: RegionOptions::default(),
                command: "pmkit fs mkfs",
            };
            let o = MkfsOptions {
                inodes: inodes.unwrap_or(0),
                lanes: lanes.unwrap_or(0),
                lane_entries,
            };
            let sb = crate::format_target::format(&target, |region, _| {
                for n in region.notes() {
                    eprintln!("note: {n}");
                }
                Fs::mkfs(&region, &o).with_context(|| format!("{}", pool.display()))?;
                Ok(pmkit_fs::superblock(&region)?)
            })?;
            println!(
                "{}: PMFS of {} blocks of 4 KiB ({} for data), {} inodes to start (the table grows), {} journal lanes of {} entries",
                pool.display(),
                sb.geo.blocks,
                sb.geo.data_blocks(),
                sb.geo.inodes - 1,
                sb.geo.lanes,
                sb.geo.lane_entries
            );
        }
        Cmd::Info { pool, json } => {
            let region = open_ro(&pool)?;
            let sb =
                pmkit_fs::superblock(&region).with_context(|| format!("{}", pool.display()))?;
            let report = pmkit_fs::check(&region);
            let costs = pmkit_fs::op_costs();
            if json {
                let v = serde_json::json!({
                    "superblock": sb,
                    "usage": report,
                    "domain": region.domain(),
                    "kind": region.kind(),
                    "op_costs": costs,
                });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let g = sb.geo;
                println!("pool:        {}", pool.display());
                println!("media:       {:?}, {}", region.kind(), region.domain());
                println!(
                    "format:      {} (superblock copies at bytes {} and {})",
                    g.version(),
                    g.sb_offs()[0],
                    g.sb_offs()[1]
                );
                println!(
                    "blocks:      {} of 4 KiB, data from block {}",
                    g.blocks, g.data_block
                );
                println!(
                    "journal:     {} lanes of {} entries of 64 bytes",
                    g.lanes, g.lane_entries
                );
                let grows = match g.grows() {
                    true => "; it grows into free blocks, 32 inodes each",
                    false => " (format 4 and older: a fixed table)",
                };
                println!(
                    "inodes:      {} in the table ({} free){grows}",
                    report.inodes, report.free_inodes
                );
                println!(
                    "data blocks: {} ({} free; {} whole 2 MiB chunks free for huge blocks)",
                    g.data_blocks(),
                    report.free_blocks,
                    report.free_huge_blocks
                );
                if g.shares() {
                    println!(
                        "shared:      {} blocks shared by reflinks, saving {} blocks of copies",
                        report.shared_blocks, report.shared_extra
                    );
                }
                println!(
                    "files:       {}, directories {}, orphans {}",
                    report.files, report.dirs, report.orphans
                );
                println!(
                    "state:       mount generation {}, {}",
                    sb.mount_gen,
                    if sb.clean {
                        "clean"
                    } else {
                        "not unmounted cleanly"
                    }
                );
                println!("checkpoint:  {}", report.checkpoint);
                println!("journal cost per operation (measured on an in-memory file system):");
                for c in costs {
                    println!(
                        "  {:<36} {:>5} bytes journaled, {} fences",
                        c.op, c.journal_bytes, c.fences
                    );
                }
            }
        }
        Cmd::Mount {
            pool,
            dir,
            threads,
            protect,
            atomic,
            checksum,
            stats,
            barrier_ns,
            cache,
            transport,
            full_walk,
            atime,
            read_only,
            stop_grace,
            log,
        } => {
            crate::identify::expect_path(&pool, crate::identify::Kind::Fs)?;
            crate::fs_mount::mount(
                &pool,
                &dir,
                &crate::fs_mount::Opts {
                    threads,
                    protect: protect.0,
                    atomic,
                    checksum,
                    stats: stats.as_deref(),
                    barrier_ns,
                    cache,
                    transport,
                    full_walk,
                    atime,
                    read_only,
                    stop_grace: std::time::Duration::from_secs(stop_grace),
                    log,
                },
            )?
        }
        Cmd::Serve {
            pool,
            protect,
            full_walk,
            checksum,
        } => {
            crate::identify::expect_path(&pool, crate::identify::Kind::Fs)?;
            let o = pmkit_fs::MountOptions {
                protect: protect.0,
                full_walk,
                checksum,
                ..pmkit_fs::MountOptions::default()
            };
            crate::fs_serve::serve(&pool, &o)?
        }
        Cmd::Umount { dir, wait } => crate::fs_mount::umount(&dir, wait)?,
        Cmd::Resize { pool, size } => return crate::fs_offline::resize(&pool, size),
        Cmd::Check {
            pool,
            json,
            repair: true,
            geometry,
        } => return repair(&pool, json, geometry),
        Cmd::Check { pool, json, .. } => {
            let region = open_ro(&pool)?;
            let mut r = pmkit_fs::check(&region);
            if let Some(live) = in_use(&pool) {
                r.notes.insert(0, live);
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "{}: {} files, {} directories, {} orphans",
                    pool.display(),
                    r.files,
                    r.dirs,
                    r.orphans
                );
                for n in &r.notes {
                    println!("note: {n}");
                }
                println!("checkpoint: {}", r.checkpoint);
                for p in &r.problems {
                    println!("problem: {p}");
                }
                for d in &r.data_damage {
                    println!("data damage: {d}");
                }
                println!(
                    "{}",
                    match (r.is_clean(), r.data_damage.is_empty()) {
                        (true, true) => "clean",
                        (true, false) => "metadata clean (it mounts); DATA DAMAGED: see above",
                        (false, _) => "NOT clean",
                    }
                );
            }
            // as fsck: 1 for problems mount refuses, 4 for damage nothing here can correct
            return Ok(match (r.is_clean(), r.data_damage.is_empty()) {
                (true, true) => ExitCode::SUCCESS,
                (true, false) => ExitCode::from(4),
                (false, _) => ExitCode::from(1),
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether another process holds POOL (a mount, a program on libpmfs or the shim): a check
/// then reads a live file system, where a change in flight can look like a problem, and says so.
fn in_use(pool: &Path) -> Option<String> {
    let f = std::fs::File::open(pool).ok()?;
    let holders = pmkit_media::holders::of_file(&f);
    (!holders.is_empty()).then(|| {
        format!(
            "in use by {}: this is a check of a live file system, where a change in flight can \
             show as a problem; unmount it (`pmkit fs umount DIR`) for a verdict",
            pmkit_media::holders::describe(&holders)
        )
    })
}

fn parse_geometry(s: &str) -> std::result::Result<GeometryHint, String> {
    let n: Vec<u32> = s
        .split(',')
        .map(|v| v.trim().parse::<u32>().map_err(|e| format!("{v:?}: {e}")))
        .collect::<std::result::Result<_, _>>()?;
    match n[..] {
        [lanes, lane_entries, inodes] => Ok(GeometryHint {
            lanes,
            lane_entries,
            inodes,
        }),
        _ => Err("expected LANES,ENTRIES,INODES (three numbers)".into()),
    }
}

/// `pmkit fs check POOL --repair`: lock the pool as a mount does (so neither runs while the
/// other does), repair, print every problem and fix.
fn repair(pool: &Path, json: bool, geometry: Option<GeometryHint>) -> Result<ExitCode> {
    let region = Region::open(pool, &RegionOptions::default())
        .with_context(|| format!("{}: cannot open for repair", pool.display()))?;
    crate::identify::expect(pool, &region, crate::identify::Kind::Fs)?;
    crate::fs_offline::lock(pool, &region, "repaired")?;
    let r = pmkit_fs::repair_with(&region, &RepairOptions { geometry })
        .with_context(|| format!("{}: repair", pool.display()))?;
    region.unlock();
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        for p in &r.problems {
            println!("problem: {p}");
        }
        for f in &r.fixes {
            let mut at = Vec::new();
            if let Some(i) = f.ino {
                at.push(format!("inode {i}"));
            }
            if let Some(b) = f.block {
                at.push(format!("block {b}"));
            }
            if let Some(o) = f.offset {
                at.push(format!("byte {o}"));
            }
            println!("fixed: {} [{}]", f.what, at.join(", "));
        }
        for u in &r.unfixed {
            println!("left: {u}");
        }
        if r.is_clean() {
            println!(
                "{}: clean after repair ({} fixes): {} files, {} directories",
                pool.display(),
                r.fixes.len(),
                r.after.files,
                r.after.dirs
            );
        } else {
            println!(
                "{}: NOT clean: {} problems left after {} fixes; mount will refuse it",
                pool.display(),
                r.unfixed.len(),
                r.fixes.len()
            );
        }
    }
    Ok(if r.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
