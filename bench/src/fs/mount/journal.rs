//! Bytes written per metadata operation (thesis Table 3: touch 512 B, mkdir 320 B, mv 384 B;
//! beside them unlink, 4 KiB append + fsync, truncate of a 64 KiB file to 0, ftruncate
//! extending by 64 KiB, link, symlink, chmod and setxattr), and the FUSE requests each costs on
//! the PMFS mount (also for stat and open + 4 KiB read + close of an unchanged file, which
//! write nothing): the round trips that bound a FUSE file system, each operation a plain system call
//! on the mount, one thread, `n` times; what an operation needs first (the 64 KiB file a
//! truncate shrinks, the file a setxattr names) is made before its counters are read:
//! - PMFS: the library's counters of the mounted file system (`Served::counters`, the same
//!   `Counters` that `pmkit fs info` derives its per-operation costs from), read before and after
//!   the calls: bytes of journal entries, and every byte the library stored to PM (journal,
//!   inodes, directory entries, bitmaps, data). Each call is durable when it returns: nothing is
//!   synced.
//! - ext4 on `pmkit attach`: bytes the PM block device wrote (its `Stats::write_bytes`, what
//!   `pmkit attach --stats` reports) from before the call to after a `syncfs` that follows it,
//!   so each call's journal commit (descriptor, whole 4 KiB metadata blocks, commit block) is
//!   counted; checkpoints of those blocks to their home locations come later, when the journal
//!   fills, and are not counted.

use crate::fs::targets::Up;
use anyhow::{ensure, Context, Result};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

/// The operations, as `(name, the library's op_costs name)`. The last two write nothing (bar an
/// access time); they are here for their FUSE requests per call.
pub(super) const OPS: [(&str, &str); 13] = [
    ("touch (create)", "create (touch)"),
    ("mkdir", "mkdir"),
    ("mv (rename)", "rename (mv)"),
    ("rm (unlink)", "unlink"),
    ("append 4K+fsync", "append 4 KiB (new block)"),
    ("truncate 64K to 0", "truncate"),
    ("ftruncate +64K", "-"),
    ("link", "-"),
    ("symlink", "-"),
    ("chmod", "chmod"),
    ("setxattr 16 B", "-"),
    ("stat", "-"),
    ("open+read 4K", "-"),
];

/// What one operation wrote, averaged over the calls.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub(super) struct PerOp {
    pub op: &'static str,
    /// PMFS through the mount: journal bytes per call.
    pub pmfs_journal_bytes: f64,
    /// PMFS through the mount: all bytes stored to PM per call.
    pub pmfs_pm_bytes: f64,
    /// PMFS library alone (`pmkit_fs::op_costs`, one call on an in-memory file system).
    pub pmfs_library_journal_bytes: Option<u64>,
    /// ext4 on attach: device bytes written per call + syncfs.
    pub ext4_device_bytes: f64,
    /// ext4 on attach: device flushes per call + syncfs.
    pub ext4_flushes: f64,
    /// The thesis's figure (Table 3), where it gives one.
    pub thesis_bytes: Option<u64>,
    /// PMFS through the mount: FUSE requests the daemon answered per call (the round trips a
    /// call costs; what the kernel's caches answer costs none).
    pub pmfs_fuse_requests: f64,
}

fn syncfs(mnt: &Path) -> Result<()> {
    let d = File::open(mnt)?;
    // SAFETY: a valid open descriptor; syncfs reads nothing else.
    let r = unsafe { libc::syncfs(d.as_raw_fd()) };
    ensure!(r == 0, "syncfs: {}", std::io::Error::last_os_error());
    Ok(())
}

