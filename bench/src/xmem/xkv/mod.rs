//! `pmkit-bench xkv`: the key-value store in process (no sockets) on the real tier pair of
//! `hmep-validate` (fast: anonymous memory with huge pages; slow: the /dev/shm file, 4 KiB
//! pages). A seeded ETC-like dataset is loaded, one traced run feeds the level-3 simulator (one
//! structure per tag), and timed runs of the placements that matter (all fast, all slow, each
//! tag alone slow, each tag alone fast) are compared with `sim::predict_tlb` (misses times ΔL
//! plus the page walks on cache hits 4 KiB pages add, times the calibrated walk), with the
//! per-tag benefit ranking measured against predicted; each tag's cost alone slow is also timed
//! in back-to-back pairs against all fast and ranked by a t-test (`hmep::rank`). Then memcaslap
//! against `xkv-serve` on all-fast and all-slow as the end-to-end check.

mod caslap;

use crate::hmep::rank::{self, PairTest, RankCorrelation};
use crate::hmep::{r1, Versus};
use crate::report::{median, plot, BenchFlags};
use anyhow::{ensure, Context, Result};
use caslap::CaslapRun;
use pmkit_hmep::cache::{llc, Cache};
use pmkit_hmep::calib::Tier as CalTier;
use pmkit_hmep::epoch::{self, Epoch, Stats as EpochStats};
use pmkit_hmep::mem::Backing;
use pmkit_hmep::sim::{predict_tlb, Misses, Sim};
use pmkit_hmep::tlb::TlbCost;
use pmkit_xkv::{load, run, xmem_config, KvConfig, RunStats, Store, Workload, TAGS};
use pmkit_xmem::{PerPattern, Tier, XMem};
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

const N: usize = TAGS.len();

#[derive(clap::Args)]
pub(crate) struct XkvArgs {
    #[command(flatten)]
    flags: BenchFlags,
    /// Dataset in MiB of slab items (default 1024: 32x a 32 MiB LLC; quick 16).
    #[arg(long)]
    dataset_mib: Option<usize>,
    /// Requests per timed run (default 2000000, quick 50000).
    #[arg(long)]
    requests: Option<usize>,
    /// Requests of the traced run, after as many traced to warm the modelled cache (default
    /// 400000, quick 20000).
    #[arg(long)]
    traced: Option<usize>,
    /// Zipf theta of key popularity (0: uniform, as memcaslap draws).
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// X-Mem region size in MiB.
    #[arg(long, default_value_t = 8)]
    region_mib: usize,
    /// memcaslap operations per phase (load, then run) against xkv-serve; 0 skips it (default
    /// 400000, quick 5000).
    #[arg(long)]
    memcaslap_ops: Option<usize>,
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Pairs per tag for the cost ranking: all fast and the tag alone slow, timed back to back
    /// (default 6, quick 3).
    #[arg(long)]
    rank_pairs: Option<usize>,
}

#[derive(Serialize)]
struct Row {
    placement: String,
    slow: Vec<bool>,
    #[serde(flatten)]
    v: Versus,
}

