//! HMEP benchmarks: `hmep-validate`, and the figure of a calibration ([`calibrate`]); `hmep-validate`: the trace simulator
//! (emulation level 3) against wall clock on the one real tier pair these machines have, X-Mem's
//! own tiers with fast = anonymous memory with transparent huge pages and slow = the /dev/shm
//! file (4 KiB pages). xgraph (`pmkit-xgraph`) runs pull PageRank and BFS under every placement of its
//! three tags; one traced run per kernel gives the misses per tag and pattern, and the
//! calibration of the two backings gives ΔL per pattern; the prediction for a placement is the
//! all-fast time plus the slow tags' misses times ΔL, plus the page walks on cache hits their
//! 4 KiB pages add (the TLB model) times the calibrated walk cost.

pub(crate) mod calibrate;
pub(crate) mod chase;
pub(crate) mod rank;
mod timed;

use timed::{emulate, time_bfs, time_pagerank, typical, Emulated, Kernels};

use crate::host::cpu_label;
use crate::report::{median, plot, BenchFlags};
use anyhow::{ensure, Context, Result};
use pmkit_hmep::cache::{llc, Cache};
use pmkit_hmep::calib::{self, Options, Tier as CalTier};
use pmkit_hmep::epoch;
use pmkit_hmep::mem::Backing;
use pmkit_hmep::sim::{predict_tlb, Misses, Sim};
use pmkit_hmep::tlb::TlbCost;
use pmkit_xgraph::{Graph, TAGS};
use pmkit_xmem::{Config, PerPattern, Tier, XMem};
use rank::{pair_tests, PairTest};
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(crate) struct ValidateArgs {
    #[command(flatten)]
    flags: BenchFlags,
    /// R-MAT scale: 2^scale vertices (default 21, quick 12).
    #[arg(long)]
    scale: Option<u32>,
    /// Edges per vertex.
    #[arg(long, default_value_t = 16)]
    edge_factor: usize,
    /// PageRank iterations per timed run (default 4, quick 2).
    #[arg(long)]
    iters: Option<usize>,
    /// BFS runs per timed run (default 4, quick 2).
    #[arg(long)]
    bfs_runs: Option<usize>,
}

#[derive(Serialize)]
struct Row {
    placement: String,
    slow: [bool; 3],
    #[serde(flatten)]
    v: Versus,
}

/// One placement against wall clock: measured, predicted by level 3, emulated by level 2 (the
/// rows of `hmep-validate` and `bench xkv`).
#[derive(Serialize, Clone, Copy)]
pub(crate) struct Versus {
    pub measured_ms: f64,
    pub predicted_ms: f64,
    pub error_pct: f64,
    /// Level 2: everything on the fast tier, the slow tags emulated by the epoch emulator.
    pub emulated_ms: f64,
    pub emulated_error_pct: f64,
    /// What the emulator owed and could not pay (its own cost was above the modelled stall).
    pub unpaid_ms: f64,
}

impl Versus {
    pub(crate) fn new(
        measured_ms: f64,
        predicted_ms: f64,
        emulated_ms: f64,
        unpaid_ms: f64,
    ) -> Versus {
        let err = |v: f64| (v - measured_ms) / measured_ms * 100.0;
        Versus {
            measured_ms,
            predicted_ms,
            error_pct: err(predicted_ms),
            emulated_ms,
            emulated_error_pct: err(emulated_ms),
            unpaid_ms,
        }
    }