fn setxattr(p: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(p.as_os_str().as_bytes())?;
    let value = [0x42u8; 16];
    // SAFETY: NUL-terminated path and name, and a value buffer of the length passed.
    let r = unsafe {
        libc::setxattr(
            path.as_ptr(),
            c"user.pmkit.bench".as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    ensure!(
        r == 0,
        "setxattr {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
    Ok(())
}

/// Run every operation `n` times in `mnt/journal`; `read()` gives the counter (bytes, second
/// counter) of the target, `sync` whether to `syncfs` after each call (and after what it needs
/// first, so that is not counted). One value per op.
fn measure(
    mnt: &Path,
    n: usize,
    sync: bool,
    read: &dyn Fn() -> (u64, u64),
) -> Result<Vec<(f64, f64)>> {
    let dir = mnt.join("journal");
    fs::create_dir(&dir)?;
    let name = |p: &str, i: usize| dir.join(format!("{p}{i:04}"));
    syncfs(mnt)?;
    let block = [0x33u8; 4096];
    let mut append = File::create(dir.join("append"))?;
    append.sync_all()?;
    let grow = File::create(dir.join("grow"))?;
    grow.sync_all()?;
    File::create(dir.join("linked"))?.sync_all()?;
    fs::write(dir.join("unchanged"), block)?;
    File::open(dir.join("unchanged"))?.read_exact(&mut [0u8; 4096])?;
    syncfs(mnt)?;
    let mut out = vec![];
    for (op, _) in OPS {
        let (mut bytes, mut other) = (0u64, 0u64);
        for i in 0..n {
            // What the call needs, not counted.
            match op {
                "truncate 64K to 0" => {
                    let mut f = File::create(name("t", i))?;
                    for _ in 0..16 {
                        f.write_all(&block)?;
                    }
                    f.sync_all()?;
                }
                "setxattr 16 B" => File::create(name("x", i))?.sync_all()?,
                _ => {}
            }
            if sync {
                syncfs(mnt)?;
            }
            let (b0, c0) = read();
            match op {
                "touch (create)" => drop(File::create(name("f", i))?),
                "mkdir" => fs::create_dir(name("d", i))?,
                "mv (rename)" => fs::rename(name("f", i), name("g", i))?,
                "rm (unlink)" => fs::remove_file(name("g", i))?,
                "append 4K+fsync" => {
                    append.write_all(&block)?;
                    append.sync_all()?;
                }
                "truncate 64K to 0" => {
                    File::options().write(true).open(name("t", i))?.set_len(0)?
                }
                "ftruncate +64K" => grow.set_len((i as u64 + 1) << 16)?,
                "link" => fs::hard_link(dir.join("linked"), name("h", i))?,
                "symlink" => std::os::unix::fs::symlink("linked", name("s", i))?,
                "chmod" => {
                    use std::os::unix::fs::PermissionsExt;
                    let mode = if i % 2 == 0 { 0o600 } else { 0o644 };
                    fs::set_permissions(dir.join("linked"), fs::Permissions::from_mode(mode))?
                }
                "setxattr 16 B" => setxattr(&name("x", i))?,
                "stat" => {
                    fs::metadata(dir.join("linked"))?;
                }
                "open+read 4K" => {
                    File::open(dir.join("unchanged"))?.read_exact(&mut [0u8; 4096])?;
                }
                _ => unreachable!("operation {op}"),
            }
            if sync {
                syncfs(mnt)?;
            }
            let (b1, c1) = read();
            bytes += b1 - b0;
            other += c1 - c0;
        }
        out.push((bytes as f64 / n as f64, other as f64 / n as f64));
    }
    drop((append, grow));
    fs::remove_dir_all(&dir)?;
    Ok(out)
}

/// The per-operation figures of a PMFS mount (`pmfs`) and of ext4 on attach (`ext4`), both
/// mounted on their directories.
pub(super) fn per_op(pmfs: (&Up, &Path), ext4: (&Up, &Path), n: usize) -> Result<Vec<PerOp>> {
    ensure!(n >= 1, "at least one call per operation");
    let (p, pm) = pmfs;
    p.pmfs_counters().context("not a PMFS mount")?;
    let journal = measure(pm, n, false, &|| {
        let c = p.pmfs_counters().unwrap_or_default();
        (c.journal_bytes, c.bytes_written)
    })
    .context("journal bytes on PMFS")?;
    let requests = measure(pm, n, false, &|| (p.fuse_requests().unwrap_or_default(), 0))
        .context("FUSE requests on PMFS")?;
    debug_assert_eq!(requests.len(), OPS.len());
    let (e, em) = ext4;
    e.device_writes().context("not ext4 on attach")?;
    let device = measure(em, n, true, &|| e.device_writes().unwrap_or_default())
        .context("device bytes on ext4 on attach")?;
    let lib = pmkit_fs::op_costs();
    Ok(OPS
        .iter()
        .zip(journal.iter().zip(&device))
        .zip(&requests)
        .map(
            |((&(op, lib_op), (&(jb, pmb), &(db, fl))), &(rq, _))| PerOp {
                op,
                pmfs_journal_bytes: jb,
                pmfs_pm_bytes: pmb,
                pmfs_library_journal_bytes: lib
                    .iter()
                    .find(|c| c.op == lib_op)
                    .map(|c| c.journal_bytes),
                ext4_device_bytes: db,
                ext4_flushes: fl,
                thesis_bytes: match op {
                    "touch (create)" => Some(512),
                    "mkdir" => Some(320),
                    "mv (rename)" => Some(384),
                    _ => None,
                },
                pmfs_fuse_requests: rq,
            },
        )
        .collect())
}