#[derive(Serialize)]
struct Report {
    cpu: String,
    level: &'static str,
    /// /proc/loadavg (1, 5, 15 minutes) at the start and at the end: the machine is shared.
    load_average_start: String,
    load_average: String,
    rounds: usize,
    tags: [&'static str; N],
    keys: u32,
    dataset_mib: usize,
    slab_mib: usize,
    hash_mib: usize,
    region_mib: usize,
    zipf: f64,
    requests: usize,
    traced_requests: usize,
    stats: RunStats,
    llc_bytes: usize,
    llc_ways: usize,
    fast: CalTier,
    slow: CalTier,
    /// Medians of back-to-back paired differences (`calib::paired`), as the TLB costs.
    delta_ns: PerPattern,
    /// ns per page walk and per L2 TLB hit in front of a cache hit that 4 KiB pages add.
    tlb: TlbCost,
    /// The pairs' every run.
    paired: pmkit_hmep::calib::Paired,
    traced: Misses,
    rows: Vec<Row>,
    /// Per tag: ms saved by having it alone fast against everything slow.
    benefit_measured_ms: Vec<f64>,
    benefit_predicted_ms: Vec<f64>,
    same_ranking: bool,
    /// The tags the measured and the predicted benefit put first agree on.
    same_top: bool,
    /// Per tag: ms lost by having it alone slow against everything fast (the other direction,
    /// measured against the all-fast base the prediction starts from).
    cost_measured_ms: Vec<f64>,
    cost_predicted_ms: Vec<f64>,
    same_cost_ranking: bool,
    same_cost_top: bool,
    /// Per tag: ms lost alone slow, median of the back-to-back pairs (`rank_pairs` of them).
    rank_pairs: usize,
    cost_paired_ms: Vec<f64>,
    /// Pairs of tags whose paired costs differ by a paired t-test at the 1% level
    /// (`hmep::rank`), and how many of those levels 3 and 2 order alike.
    cost_ranked_pairs: usize,
    cost_ranked_pairs_agree: usize,
    cost_ranked_pairs_agree_emulated: usize,
    /// Every pair's test, against level 3's costs.
    cost_pair_tests: Vec<PairTest>,
    /// The paired costs' ranking as a whole against level 3's and level 2's: Spearman's rho
    /// and its one-sided permutation p-value (`hmep::rank::spearman`).
    cost_rank_correlation: RankCorrelation,
    cost_rank_correlation_emulated: RankCorrelation,
    /// The noise floor of those pairs: per pair round, all fast against all fast back to back
    /// (nothing moved), and all fast against all fast after every tag went slow and back (ms).
    control_still_ms: Vec<f64>,
    control_moved_ms: Vec<f64>,
    /// Standard deviations of the two, and of the tags' paired costs (pooled), ms.
    control_still_sd_ms: f64,
    control_moved_sd_ms: f64,
    cost_paired_sd_ms: f64,
    max_abs_error_pct: f64,
    /// Level 2: the emulator's ns per access (count-only runs against plain ones, taken off
    /// what it owes), the per-tag costs it gives, its ranking and its largest error.
    emulator_overhead_ns: f64,
    cost_emulated_ms: Vec<f64>,
    same_cost_ranking_emulated: bool,
    same_cost_top_emulated: bool,
    max_abs_emulated_error_pct: f64,
    memcaslap: Vec<CaslapRun>,
    memcaslap_note: String,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn name(slow: &[bool]) -> String {
    let s: Vec<&str> = TAGS
        .iter()
        .zip(slow)
        .filter(|(_, &s)| s)
        .map(|(t, _)| *t)
        .collect();
    match s.len() {
        0 => "all fast".into(),
        N => "all slow".into(),
        1 => format!("{} slow", s[0]),
        _ if s.len() == N - 1 => {
            let f = TAGS.iter().zip(slow).find(|(_, &s)| !s).map(|(t, _)| *t);
            format!("{} fast", f.unwrap_or("?"))
        }
        _ => s.join("+") + " slow",
    }
}

/// Put each tag's regions where `slow` says (slow moves first, so the budget holds).
fn place(x: &XMem, slow: &[bool]) -> Result<()> {
    let regions = x.regions();
    for want_slow in [true, false] {
        for r in &regions {
            let t = x.tag_name(r.tag)?;
            let i = TAGS.iter().position(|n| *n == t).context("an xkv tag")?;
            if slow[i] == want_slow {
                x.move_region(r.index, if want_slow { Tier::Slow } else { Tier::Fast })?;
            }
        }
    }
    Ok(())
}

pub(crate) fn bench(a: XkvArgs) -> Result<ExitCode> {
    let quick = a.flags.quick;
    let dataset_mib = a.dataset_mib.unwrap_or(if quick { 16 } else { 1024 });
    let requests = a.requests.unwrap_or(if quick { 50_000 } else { 2_000_000 });
    let traced_n = a.traced.unwrap_or(if quick { 20_000 } else { 400_000 });
    let caslap_ops = a
        .memcaslap_ops
        .unwrap_or(if quick { 5_000 } else { 400_000 });
    ensure!(
        (4..=65_536).contains(&dataset_mib),
        "--dataset-mib: 4..=65536"
    );
    ensure!(
        requests >= 1000 && traced_n >= 1000,
        "at least 1000 requests"
    );
    ensure!((0.0..1.0).contains(&a.zipf), "--zipf: 0 <= theta < 1");
    let rounds = a.flags.rounds(3);
    let rank_n = a.rank_pairs.unwrap_or(if quick { 3 } else { 6 });
    ensure!((3..=100).contains(&rank_n), "--rank-pairs: 3..=100");
    let masks: Vec<Vec<bool>> = std::iter::once(vec![false; N])
        .chain(std::iter::once(vec![true; N]))
        .chain((0..N).map(|s| (0..N).map(|i| i == s).collect()))
        .chain((0..N).map(|s| (0..N).map(|i| i != s).collect()))
        .collect();
    let bar = a
        .flags
        .progress(3 + rounds * (2 * masks.len() + 3) + rank_n * N);
    let load_start = load_average();

    bar.set_message("calibrating anon-thp and the /dev/shm file");
    let cal = crate::hmep::calibrate_tiers(
        vec![Backing::AnonThp, Backing::File(a.flags.dir.clone())],
        quick,
    )?;
    let (fast, slow) = (cal.tiers[0].clone(), cal.tiers[1].clone());
    let pair = crate::hmep::pair_tiers(&a.flags.dir, quick)?.summary();
    let (d, tlb) = (pair.delta, pair.tlb);
    bar.inc();

    // A dataset of `dataset_mib` of class-rounded items, with a limit above it: no evictions.
    let mean = Workload::mean_item_bytes(a.seed);
    let keys = ((dataset_mib << 20) as f64 / mean) as u32;
    let mut k = KvConfig::new((dataset_mib << 20) * 5 / 4 + (16 << 20));
    k.hash_items = keys as usize;
    let w = Workload::etc(a.seed, keys, a.zipf);
    let pm = a
        .flags
        .dir
        .join(format!("pmkit-bench-xkv-{}.pm", std::process::id()));
    let _ = std::fs::remove_file(&pm);
    let x = XMem::new(xmem_config(&pm, &k, a.region_mib << 20, true)).context("starting X-Mem")?;
    let mut s = Store::new(&x, &k)?;
    bar.set_message(format!("loading {keys} items ({dataset_mib} MiB)"));
    let loaded = load(&mut s, &w, &mut ())?;
    ensure!(
        loaded == keys as usize && s.counters.evictions == 0,
        "loaded {loaded} of {keys} items with {} evictions",
        s.counters.evictions
    );
    pmkit_xkv::check_placement(&x, &s)?;
    bar.inc();

    let (llc_bytes, llc_ways) = llc();
    bar.set_message(format!("tracing {traced_n} requests"));
    let mut sim = Sim::new(Cache::new(llc_bytes, llc_ways), N);
    run(&mut s, &w, &w.requests(traced_n, 1), &mut sim);
    sim.reset_counts();
    run(&mut s, &w, &w.requests(traced_n, 2), &mut sim);
    let traced = sim.finish();
    bar.inc();

    let reqs = w.requests(requests, 3);
    let warm = w.requests(requests / 10, 4);
    // Level 2's set-up: everything fast, and first the emulator's own cost (count-only runs
    // against plain ones).
    place(&x, &[false; N])?;
    let cfg = |overhead_ns: f64, count_only: bool| {
        let mut c = epoch::Config::new(d, tlb, llc_bytes, llc_ways);
        c.overhead_ns = overhead_ns;
        c.count_only = count_only;
        c
    };
    let timed = |s: &mut Store, e: &mut Epoch| {
        run(s, &w, &warm, e);
        e.reset_counts();
        let t = Instant::now();
        run(s, &w, &reqs, e);
        (t.elapsed().as_secs_f64() * 1e3, e.finish())
    };
    let (mut plain, mut count, mut accesses) = (vec![], vec![], 0);
    for _ in 0..rounds {
        bar.set_message("level 2: the emulator's own cost");
        run(&mut s, &w, &warm, &mut ());
        let t = Instant::now();
        run(&mut s, &w, &reqs, &mut ());
        plain.push(t.elapsed().as_secs_f64() * 1e3);
        let (ms, st) = timed(&mut s, &mut Epoch::new(cfg(0.0, true), (1 << N) - 1));
        count.push(ms);
        accesses = st.accesses;
        bar.inc();
    }
    let overhead_ns = ((median(count.iter().copied()) - median(plain.iter().copied())) * 1e6
        / accesses.max(1) as f64)
        .max(0.0);

    // Every placement measured on the real tiers, then at once emulated on the fast tier (the
    // two timed back to back, so the machine's drift between them stays small).
    let mut ms = vec![vec![]; masks.len()];
    let mut emu_ms = vec![vec![]; masks.len()];
    let mut emu_stats = vec![EpochStats::default(); masks.len()];
    let mut stats: Option<RunStats> = None;
    // One plain timed run (after a warm one): ms. Every run must give the first one's answers:
    // migration kept every byte.
    let timed_plain = |s: &mut Store, stats: &mut Option<RunStats>| -> Result<f64> {
        run(s, &w, &warm, &mut ());
        let t = Instant::now();
        let st = run(s, &w, &reqs, &mut ());
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let first = stats.get_or_insert_with(|| st.clone());
        ensure!(
            *first == st,
            "the run changed with the placement: {st:?} vs {first:?}"
        );
        Ok(ms)
    };
    for r in 0..rounds {
        for j in 0..masks.len() {
            let i = (j + r) % masks.len();
            bar.set_message(format!("round {}/{rounds}: {}", r + 1, name(&masks[i])));
            place(&x, &masks[i])?;
            ms[i].push(timed_plain(&mut s, &mut stats)?);
            bar.inc();
            place(&x, &[false; N])?;
            let bits = masks[i]
                .iter()
                .enumerate()
                .fold(0u64, |b, (t, &slow)| b | (u64::from(slow) << t));
            let (ms, st) = timed(&mut s, &mut Epoch::new(cfg(overhead_ns, false), bits));
            emu_ms[i].push(ms);
            emu_stats[i] = st;
            bar.inc();
        }
    }
    // Each tag's cost alone slow, in tight pairs: all fast and the tag alone slow timed back to
    // back, the order swapped every other pair so a steady drift cancels. The rounds above
    // space one placement's run from the all-fast run a minute apart, and the machine's
    // speed drifts by more than a tag's cost in that time.
    let mut paired = vec![vec![]; N];
    let mut control: [Vec<f64>; 2] = [vec![], vec![]];
    for r in 0..rank_n {
        for j in 0..N {
            let t = (j + r) % N;
            bar.set_message(format!(
                "pair {}/{rank_n}: {} slow against all fast",
                r + 1,
                TAGS[t]
            ));
            let alone: Vec<bool> = (0..N).map(|i| i == t).collect();
            let mut ms = [0.0; 2];
            for k in [r % 2, 1 - r % 2] {
                place(&x, if k == 0 { &masks[0] } else { &alone })?;
                ms[k] = timed_plain(&mut s, &mut stats)?;
            }
            paired[t].push(ms[1] - ms[0]);
            bar.inc();
        }
        // Two controls, all fast against all fast: back to back with nothing moved (the run's
        // own noise), and with every tag moved to the slow tier and back in between (what the
        // moves themselves leave behind: fresh pages, page tables, huge pages or not).
        place(&x, &masks[0])?;
        let a = timed_plain(&mut s, &mut stats)?;
        let b = timed_plain(&mut s, &mut stats)?;
        control[0].push(b - a);
        place(&x, &masks[1])?;
        place(&x, &masks[0])?;
        control[1].push(timed_plain(&mut s, &mut stats)? - b);
    }
    place(&x, &[false; N])?;
    let emulated: Vec<f64> = emu_ms.iter().map(|v| median(v.iter().copied())).collect();
    let (slab_mib, hash_mib) = (s.slab_bytes() >> 20, s.hash_bytes() >> 20);
    drop(s);
    drop(x);

    let measured: Vec<f64> = ms.iter().map(|v| median(v.iter().copied())).collect();
    let scale = requests as f64 / traced_n as f64;
    let base_ns = measured[0] * 1e6;
    let rows: Vec<Row> = masks
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let meas = measured[i];
            let pred = predict_tlb(base_ns, &traced, m, &d, &tlb, scale) / 1e6;
            Row {
                placement: name(m),
                slow: m.clone(),
                v: Versus::new(meas, pred, emulated[i], emu_stats[i].unpaid_ns / 1e6),
            }
        })
        .collect();
    // Benefit of tag t: all slow (row 1) minus "t fast" (row 2 + N + t).
    let benefit =
        |v: &dyn Fn(usize) -> f64| -> Vec<f64> { (0..N).map(|t| v(1) - v(2 + N + t)).collect() };
    let bm = benefit(&|i| rows[i].v.measured_ms);
    let bp = benefit(&|i| rows[i].v.predicted_ms);
    // Cost of tag t alone slow: row 2 + t minus all fast (row 0).
    let cm: Vec<f64> = (0..N)
        .map(|t| rows[2 + t].v.measured_ms - rows[0].v.measured_ms)
        .collect();
    let cp: Vec<f64> = (0..N)
        .map(|t| rows[2 + t].v.predicted_ms - rows[0].v.predicted_ms)
        .collect();
    let cost_paired: Vec<f64> = paired.iter().map(|v| median(v.iter().copied())).collect();
    let tests = rank::pair_tests(&paired, &cp);
    let ranked = rank::counts(&tests);
    let max_abs = Versus::max_abs_errors(rows.iter().map(|r| &r.v));
    let ce: Vec<f64> = (0..N)
        .map(|t| rows[2 + t].v.emulated_ms - rows[0].v.emulated_ms)
        .collect();
    let order = |b: &[f64]| {
        let mut o: Vec<usize> = (0..N).collect();
        o.sort_by(|&i, &j| b[j].total_cmp(&b[i]));
        o
    };

