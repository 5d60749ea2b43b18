//! `pmkit probe`: what this machine offers for PM, and what each primitive costs here.
//!
//! Every cost is measured on a region in `--dir` (default /dev/shm) while a second thread of this
//! process spins, because the costs that matter (TLB shootdowns of mprotect/munmap) appear only
//! when another CPU runs the same address space, as it always does in a server.

use anyhow::{Context, Result};
use pmkit::progress::Progress;
use pmkit_media::protect::{Access, Pkey};
use pmkit_media::{features, region, Persister, Region, RegionOptions, WriteScheme};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Directory for the scratch region (emulated PM).
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Size of the scratch region in MiB (random writes spread over all of it).
    #[arg(long, default_value_t = 256)]
    size_mib: u64,
    /// Milliseconds spent measuring each item.
    #[arg(long, default_value_t = 300)]
    ms: u64,
    /// Measure without the second spinning thread (shows what TLB shootdowns cost: compare).
    #[arg(long)]
    alone: bool,
}

#[derive(Serialize)]
struct Report {
    cpu: pmkit_media::CpuFeatures,
    nt_width_bytes: usize,
    persistence_domain: Option<region::Domain>,
    persistence_domain_source: &'static str,
    default_write_scheme: WriteScheme,
    best_flush: pmkit_media::Flush,
    region: String,
    second_thread_running: bool,
    measurements: Vec<Measurement>,
}

#[derive(Serialize, Clone)]
struct Measurement {
    /// What was measured: "write4k", "seq256k" or "window".
    kind: &'static str,
    /// Write scheme or protection window.
    name: String,
    ns_per_op: f64,
    mb_per_s: f64,
    ops: u64,
}

const BLOCK: usize = 4096;
const SEQ: usize = 256 * 1024;

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let f = *features();
    let domain = region::platform_domain();
    let path = a.dir.join(format!("pmkit-probe-{}.pm", std::process::id()));
    let size = a.size_mib.max(4) << 20;
    let reg = Region::create(
        &path,
        size,
        &RegionOptions {
            populate: true,
            ..Default::default()
        },
    )
    .with_context(|| {
        format!(
            "creating the scratch region in {} (choose another with --dir)",
            a.dir.display()
        )
    })?;
    // The file is scratch: unlink now so nothing is left behind, whatever happens.
    let _ = std::fs::remove_file(&path);
    let kind = reg.kind();

    let schemes: Vec<WriteScheme> = WriteScheme::ALL
        .into_iter()
        .filter(|s| s.available())
        .collect();
    let total = (schemes.len() * 2 + 5) as u64;
    let bar = Progress::new(!a.json, total);

    let stop = Arc::new(AtomicBool::new(a.alone));
    let spinner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_add(1);
                std::hint::spin_loop();
            }
            x
        })
    };

    let dur = Duration::from_millis(a.ms);
    let mut ms = vec![];
    let buf = vec![0xA5u8; SEQ];
    for &s in &schemes {
        bar.set_message(format!("4 KiB random {s}"));
        let p = Persister::new(s, reg.len(), reg.domain());
        ms.push(measure(
            "write4k",
            s.name(),
            BLOCK,
            dur,
            &reg,
            |reg, off| {
                p.write(reg, off, &buf[..BLOCK]);
                p.persist_now(reg, off, BLOCK)
                    .expect("msync of scratch region");
            },
        ));
        bar.inc();
    }
    for &s in &schemes {
        bar.set_message(format!("256 KiB sequential {s}"));
        let p = Persister::new(s, reg.len(), reg.domain());
        let mut next = 0usize;
        ms.push(measure("seq256k", s.name(), SEQ, dur, &reg, |reg, _| {
            p.write(reg, next, &buf);
            p.persist_now(reg, next, SEQ)
                .expect("msync of scratch region");
            next = (next + SEQ) % (reg.len() - SEQ + 1) / SEQ * SEQ;
        }));
        bar.inc();
    }

    // Protection windows around a 4 KiB nt write.
    let nt = Persister::new(WriteScheme::Nt, reg.len(), reg.domain());
    bar.set_message("no window".to_string());
    ms.push(measure("window", "none", BLOCK, dur, &reg, |reg, off| {
        nt.write(reg, off, &buf[..BLOCK]);
        nt.fence(reg);
    }));
    bar.inc();

    bar.set_message("mprotect toggle".to_string());
    reg.set_access(0, reg.len(), Access::Read)?;
    ms.push(measure(
        "window",
        "mprotect",
        BLOCK,
        dur,
        &reg,
        |reg, off| {
            reg.set_access(off, BLOCK, Access::ReadWrite)
                .expect("mprotect");
            nt.write(reg, off, &buf[..BLOCK]);
            nt.fence(reg);
            reg.set_access(off, BLOCK, Access::Read).expect("mprotect");
        },
    ));
    reg.set_access(0, reg.len(), Access::ReadWrite)?;
    bar.inc();

    bar.set_message("per-thread mmap window".to_string());
    ms.push(measure("window", "mmap", BLOCK, dur, &reg, |reg, off| {
        let w = reg
            .window(off, BLOCK, Access::ReadWrite)
            .expect("mmap window");
        nt.write(w.media(), w.offset_of(off), &buf[..BLOCK]);
        nt.fence(w.media());
    }));
    bar.inc();

    bar.set_message("kernel write (pwrite) into a read-only mapping".to_string());
    if let Ok(kw) = pmkit_media::KernelWriter::new(&reg) {
        reg.set_access(0, reg.len(), Access::Read)?;
        ms.push(measure("window", "kernel", BLOCK, dur, &reg, |reg, off| {
            kw.write(off, &buf[..BLOCK])
                .expect("pwrite into the scratch file");
            nt.fence(reg);
        }));
        reg.set_access(0, reg.len(), Access::ReadWrite)?;
    }
    bar.inc();

    bar.set_message("pkey window".to_string());
    if f.pku {
        let key = Pkey::alloc()?;
        reg.set_pkey(&key, Access::ReadWrite)?;
        key.deny_this_thread();
        ms.push(measure("window", "pkey", BLOCK, dur, &reg, |reg, off| {
            let _w = key.open_write();
            nt.write(reg, off, &buf[..BLOCK]);
            nt.fence(reg);
        }));
        // Unmap before the key is freed (drop order: reg is declared first, so drop it explicitly).
        drop(reg);
        drop(key);
    }
    bar.inc();
    bar.finish();
    stop.store(true, Ordering::Relaxed);
    let _ = spinner.join();

    let report = Report {
        cpu: f,
        nt_width_bytes: f.nt_width(),
        persistence_domain: domain,
        persistence_domain_source: if domain.is_some() {
            "/sys/bus/nd"
        } else {
            "not reported by the platform (no nd regions): ADR assumed"
        },
        default_write_scheme: WriteScheme::Nt,
        best_flush: pmkit_media::Flush::best(),
        region: format!(
            "{} MiB file in {} ({})",
            size >> 20,
            a.dir.display(),
            mapping_of(kind)
        ),
        second_thread_running: !a.alone,
        measurements: ms,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(ExitCode::SUCCESS)
}