    /// The largest |error| of level 3 and of level 2 over `rows`.
    pub(crate) fn max_abs_errors<'a>(rows: impl Iterator<Item = &'a Versus>) -> (f64, f64) {
        rows.fold((0.0, 0.0), |(p, e), v| {
            (p.max(v.error_pct.abs()), e.max(v.emulated_error_pct.abs()))
        })
    }

    /// Print the rows as a table, placement names in `width` columns.
    pub(crate) fn table<'a>(width: usize, rows: impl Iterator<Item = (&'a str, &'a Versus)>) {
        println!(
            "  {:<width$} {:>12} {:>12} {:>8} {:>12} {:>8} {:>8}",
            "placement", "measured ms", "level 3", "error", "level 2", "error", "unpaid"
        );
        for (name, v) in rows {
            println!(
                "  {name:<width$} {:>12.1} {:>12.1} {:>7.1}% {:>12.1} {:>7.1}% {:>8.1}",
                v.measured_ms,
                v.predicted_ms,
                v.error_pct,
                v.emulated_ms,
                v.emulated_error_pct,
                v.unpaid_ms
            );
        }
    }
}

#[derive(Serialize)]
struct App {
    name: &'static str,
    /// Misses per tag (in `tags` order) by pattern (chase, random, streaming) of one traced run,
    /// and accesses.
    traced: Misses,
    /// Traced runs per timed run.
    scale: f64,
    rows: Vec<Row>,
    /// Per tag: time saved by having it alone fast against everything slow, measured and
    /// predicted (ms).
    benefit_measured_ms: Vec<f64>,
    benefit_predicted_ms: Vec<f64>,
    same_ranking: bool,
    /// Per tag: its main effect over the 8 placements (mean of the runs with it slow less the
    /// mean of those with it fast, [`rank::main_effects`]), measured (medians), predicted by
    /// level 3 and emulated by level 2 (ms).
    effect_measured_ms: Vec<f64>,
    effect_predicted_ms: Vec<f64>,
    effect_emulated_ms: Vec<f64>,
    /// Pairs of tags whose main effects, one per round, differ by a paired t-test at the 1%
    /// level (the pairs the measurement can rank, [`rank`]), and how many of those levels 3
    /// and 2 order alike.
    ranked_pairs: usize,
    ranked_pairs_agree: usize,
    ranked_pairs_agree_emulated: usize,
    /// Every pair's test, against level 3's effects.
    pair_tests: Vec<PairTest>,
    /// Every placement's (mask order) figure in every round: that round's median iteration
    /// (search) times the iterations per run, ms.
    measured_rounds_ms: Vec<Vec<f64>>,
    max_abs_error_pct: f64,
    /// With the prices of the pairs taken before the rounds alone.
    max_abs_error_up_front_pct: f64,
    /// Level 2: the emulator's own ns per access (taken off what it owes), the benefits and
    /// ranking it gives, its largest error against wall clock.
    emulator_overhead_ns: f64,
    benefit_emulated_ms: Vec<f64>,
    same_ranking_emulated: bool,
    max_abs_emulated_error_pct: f64,
}