    // memcaslap: rounds alternate the two tiers; the median ops/s of each is reported.
    let mut runs: Vec<CaslapRun> = vec![];
    let mut note = String::new();
    if caslap_ops > 0 {
        let mut all: [Vec<CaslapRun>; 2] = [vec![], vec![]];
        'rounds: for r in 0..rounds {
            for j in 0..2 {
                let slow = (j + r) % 2 == 1;
                bar.set_message(format!(
                    "round {}/{rounds}: memcaslap against xkv-serve, {}",
                    r + 1,
                    if slow { "all slow" } else { "all fast" }
                ));
                let mib = dataset_mib.clamp(64, 1024);
                match caslap::run(&a.flags.dir, mib, caslap_ops, caslap_ops, slow) {
                    Ok(c) => all[slow as usize].push(c),
                    Err(e) => {
                        note = format!("memcaslap not run: {e:#}");
                        break 'rounds;
                    }
                }
                bar.inc();
            }
        }
        if note.is_empty() {
            for v in all {
                let mut m = v[0].clone();
                m.load_ops_per_s = median(v.iter().map(|c| c.load_ops_per_s));
                m.ops_per_s = median(v.iter().map(|c| c.ops_per_s));
                m.rounds_ops_per_s = v.iter().map(|c| c.ops_per_s).collect();
                runs.push(m);
            }
        }
    } else {
        note = "memcaslap skipped (--memcaslap-ops 0)".into();
    }
    bar.finish();

    let report = Report {
        cpu: cal.cpu.clone(),
        level: "level 3 (trace simulator) and level 2 (epoch emulator, everything on the fast \
                tier) against wall clock on a real tier pair: anonymous memory with huge pages \
                (fast) and the /dev/shm file with 4 KiB pages (slow)",
        load_average_start: load_start,
        load_average: load_average(),
        rounds,
        tags: TAGS,
        keys,
        dataset_mib,
        slab_mib,
        hash_mib,
        region_mib: a.region_mib,
        zipf: a.zipf,
        requests,
        traced_requests: traced_n,
        stats: stats.unwrap_or_default(),
        llc_bytes,
        llc_ways,
        fast,
        slow,
        delta_ns: d,
        tlb,
        paired: pair,
        traced,
        same_ranking: order(&bm) == order(&bp),
        same_top: order(&bm)[0] == order(&bp)[0],
        same_cost_ranking: order(&cm) == order(&cp),
        same_cost_top: order(&cm)[0] == order(&cp)[0],
        rank_pairs: rank_n,
        cost_ranked_pairs: ranked.0,
        cost_ranked_pairs_agree: ranked.1,
        cost_ranked_pairs_agree_emulated: rank::counts(&rank::pair_tests(&paired, &ce)).1,
        cost_pair_tests: tests,
        cost_rank_correlation: rank::spearman(&cost_paired, &cp),
        cost_rank_correlation_emulated: rank::spearman(&cost_paired, &ce),
        control_still_sd_ms: rank::sd(&control[0]),
        control_moved_sd_ms: rank::sd(&control[1]),
        cost_paired_sd_ms: rank::pooled_sd(&paired),
        control_still_ms: control[0].clone(),
        control_moved_ms: control[1].clone(),
        cost_paired_ms: cost_paired,
        cost_predicted_ms: cp,
        max_abs_error_pct: max_abs.0,
        emulator_overhead_ns: overhead_ns,
        same_cost_ranking_emulated: order(&cm) == order(&ce),
        same_cost_top_emulated: order(&cm)[0] == order(&ce)[0],
        cost_emulated_ms: ce,
        cost_measured_ms: cm,
        max_abs_emulated_error_pct: max_abs.1,
        benefit_measured_ms: bm,
        benefit_predicted_ms: bp,
        rows,
        memcaslap: runs,
        memcaslap_note: note,
    };
    a.flags.emit(&report, draw, table)
}