/// Run `op` at random 4 KiB-aligned offsets for `dur` and return its mean cost.
fn measure(
    kind: &'static str,
    name: &str,
    bytes: usize,
    dur: Duration,
    reg: &Region,
    mut op: impl FnMut(&Region, usize),
) -> Measurement {
    let blocks = (reg.len() / BLOCK - SEQ / BLOCK) as u64;
    // splitmix64: well-spread offsets for a probe, without a random-number crate.
    let mut x = 42u64;
    let mut block = move || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let z = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % blocks) as usize
    };
    // Warm up (faults, caches), then measure in batches so the clock is read rarely.
    for _ in 0..64 {
        op(reg, block() * BLOCK);
    }
    let t0 = Instant::now();
    let mut ops = 0u64;
    while t0.elapsed() < dur {
        for _ in 0..32 {
            op(reg, block() * BLOCK);
        }
        ops += 32;
    }
    let secs = t0.elapsed().as_secs_f64();
    Measurement {
        kind,
        name: name.to_string(),
        ns_per_op: secs * 1e9 / ops as f64,
        mb_per_s: (ops as f64 * bytes as f64) / secs / 1e6,
        ops,
    }
}

fn print_table(r: &Report) {
    let yn = |b: bool| if b { "yes" } else { "no" };
    let c = &r.cpu;
    println!("CPU features");
    println!(
        "  clflush {}  clflushopt {}  clwb {}",
        yn(c.clflush),
        yn(c.clflushopt),
        yn(c.clwb)
    );
    println!(
        "  non-temporal stores: sse2 {}  avx2 {}  avx512f {}  (widest: {} bytes)",
        yn(c.sse2),
        yn(c.avx2),
        yn(c.avx512f),
        r.nt_width_bytes
    );
    println!(
        "  pku {}  rtm {}  cmpxchg16b {}",
        yn(c.pku),
        yn(c.rtm),
        yn(c.cmpxchg16b)
    );
    match r.persistence_domain {
        Some(d) => println!(
            "Persistence domain: {d} (from {})",
            r.persistence_domain_source
        ),
        None => println!("Persistence domain: {}", r.persistence_domain_source),
    }
    println!(
        "Primitives chosen: default write scheme {}, best flush {:?}",
        r.default_write_scheme, r.best_flush
    );
    println!(
        "Measured on {}, with a second thread of this process spinning:",
        r.region
    );
    let section = |kind: &str, title: &str| {
        println!("\n  {title}");
        println!("  {:<12} {:>12} {:>12}", "", "ns/op", "MB/s");
        for m in r.measurements.iter().filter(|m| m.kind == kind) {
            println!(
                "  {:<12} {:>12.0} {:>12.0}",
                m.name, m.ns_per_op, m.mb_per_s
            );
        }
    };
    section(
        "write4k",
        "4 KiB random persistent write (write + make durable), per write scheme",
    );
    section(
        "seq256k",
        "256 KiB sequential persistent write, per write scheme",
    );
    section(
        "window",
        "4 KiB random nt write inside each protection window",
    );
}

/// What the measured region is, in words: real PM (MAP_SYNC on a DAX file system) or not.
fn mapping_of(kind: region::RegionKind) -> &'static str {
    match kind {
        region::RegionKind::Dax => "DAX: mapped MAP_SYNC",
        region::RegionKind::DevDax => "device-dax",
        region::RegionKind::File | region::RegionKind::Anonymous => {
            "emulated PM: not DAX, no MAP_SYNC"
        }
    }
}
