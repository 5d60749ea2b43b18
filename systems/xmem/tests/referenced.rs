//! The online signal per region (an extension beyond the thesis): after `clear_referenced`,
//! `referenced` reports the touched bytes of each region apart from its neighbour's (each
//! region is its own VMA), also after the regions move between tiers.

mod common;

use common::*;
use pmkit_xmem::Tier;

fn touch(p: *mut u8, bytes: usize) {
    for off in (0..bytes).step_by(4096) {
        // SAFETY: inside a live 1 MiB object.
        unsafe { p.add(off).write_volatile(1) };
    }
}

fn by_region(x: &pmkit_xmem::XMem) -> Vec<(usize, u64)> {
    x.referenced().expect("read /proc/self/smaps")
}

#[test]
fn touched_bytes_are_counted_per_region() {
    let f = fixture(8, 8, 4);
    let x = &f.xmem;
    let (a, b) = (x.tag("a").unwrap(), x.tag("b").unwrap());
    // One 1 MiB object each: two adjacent 2 MiB regions (0 and 1), both in DRAM.
    let pa = x.alloc(a, MIB, 4096).unwrap().as_ptr();
    let pb = x.alloc(b, MIB, 4096).unwrap().as_ptr();
    let (ra, rb) = (
        x.region_of(pa as usize).unwrap(),
        x.region_of(pb as usize).unwrap(),
    );
    assert_eq!(rb, ra + 1, "adjacent regions");
    touch(pa, MIB);
    touch(pb, MIB);
    for round in 0..2 {
        x.clear_referenced().unwrap();
        let r = by_region(x);
        let get = |r: &[(usize, u64)], i| r.iter().find(|e| e.0 == i).unwrap().1;
        assert!(
            get(&r, ra) <= 64 << 10 && get(&r, rb) <= 64 << 10,
            "cleared: {r:?}"
        );
        // Not every touched page is reported referenced: 224-256 KiB of the 256 KiB were seen
        // on this VM's kernel on some days, 16-120 KiB on others, and under load once none
        // (with the same binary: the kernel's page aging clears accessed bits too). So the
        // touch is repeated until the region counts (at most 5 times), and the check is that
        // the neighbour counts far less: a merged VMA would split its count evenly.
        let mut r = Vec::new();
        for _ in 0..5 {
            touch(pa, 256 << 10);
            r = by_region(x);
            if get(&r, ra) >= 4 << 10 {
                break;
            }
        }
        let (touched, neighbour) = (get(&r, ra), get(&r, rb));
        assert!(touched >= 4 << 10, "round {round}: {r:?}");
        assert!(
            neighbour <= touched / 4,
            "round {round}: the neighbour untouched: {r:?}"
        );
        // Move both regions to PM (and later back): each is still counted apart.
        let to = if round == 0 { Tier::Slow } else { Tier::Fast };
        x.move_region(ra, to).unwrap();
        x.move_region(rb, to).unwrap();
    }
    x.check_invariants();
}
