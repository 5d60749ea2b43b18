//! `pmkit create`, `pmkit info`, `pmkit check`: make, describe and verify PMBD block devices,
//! in the spirit of `pmempool create/info/check`. [`EngineArgs`] is the one set of engine flags
//! (protection, write scheme, buffers, ...) that every command opening a device flattens in.

use anyhow::{Context, Result};
use pmkit_blk::{
    BatchOptions, CheckReport, CreateOptions, EngineOptions, Found, Protect, Severity, WriteScheme,
};
use pmkit_media::emulate::EmulationSpec;
use std::path::PathBuf;
use std::process::ExitCode;

/// Engine options as command-line flags (`#[command(flatten)]` this into any command that
/// opens a device, then call [`EngineArgs::to_options`]).
#[derive(clap::Args, Clone, Debug)]
pub struct EngineArgs {
    /// Protection from stray writes: none, pt, pt-batch, private, pkey
    /// [default: pkey where the CPU has memory protection keys, else private or pt]
    #[arg(long, value_name = "MODE")]
    pub protect: Option<Protect>,
    /// With an explicit `--protect pkey`: what to use where pkeys are missing (default: refuse)
    #[arg(long, value_name = "MODE")]
    pub pkey_fallback: Option<Protect>,
    /// Ordered persistence: nt, clwb, clflushopt, clflush, wb, msync
    #[arg(long = "write", value_name = "SCHEME", default_value = "nt")]
    pub write: WriteScheme,
    /// pt-batch: number of staging buffers, each with a syncer thread
    #[arg(long, value_name = "N", default_value_t = BatchOptions::default().buffers)]
    pub buffers: usize,
    /// pt-batch: bytes per buffer (K, M, G suffixes)
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = parse_size)]
    pub buffer_size: u64,
    /// pt-batch: most blocks a syncer writes per batch
    #[arg(long, value_name = "BLOCKS", default_value_t = BatchOptions::default().batch_blocks)]
    pub batch: usize,
    /// pt-batch: consecutive blocks that map to the same buffer
    #[arg(long, value_name = "BLOCKS", default_value_t = BatchOptions::default().stride_blocks)]
    pub buffer_stride: u64,
    /// pt-batch: percent dirty at which a syncer starts draining
    #[arg(long, value_name = "PCT", default_value_t = BatchOptions::default().high_pct)]
    pub high_watermark: u8,
    /// pt-batch: percent dirty a syncer drains down to
    #[arg(long, value_name = "PCT", default_value_t = BatchOptions::default().low_pct)]
    pub low_watermark: u8,
    /// Write only the 64-byte lines of a block that changed
    #[arg(long)]
    pub subpage: bool,
    /// Read every write back and compare
    #[arg(long)]
    pub write_verify: bool,
    /// PM speed emulation: rdsx=N,wrsx=N,rdlat=NS,wrlat=NS,rdbw=MBS,wrbw=MBS (any subset)
    #[arg(long, value_name = "SPEC")]
    pub emulate: Option<EmulationSpec>,
    /// Largest request accepted (K, M suffixes)
    #[arg(long, value_name = "SIZE", default_value = "32M", value_parser = parse_size)]
    pub max_request: u64,
    /// Fault every page of the region in at open
    #[arg(long)]
    pub populate: bool,
}

impl EngineArgs {
    pub fn to_options(&self) -> EngineOptions {
        let d = BatchOptions::default();
        EngineOptions {
            protect: self.protect,
            pkey_fallback: self.pkey_fallback,
            write: self.write,
            batch: BatchOptions {
                buffers: self.buffers,
                buffer_bytes: usize::try_from(self.buffer_size).unwrap_or(usize::MAX),
                batch_blocks: self.batch,
                stride_blocks: self.buffer_stride,
                high_pct: self.high_watermark,
                low_pct: self.low_watermark,
                idle_ms: d.idle_ms,
            },
            subpage: self.subpage,
            write_verify: self.write_verify,
            emulate: self.emulate.unwrap_or_default(),
            max_request: usize::try_from(self.max_request).unwrap_or(usize::MAX),
            populate: self.populate,
        }
    }
}

