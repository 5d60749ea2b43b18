//! The allocator against a model, with the per-thread caches on and off: random allocs and
//! frees over several tags; every object lies inside a region of its tag, no two live objects
//! overlap, alignment holds, contents survive, a second free of a freed address is refused,
//! and the heaps' own invariants hold after every step.

mod common;
use common::*;
use pmkit_xmem::Tier;
use proptest::prelude::*;
use std::ptr::NonNull;

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        tag: usize,
        size: usize,
        align: usize,
    },
    Free(usize),
    /// Free again an address freed earlier (refused unless a live object starts there now).
    FreeAgain(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        4 => 1usize..512,
        2 => 512usize..8193,
        1 => 8193usize..300_000,
        1 => Just(2 * MIB),
    ];
    let align = prop_oneof![4 => Just(8usize), 1 => Just(64usize), 1 => Just(4096usize)];
    prop_oneof![
        3 => (0usize..3, size, align).prop_map(|(tag, size, align)| Op::Alloc { tag, size, align }),
        2 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::FreeAgain),
    ]
}

struct Live {
    p: NonNull<u8>,
    size: usize,
    tag: usize,
    seed: u8,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn alloc_free_matches_model(ops in proptest::collection::vec(op(), 1..120)) {
        run_model(ops, false)?;
    }

    #[test]
    fn alloc_free_matches_model_with_thread_caches(ops in proptest::collection::vec(op(), 1..160)) {
        run_model(ops, true)?;
    }
}

fn run_model(ops: Vec<Op>, thread_cache: bool) -> Result<(), TestCaseError> {
    let f = fixture_with(64, 48, 4, thread_cache);
    let x = &f.xmem;
    let tags: Vec<_> = (0..3).map(|i| x.tag(&format!("t{i}")).unwrap()).collect();
    let mut live: Vec<Live> = Vec::new();
    let mut freed: Vec<NonNull<u8>> = Vec::new();
    for (n, op) in ops.into_iter().enumerate() {
        match op {
            Op::Alloc { tag, size, align } => {
                let p = x.alloc(tags[tag], size, align).unwrap();
                prop_assert_eq!(p.as_ptr() as usize % align, 0);
                let seed = n as u8;
                fill(p.as_ptr(), size, seed);
                live.push(Live { p, size, tag, seed });
            }
            Op::Free(i) if !live.is_empty() => {
                let l = live.swap_remove(i % live.len());
                prop_assert!(holds(l.p.as_ptr(), l.size, l.seed), "contents changed");
                // SAFETY: the object is live and no reference to it remains.
                unsafe { x.free(l.p) }.unwrap();
                freed.push(l.p);
            }
            Op::FreeAgain(i) if !freed.is_empty() => {
                let p = freed[i % freed.len()];
                if live.iter().all(|l| l.p != p) {
                    // SAFETY: no live object starts at `p`: refused before anything is touched.
                    let again = unsafe { x.free(p) };
                    prop_assert!(
                        matches!(again, Err(pmkit_xmem::XmemError::ForeignPointer(_))),
                        "second free of {:?} not refused: {:?}",
                        p,
                        again
                    );
                }
            }
            Op::Free(_) | Op::FreeAgain(_) => {}
        }
        x.check_invariants();
    }
    // Every object inside one region of its own tag; no overlaps.
    let regions = x.regions();
    for l in &live {
        let a = l.p.as_ptr() as usize;
        let r = x.region_of(a).expect("object in a used region");
        prop_assert_eq!(
            x.region_of(a + l.size - 1),
            Some(r),
            "object crosses a region"
        );
        let info = regions.iter().find(|i| i.index == r).unwrap();
        prop_assert_eq!(info.tag, tags[l.tag]);
        prop_assert!(holds(l.p.as_ptr(), l.size, l.seed));
    }
    let mut spans: Vec<(usize, usize)> = live
        .iter()
        .map(|l| (l.p.as_ptr() as usize, l.size))
        .collect();
    spans.sort();
    for w in spans.windows(2) {
        prop_assert!(w[0].0 + w[0].1 <= w[1].0, "objects overlap");
    }
    // Live bytes per region are at least the bytes asked for (cached objects count too), and
    // the budget held.
    let asked: usize = live.iter().map(|l| l.size).sum();
    let counted: usize = regions.iter().map(|r| r.bytes).sum();
    prop_assert!(counted >= asked);
    prop_assert!(regions.iter().filter(|r| r.tier == Tier::Fast).count() <= 4);
    // Freeing the rest and flushing this thread's cache leaves nothing counted.
    for l in live {
        // SAFETY: live, freed once.
        unsafe { x.free(l.p) }.unwrap();
    }
    x.flush_thread_cache();
    prop_assert_eq!(x.regions().iter().map(|r| r.bytes).sum::<usize>(), 0);
    x.check_invariants();
    Ok(())
}

#[test]
fn empty_regions_go_back_to_the_reservation_and_are_reused() {
    let f = fixture(8, 8, 2);
    let x = &f.xmem;
    let (a, b) = (x.tag("a").unwrap(), x.tag("b").unwrap());
    let objs: Vec<_> = (0..3).map(|_| x.alloc(a, 2 * MIB, 8).unwrap()).collect();
    let first = objs[0].as_ptr() as usize;
    assert_eq!(x.regions().len(), 3);
    assert_eq!(x.fast_slots(), (2, 2));
    // SAFETY: a live object, freed once (as for the frees below).
    unsafe { x.free(objs[0]) }.unwrap();
    assert_eq!(x.regions().len(), 2, "an emptied region goes back");
    assert_eq!(x.fast_slots(), (2, 1), "with its DRAM slot");
    assert_eq!(x.region_of(first), None);
    // SAFETY: as above.
    unsafe { x.free(objs[1]) }.unwrap();
    // SAFETY: as above.
    unsafe { x.free(objs[2]) }.unwrap();
    assert_eq!(x.regions().len(), 1, "a tag keeps its last region");
    x.check_invariants();
    // Another tag reuses the lowest returned region: same address, fresh owner.
    let p = x.alloc(b, 64, 8).unwrap();
    assert_eq!(p.as_ptr() as usize, first);
    assert_eq!(x.regions().iter().find(|r| r.index == 0).unwrap().tag, b);
    fill(p.as_ptr(), 64, 5);
    assert!(holds(p.as_ptr(), 64, 5));
    // A stale pointer into a returned region that nobody reuses is refused.
    assert!(x.region_of(objs[1].as_ptr() as usize).is_none());
    // SAFETY: refused before anything is touched.
    let stale = unsafe { x.free(objs[1]) };
    assert!(matches!(
        stale,
        Err(pmkit_xmem::XmemError::ForeignPointer(_))
    ));
    x.check_invariants();
}
