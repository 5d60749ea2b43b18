//! `pmkit bench fs-map` (Oikawa's layer-cost study, figure 5; PMFS thesis Fig. 16): random reads and writes of
//! 64 B to 256 KiB through a memory mapping of one prefilled file, 1 thread. PMFS maps its file
//! with direct access (`Posix::map`: the file's PM at one address, no page cache) twice: a file
//! made by one fallocate of the whole 2 MiB-aligned file (2 MiB blocks, `pmfs-map-2m`) and one
//! written 4 KiB at a time (4 KiB blocks, `pmfs-map-4k`); writes are copies into the view and a
//! `Posix::persist` of their bytes. The kernel file systems (ext4 on `pmkit attach`, the
//! thesis's baseline and ratio base; ext2/ext4 on a /dev/shm loop device; tmpfs) map their file
//! `MAP_SHARED` through the page cache; writes are copies and an `msync(MS_SYNC)` of the touched
//! pages. Every configuration uses the same seeded offsets (aligned to the size), every mapping
//! is prefaulted (one store per 4 KiB page, then persisted) before timing, and the report
//! records what backs each mapping: its VMAs, the bytes mapped by 2 MiB page-table entries
//! (`/proc/self/smaps`) and the host's shmem THP setting, because a /dev/shm pool maps with
//! 4 KiB pages unless shmem THP is on, whatever the PMFS block size.

use crate::fs::targets::{self, Sizes, Target, Up};
use crate::host::{cpu_label, need_root, need_tool, Scratch};
use crate::report::{median, plot, rotated_rounds, BenchFlags};
use anyhow::{ensure, Context, Result};
use pmkit::args::EngineArgs;
use serde::Serialize;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    flags: BenchFlags,
    /// Request sizes in bytes [default: 64,256,1024,4096,16384,65536,262144; quick: 64,4096]
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<u64>,
    /// Milliseconds per cell per round (default 1000, quick 100).
    #[arg(long)]
    ms: Option<u64>,
    /// Size of the mapped file, in MiB, a multiple of 2 (default 64, quick 8).
    #[arg(long)]
    file_mib: Option<u64>,
    /// Size of the PMFS pool and of each ext2/ext4 device, in MiB.
    #[arg(long, default_value_t = 512)]
    size_mib: u64,
    #[command(flatten)]
    engine: EngineArgs,
}

/// One configuration of the figure.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Config {
    /// PMFS (the library) with a file of 2 MiB blocks (`true`) or 4 KiB blocks.
    Pmfs(bool),
    Kernel(Target),
}

const CONFIGS: [Config; 6] = [
    Config::Pmfs(true),
    Config::Pmfs(false),
    Config::Kernel(Target::Ext4Attach),
    Config::Kernel(Target::Ext2Loop),
    Config::Kernel(Target::Ext4Loop),
    Config::Kernel(Target::Tmpfs),
];

/// The ratio base.
const BASE: &str = "ext4-attach";
/// Operations between two looks at the clock.
const CLOCK_EVERY: u64 = 8;
const PAGE: usize = 4096;

impl Config {
    fn name(self) -> String {
        match self {
            Config::Pmfs(true) => "pmfs-map-2m".into(),
            Config::Pmfs(false) => "pmfs-map-4k".into(),
            Config::Kernel(t) => t.name(),
        }
    }

    fn target(self) -> Target {
        match self {
            Config::Pmfs(_) => Target::Library,
            Config::Kernel(t) => t,
        }
    }
}

/// One timed cell: random reads or writes of `bs` bytes.
#[derive(Clone, Copy, Serialize)]
struct Cell {
    write: bool,
    bs: u64,
}

impl Cell {
    fn label(self) -> String {
        format!(
            "rand{}-{}",
            if self.write { "write" } else { "read" },
            self.bs
        )
    }
}

/// What backs one mapping (first round).
#[derive(Serialize, Clone)]
struct Backing {
    config: String,
    /// Whether the mapping's address is 2 MiB-aligned.
    addr_2m_aligned: bool,
    /// VMAs of the mapping (PMFS: about one per extent of adjacent blocks).
    vmas: usize,
    /// PMFS: the file's extents of adjacent blocks, and how many bytes lie in 2 MiB-aligned
    /// extents of whole 2 MiB (huge-block-shaped); 0 for the kernel file systems.
    extents: usize,
    bytes_in_2m_extents: u64,
    /// Bytes of the mapping mapped by 2 MiB page-table entries after the prefault
    /// (smaps FilePmdMapped + ShmemPmdMapped): what the TLB gets.
    pmd_mapped_bytes: u64,
}

#[derive(Serialize, Clone)]
struct Sample {
    config: String,
    cell: String,
    mb_s: f64,
}

