//! Presets, the model's arithmetic and a quick calibration on real memory.

use pmkit_hmep::calib::{self, Options, Runs, Tier};
use pmkit_hmep::mem::{Backing, Buf};
use pmkit_hmep::model::Model;
use pmkit_hmep::preset::{self, Mode};
use pmkit_hmep::HmepError;
use pmkit_xmem::place::Pattern;

fn tier(chase: f64, random: f64, seq: f64, read: f64, write: f64) -> Tier {
    Tier {
        backing: "test".into(),
        bytes: 0,
        huge_fraction: 0.0,
        chase_ns: chase,
        random_ns: random,
        seq_ns: seq,
        read_gbs: read,
        write_gbs: write,
        runs: Runs::default(),
        tlb_chase_ns: 0.0,
        tlb_pages: 0,
        tlb_walks_4k: 0.0,
        tlb_walks_2m: 0.0,
        tlb_gather_ns: 0.0,
        l1_chase_ns: 0.0,
        l1_pages: 0,
        l1_misses_4k: 0.0,
        l1_misses_2m: 0.0,
    }
}

#[test]
fn every_preset_is_valid_named_once_and_sourced() {
    let all = preset::all();
    assert!(all.len() >= 10, "thesis x6, optane x2, cxl x2");
    for p in &all {
        p.validate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(all.iter().filter(|q| q.name == p.name).count(), 1);
        assert!(
            p.sources.iter().all(|s| s.len() > 20),
            "{}: a real citation",
            p.name
        );
    }
    assert!(matches!(
        preset::by_name("nope"),
        Err(HmepError::UnknownPreset(_))
    ));
}

#[test]
fn modes_scale_the_preset_as_documented() {
    let p = preset::by_name("thesis-600-5").unwrap();
    // Ratio: 600/150 = 4x the local latency.
    assert_eq!(p.latency_ns(200.0, None).unwrap(), 800.0);
    // Absolute: the source's ns, refused when not slower than local.
    assert_eq!(p.latency_ns(200.0, Some(Mode::Absolute)).unwrap(), 600.0);
    assert!(matches!(
        p.latency_ns(700.0, Some(Mode::Absolute)),
        Err(HmepError::NotSlower { .. })
    ));
    // Delta: the source's distance over its DRAM, added.
    assert_eq!(p.latency_ns(200.0, Some(Mode::Delta)).unwrap(), 650.0);
    let cxl = preset::by_name("cxl-direct").unwrap();
    assert_eq!(cxl.latency_ns(200.0, None).unwrap(), 280.0);
    assert!(cxl.latency_ns(200.0, Some(Mode::Ratio)).is_err());
}

#[test]
fn the_model_follows_its_formulas() {
    // Local: chase 200 ns, random 10 ns (MLP 20), sequential 2 ns (PF 100), 20 GB/s.
    let fast = tier(200.0, 10.0, 2.0, 20.0, 10.0);
    let p = preset::by_name("optane-1dimm").unwrap();
    let m = Model::new(&p, &fast, None).unwrap();
    let lat = 200.0 * 305.0 / 81.0;
    assert!((m.slow[Pattern::PointerChase as usize] - lat).abs() < 1e-9);
    // Random: max(lat/20, 256 B / 6.6 GB/s) = max(37.65, 38.79): bandwidth-bound on XPLines.
    let r = (lat / 20.0).max(256.0 / 6.6);
    assert!((m.slow[Pattern::Random as usize] - r).abs() < 1e-9);
    let s = (lat / 100.0).max(64.0 / 6.6);
    assert!((m.slow[Pattern::Streaming as usize] - s).abs() < 1e-9);
    assert_eq!(m.fast, [200.0, 10.0, 2.0]);
    assert!((m.slow_write_random_ns - 256.0 / 2.3).abs() < 1e-9);
    // Every preset, on a plausible machine: the slow tier is never faster, and a dependent miss
    // gains the most (random and streaming trade places when bandwidth is scarce: at 5 GB/s a
    // streamed line costs 12.8 ns).
    for p in preset::all() {
        let m = Model::new(&p, &fast, None).unwrap();
        let l = m.latencies();
        l.validate().unwrap();
        let d: Vec<f64> = (0..3).map(|i| l.slow[i] - l.fast[i]).collect();
        assert!(d[0] > d[1] && d[0] > d[2], "{}: {d:?}", p.name);
    }
}