fn table(r: &Report) {
    println!(
        "CPU: {}; load average {}; {}",
        r.cpu, r.load_average, r.level
    );
    println!(
        "xkv: {} keys, {} MiB dataset ({} MiB slabs, {} MiB hash), Zipf {}, {} requests per timed run \
         ({} traced), regions {} MiB, cache model {} MiB {} ways, rounds {}",
        r.keys, r.dataset_mib, r.slab_mib, r.hash_mib, r.zipf, r.requests, r.traced_requests,
        r.region_mib, r.llc_bytes >> 20, r.llc_ways, r.rounds
    );
    println!(
        "run: {} gets ({} hits), {} sets; ΔL chase {:.1}, random {:.2}, stream {:.2} ns (fast {} {:.0}% huge, slow {})",
        r.stats.gets, r.stats.hits, r.stats.sets, r.delta_ns[0], r.delta_ns[1], r.delta_ns[2],
        r.fast.backing, r.fast.huge_fraction * 100.0, r.slow.backing
    );
    for (t, (m, acc)) in TAGS
        .iter()
        .zip(r.traced.misses.iter().zip(&r.traced.accesses))
    {
        println!(
            "  traced {t:<10} accesses {acc:>10} misses chase {:>9} random {:>9} stream {:>9}",
            m[0], m[1], m[2]
        );
    }
    Versus::table(20, r.rows.iter().map(|r| (r.placement.as_str(), &r.v)));
    println!(
        "benefit per tag alone fast (ms, {:?}):\n  measured  {:?}\n  predicted {:?}\n  same ranking: {}; same first: {}; max |error| {:.1}%",
        TAGS,
        r1(&r.benefit_measured_ms),
        r1(&r.benefit_predicted_ms),
        r.same_ranking,
        r.same_top,
        r.max_abs_error_pct
    );
    println!(
        "cost per tag alone slow (ms):\n  measured  {:?}\n  predicted {:?}\n  same ranking: {}; same first: {}",
        r1(&r.cost_measured_ms),
        r1(&r.cost_predicted_ms),
        r.same_cost_ranking,
        r.same_cost_top
    );
    println!(
        "cost per tag alone slow, median of {} back-to-back pairs (ms): {:?}",
        r.rank_pairs,
        r1(&r.cost_paired_ms)
    );
    println!(
        "pairs of tags the paired costs rank (paired t-test, 1%): {}; level 3 agrees on {}, level 2 on {}",
        r.cost_ranked_pairs, r.cost_ranked_pairs_agree, r.cost_ranked_pairs_agree_emulated
    );
    rank::print(&r.cost_pair_tests, &TAGS);
    println!(
        "the paired costs' ranking against level 3's: Spearman rho {:.2} (one-sided p {:.4}); against level 2's: rho {:.2} (p {:.4})",
        r.cost_rank_correlation.rho,
        r.cost_rank_correlation.p,
        r.cost_rank_correlation_emulated.rho,
        r.cost_rank_correlation_emulated.p
    );
    println!(
        "noise floor, all fast against all fast: sd {:.1} ms back to back, {:.1} ms after every tag moved slow and back; the tags' paired costs: sd {:.1} ms",
        r.control_still_sd_ms, r.control_moved_sd_ms, r.cost_paired_sd_ms
    );
    println!(
        "level 2 (emulator {:.1} ns per access, taken off): cost per tag alone slow (ms) {:?}; same ranking: {}; same first: {}; max |error| {:.1}%",
        r.emulator_overhead_ns,
        r1(&r.cost_emulated_ms),
        r.same_cost_ranking_emulated,
        r.same_cost_top_emulated,
        r.max_abs_emulated_error_pct
    );
    for c in &r.memcaslap {
        println!(
            "memcaslap against xkv-serve, all {} (median of {}): load {:.0} ops/s, ETC mix {:.0} ops/s \
             (rounds {:?}; {} of {} gets hit)",
            c.tier,
            c.rounds_ops_per_s.len(),
            c.load_ops_per_s,
            c.ops_per_s,
            r1(&c.rounds_ops_per_s),
            c.get_hits,
            c.cmd_get
        );
    }
    if !r.memcaslap_note.is_empty() {
        println!("{}", r.memcaslap_note);
    }
}

