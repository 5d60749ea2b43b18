//! Migration speed (compare with the thesis's Table 9: about 1 s per GiB DRAM -> NVM with 64 MB
//! regions and 4 KiB pages on its emulator).
//!
//! `cargo run --release -p pmkit-xmem --example migrate -- [REGION_MIB] [GIB] [thp|4k] [rights]`
//! moves GIB (default 1) of full regions (default 64 MiB) DRAM -> PM (/dev/shm) and back, three
//! rounds, and prints the median ms per GiB of each direction. `rights`: hold writers off by
//! page rights instead of userfaultfd (`Config::uffd = false`).

use pmkit_xmem::{Config, Tier, XMem};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let region_mib: usize = args.first().map_or(Ok(64), |s| s.parse())?;
    let gib: usize = args.get(1).map_or(Ok(1), |s| s.parse())?;
    let thp = args.get(2).is_some_and(|s| s == "thp");
    let rights = args.get(3).is_some_and(|s| s == "rights");
    let region = region_mib << 20;
    let total = gib << 30;
    let n = total / region;
    let dir = tempfile::tempdir_in("/dev/shm")?;
    let mut cfg = Config::new(dir.path().join("pm.img"), total as u64, total as u64);
    cfg.region_size = region;
    cfg.reserve = 2 * total;
    cfg.thp = thp;
    cfg.uffd = !rights;
    let x = XMem::new(cfg)?;
    println!("write protection: {:?}", x.write_protection());
    let t = x.tag("data")?;
    let mut objs = Vec::new();
    for k in 0..n {
        let p = x.alloc(t, region, 4096)?.as_ptr();
        // Touch every page so the copy moves real memory (one byte per 4 KiB is enough).
        for off in (0..region).step_by(4096) {
            // SAFETY: `p` is a live allocation of `region` bytes.
            unsafe { p.add(off).write(k as u8) };
        }
        objs.push(p);
    }
    let regions: Vec<usize> = x.regions().iter().map(|r| r.index).collect();
    let per_gib = |ms: f64| ms * (1u64 << 30) as f64 / total as f64;
    let (mut down, mut up) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let s = Instant::now();
        for &r in &regions {
            x.move_region(r, Tier::Slow)?;
        }
        down.push(per_gib(s.elapsed().as_secs_f64() * 1e3));
        let s = Instant::now();
        for &r in &regions {
            x.move_region(r, Tier::Fast)?;
        }
        up.push(per_gib(s.elapsed().as_secs_f64() * 1e3));
    }
    for (k, p) in objs.iter().enumerate() {
        for off in (0..region).step_by(4096) {
            // SAFETY: as above.
            assert_eq!(unsafe { p.add(off).read() }, k as u8, "bytes changed");
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "regions {n} x {region_mib} MiB ({gib} GiB), pages {}: DRAM->PM {:.0} ms/GiB, PM->DRAM {:.0} ms/GiB (median of 3; thesis Table 9: 1015 ms/GiB DRAM->NVM, 64 MB regions, 4 KiB pages)",
        if thp { "THP (madvise)" } else { "4 KiB" },
        median(&mut down),
        median(&mut up)
    );
    Ok(())
}