#[test]
fn the_chase_is_one_cycle_through_every_line() {
    let mut b = Buf::new(&Backing::Anon, 2 << 20).unwrap();
    for seed in [1, 2, 0xdead_beef] {
        b.link_cycle(seed);
        assert_eq!(b.cycle_len(), (2 << 20) / 64);
    }
    assert!(
        Buf::new(&Backing::Anon, 3 << 20).is_err(),
        "not a power of two"
    );
}

#[test]
fn a_gather_loads_the_page_cycle_s_lines_one_per_page() {
    // The TLB chase's cycle over 256 pages, listed: one line in each page, every page once, and
    // the gather loads exactly those lines (each holds the next line's index, so one lap sums
    // to the sum of the lines themselves, whatever the order).
    let pages = 256;
    let mut b = Buf::new(&Backing::Anon, 2 << 20).unwrap();
    let start = b.link_pages(7, pages);
    let lines = b.cycle_lines(start, pages);
    assert_eq!(lines.len(), pages);
    assert_eq!(lines[0] as u64, start);
    let mut seen: Vec<u32> = lines.iter().map(|l| l / 64).collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..pages as u32).collect::<Vec<_>>(),
        "one line per page"
    );
    let sum: u64 = lines.iter().map(|&l| u64::from(l)).sum();
    assert_eq!(b.gather(&lines, 1), sum);
    assert_eq!(b.gather(&lines, 3), 3 * sum);
}

#[test]
fn a_quick_calibration_measures_every_backing() {
    let dir = tempdir_in_shm("calibration");
    let o = Options {
        bytes: 8 << 20,
        chase_steps: 20_000,
        random_loads: 100_000,
        ..Options::quick(vec![
            Backing::Anon,
            Backing::AnonThp,
            Backing::File(dir.clone()),
        ])
    };
    let mut steps = 0;
    let c = calib::run(&o, "test".into(), &mut |_| steps += 1).unwrap();
    assert_eq!(steps, 3);
    assert_eq!(c.tiers.len(), 3);
    for t in &c.tiers {
        for v in [t.chase_ns, t.random_ns, t.seq_ns, t.read_gbs, t.write_gbs] {
            assert!(v.is_finite() && v > 0.0, "{t:?}");
        }
        assert!((0.0..=1.0).contains(&t.huge_fraction));
        // The L1 dTLB chase: 512 pages miss a 64-72 entry L1 and hit the L2 with 4 KiB pages,
        // and stay in the L1 with 2 MiB pages.
        assert_eq!(t.l1_pages, calib::L1_PAGES as u64);
        assert!(t.l1_chase_ns.is_finite() && t.l1_chase_ns > 0.0, "{t:?}");
        assert!(t.l1_misses_4k > 0.9 && t.l1_misses_2m < 0.1, "{t:?}");
    }
    assert_eq!(c.tiers[2].backing, format!("file:{}", dir.display()));
    // The file is gone with the buffer.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_paired_calibration_gives_every_difference_of_every_run() {
    let dir = tempdir_in_shm("paired");
    let o = Options {
        bytes: 8 << 20,
        chase_steps: 20_000,
        random_loads: 100_000,
        ..Options::quick(vec![])
    };
    let p = calib::paired(&Backing::AnonThp, &Backing::File(dir.clone()), &o).unwrap();
    assert_eq!(p.runs, 5, "at least five pairs");
    assert_eq!(p.differences.len(), 5);
    assert!(p.differences.iter().flatten().all(|d| d.is_finite()));
    let t = p.tlb;
    for v in p
        .delta
        .into_iter()
        .chain([t.walk_ns, t.walk_independent_ns, t.l1_ns])
    {
        assert!(v.is_finite() && v >= 0.0, "{p:?}");
    }
    // A pairing kept open takes pairs one at a time; its summary is over all of them.
    let mut open = calib::Pairing::new(&Backing::AnonThp, &Backing::File(dir.clone()), &o).unwrap();
    let first = open.pair();
    assert_eq!(open.summary().runs, 1);
    assert_eq!(open.summary().differences, vec![first]);
    open.pair();
    assert_eq!(open.summary().runs, 2);
    drop(open);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "files gone");
    std::fs::remove_dir(&dir).unwrap();
}