#[derive(Serialize)]
struct Row {
    cell: String,
    write: bool,
    bs: u64,
    cells: Vec<Value>,
}

#[derive(Serialize)]
struct Value {
    config: String,
    mb_s: f64,
    vs_ext4_attach: f64,
}

#[derive(Serialize)]
struct Report {
    cpu: String,
    rounds: usize,
    ms: u64,
    file_bytes: u64,
    configs: Vec<String>,
    /// /sys/kernel/mm/transparent_hugepage/shmem_enabled (the selected value in brackets).
    shmem_thp: String,
    prefaulted: bool,
    backing: Vec<Backing>,
    samples: Vec<Sample>,
    summary: Vec<Row>,
}

/// Seeded offsets aligned to `bs` inside `file` (splitmix64): the same sequence everywhere.
struct Offsets(u64);

impl Offsets {
    fn next(&mut self, bs: u64, file: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d4_9bb1_1331_11eb);
        ((z ^ (z >> 31)) % (file / bs)) * bs
    }
}

/// A mapping under test: its base, length, and how its stores are made durable.
struct View<'a> {
    ptr: *mut u8,
    len: usize,
    persist: &'a dyn Fn(*mut u8, usize) -> Result<()>,
}

impl View<'_> {
    /// One store per 4 KiB page (of the byte already there) and a persist of the whole
    /// mapping, so timed accesses find every page mapped writable.
    fn prefault(&self) -> Result<()> {
        for off in (0..self.len).step_by(PAGE) {
            // SAFETY: `off < len`, inside the live mapping; a volatile read and write of the
            // same byte.
            unsafe {
                let p = self.ptr.add(off);
                p.write_volatile(p.read_volatile());
            }
        }
        (self.persist)(self.ptr, self.len)
    }

    /// Run `cell` for `ms` with offsets seeded by `seed`; MB/s.
    fn run(&self, cell: Cell, ms: u64, seed: u64) -> Result<f64> {
        let bs = cell.bs as usize;
        let mut buf = vec![0x5au8; bs];
        let mut offs = Offsets(seed);
        let limit = Duration::from_millis(ms);
        let mut ops = 0u64;
        let t = Instant::now();
        loop {
            let off = offs.next(cell.bs, self.len as u64) as usize;
            // SAFETY: `off + bs <= len` (offsets are aligned to bs inside the file) and the
            // mapping lives for the whole run; `buf` is a separate allocation.
            unsafe {
                let p = self.ptr.add(off);
                if cell.write {
                    std::ptr::copy_nonoverlapping(buf.as_ptr(), p, bs);
                } else {
                    std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), bs);
                }
            }
            if cell.write {
                // SAFETY: as above, inside the mapping.
                (self.persist)(unsafe { self.ptr.add(off) }, bs)?;
            }
            std::hint::black_box(&mut buf);
            ops += 1;
            if ops.is_multiple_of(CLOCK_EVERY) && t.elapsed() >= limit {
                break;
            }
        }
        Ok((ops * cell.bs) as f64 / t.elapsed().as_secs_f64() / 1e6)
    }

    /// VMAs of this mapping and its bytes mapped by PMDs, from /proc/self/smaps.
    fn smaps(&self) -> (usize, u64) {
        let (lo, hi) = (self.ptr as usize, self.ptr as usize + self.len);
        let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        let (mut vmas, mut pmd_kb, mut inside) = (0, 0u64, false);
        for l in text.lines() {
            let head = l.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = head.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = a < hi && b > lo;
                    vmas += usize::from(inside);
                    continue;
                }
            }
            if inside && (l.starts_with("FilePmdMapped:") || l.starts_with("ShmemPmdMapped:")) {
                pmd_kb += l
                    .split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
            }
        }
        (vmas, pmd_kb << 10)
    }

    fn backing(&self, config: String, extents: &[(u64, u64)]) -> Backing {
        let (vmas, pmd) = self.smaps();
        let huge = 2u64 << 20;
        Backing {
            config,
            addr_2m_aligned: (self.ptr as u64).is_multiple_of(huge),
            vmas,
            extents: extents.len(),
            bytes_in_2m_extents: extents
                .iter()
                .filter(|e| e.0.is_multiple_of(huge))
                .map(|e| e.1 / huge * huge)
                .sum(),
            pmd_mapped_bytes: pmd,
        }
    }

    /// Prefault, then every cell; the backing seen after the prefault.
    fn measure(
        &self,
        config: String,
        extents: &[(u64, u64)],
        cells: &[Cell],
        ms: u64,
    ) -> Result<(Backing, Vec<f64>)> {
        self.prefault()?;
        let b = self.backing(config, extents);
        let mut out = Vec::new();
        for (i, &c) in cells.iter().enumerate() {
            out.push(self.run(c, ms, 0x5eed + i as u64)?);
        }
        Ok((b, out))
    }
}

