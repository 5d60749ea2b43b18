//! `pmkit create`, `pmkit info`, `pmkit check`: make, describe and verify PMBD block devices,
//! in the spirit of `pmempool create/info/check`.

use anyhow::{Context, Result};
use pmkit::args::{CreateFlags, EngineArgs};
use pmkit_blk::{CheckReport, Found, Severity};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(crate) struct CreateArgs {
    /// File to create (or, without --size, an existing file or /dev/daxX.Y to format)
    pub path: PathBuf,
    #[command(flatten)]
    pub create: CreateFlags,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Format PATH even if it already holds a pmkit device, file system or object pool
    /// (whose contents are then lost); without it such a file is refused
    #[arg(long)]
    pub force: bool,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub(crate) struct InfoArgs {
    /// The device: a file made by `pmkit create`, or a device-dax device
    pub path: PathBuf,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub(crate) struct CheckArgs {
    /// The device: a file made by `pmkit create`, or a device-dax device
    pub path: PathBuf,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    /// If the only problem is an unclean shutdown, mark the device clean (the only way `check`
    /// writes: it then needs write access; without it the file is opened read-only)
    #[arg(long)]
    pub mark_clean: bool,
}

pub(crate) fn create(a: CreateArgs) -> Result<ExitCode> {
    let engine = a.engine.to_options();
    let target = crate::format_target::Target {
        path: &a.path,
        size: a.create.size,
        force: a.force,
        opts: pmkit_media::RegionOptions {
            populate: engine.populate,
            ..Default::default()
        },
        command: "pmkit create",
    };
    let dev = crate::format_target::format(&target, |region, fresh| {
        // A freshly fallocate'd file reads as zeroes already.
        let create = pmkit_blk::CreateOptions {
            zero_data: !fresh,
            ..a.create.to_options()
        };
        pmkit_blk::Device::create(region, &create, &engine)
            .with_context(|| format!("cannot create a block device at {}", a.path.display()))
    })?;
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

pub(crate) fn info(a: InfoArgs) -> Result<ExitCode> {
    crate::identify::expect_path(&a.path, crate::identify::Kind::Blk)?;
    let (found, in_use) = pmkit_blk::inspect_path(&a.path)
        .with_context(|| format!("cannot read the device at {}", a.path.display()))?;
    if a.json {
        let read_only_user =
            !in_use && pmkit_blk::open_read_only_elsewhere(&a.path).unwrap_or(false);
        let v = serde_json::json!({
            "path": a.path,
            "in_use": in_use,
            "open_read_only_elsewhere": read_only_user,
            "found": found,
        });
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
    let read_only_user = !in_use && pmkit_blk::open_read_only_elsewhere(path).unwrap_or(false);
    let state = match (in_use, sb.clean) {
        (true, _) => "in use by another process".to_string(),
        (false, _) if read_only_user => {
            "open read-only by another process (e.g. `pmkit serve --read-only`); nothing is written"
                .to_string()
        }
        (false, true) => "clean".to_string(),
        (false, false) => "NOT shut down cleanly (run `pmkit check`)".to_string(),
    };
    row("state", state);
    let last = match (sb.last_protect, sb.last_write) {
        (Some(p), Some(w)) => format!("protect {p}, write {w}"),
        _ => "never opened".into(),
    };
    row("last opened", format!("{last} ({} opens)", sb.opens));
    if let Ok(region) = pmkit_media::Region::open_read_only(path) {
        let (p, why) = pmkit_blk::default_protect(Some(&region));
        row("protection", format!("{p} by default here: {why}"));
    }
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

pub(crate) fn check(a: CheckArgs) -> Result<ExitCode> {
    crate::identify::expect_path(&a.path, crate::identify::Kind::Blk)?;
    let report = pmkit_blk::check_path(&a.path, a.mark_clean).map_err(|e| {
        let denied = matches!(&e, pmkit_blk::BlkError::Media(m)
            if matches!(m.os_error(), Some(libc::EROFS | libc::EACCES | libc::EPERM)));
        let what = if a.mark_clean && denied {
            format!(
                "--mark-clean needs write access to {}, which this process lacks; drop \
                 --mark-clean to check it read-only",
                a.path.display()
            )
        } else {
            format!("cannot check the device at {}", a.path.display())
        };
        anyhow::Error::new(e).context(what)
    })?;
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