fn tempdir_in_shm(test: &str) -> std::path::PathBuf {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let d = base.join(format!("pmkit-hmep-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

mod sim {
    use pmkit_hmep::cache::Cache;
    use pmkit_hmep::sim::{delta, predict, Misses, Sim, Unit};

    #[test]
    fn the_cache_keeps_what_fits_and_loses_what_does_not() {
        let mut c = Cache::new(64 << 10, 8);
        assert_eq!(c.bytes(), 64 << 10);
        for pass in 0..3 {
            for a in (0..32u64 << 10).step_by(64) {
                let hit = c.access(a);
                assert_eq!(hit, pass > 0, "32 KiB fits in 64 KiB");
            }
        }
        let mut c = Cache::new(64 << 10, 8);
        for _ in 0..3 {
            for a in (0..128u64 << 10).step_by(64) {
                assert!(!c.access(a), "LRU over twice its size misses every time");
            }
        }
        // One set, two ways: the least recent goes.
        let mut c = Cache::new(128, 2);
        assert!(!c.access(0) && !c.access(64) && c.access(0));
        assert!(!c.access(128), "evicts line 1 (64), the least recent");
        assert!(c.access(0) && !c.access(64));
    }

    #[test]
    fn misses_are_charged_the_pattern_of_their_line() {
        const BASE: u64 = 0x7f00_0000_0000;
        let mut s = Sim::new(Cache::new(1 << 20, 16), 3);
        // Structure 0: a stream over 64 MiB; 1: a linked list whose loads read the next node's
        // address; 2: random lines.
        let mut rng = 0x1234_5678u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let nodes: Vec<u64> = (0..40_000)
            .map(|_| BASE + (1 << 32) + (next() % (1 << 22)) * 64)
            .collect();
        for i in 0..40_000u64 {
            s.access(0, BASE + i * 64, 0);
            s.access(1, nodes[i as usize], nodes[(i as usize + 1) % nodes.len()]);
            s.access(2, BASE + (2 << 32) + (next() % (1 << 22)) * 64, 0);
        }
        let m = s.finish();
        assert_eq!(m.accesses, vec![40_000; 3]);
        let share =
            |s: usize, p: usize| m.misses[s][p] as f64 / m.misses[s].iter().sum::<u64>() as f64;
        assert!(share(0, 2) > 0.95, "stream: {:?}", m.misses[0]);
        assert!(share(1, 0) > 0.95, "chase: {:?}", m.misses[1]);
        assert!(share(2, 1) > 0.95, "random: {:?}", m.misses[2]);
    }

    #[test]
    fn a_prediction_adds_only_the_slow_structures_misses() {
        let unit = |misses| Unit {
            misses,
            ..Unit::default()
        };
        let m = Misses {
            misses: vec![[10, 0, 0], [0, 100, 1000]],
            accesses: vec![10, 1100],
            units: vec![unit([10, 0, 0]), unit([0, 100, 1000])],
            ..Misses::default()
        };
        let d = [50.0, 2.0, 0.5];
        assert_eq!(predict(1e6, &m, &[false, false], &d, 1.0), 1e6);
        assert_eq!(predict(1e6, &m, &[true, false], &d, 2.0), 1e6 + 1000.0);
        assert_eq!(
            predict(1e6, &m, &[true, true], &d, 1.0),
            1e6 + 500.0 + 200.0 + 500.0
        );
        let t = |c: f64| super::tier(c, c / 10.0, c / 100.0, 10.0, 10.0);
        assert_eq!(delta(&t(100.0), &t(300.0)), [200.0, 20.0, 2.0]);
        assert_eq!(delta(&t(300.0), &t(100.0)), [0.0; 3]);
    }
}