fn draw(p: &Path, r: &Report) -> Result<()> {
    let panels = vec![
        plot::BarPanel {
            title: "ms per timed run by placement".into(),
            groups: r.rows.iter().map(|x| x.placement.clone()).collect(),
            series: vec![
                (
                    "measured".into(),
                    r.rows.iter().map(|x| x.v.measured_ms).collect(),
                ),
                (
                    "predicted (level 3)".into(),
                    r.rows.iter().map(|x| x.v.predicted_ms).collect(),
                ),
                (
                    "emulated (level 2)".into(),
                    r.rows.iter().map(|x| x.v.emulated_ms).collect(),
                ),
            ],
        },
        plot::BarPanel {
            title: "ms saved by a tag alone fast (against all slow)".into(),
            groups: TAGS.iter().map(|t| t.to_string()).collect(),
            series: vec![
                ("measured".into(), r.benefit_measured_ms.clone()),
                ("predicted".into(), r.benefit_predicted_ms.clone()),
            ],
        },
        plot::BarPanel {
            title: "ms lost by a tag alone slow (against all fast)".into(),
            groups: TAGS.iter().map(|t| t.to_string()).collect(),
            series: vec![
                ("measured".into(), r.cost_measured_ms.clone()),
                ("measured in pairs".into(), r.cost_paired_ms.clone()),
                ("predicted".into(), r.cost_predicted_ms.clone()),
                ("emulated".into(), r.cost_emulated_ms.clone()),
            ],
        },
    ];
    plot::bars(
        p,
        &format!("xkv on huge pages vs 4 KiB pages: {}", r.cpu),
        "ms",
        &panels,
        1,
    )
}
