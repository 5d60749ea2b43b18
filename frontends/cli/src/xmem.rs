//! `pmkit xmem ...`: X-Mem's profiler and placement model from the command line (systems/xmem,
//! docs/xmem.md). `profile` classifies an unmodified program's accesses (valgrind lackey) into
//! a profile saved per structure name; `place` runs the thesis's model and greedy on a saved
//! profile for a fast-tier budget; `stats` describes a profile (patterns, benefit, rank); `run`
//! runs an X-Mem program with tiers, profile and priorities chosen outside it (`xmem_run.rs`).

use crate::xmem_profile::{self, LogFile};
use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, Subcommand};
use pmkit::args::{human_size, parse_latencies, parse_priority, parse_size};
use pmkit_xmem::place::{self, Candidate, Latencies, Profile};
use pmkit_xmem::profiles::{self, Saved};
use pmkit_xmem::untagged::{self, Classifier, NamedRange};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(ClapArgs)]
pub(crate) struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Classify a program's memory accesses (pointer chasing, random, streaming) per data
    /// structure and save the profile. Runs `valgrind --tool=lackey --trace-mem=yes` on
    /// `-- PROGRAM ARGS`, or reads a saved lackey log with --trace. Lackey logs no loaded
    /// values, so pointer chasing is never seen (it counts as random or streaming).
    Profile {
        /// A saved `valgrind --tool=lackey --trace-mem=yes` log (instead of running a program).
        #[arg(long, conflicts_with = "program")]
        trace: Option<PathBuf>,
        /// Write the profile here (per structure name; `pmkit xmem place` and `XMem::load_profiles`
        /// read it).
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// Keep valgrind's log of the run here (it is removed otherwise).
        #[arg(long)]
        keep_trace: Option<PathBuf>,
        /// Region size: accesses are counted per window of this size (a power of two).
        #[arg(long, value_parser = parse_size, default_value = "2M")]
        region_size: u64,
        /// A named structure: NAME=START-END (END exclusive, 0x... or decimal). Repeatable.
        #[arg(long = "tag", value_parser = untagged::parse_range)]
        tags: Vec<NamedRange>,
        /// Leave out structures with fewer classified accesses than this.
        #[arg(long, default_value_t = 100)]
        min_accesses: u64,
        /// Read at most this many data accesses of the log.
        #[arg(long, default_value_t = 200_000_000)]
        max_accesses: u64,
        /// Count every classified line once per buffer, as the thesis's profiler did, instead of
        /// only the accesses that miss a model of this machine's last-level cache (the default:
        /// a structure the cache holds gains nothing from DRAM).
        #[arg(long)]
        no_cache_filter: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The program and its arguments, after `--`.
        #[arg(last = true)]
        program: Vec<String>,
    },
    /// Plan a fast-tier budget for a saved profile: every structure's regions ranked by the
    /// thesis's Eq. 3 benefit (priorities first), the greedy filling the budget, and Eq. 4's
    /// estimated access time against everything in the slow tier.
    Place {
        /// A profile made by `pmkit xmem profile`.
        profile: PathBuf,
        /// The fast-tier (DRAM) budget, e.g. 256M; a whole number of regions is used.
        #[arg(long, value_parser = parse_size)]
        fast_budget: u64,
        /// Region size the profile was made with.
        #[arg(long, value_parser = parse_size, default_value = "2M")]
        region_size: u64,
        /// NAME=N: structure NAME's priority (higher goes to the fast tier first). Repeatable.
        #[arg(long = "priority", value_parser = parse_priority)]
        priorities: Vec<(String, i32)>,
        /// Slow-tier stall per access, chase,random,streaming (fast is 0) [default: 26,3.8,1].
        #[arg(long, value_parser = parse_latencies)]
        slow_latency: Option<[f64; 3]>,
        /// ns per line written back to the slow tier, the write term of Eq. 3 (fast writes
        /// cost 0) [default: 0, the thesis's model]. Optane-like media: about 100.
        #[arg(long, default_value_t = 0.0)]
        slow_write: f64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Describe a saved profile: per structure, regions, accesses per region by pattern, the
    /// dominant pattern, the Eq. 3 benefit per region and its rank.
    Stats {
        /// A profile made by `pmkit xmem profile`.
        profile: PathBuf,
        /// ns per line written back to the slow tier (see `place --slow-write`).
        #[arg(long, default_value_t = 0.0)]
        slow_write: f64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a program written against X-Mem's C ABI (xmem.h) with the tiers, a saved profile
    /// and priorities chosen here (passed to its xmem_init in PMKIT_XMEM, overriding its own
    /// spec), then print where each structure's regions ended up.
    Run(crate::xmem_run::RunArgs),
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    match a.cmd {
        Cmd::Run(r) => crate::xmem_run::run(r),
        Cmd::Profile {
            trace,
            out,
            keep_trace,
            region_size,
            tags,
            min_accesses,
            max_accesses,
            no_cache_filter,
            json,
            program,
        } => {
            if !region_size.is_power_of_two() || region_size < 4096 {
                bail!("--region-size {region_size}: must be a power of two of at least 4096");
            }
            let mut c = Classifier::new(&tags, region_size);
            if !no_cache_filter {
                let (bytes, ways) = pmkit_xmem::cache::llc();
                c = c.with_cache(pmkit_xmem::cache::Cache::new(bytes, ways));
            }
            let mut status = None;
            let (truncated, source) = if let Some(t) = trace {
                let f = std::fs::File::open(&t)
                    .with_context(|| format!("{}: cannot open the trace", t.display()))?;
                let cut = c.read(std::io::BufReader::new(f), max_accesses)?;
                (cut, t.display().to_string())
            } else {
                if program.is_empty() {
                    bail!("nothing to profile: give --trace FILE or -- PROGRAM ARGS");
                }
                let log = LogFile {
                    path: keep_trace.clone().unwrap_or_else(|| {
                        std::env::temp_dir()
                            .join(format!("pmkit-xmem-lackey-{}.log", std::process::id()))
                    }),
                    keep: keep_trace.is_some(),
                };
                status = Some(xmem_profile::run_lackey(&program, &log.path)?);
                let f = std::fs::File::open(&log.path)
                    .with_context(|| format!("{}: valgrind left no log", log.path.display()))?;
                let cut = c.read(std::io::BufReader::new(f), max_accesses)?;
                (cut, program.join(" "))
            };
            let p = c.finish(min_accesses, truncated);
            if p.accesses == 0 {
                bail!(
                    "{source}: no data accesses in the trace (is it a lackey --trace-mem=yes log?)"
                );
            }
            if let Some(o) = &out {
                let saved: Vec<Saved> = p.tags.iter().map(|t| t.0.clone()).collect();
                profiles::save(o, &saved)
                    .with_context(|| format!("{}: cannot write the profile", o.display()))?;
            }
            print_profile(&p, &source, status, out.as_deref(), region_size, json)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Place {
            profile,
            fast_budget,
            region_size,
            priorities,
            slow_latency,
            slow_write,
            json,
        } => {
            let saved = load(&profile)?;
            for (n, _) in &priorities {
                if !saved.iter().any(|s| &s.name == n) {
                    bail!(
                        "--priority {n}: no structure of that name in {}",
                        profile.display()
                    );
                }
            }
            let lat = Latencies {
                fast: [0.0; 3],
                slow: slow_latency.unwrap_or(Latencies::default().slow),
                fast_write: 0.0,
                slow_write,
            };
            lat.validate().context("--slow-latency or --slow-write")?;
            let plan = plan(&saved, &priorities, &lat, fast_budget, region_size);
            if json {
                println!("{}", serde_json::to_string_pretty(&plan)?);
            } else {
                print_plan(&plan, &profile);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Stats {
            profile,
            slow_write,
            json,
        } => {
            let saved = load(&profile)?;
            let lat = Latencies {
                slow_write,
                ..Latencies::default()
            };
            lat.validate().context("--slow-write")?;
            let s = stats(&saved, &lat);
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print_stats(&s, &profile);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn load(p: &std::path::Path) -> Result<Vec<Saved>> {
    let s = profiles::load(p).with_context(|| {
        format!(
            "{}: not a readable X-Mem profile (make one with `pmkit xmem profile --out`)",
            p.display()
        )
    })?;
    if s.is_empty() {
        bail!("{}: the profile names no structure", p.display());
    }
    Ok(s)
}

const PATTERNS: [&str; 3] = ["chase", "random", "streaming"];

#[derive(Serialize)]
struct ProfileTag {
    name: String,
    regions: u64,
    accesses: u64,
    per_region: [f64; 3],
    writebacks_per_region: f64,
    dominant: &'static str,
}

fn dominant(f: &[f64; 3]) -> &'static str {
    let i = (0..3).max_by(|&a, &b| f[a].total_cmp(&f[b])).unwrap_or(0);
    PATTERNS[i]
}

fn print_profile(
    p: &untagged::Profiled,
    source: &str,
    status: Option<std::process::ExitStatus>,
    out: Option<&std::path::Path>,
    region: u64,
    json: bool,
) -> Result<()> {
    let tags: Vec<ProfileTag> = p
        .tags
        .iter()
        .map(|(s, n)| ProfileTag {
            name: s.name.clone(),
            regions: s.regions,
            accesses: *n,
            per_region: s.f,
            writebacks_per_region: s.writebacks,
            dominant: dominant(&s.f),
        })
        .collect();
    if json {
        let v = serde_json::json!({
            "source": source,
            "exit_status": status.and_then(|s| s.code()),
            "accesses": p.accesses,
            "truncated": p.truncated,
            "region_size": region,
            "profile": out.map(|o| o.display().to_string()),
            "pointer_chasing_visible": false,
            "tags": tags,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if let Some(s) = status.filter(|s| !s.success()) {
        eprintln!("note: the program exited with {s}; its accesses up to then are profiled");
    }
    println!(
        "{source}: {} data accesses{}, {} structure(s), regions of {}",
        p.accesses,
        if p.truncated {
            " (cut at --max-accesses)"
        } else {
            ""
        },
        tags.len(),
        human_size(region)
    );
    println!(
        "{:<36} {:>7} {:>12} {:>12} {:>12} {:>12} {:>12}  dominant",
        "structure", "regions", "accesses", "chase/reg", "random/reg", "stream/reg", "written/reg"
    );
    for t in &tags {
        println!(
            "{:<36} {:>7} {:>12} {:>12.1} {:>12.1} {:>12.1} {:>12.1}  {}",
            t.name,
            t.regions,
            t.accesses,
            t.per_region[0],
            t.per_region[1],
            t.per_region[2],
            t.writebacks_per_region,
            t.dominant
        );
    }
    println!("note: lackey logs no loaded values, so pointer chasing cannot be seen (it counts as random or streaming)");
    if let Some(o) = out {
        println!("profile: {}", o.display());
    }
    Ok(())
}

#[derive(Serialize)]
struct PlanTag {
    name: String,
    priority: i32,
    regions: u64,
    fast_regions: u64,
    tier: &'static str,
    benefit_per_region: f64,
}

#[derive(Serialize)]
struct Plan {
    fast_budget: u64,
    region_size: u64,
    fast_slots: u64,
    slow_latency: [f64; 3],
    slow_write: f64,
    tags: Vec<PlanTag>,
    /// Eq. 4 with every region slow, and with the plan.
    estimate_all_slow: f64,
    estimate_planned: f64,
}

/// A saved structure's profile as the placement reads it.
fn profile(s: &Saved) -> Profile {
    Profile {
        f: s.f,
        writebacks: s.writebacks,
    }
}

/// The greedy over every region of every structure (regions of one structure share its
/// benefit), as `XMem::rebalance` would place them.
fn plan(
    saved: &[Saved],
    prio: &[(String, i32)],
    lat: &Latencies,
    budget: u64,
    region: u64,
) -> Plan {
    let priority = |n: &str| prio.iter().rev().find(|p| p.0 == n).map_or(0, |p| p.1);
    let mut owner = Vec::new();
    let mut cands = Vec::new();
    let mut fs = Vec::new();
    for (i, s) in saved.iter().enumerate() {
        for _ in 0..s.regions {
            owner.push(i);
            fs.push(profile(s));
            cands.push(Candidate {
                priority: priority(&s.name),
                benefit: lat.benefit(&profile(s)),
            });
        }
    }
    let slots = budget / region.max(1);
    let fast = place::greedy(&cands, slots.min(cands.len() as u64) as usize);
    let tags = saved
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n = owner
                .iter()
                .zip(&fast)
                .filter(|(o, f)| **o == i && **f)
                .count() as u64;
            PlanTag {
                name: s.name.clone(),
                priority: priority(&s.name),
                regions: s.regions,
                fast_regions: n,
                tier: match n {
                    0 => "slow",
                    n if n == s.regions => "fast",
                    _ => "split",
                },
                benefit_per_region: lat.benefit(&profile(s)),
            }
        })
        .collect();
    Plan {
        fast_budget: budget,
        region_size: region,
        fast_slots: slots,
        slow_latency: lat.slow,
        slow_write: lat.slow_write,
        tags,
        estimate_all_slow: lat.estimate(&fs, &vec![false; fs.len()]),
        estimate_planned: lat.estimate(&fs, &fast),
    }
}

fn print_plan(p: &Plan, path: &std::path::Path) {
    println!(
        "{}: fast budget {} = {} region(s) of {}; slow stall per access {:?} (chase, random, streaming), fast 0",
        path.display(),
        human_size(p.fast_budget),
        p.fast_slots,
        human_size(p.region_size),
        p.slow_latency
    );
    println!(
        "{:<36} {:>8} {:>7} {:>6} {:>6}  {:>14}",
        "structure", "priority", "regions", "fast", "tier", "benefit/region"
    );
    for t in &p.tags {
        println!(
            "{:<36} {:>8} {:>7} {:>6} {:>6}  {:>14.1}",
            t.name, t.priority, t.regions, t.fast_regions, t.tier, t.benefit_per_region
        );
    }
    let saved = if p.estimate_all_slow > 0.0 {
        100.0 * (1.0 - p.estimate_planned / p.estimate_all_slow)
    } else {
        0.0
    };
    println!(
        "Eq. 4 estimated stall: {:.1} with this plan, {:.1} all in the slow tier ({saved:.1}% less)",
        p.estimate_planned, p.estimate_all_slow
    );
}

#[derive(Serialize)]
struct StatTag {
    rank: usize,
    name: String,
    regions: u64,
    per_region: [f64; 3],
    share_percent: [f64; 3],
    dominant: &'static str,
    writebacks_per_region: f64,
    benefit_per_region: f64,
}

fn stats(saved: &[Saved], lat: &Latencies) -> Vec<StatTag> {
    let mut v: Vec<StatTag> = saved
        .iter()
        .map(|s| {
            let total: f64 = s.f.iter().sum();
            StatTag {
                rank: 0,
                name: s.name.clone(),
                regions: s.regions,
                per_region: s.f,
                share_percent: s
                    .f
                    .map(|x| if total > 0.0 { 100.0 * x / total } else { 0.0 }),
                dominant: dominant(&s.f),
                writebacks_per_region: s.writebacks,
                benefit_per_region: lat.benefit(&profile(s)),
            }
        })
        .collect();
    v.sort_by(|a, b| b.benefit_per_region.total_cmp(&a.benefit_per_region));
    for (i, t) in v.iter_mut().enumerate() {
        t.rank = i + 1;
    }
    v
}

fn print_stats(s: &[StatTag], path: &std::path::Path) {
    let regions: u64 = s.iter().map(|t| t.regions).sum();
    println!(
        "{}: {} structure(s), {regions} region(s); ranked by Eq. 3 benefit per region (default latencies, --slow-write for writes)",
        path.display(),
        s.len()
    );
    println!(
        "{:>4} {:<36} {:>7} {:>24} {:>10} {:>12} {:>14}",
        "rank",
        "structure",
        "regions",
        "chase/random/stream %",
        "dominant",
        "written/reg",
        "benefit/region"
    );
    for t in s {
        let sh = t.share_percent;
        println!(
            "{:>4} {:<36} {:>7} {:>24} {:>10} {:>12.1} {:>14.1}",
            t.rank,
            t.name,
            t.regions,
            format!("{:.0}/{:.0}/{:.0}", sh[0], sh[1], sh[2]),
            t.dominant,
            t.writebacks_per_region,
            t.benefit_per_region
        );
    }
}
