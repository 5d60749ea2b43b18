//! `pmkit xmem run -- PROGRAM`: run a program written against X-Mem's C ABI (`xmem.h`) with
//! the tiers, profile and priorities chosen here rather than in its code. The choices go to
//! the program's `xmem_init` through the `PMKIT_XMEM` environment variable (whose keys override
//! the program's own spec, `pmkit_xmem::spec`); X-Mem writes its regions to a stats file as the
//! program exits, and this command prints where each structure ended up.

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use pmkit::args::{human_size, parse_latencies, parse_priority, parse_size};
use serde::Deserialize;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(ClapArgs)]
pub(crate) struct RunArgs {
    /// The fast-tier (DRAM) budget, e.g. 256M (a whole number of regions is used).
    #[arg(long, value_parser = parse_size)]
    fast_budget: Option<u64>,
    /// The slow tier's file (emulated PM on /dev/shm, or a file on a DAX file system; it must
    /// not exist and is removed when the program exits) or device-dax device (/dev/daxX.Y).
    #[arg(long, conflicts_with = "slow_node")]
    pm: Option<PathBuf>,
    /// The slow tier's size.
    #[arg(long, value_parser = parse_size)]
    pm_size: Option<u64>,
    /// Bind DRAM regions to this NUMA node.
    #[arg(long)]
    fast_node: Option<u32>,
    /// The slow tier is this NUMA node (PM or CXL memory as a CPU-less node), --pm-size of it;
    /// regions move by mbind. Needs --fast-node.
    #[arg(long, requires = "fast_node")]
    slow_node: Option<u32>,
    /// Region size (a power of two, 2M-1G).
    #[arg(long, value_parser = parse_size)]
    region_size: Option<u64>,
    /// Ask for transparent huge pages on DRAM regions.
    #[arg(long)]
    thp: bool,
    /// A profile saved by `pmkit xmem profile` or `XMem::save_profiles`: each named structure
    /// is placed by it from its first allocation.
    #[arg(long)]
    profile: Option<PathBuf>,
    /// NAME=N: structure NAME's priority (higher goes to the fast tier first). Repeatable.
    #[arg(long = "priority", value_parser = parse_priority)]
    priorities: Vec<(String, i32)>,
    /// Slow-tier stall per access, chase,random,streaming, for the placement model.
    #[arg(long, value_parser = parse_latencies)]
    slow_latency: Option<[f64; 3]>,
    /// Keep the regions X-Mem reported at exit in this file (JSON).
    #[arg(long)]
    stats: Option<PathBuf>,
    /// Print the regions as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true)]
    program: Vec<String>,
}

#[derive(Deserialize)]
struct Stats {
    region_size: u64,
    fast_slots: u64,
    fast_used: u64,
    regions: Vec<Region>,
}

#[derive(Deserialize)]
struct Region {
    name: String,
    tier: String,
    bytes: u64,
    benefit: f64,
    priority: i32,
}

/// The `PMKIT_XMEM` spec for `a`.
fn spec(a: &RunArgs, stats: &std::path::Path) -> Result<String> {
    let mut kv = Vec::new();
    let path = |p: &std::path::Path, what: &str| -> Result<String> {
        let s = p
            .to_str()
            .with_context(|| format!("{what} {}: not UTF-8", p.display()))?;
        if s.contains(',') {
            bail!("{what} {s}: a path with ',' cannot be passed to X-Mem's spec");
        }
        Ok(s.to_owned())
    };
    if let Some(b) = a.fast_budget {
        kv.push(format!("budget={b}"));
    }
    if let Some(p) = &a.pm {
        kv.push(format!("pm={}", path(p, "--pm")?));
    }
    if let Some(s) = a.pm_size {
        kv.push(format!("pm_size={s}"));
    }
    if let Some(r) = a.region_size {
        kv.push(format!("region={r}"));
    }
    if let Some(n) = a.fast_node {
        kv.push(format!("fast_node={n}"));
    }
    if let Some(n) = a.slow_node {
        kv.push(format!("slow_node={n}"));
    }
    if a.thp {
        kv.push("thp=on".into());
    }
    if let Some(p) = &a.profile {
        // Checked here, where the error can name the flag.
        // (Formatted here: the error's text already carries its OS cause.)
        pmkit_xmem::profiles::load(p)
            .map_err(|e| anyhow::anyhow!("--profile {}: cannot load it: {e}", p.display()))?;
        kv.push(format!("profile={}", path(p, "--profile")?));
    }
    for (name, n) in &a.priorities {
        if name.contains(',') {
            bail!("--priority {name}={n}: a name with ',' cannot be passed to X-Mem's spec");
        }
        kv.push(format!("priority={name}:{n}"));
    }
    if let Some([c, r, s]) = a.slow_latency {
        kv.push(format!("slow_latency={c}:{r}:{s}"));
    }
    kv.push(format!("stats={}", path(stats, "the stats file")?));
    Ok(kv.join(","))
}