/// `4096`, `64K`, `16M`, `1G`, `2T` (binary multiples; a trailing `B` or `iB` is allowed).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        Some('T' | 't') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 4096, 64K, 16M, 1G)"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[derive(clap::Args)]
pub struct CreateArgs {
    /// File to create (or, without --size, an existing file or /dev/daxX.Y to format)
    pub path: PathBuf,
    /// Size of the new file (K, M, G, T suffixes)
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Logical block size: 512 or 4096
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub block_size: u32,
    /// Keep a CRC32C per block in PM and verify it on every read
    #[arg(long)]
    pub checksum: bool,
    /// Atomic block writes (BTT-class): every block write is all-or-nothing across a power
    /// failure (a block map plus spare blocks; multi-block requests are atomic per block)
    #[arg(long)]
    pub atomic: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct InfoArgs {
    pub path: PathBuf,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct CheckArgs {
    pub path: PathBuf,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    /// If the only problem is an unclean shutdown, mark the device clean
    #[arg(long)]
    pub mark_clean: bool,
}

pub fn create(a: CreateArgs) -> Result<ExitCode> {
    let create = CreateOptions {
        block_size: a.block_size,
        checksum: a.checksum,
        zero_data: true,
        atomic: a.atomic,
    };
    let dev = pmkit_blk::create_path(&a.path, a.size, &create, &a.engine.to_options())
        .with_context(|| format!("cannot create a block device at {}", a.path.display()))?;
    let info = dev.info();
    dev.close().context("cannot close the new device")?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "path": a.path, "device": info }))?
        );
    } else {
        for n in &info.notes {
            eprintln!("note: {n}");
        }
        println!(
            "created {}: {} blocks of {} bytes ({} bytes), checksums {}, {}, uuid {}",
            a.path.display(),
            info.capacity / info.block_size as u64,
            info.block_size,
            info.capacity,
            if info.checksum { "on" } else { "off" },
            if info.atomic {
                format!(
                    "atomic block writes ({} spare blocks in {} lanes)",
                    info.superblock.layout.spare, info.lanes
                )
            } else {
                "plain (no block atomicity)".to_string()
            },
            info.superblock.uuid_string()
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn info(a: InfoArgs) -> Result<ExitCode> {
    let (found, in_use) = pmkit_blk::inspect_path(&a.path)
        .with_context(|| format!("cannot read the device at {}", a.path.display()))?;
    if a.json {
        let v = serde_json::json!({ "path": a.path, "in_use": in_use, "found": found });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_info(&a.path, &found, in_use);
    Ok(ExitCode::SUCCESS)
}

fn print_info(path: &std::path::Path, f: &Found, in_use: bool) {
    let sb = &f.current;
    let l = &sb.layout;
    let row = |k: &str, v: String| println!("{k:<14}{v}");
    row("path", path.display().to_string());
    row("uuid", sb.uuid_string());
    row("version", sb.version.to_string());
    row("block size", l.block_size.to_string());
    row(
        "capacity",
        format!("{} bytes ({} blocks)", l.capacity(), l.nblocks),
    );
    if l.atomic() {
        row(
            "checksums",
            if l.checksum() {
                "on (CRC32C per block, in its map entry)".into()
            } else {
                "off".into()
            },
        );
        row("atomic", "yes: each block write is all-or-nothing (map + spare blocks; per block in multi-block requests)".into());
        let map_end = l.map_off + l.nblocks * pmkit_blk::superblock::MAP_ENTRY;
        row(
            "layout",
            format!(
                "superblock 0..4096, map {}..{} ({} entries of 8 bytes), physical blocks {}..{} ({} = {} + {} spare) of {} bytes",
                l.map_off,
                map_end,
                l.nblocks,
                l.data_off,
                l.data_off + l.phys_blocks() * l.block_size as u64,
                l.phys_blocks(),
                l.nblocks,
                l.spare,
                l.region_len
            ),
        );
    } else {
        row(
            "checksums",
            if l.checksum() {
                "on (CRC32C per block, in PM)".into()
            } else {
                "off".into()
            },
        );
        row(
            "atomic",
            "no (a block being written at a crash may be torn)".into(),
        );
        row(
            "layout",
            format!(
                "superblock 0..4096, {}data {}..{} of {} bytes",
                if l.checksum() {
                    format!("CRC table {}..{}, ", l.csum_off, l.data_off)
                } else {
                    String::new()
                },
                l.data_off,
                l.data_off + l.capacity(),
                l.region_len
            ),
        );
    }
    let state = match (in_use, sb.clean) {
        (true, _) => "in use by another process".to_string(),
        (false, true) => "clean".to_string(),
        (false, false) => "NOT shut down cleanly (run `pmkit check`)".to_string(),
    };
    row("state", state);
    let last = match (sb.last_protect, sb.last_write) {
        (Some(p), Some(w)) => format!("protect {p}, write {w}"),
        _ => "never opened".into(),
    };
    row("last opened", format!("{last} ({} opens)", sb.opens));
    row("created", format!("{} (unix time)", sb.created_unix));
    let slot = ['A', 'B'][f.slot];
    let spare = match &f.slot_errors[1 - f.slot] {
        None => "valid".to_string(),
        Some(e) => format!("unusable: {e}"),
    };
    row(
        "superblock",
        format!(
            "slot {slot} in force (generation {}); spare slot {spare}",
            sb.seq
        ),
    );
}

pub fn check(a: CheckArgs) -> Result<ExitCode> {
    let report = pmkit_blk::check_path(&a.path, a.mark_clean)
        .with_context(|| format!("cannot check the device at {}", a.path.display()))?;
    if a.json {
        let v = serde_json::json!({ "path": a.path, "clean": report.is_clean(), "report": report });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_check(&a.path, &report);
    }
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_check(path: &std::path::Path, r: &CheckReport) {
    if let Some(sb) = &r.superblock {
        println!(
            "{}: superblock valid (slot {}, generation {}), {} blocks of {} bytes",
            path.display(),
            r.slot_in_force.unwrap_or('?'),
            sb.seq,
            sb.layout.nblocks,
            sb.layout.block_size
        );
        if let Some(m) = &r.map {
            println!(
                "map: {} entries, {} problems; free blocks {} (spares {})",
                m.entries, m.problems, m.free_blocks, sb.layout.spare
            );
        }
        if sb.layout.checksum() {
            println!(
                "checksums: {} blocks checked, {} bad",
                r.blocks_checked, r.bad_blocks
            );
        }
    }
    for f in &r.findings {
        let tag = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        println!("{tag}: {}", f.what);
    }
    println!("{}", if r.is_clean() { "clean" } else { "NOT clean" });
}

/// `--stats FILE` of `serve` and `attach`: the device's statistics (counts, bytes, latency
/// histograms, flushes) as JSON in FILE, rewritten every second while the device is up and once
/// more after it closes. Each write goes to a temporary file renamed over FILE, so a reader
/// never sees half a document.
pub struct StatsWriter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    path: std::path::PathBuf,
}

/// Write `value` as pretty JSON to `path` atomically.
fn write_json_atomically(
    path: &std::path::Path,
    value: &impl serde::Serialize,
) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(&tmp, path)
}

impl StatsWriter {
    pub fn spawn<S: serde::Serialize>(
        path: std::path::PathBuf,
        stats: impl Fn() -> S + Send + 'static,
    ) -> Result<StatsWriter> {
        use std::sync::atomic::Ordering;
        write_json_atomically(&path, &stats())
            .with_context(|| format!("writing statistics to {}", path.display()))?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, p) = (stop.clone(), path.clone());
        let thread = std::thread::Builder::new()
            .name("pmkit-stats".into())
            .spawn(move || {
                // Wake every 200 ms (quick to stop), write every fifth time (once a second).
                let mut ticks = 0u64;
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    ticks += 1;
                    if ticks.is_multiple_of(5) {
                        if let Err(e) = write_json_atomically(&p, &stats()) {
                            tracing::warn!("writing statistics to {}: {e}", p.display());
                        }
                    }
                }
            })?;
        Ok(StatsWriter {
            stop,
            thread: Some(thread),
            path,
        })
    }

    /// Stop the periodic writes and write `last` (the statistics after close).
    pub fn finish(mut self, last: &impl serde::Serialize) -> Result<()> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        write_json_atomically(&self.path, last)
            .with_context(|| format!("writing statistics to {}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn engine_args_map_onto_options() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            e: EngineArgs,
        }
        let t = T::try_parse_from([
            "t",
            "--protect",
            "pt-batch",
            "--write",
            "clwb",
            "--buffers",
            "4",
            "--buffer-size",
            "1M",
            "--subpage",
            "--emulate",
            "wrsx=3",
        ])
        .unwrap();
        let o = t.e.to_options();
        assert_eq!(o.protect, Some(Protect::PtBatch));
        assert_eq!(o.write, WriteScheme::Clwb);
        assert_eq!((o.batch.buffers, o.batch.buffer_bytes), (4, 1 << 20));
        assert!(o.subpage && !o.write_verify);
        assert_eq!(o.emulate.wrsx, 3);
        let d = T::try_parse_from(["t"]).unwrap().e.to_options();
        assert_eq!(
            d,
            EngineOptions::default(),
            "flag defaults are the engine's defaults"
        );
        assert!(T::try_parse_from(["t", "--protect", "bogus"]).is_err());
    }
}
