//! The allocator against a model: random allocs and frees over several tags; every object lies
//! inside a region of its tag, no two live objects overlap, alignment holds, contents survive,
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
        let f = fixture(64, 48, 4);
        let x = &f.xmem;
        let tags: Vec<_> = (0..3).map(|i| x.tag(&format!("t{i}")).unwrap()).collect();
        let mut live: Vec<Live> = Vec::new();
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
                }
                Op::Free(_) => {}
            }
            x.check_invariants();
        }
        // Every object inside one region of its own tag; no overlaps.
        let regions = x.regions();
        for l in &live {
            let a = l.p.as_ptr() as usize;
            let r = x.region_of(a).expect("object in a used region");
            prop_assert_eq!(x.region_of(a + l.size - 1), Some(r), "object crosses a region");
            let info = regions.iter().find(|i| i.index == r).unwrap();
            prop_assert_eq!(info.tag, tags[l.tag]);
            prop_assert!(holds(l.p.as_ptr(), l.size, l.seed));
        }
        let mut spans: Vec<(usize, usize)> =
            live.iter().map(|l| (l.p.as_ptr() as usize, l.size)).collect();
        spans.sort();
        for w in spans.windows(2) {
            prop_assert!(w[0].0 + w[0].1 <= w[1].0, "objects overlap");
        }
        // Live bytes per region are at least the bytes asked for, and the budget held.
        let asked: usize = live.iter().map(|l| l.size).sum();
        let counted: usize = regions.iter().map(|r| r.bytes).sum();
        prop_assert!(counted >= asked);
        prop_assert!(regions.iter().filter(|r| r.tier == Tier::Fast).count() <= 4);
    }
}