pub(crate) fn run(a: RunArgs) -> Result<ExitCode> {
    let own = a.stats.is_none();
    let stats_path = a.stats.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("pmkit-xmem-run-{}.json", std::process::id()))
    });
    let _ = std::fs::remove_file(&stats_path);
    let spec = spec(&a, &stats_path)?;
    let status = Command::new(&a.program[0])
        .args(&a.program[1..])
        .env(pmkit_xmem::spec::ENV, &spec)
        .status()
        .with_context(|| format!("cannot run {}", a.program[0]))?;
    let read = std::fs::read_to_string(&stats_path);
    if own {
        let _ = std::fs::remove_file(&stats_path);
    }
    let text = match read {
        Ok(t) => t,
        Err(_) => {
            eprintln!(
                "pmkit xmem run: {} wrote no X-Mem stats: it did not call xmem_init, or \
                 xmem_init failed (the program's xmem_errmsg() says why), or it did not exit \
                 normally ({status})",
                a.program[0]
            );
            return Ok(exit(status));
        }
    };
    let s: Stats = serde_json::from_str(&text)
        .with_context(|| format!("{}: not X-Mem stats", stats_path.display()))?;
    if a.json {
        println!("{}", text.trim());
    } else {
        print_table(&s);
    }
    Ok(exit(status))
}

fn exit(s: std::process::ExitStatus) -> ExitCode {
    match s.code() {
        Some(c) => ExitCode::from(c.clamp(0, 255) as u8),
        None => ExitCode::from(128 + s.signal_number().unwrap_or(0).clamp(0, 127) as u8),
    }
}

trait Signal {
    fn signal_number(&self) -> Option<i32>;
}
impl Signal for std::process::ExitStatus {
    fn signal_number(&self) -> Option<i32> {
        std::os::unix::process::ExitStatusExt::signal(self)
    }
}

/// Per structure: regions in DRAM and in PM, bytes in use, benefit per region, priority.
fn print_table(s: &Stats) {
    let mut names: Vec<&str> = s.regions.iter().map(|r| r.name.as_str()).collect();
    names.sort();
    names.dedup();
    println!(
        "X-Mem at exit: {} of {} DRAM regions used ({} each)",
        s.fast_used,
        s.fast_slots,
        human_size(s.region_size)
    );
    println!(
        "{:<24} {:>6} {:>6} {:>10} {:>12} {:>8}",
        "structure", "dram", "pm", "in use", "benefit", "priority"
    );
    for n in names {
        let rs: Vec<&Region> = s.regions.iter().filter(|r| r.name == n).collect();
        let dram = rs.iter().filter(|r| r.tier == "dram").count();
        let bytes: u64 = rs.iter().map(|r| r.bytes).sum();
        let benefit = rs.iter().map(|r| r.benefit).fold(0.0, f64::max);
        let prio = rs.iter().map(|r| r.priority).max().unwrap_or(0);
        println!(
            "{:<24} {:>6} {:>6} {:>10} {:>12.1} {:>8}",
            n,
            dram,
            rs.len() - dram,
            human_size(bytes),
            benefit,
            prio
        );
    }
}