/// PMFS: make /data (fallocate, or 4 KiB writes), map it, measure, unmap.
fn run_pmfs(
    up: &Up,
    huge: bool,
    file: u64,
    cells: &[Cell],
    ms: u64,
) -> Result<(Backing, Vec<f64>)> {
    let p = up.open_library()?;
    let r = (|| {
        let fd = p.open(b"/data", libc::O_RDWR | libc::O_CREAT, 0o644)?;
        if huge {
            p.fallocate(fd, 0, file)?;
        } else {
            let page = vec![0xa5u8; PAGE];
            for off in (0..file).step_by(PAGE) {
                ensure!(p.pwrite(fd, &page, off)? == PAGE, "short write at {off}");
            }
        }
        p.fsync(fd)?;
        let ino = p.fstat(fd)?.ino;
        let extents = p.fs().pin_extents(ino, 0, file)?;
        p.fs().unpin(ino, 0, file);
        let m = p.map(fd, 0, file).context("Posix::map of /data")?;
        let persist = |ptr: *mut u8, n: usize| -> Result<()> { Ok(p.persist(ptr, n)?) };
        let v = View {
            ptr: m.ptr,
            len: m.len,
            persist: &persist,
        };
        let r = v.measure(Config::Pmfs(huge).name(), &extents, cells, ms);
        p.unmap(m.ptr)?;
        p.close(fd)?;
        r
    })();
    drop(p.unmount());
    r
}

/// A kernel file system: prefill `mnt/data`, mmap it shared, measure, unmap.
fn run_kernel(
    t: Target,
    mnt: &Path,
    file: u64,
    cells: &[Cell],
    ms: u64,
) -> Result<(Backing, Vec<f64>)> {
    let path = mnt.join("data");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&path)?;
        let chunk = vec![0xa5u8; 256 << 10];
        let mut off = 0;
        while off < file {
            let n = chunk.len().min((file - off) as usize);
            f.write_all(&chunk[..n])?;
            off += n as u64;
        }
        f.sync_all()?;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)?;
    let len = file as usize;
    // SAFETY: a fresh shared mapping of a file we hold open; unmapped below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    ensure!(
        ptr != libc::MAP_FAILED,
        "mmap of {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    let base = ptr as usize;
    let persist = |p: *mut u8, n: usize| -> Result<()> {
        let start = (p as usize - base) & !(PAGE - 1);
        let end = (p as usize - base + n).div_ceil(PAGE) * PAGE;
        // SAFETY: page-aligned range inside the live mapping.
        let rc = unsafe { libc::msync((base + start) as *mut _, end - start, libc::MS_SYNC) };
        ensure!(rc == 0, "msync: {}", std::io::Error::last_os_error());
        Ok(())
    };
    let v = View {
        ptr: ptr.cast(),
        len,
        persist: &persist,
    };
    let r = v.measure(t.name(), &[], cells, ms);
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(ptr, len) };
    r
}