#[derive(Serialize)]
struct Report {
    cpu: String,
    level: &'static str,
    rounds: usize,
    tags: [&'static str; 3],
    vertices: usize,
    edges: usize,
    region_mib: usize,
    llc_bytes: usize,
    llc_ways: usize,
    fast: CalTier,
    slow: CalTier,
    /// ns per access more on the slow tier, per pattern (chase, random, streaming): medians of
    /// back-to-back paired differences (`calib::paired`).
    delta_ns: PerPattern,
    /// Those pairs: every run's differences (the first ones taken before the rounds, then one
    /// at the start of each round).
    paired: calib::Paired,
    /// The prices from the pairs taken before the rounds alone, and level 3's largest error
    /// per kernel with them: how much pricing during the rounds changed.
    delta_up_front_ns: PerPattern,
    tlb_up_front: TlbCost,
    /// ns per page walk and per L2 TLB hit in front of a cache hit (the calibration's TLB
    /// chases), charged per walk and L2 TLB hit the slow tier's 4 KiB pages take beyond the fast
    /// tier's huge pages.
    tlb: TlbCost,
    apps: Vec<App>,
    /// Level 2 on a dependent chase, where its stall per access is far above its own cost.
    chase: chase::ChaseCheck,
}

fn placement_name(slow: &[bool; 3]) -> String {
    TAGS.iter()
        .zip(slow)
        .map(|(t, &s)| format!("{t}:{}", if s { "4k" } else { "thp" }))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Put each tag's regions on the tier `slow` says (slow moves first, so the budget holds).
fn place(x: &XMem, slow: &[bool; 3]) -> Result<()> {
    let regions = x.regions();
    for want_slow in [true, false] {
        for r in &regions {
            let name = x.tag_name(r.tag)?;
            let i = TAGS
                .iter()
                .position(|t| *t == name)
                .context("an xgraph tag")?;
            if slow[i] == want_slow {
                x.move_region(r.index, if want_slow { Tier::Slow } else { Tier::Fast })?;
            }
        }
    }
    Ok(())
}

/// The backings X-Mem's tiers use, calibrated for a benchmark that compares against them:
/// quick (seconds) or 256 MiB, 3 runs and long chases (about a minute).
pub(crate) fn calibrate_tiers(backings: Vec<Backing>, quick: bool) -> Result<calib::Calibration> {
    Ok(calib::run(
        &tier_options(backings, quick),
        cpu_label(),
        &mut |_| {},
    )?)
}

fn tier_options(backings: Vec<Backing>, quick: bool) -> Options {
    let mut o = Options::quick(backings);
    if !quick {
        o.bytes = 256 << 20;
        o.runs = 3;
        o.chase_steps = 1_000_000;
        o.random_loads = 10_000_000;
    }
    o
}

/// The real tier pair's difference (huge-page anonymous memory against the file in `dir`),
/// measured in back-to-back pairs: the ΔL and TLB costs the predictions use. The pairing stays
/// open with its first pairs taken, so a benchmark can add one per round.
pub(crate) fn pair_tiers(dir: &Path, quick: bool) -> Result<calib::Pairing> {
    let o = tier_options(vec![], quick);
    Ok(calib::Pairing::started(
        &Backing::AnonThp,
        &Backing::File(dir.to_path_buf()),
        &o,
    )?)
}

pub(crate) fn validate(a: ValidateArgs) -> Result<ExitCode> {
    let quick = a.flags.quick;
    let scale = a.scale.unwrap_or(if quick { 12 } else { 21 });
    let iters = a.iters.unwrap_or(if quick { 2 } else { 4 }).max(1);
    let bfs_runs = a.bfs_runs.unwrap_or(if quick { 2 } else { 4 }).max(1);
    let rounds = a.flags.rounds(3);
    let bar = a.flags.progress(2 + 2 + rounds * 8 + rounds * 10);

    // ΔL per pattern between the two backings X-Mem's tiers use.
    bar.set_message("calibrating anon-thp and the /dev/shm file");
    let cal = calibrate_tiers(
        vec![Backing::AnonThp, Backing::File(a.flags.dir.clone())],
        quick,
    )?;
    let (fast, slow) = (cal.tiers[0].clone(), cal.tiers[1].clone());
    bar.set_message("the tier pair's differences, in back-to-back pairs");
    let mut pairing = pair_tiers(&a.flags.dir, quick)?;
    let up_front = pairing.summary();
    bar.inc();

    // X-Mem with one region per tag, all three fit in the fast budget and in PM.
    let n = 1usize << scale;
    let adj = (n + 1) * 8 + (a.edge_factor << scale) * 4;
    let region = (adj + (8 << 20)).next_power_of_two().max(2 << 20);
    let pm = a
        .flags
        .dir
        .join(format!("pmkit-hmep-validate-{}.pm", std::process::id()));
    let _ = std::fs::remove_file(&pm);
    let mut cfg = Config::new(&pm, 3 * region as u64, 3 * region as u64);
    cfg.region_size = region;
    cfg.thp = true;
    let x = XMem::new(cfg).context("starting X-Mem")?;
    bar.set_message(format!("building an R-MAT graph, scale {scale}"));
    let mut g = Graph::build(&x, scale, a.edge_factor, 0x5eed)?;
    ensure!(
        x.regions().len() == 3,
        "one region per tag: {} regions",
        x.regions().len()
    );
    bar.inc();

    // One traced run of each kernel, everything in the fast tier.
    let (llc_bytes, llc_ways) = llc();
    bar.set_message("tracing one PageRank iteration and one BFS");
    place(&x, &[false; 3])?;
    let root = g.root();
    let g_edges = g.edges;
    let mut sim = Sim::new(Cache::new(llc_bytes, llc_ways), 3);
    g.reset_ranks();
    g.pagerank_iter(&mut sim); // warm the modelled cache as timed runs are warm
    sim.reset_counts();
    g.pagerank_iter(&mut sim);
    let pr_trace = sim.finish();
    bar.inc();
    let mut sim = Sim::new(Cache::new(llc_bytes, llc_ways), 3);
    g.bfs(root, &mut sim);
    sim.reset_counts();
    let reached = g.bfs(root, &mut sim);
    let bfs_trace = sim.finish();
    bar.inc();

    // Every placement, rounds rotated.
    let masks: Vec<[bool; 3]> = (0..8u8)
        .map(|m| [m & 1 != 0, m & 2 != 0, m & 4 != 0])
        .collect();
    // Per placement, per round: every iteration's (search's) own time, so that one slow
    // stretch of the shared machine moves one sample, not a round.
    let mut pr_ms = vec![vec![]; 8];
    let mut bfs_ms = vec![vec![]; 8];
    let mut rank_sum = None;
    let k = Kernels {
        root,
        reached,
        iters,
        bfs_runs,
    };
    for r in 0..rounds {
        for j in 0..8 {
            let i = (j + r) % 8;
            bar.set_message(format!(
                "round {}/{rounds}: {}",
                r + 1,
                placement_name(&masks[i])
            ));
            if j == 0 {
                // One more pair per round: the prices then span the rounds they price.
                pairing.pair();
            }
            place(&x, &masks[i])?;
            let (each, sum) = time_pagerank(&mut g, &k, &mut (), &mut |_| {});
            pr_ms[i].push(each);
            // The same ranks under every placement: migration kept every byte.
            let s = *rank_sum.get_or_insert(sum);
            ensure!(
                sum == s,
                "PageRank changed with the placement: {sum} vs {s}"
            );
            bfs_ms[i].push(time_bfs(&mut g, &k, &mut (), &mut |_| {})?);
            bar.inc();
        }
    }
    let pair = pairing.summary();
    drop(pairing);
    let (d, tlb) = (pair.delta, pair.tlb);
    // Level 2 on the same graph, everything on the fast tier.
    place(&x, &[false; 3])?;
    let cfg = |overhead_ns: f64, count_only: bool| {
        let mut c = epoch::Config::new(d, tlb, llc_bytes, llc_ways);
        c.overhead_ns = overhead_ns;
        c.count_only = count_only;
        c
    };
    let (pr_emu, bfs_emu) = emulate(&mut g, &k, &masks, rounds, &cfg, &|m| {
        bar.set_message(format!("level 2: {m}"));
        bar.inc();
    })?;
    drop(g);
    drop(x);
    bar.set_message("level 2: a dependent chase on each tier and emulated");
    let chase = chase::run(
        &a.flags.dir,
        if quick { 64 << 20 } else { 512 << 20 },
        if quick { 100_000 } else { 2_000_000 },
        rounds,
        d[0],
        &cfg,
    )?;
    bar.finish();

    let apps = vec![
        app(
            "pagerank",
            pr_trace,
            iters as f64,
            &masks,
            &pr_ms,
            &pr_emu,
            [(&d, &tlb), (&up_front.delta, &up_front.tlb)],
        ),
        app(
            "bfs",
            bfs_trace,
            bfs_runs as f64,
            &masks,
            &bfs_ms,
            &bfs_emu,
            [(&d, &tlb), (&up_front.delta, &up_front.tlb)],
        ),
    ];
    let report = Report {
        cpu: cal.cpu.clone(),
        level: "level 3 (trace simulator) and level 2 (epoch emulator, everything on the fast \
                tier) against wall clock on a real tier pair: anonymous memory with huge pages \
                (fast) and the /dev/shm file with 4 KiB pages (slow)",
        rounds,
        tags: TAGS,
        vertices: n,
        edges: g_edges,
        region_mib: region >> 20,
        llc_bytes,
        llc_ways,
        fast,
        slow,
        delta_ns: d,
        tlb,
        paired: pair,
        delta_up_front_ns: up_front.delta,
        tlb_up_front: up_front.tlb,
        apps,
        chase,
    };
    a.flags.emit(&report, draw, table)
}

#[allow(clippy::too_many_arguments)]
fn app(
    name: &'static str,
    traced: Misses,
    scale: f64,
    masks: &[[bool; 3]],
    ms: &[Vec<Vec<f64>>],
    emu: &Emulated,
    prices: [(&PerPattern, &TlbCost); 2],
) -> App {
    let [(d, tlb), up_front] = prices;
    // A placement's figure: its median iteration over every round, times the iterations per
    // run; a round's figure (for the pair tests): that round's median iteration, likewise.
    let measured: Vec<f64> = ms
        .iter()
        .map(|rounds| median(rounds.iter().flatten().copied()) * rounds[0].len() as f64)
        .collect();
    let ms: Vec<Vec<f64>> = ms
        .iter()
        .map(|rounds| rounds.iter().map(|r| typical(r)).collect())
        .collect();
    let emulated: Vec<f64> = emu.ms.iter().map(|v| median(v.iter().copied())).collect();
    let base_ns = measured[0] * 1e6;
    let rows: Vec<Row> = masks
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let meas = measured[i];
            let pred = predict_tlb(base_ns, &traced, m, d, tlb, scale) / 1e6;
            Row {
                placement: placement_name(m),
                slow: *m,
                v: Versus::new(meas, pred, emulated[i], emu.stats[i].unpaid_ns / 1e6),
            }
        })
        .collect();
    // Benefit of tag s: all slow (mask 7) against all slow but s (mask 7 with bit s cleared).
    let benefit = |v: &dyn Fn(usize) -> f64| -> Vec<f64> {
        (0..3).map(|s| v(7) - v(7 & !(1 << s))).collect()
    };
    let bm = benefit(&|i| rows[i].v.measured_ms);
    let bp = benefit(&|i| rows[i].v.predicted_ms);
    let be = benefit(&|i| rows[i].v.emulated_ms);
    let order = |b: &[f64]| {
        let mut o: Vec<usize> = (0..3).collect();
        o.sort_by(|&i, &j| b[j].total_cmp(&b[i]));
        o
    };
    // The ranking is judged on main effects, each round's own: every run of a round informs
    // every tag's figure, where a benefit is one run against one other.
    let effects = |v: &dyn Fn(usize) -> f64| -> Vec<f64> {
        rank::main_effects(&(0..8).map(v).collect::<Vec<_>>(), 3)
    };
    let em = effects(&|i| rows[i].v.measured_ms);
    let ep = effects(&|i| rows[i].v.predicted_ms);
    let ee = effects(&|i| rows[i].v.emulated_ms);
    let by_round: Vec<Vec<f64>> = (0..ms[0].len()).map(|r| effects(&|i| ms[i][r])).collect();
    let per_round: Vec<Vec<f64>> = (0..3)
        .map(|t| by_round.iter().map(|e| e[t]).collect())
        .collect();
    let tests = pair_tests(&per_round, &ep);
    let (ranked, agree) = rank::counts(&tests);
    let agree_emulated = rank::counts(&pair_tests(&per_round, &ee)).1;
    let max_abs = Versus::max_abs_errors(rows.iter().map(|r| &r.v));
    let max_abs_up_front = masks
        .iter()
        .zip(&measured)
        .map(|(m, &meas)| {
            let pred = predict_tlb(base_ns, &traced, m, up_front.0, up_front.1, scale) / 1e6;
            ((pred - meas) / meas * 100.0).abs()
        })
        .fold(0.0, f64::max);
    App {
        name,
        scale,
        effect_measured_ms: em,
        effect_predicted_ms: ep,
        effect_emulated_ms: ee,
        measured_rounds_ms: ms,
        ranked_pairs: ranked,
        ranked_pairs_agree: agree,
        ranked_pairs_agree_emulated: agree_emulated,
        pair_tests: tests,
        same_ranking: order(&bm) == order(&bp),
        same_ranking_emulated: order(&bm) == order(&be),
        max_abs_error_pct: max_abs.0,
        max_abs_error_up_front_pct: max_abs_up_front,
        max_abs_emulated_error_pct: max_abs.1,
        emulator_overhead_ns: emu.overhead_ns,
        benefit_measured_ms: bm,
        benefit_predicted_ms: bp,
        benefit_emulated_ms: be,
        traced,
        rows,
    }
}

