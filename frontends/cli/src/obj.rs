//! `pmkit obj ...`: create, inspect, dump and check PMO pools (persistent memory objects).

use anyhow::{Context, Result};
use clap::{Args as ClapArgs, Subcommand};
use pmkit::args::parse_size;
use pmkit_media::{Region, RegionOptions};
use pmkit_obj::{Pool, PoolOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(ClapArgs)]
pub(crate) struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a pool: a new file of --size bytes, or format an existing file or device-dax
    /// device. Refused while POOL is in use, and over an existing pmkit format unless --force.
    Create {
        /// The pool: a file, or a device-dax device.
        pool: PathBuf,
        /// Size of a pool file created here, e.g. 64M, 1G; an existing file keeps its size.
        #[arg(long, value_parser = parse_size)]
        size: Option<u64>,
        /// Format POOL even if it already holds a pmkit object pool, file system or device
        /// (whose contents are then lost).
        #[arg(long)]
        force: bool,
        /// Object Table entries: the most objects the pool can hold.
        #[arg(long, default_value_t = 4096)]
        max_objects: u32,
        /// Keep a CRC32C per 4 KiB object page: a page that no longer matches is an I/O error
        /// (never data) and `obj check` names the object and page. Costs about 0.3 us per page
        /// synced (docs/obj.md).
        #[arg(long)]
        checksum: bool,
    },
    /// List the objects of a pool.
    List {
        /// The pool: a file, or a device-dax device.
        pool: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a pool's geometry and usage.
    Info {
        /// The pool: a file, or a device-dax device.
        pool: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write an object's last published contents to stdout (raw bytes, or a hex dump with --hex).
    Dump {
        /// The pool: a file, or a device-dax device.
        pool: PathBuf,
        /// The object's name.
        name: String,
        /// A hex dump with offsets and text, instead of the raw bytes.
        #[arg(long)]
        hex: bool,
    },
    /// Check a pool without changing it; exit status 1 if it has problems.
    Check {
        /// The pool: a file, or a device-dax device.
        pool: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create an object of SIZE bytes (zero-filled).
    New {
        /// The pool: a file, or a device-dax device.
        pool: PathBuf,
        /// The object's name.
        name: String,
        /// The object's size, e.g. 4K, 1M (zero-filled).
        #[arg(long, value_parser = parse_size)]
        size: u64,
    },
    /// Write FILE (or stdin) into an object at OFFSET and publish it with one PMO Sync.
    Put {
        /// The pool: a file, or a device-dax device.
        pool: PathBuf,
        /// The object's name.
        name: String,
        /// Where in the object to write, in bytes (K, M, G suffixes).
        #[arg(long, default_value = "0", value_parser = parse_size)]
        offset: u64,
        /// Input file; stdin when absent.
        #[arg(long)]
        from: Option<PathBuf>,
    },
    /// Delete an object.
    Delete {
        /// The pool: a file, or a device-dax device.
        pool: PathBuf,
        /// The object's name.
        name: String,
    },
}

/// Open a pool to change it: read-write, locked exclusively (refused, holders named, while
/// another process uses it), recovered.
fn open(path: &Path) -> Result<Pool<Region>> {
    let region = Region::open(path, &RegionOptions::default())
        .with_context(|| format!("{}: cannot open", path.display()))?;
    crate::identify::expect(path, &region, crate::identify::Kind::Obj)?;
    region.claim(true)?;
    let (pool, rec) = Pool::open(region, &PoolOptions::default())
        .with_context(|| format!("{}", path.display()))?;
    if !rec.rolled_forward.is_empty() {
        eprintln!(
            "{}: recovery rolled forward an interrupted sync of {} objects",
            path.display(),
            rec.rolled_forward.len()
        );
    }
    Ok(pool)
}

/// Open a pool to read it: read-only (`O_RDONLY`, nothing written; read permission is
/// enough), with a shared lock so no writer changes it meanwhile. A committed sync that a crash
/// left to roll forward needs a writer: then the pool is opened as [`open`] does, when this
/// process may.
fn open_read(path: &Path) -> Result<Pool<Region>> {
    let region =
        Region::open_read_only(path).with_context(|| format!("{}: cannot open", path.display()))?;
    crate::identify::expect(path, &region, crate::identify::Kind::Obj)?;
    region.claim(false)?;
    match Pool::open_read_only(region) {
        Err(e @ pmkit_obj::ObjError::NeedsRecovery { .. }) => {
            open(path).with_context(|| format!("{}: {e}", path.display()))
        }
        r => r.with_context(|| format!("{}", path.display())),
    }
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    match a.cmd {
        Cmd::Create {
            pool,
            size,
            force,
            max_objects,
            checksum,
        } => {
            let opts = PoolOptions {
                max_objects,
                checksum,
                ..PoolOptions::default()
            };
            let target = crate::format_target::Target {
                path: &pool,
                size,
                force,
                opts: RegionOptions::default(),
                command: "pmkit obj create",
            };
            let p = crate::format_target::format(&target, |region, _| {
                for n in region.notes() {
                    eprintln!("note: {n}");
                }
                Pool::format(region, &opts).with_context(|| format!("{}", pool.display()))
            })?;
            let g = p.geometry();
            println!(
                "{}: PMO pool of {} bytes, {} object entries, object area {} bytes{}",
                pool.display(),
                g.pool_len,
                g.max_objects,
                g.area_len,
                if p.checksum() { ", page checksums" } else { "" }
            );
        }
        Cmd::List { pool, json } => {
            let p = open_read(&pool)?;
            let list = p.list();
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                println!(
                    "{:<24} {:>12} {:>12} {:>14} {:>4} {:>10}",
                    "NAME", "SIZE", "CAPACITY", "OFFSET", "SLOT", "GENERATION"
                );
                for o in list {
                    println!(
                        "{:<24} {:>12} {:>12} {:>#14x} {:>4} {:>10}",
                        o.name, o.size, o.capacity, o.offset, o.slot, o.generation
                    );
                }
            }
        }
        Cmd::Info { pool, json } => {
            let p = open_read(&pool)?;
            let g = p.geometry();
            let (free, largest) = p.free_space();
            let objects = p.list().len();
            if json {
                let v = serde_json::json!({"geometry": g, "objects": objects, "free_bytes": free, "largest_free": largest,
                    "domain": p.media().domain(), "kind": p.media().kind()});
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("pool:           {}", pool.display());
                println!(
                    "media:          {:?}, {}",
                    p.media().kind(),
                    p.media().domain()
                );
                println!("size:           {} bytes", g.pool_len);
                println!(
                    "object table:   {} entries at {:#x}",
                    g.max_objects, g.table_off
                );
                println!("sync table:     at {:#x}", g.sync_off);
                println!("object area:    {} bytes at {:#x}", g.area_len, g.area_off);
                println!(
                    "page checksums: {}",
                    if p.checksum() {
                        "yes (CRC32C per 4 KiB page)"
                    } else {
                        "no"
                    }
                );
                println!("objects:        {objects}");
                println!("free:           {free} bytes (largest extent {largest})");
            }
        }
        Cmd::Dump { pool, name, hex } => {
            let p = open_read(&pool)?;
            let data = p.read_published(&name)?;
            let mut out = std::io::stdout().lock();
            if hex {
                for (i, chunk) in data.chunks(16).enumerate() {
                    let hexs: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
                    let text: String = chunk
                        .iter()
                        .map(|&b| {
                            if b.is_ascii_graphic() || b == b' ' {
                                b as char
                            } else {
                                '.'
                            }
                        })
                        .collect();
                    writeln!(out, "{:08x}  {:<47}  |{}|", i * 16, hexs.join(" "), text)?;
                }
            } else {
                out.write_all(&data)?;
            }
        }
        Cmd::Check { pool, json } => {
            let region = Region::open_read_only(&pool)
                .with_context(|| format!("{}: cannot open", pool.display()))?;
            crate::identify::expect(&pool, &region, crate::identify::Kind::Obj)?;
            region.claim(false)?;
            let r = Pool::check(&region);
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "{}: {} objects, {} bytes of object area used{}",
                    pool.display(),
                    r.objects,
                    r.bytes_used,
                    match &r.pending_intent {
                        Some(i) => format!(
                            "; a committed sync of {} objects will be rolled forward on open",
                            i.len()
                        ),
                        None => String::new(),
                    }
                );
                for e in &r.errors {
                    println!("problem: {e}");
                }
                println!("{}", if r.is_clean() { "clean" } else { "NOT clean" });
            }
            return Ok(if r.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            });
        }
        Cmd::New { pool, name, size } => {
            let p = open(&pool)?;
            p.create(&name, size)?;
        }
        Cmd::Put {
            pool,
            name,
            offset,
            from,
        } => {
            let data = match from {
                Some(f) => {
                    std::fs::read(&f).with_context(|| format!("{}: cannot read", f.display()))?
                }
                None => {
                    let mut v = vec![];
                    std::io::Read::read_to_end(&mut std::io::stdin(), &mut v)?;
                    v
                }
            };
            let p = open(&pool)?;
            let h = p.attach(&name, pmkit_obj::Access::ReadWrite)?;
            h.write(offset, &data)?;
            h.sync()?;
            h.detach()?;
        }
        Cmd::Delete { pool, name } => {
            let p = open(&pool)?;
            p.delete(&name)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