fn shmem_thp() -> String {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .map_or_else(|_| "unknown".into(), |s| s.trim().to_string())
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    need_root("bench fs-map mounts file systems")?;
    for tool in ["mkfs.ext4", "mkfs.ext2", "losetup", "mount", "umount"] {
        need_tool(tool, "install e2fsprogs, mount and util-linux")?;
    }
    ensure!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: load the fuse module (modprobe fuse)"
    );
    let quick = a.flags.quick;
    let rounds = a.flags.rounds(3);
    let ms = a.ms.unwrap_or(if quick { 100 } else { 1000 }).max(10);
    let mib = a.file_mib.unwrap_or(if quick { 8 } else { 64 });
    ensure!(
        mib >= 2 && mib.is_multiple_of(2) && mib <= 4096,
        "--file-mib {mib}: a multiple of 2 MiB (whole huge blocks), at most 4096"
    );
    let file = mib << 20;
    let mut sizes = if a.sizes.is_empty() {
        if quick {
            vec![64, 4096]
        } else {
            vec![64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10]
        }
    } else {
        a.sizes.clone()
    };
    sizes.sort_unstable();
    sizes.dedup();
    for &s in &sizes {
        ensure!(
            s >= 1 && file.is_multiple_of(s) && s <= file,
            "--sizes: {s} must divide the file size ({mib} MiB)"
        );
    }
    let cells: Vec<Cell> = [false, true]
        .iter()
        .flat_map(|&write| sizes.iter().map(move |&bs| Cell { write, bs }))
        .collect();
    let s = Sizes {
        bytes: a.size_mib.max((file * 3) >> 20).max(256) << 20,
        inodes: 4096,
        fuse_threads: 4,
        pmfs_protect: pmkit::args::ProtectArg(None),
        barrier_ns: 0,
    };
    let base = Scratch::dir(&std::env::temp_dir(), "fs-map")?;
    let mnt = base.path().join("mnt");
    std::fs::create_dir_all(&mnt)?;
    let bar = a.flags.progress(rounds * CONFIGS.len());
    let runs = rotated_rounds(rounds, 1, CONFIGS.len(), &bar, |r, _, i| {
        let c = CONFIGS[i];
        bar.set_message(format!("round {}/{rounds}: {}", r + 1, c.name()));
        let t = c.target();
        let up = targets::up(t, &a.flags.dir, &mnt, &s, &a.engine)
            .with_context(|| format!("setting up {}", c.name()))?;
        let res = match c {
            Config::Pmfs(huge) => run_pmfs(&up, huge, file, &cells, ms),
            Config::Kernel(t) => run_kernel(t, &mnt, file, &cells, ms),
        };
        let down = targets::down(up, &mnt);
        let res = res.with_context(|| format!("fs-map on {}", c.name()))?;
        down.with_context(|| format!("tearing down {}", c.name()))?;
        Ok(res)
    })?;
    let configs: Vec<String> = CONFIGS.iter().map(|c| c.name()).collect();
    let mut backing = Vec::new();
    let mut samples = Vec::new();
    for (i, per_round) in runs.into_iter().flatten().enumerate() {
        for (r, (b, mbs)) in per_round.into_iter().enumerate() {
            if r == 0 {
                backing.push(b);
            }
            for (c, v) in cells.iter().zip(mbs) {
                samples.push(Sample {
                    config: configs[i].clone(),
                    cell: c.label(),
                    mb_s: v,
                });
            }
        }
    }
    let summary = cells
        .iter()
        .map(|c| {
            let m = |name: &str| {
                median(
                    samples
                        .iter()
                        .filter(|s| s.config == name && s.cell == c.label())
                        .map(|s| s.mb_s),
                )
            };
            let b = m(BASE).max(1e-9);
            Row {
                cell: c.label(),
                write: c.write,
                bs: c.bs,
                cells: configs
                    .iter()
                    .map(|n| Value {
                        config: n.clone(),
                        mb_s: m(n),
                        vs_ext4_attach: m(n) / b,
                    })
                    .collect(),
            }
        })
        .collect();
    let report = Report {
        cpu: cpu_label(),
        rounds,
        ms,
        file_bytes: file,
        configs,
        shmem_thp: shmem_thp(),
        prefaulted: true,
        backing,
        samples,
        summary,
    };
    a.flags.emit(&report, draw, print_table)
}

fn size_label(b: u64) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

/// Two panels (random read, random write + persist), MB/s against the size, both logarithmic.
fn draw(p: &Path, r: &Report) -> Result<()> {
    let panels: Vec<plot::LinePanel> = [false, true]
        .iter()
        .map(|&w| plot::LinePanel {
            title: if w {
                "random write + persist/msync".into()
            } else {
                "random read".into()
            },
            series: r
                .configs
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let pts = r.summary.iter().filter(|x| x.write == w);
                    (
                        c.clone(),
                        pts.map(|x| (x.bs as f64, x.cells[i].mb_s)).collect(),
                    )
                })
                .collect(),
        })
        .collect();
    plot::line_panels(
        p,
        &format!("mmap'd file access, 1 thread (thesis Fig. 16); {}", r.cpu),
        plot::Axes {
            x_label: "access size (bytes)",
            y_label: "MB/s",
            log_x: true,
            log_y: true,
            x_fmt: |v| size_label(v.round() as u64),
        },
        &panels,
        2,
    )
}

fn print_table(r: &Report) {
    println!(
        "bench fs-map: median of {} round(s), {} ms per cell, {} MiB file mapped and prefaulted, \
         1 thread; {}",
        r.rounds,
        r.ms,
        r.file_bytes >> 20,
        r.cpu
    );
    println!("shmem THP: {}", r.shmem_thp);
    println!("MB/s ({BASE}'s ratio)");
    print!("{:<18}", "cell");
    for c in &r.configs {
        print!(" {c:>18}");
    }
    println!();
    for row in &r.summary {
        print!("{:<18}", row.cell);
        for c in &row.cells {
            print!(
                " {:>18}",
                format!("{:.1} ({:.2}x)", c.mb_s, c.vs_ext4_attach)
            );
        }
        println!();
    }
    println!("backing: config, 2 MiB-aligned address, VMAs, extents, bytes in 2 MiB extents, PMD-mapped bytes");
    for b in &r.backing {
        println!(
            "  {:<14} {:>5} {:>6} {:>6} {:>10} {:>10}",
            b.config,
            b.addr_2m_aligned,
            b.vmas,
            b.extents,
            b.bytes_in_2m_extents,
            b.pmd_mapped_bytes
        );
    }
}