/// Figures rounded to 0.1 for the tables.
pub(crate) fn r1(v: &[f64]) -> Vec<f64> {
    v.iter().map(|x| (x * 10.0).round() / 10.0).collect()
}

fn table(r: &Report) {
    println!("CPU: {}; {}", r.cpu, r.level);
    println!(
        "graph: {} vertices, {} edges; regions {} MiB; cache model {} MiB, {} ways; rounds {}",
        r.vertices,
        r.edges,
        r.region_mib,
        r.llc_bytes >> 20,
        r.llc_ways,
        r.rounds
    );
    println!(
        "tiers: fast {} ({:.0}% huge) chase {:.1} ns, slow {} chase {:.1} ns; ΔL chase {:.1}, random {:.2}, stream {:.2} ns",
        r.fast.backing,
        r.fast.huge_fraction * 100.0,
        r.fast.chase_ns,
        r.slow.backing,
        r.slow.chase_ns,
        r.delta_ns[0],
        r.delta_ns[1],
        r.delta_ns[2]
    );
    println!(
        "  medians of {} back-to-back pairs, one per round after the first {}; those first alone: ΔL chase {:.1}, random {:.2}, stream {:.2} ns, walk {:.1} / {:.2} ns",
        r.paired.runs,
        r.paired.runs - r.rounds,
        r.delta_up_front_ns[0],
        r.delta_up_front_ns[1],
        r.delta_up_front_ns[2],
        r.tlb_up_front.walk_ns,
        r.tlb_up_front.walk_independent_ns
    );
    println!(
        "TLB chase ({} pages): fast {:.1} ns, slow {:.1} ns per load; page walk on a cache hit {:.1} ns (dependent), {:.2} ns (independent, paired)",
        r.slow.tlb_pages, r.fast.tlb_chase_ns, r.slow.tlb_chase_ns, r.tlb.walk_ns, r.tlb.walk_independent_ns
    );
    println!(
        "L1 dTLB chase ({} pages): fast {:.1} ns, slow {:.1} ns per load; L2 TLB hit on a cache hit {:.2} ns",
        r.slow.l1_pages, r.fast.l1_chase_ns, r.slow.l1_chase_ns, r.tlb.l1_ns
    );
    let c = &r.chase;
    println!(
        "level 2 on a dependent chase over {} MiB ({} loads): fast {:.1} ns, slow {:.1} ns, emulated {:.1} ns ({:+.1}%), level 3 {:.1} ns ({:+.1}%); emulator {:.1} ns per access taken off, {:.1} ns unpaid",
        c.bytes >> 20,
        c.steps,
        c.fast_ns,
        c.slow_ns,
        c.emulated_ns,
        c.emulated_error_pct,
        c.predicted_ns,
        c.predicted_error_pct,
        c.overhead_ns,
        c.unpaid_ns_per_access
    );
    for a in &r.apps {
        println!("\n{} (x{} per timed run)", a.name, a.scale);
        for (t, m) in TAGS.iter().zip(&a.traced.misses) {
            println!(
                "  traced misses {t:<10} chase {:>10} random {:>10} stream {:>10}",
                m[0], m[1], m[2]
            );
        }
        for (t, u) in TAGS.iter().zip(&a.traced.units) {
            println!(
                "  traced walks  {t:<10} 4k {:>10} 2m {:>10} (on cache hits: 4k {:>10} 2m {:>10}), stores {:>10}",
                u.walks_4k, u.walks_2m, u.walks_4k_on_hits, u.walks_2m_on_hits, u.stores
            );
            println!(
                "  L1 dTLB misses on cache hits {t:<10} 4k {:>10} 2m {:>10}",
                u.l1_tlb_misses_4k_on_hits, u.l1_tlb_misses_2m_on_hits
            );
        }
        Versus::table(44, a.rows.iter().map(|r| (r.placement.as_str(), &r.v)));
        println!(
            "  benefit per tag alone fast (ms), measured {:?} predicted {:?}; same ranking: {}; max |error| {:.1}% ({:.1}% priced by the {} pairs before the rounds alone)",
            r1(&a.benefit_measured_ms),
            r1(&a.benefit_predicted_ms),
            a.same_ranking,
            a.max_abs_error_pct,
            a.max_abs_error_up_front_pct,
            r.paired.runs - r.rounds
        );
        println!(
            "  main effect per tag slow (ms): measured {:?}, level 3 {:?}, level 2 {:?}",
            r1(&a.effect_measured_ms),
            r1(&a.effect_predicted_ms),
            r1(&a.effect_emulated_ms)
        );
        println!(
            "  pairs of tags the measured effects rank (paired t-test over rounds, 1%): {}; level 3 agrees on {}, level 2 on {}",
            a.ranked_pairs, a.ranked_pairs_agree, a.ranked_pairs_agree_emulated
        );
        rank::print(&a.pair_tests, &TAGS);
        println!(
            "  level 2: emulator {:.1} ns per access (taken off); benefit per tag alone fast (ms) {:?}; same ranking: {}; max |error| {:.1}%",
            a.emulator_overhead_ns,
            r1(&a.benefit_emulated_ms),
            a.same_ranking_emulated,
            a.max_abs_emulated_error_pct
        );
    }
}

fn draw(p: &Path, r: &Report) -> Result<()> {
    let panels: Vec<plot::BarPanel> = r
        .apps
        .iter()
        .map(|a| plot::BarPanel {
            title: format!(
                "{}: ms per timed run (adjacency/vertex/messages: t = huge, 4 = 4 KiB)",
                a.name
            ),
            groups: a
                .rows
                .iter()
                .map(|row| {
                    row.slow
                        .iter()
                        .map(|&s| if s { '4' } else { 't' })
                        .collect()
                })
                .collect(),
            series: vec![
                (
                    "measured".into(),
                    a.rows.iter().map(|x| x.v.measured_ms).collect(),
                ),
                (
                    "predicted (level 3)".into(),
                    a.rows.iter().map(|x| x.v.predicted_ms).collect(),
                ),
                (
                    "emulated (level 2)".into(),
                    a.rows.iter().map(|x| x.v.emulated_ms).collect(),
                ),
            ],
        })
        .collect();
    plot::bars(
        p,
        &format!("HMEP levels 3 and 2 against wall clock: {}", r.cpu),
        "ms",
        &panels,
        2,
    )
}
