//! Model-based property test: random sequences of attach / write (through `write`, or raw
//! stores through the pointer) / sync (one or several objects) / detach / reopen, on a real
//! mapping with protection on, for both shadows and every tracking method, against a plain
//! `Vec<u8>` per object: the published contents and the attachment's view must always match.

use pmkit_media::Region;
use pmkit_obj::{Access, Pool, PoolOptions, Shadow, Tracking};
use proptest::prelude::*;

const SIZES: [usize; 3] = [5000, 100, 3 * 4096 + 10];

#[derive(Debug, Clone)]
enum Op {
    Attach(usize, Tracking),
    Write {
        obj: usize,
        at: usize,
        len: usize,
        byte: u8,
        raw: bool,
    },
    Sync(Vec<usize>),
    Detach(usize),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let tracking = prop_oneof![
        Just(Tracking::Explicit),
        Just(Tracking::Faults),
        Just(Tracking::Whole)
    ];
    prop_oneof![
        2 => (0..3usize, tracking).prop_map(|(o, t)| Op::Attach(o, t)),
        6 => (0..3usize, any::<u16>(), 1..600usize, any::<u8>(), any::<bool>()).prop_map(
            |(obj, at, len, byte, raw)| {
                let at = at as usize % SIZES[obj];
                let len = len.min(SIZES[obj] - at);
                Op::Write { obj, at, len, byte, raw }
            }
        ),
        3 => proptest::sample::subsequence(vec![0usize, 1, 2], 1..=3).prop_map(Op::Sync),
        1 => (0..3usize).prop_map(Op::Detach),
        1 => Just(Op::Reopen),
    ]
}

struct Model {
    published: Vec<Vec<u8>>,
    /// (handle id, tracking, the attachment's view) per attached object.
    attached: Vec<Option<(u64, Tracking, Vec<u8>)>>,
}

/// The first differing byte, briefly (the objects are kilobytes long).
fn diff(got: &[u8], want: &[u8]) -> Option<String> {
    if got == want {
        return None;
    }
    Some(match got.iter().zip(want).position(|(a, b)| a != b) {
        Some(i) => format!("byte {i} is {} but the model has {}", got[i], want[i]),
        None => format!("lengths {} and {}", got.len(), want.len()),
    })
}

fn run(shadow: Shadow, ops: &[Op]) -> Result<(), TestCaseError> {
    run_with(shadow, false, ops)
}

/// With `checksum`, every read of published data (attach fill, catch-up, `read_published`)
/// also compares each page with its CRC, so a sync that leaves a stale CRC fails the run.
fn run_with(shadow: Shadow, checksum: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    let opts = PoolOptions {
        max_objects: 8,
        protect: true,
        shadow,
        checksum,
        ..PoolOptions::default()
    };
    let mut pool = Pool::format(Region::anonymous(1 << 20).unwrap(), &opts).unwrap();
    let names = ["a", "b", "c"];
    for (n, s) in names.iter().zip(SIZES) {
        pool.create(n, s as u64).unwrap();
    }
    let mut m = Model {
        published: SIZES.iter().map(|&s| vec![0; s]).collect(),
        attached: vec![None, None, None],
    };
    for op in ops {
        match op {
            Op::Attach(o, t) => {
                if m.attached[*o].is_none() {
                    let id = pool.attach_id(names[*o], Access::ReadWrite, *t).unwrap();
                    m.attached[*o] = Some((id, *t, m.published[*o].clone()));
                }
            }
            Op::Write {
                obj,
                at,
                len,
                byte,
                raw,
            } => {
                let Some((id, t, view)) = m.attached[*obj].as_mut() else {
                    continue;
                };
                let src = vec![*byte; *len];
                if *raw {
                    let p = pool.ptr_id(*id).unwrap().unwrap();
                    // SAFETY: inside the object, read-write handle; the pointer was taken after
                    // the handle's last sync.
                    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p.add(*at), *len) };
                    if *t == Tracking::Explicit {
                        pool.mark_dirty_id(*id, *at as u64, *len as u64).unwrap();
                    }
                } else {
                    pool.write_id(*id, *at as u64, &src).unwrap();
                }
                view[*at..*at + *len].copy_from_slice(&src);
            }
            Op::Sync(objs) => {
                let ids: Vec<u64> = objs
                    .iter()
                    .filter_map(|&o| m.attached[o].as_ref().map(|a| a.0))
                    .collect();
                pool.sync_ids(&ids).unwrap();
                for &o in objs {
                    if let Some((_, _, view)) = &m.attached[o] {
                        m.published[o] = view.clone();
                    }
                }
            }
            Op::Detach(o) => {
                if let Some((id, _, _)) = m.attached[*o].take() {
                    pool.detach_id(id).unwrap();
                }
            }
            Op::Reopen => {
                for a in m.attached.iter_mut() {
                    if let Some((id, _, _)) = a.take() {
                        pool.detach_id(id).unwrap();
                    }
                }
                pool = Pool::open(pool.into_media(), &opts).unwrap().0;
            }
        }
        for (o, n) in names.iter().enumerate() {
            let got = pool.read_published(n).unwrap();
            let why = diff(&got, &m.published[o]);
            prop_assert!(why.is_none(), "{} published after {:?}: {:?}", n, op, why);
            if let Some((id, _, view)) = &m.attached[o] {
                let mut got = vec![0u8; view.len()];
                pool.read_id(*id, 0, &mut got).unwrap();
                let why = diff(&got, view);
                prop_assert!(why.is_none(), "view of {} after {:?}: {:?}", n, op, why);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn dram_shadow_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(Shadow::Dram, &ops)?;
    }

    #[test]
    fn pm_shadow_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(Shadow::Pm, &ops)?;
    }

    #[test]
    fn checksum_dram_shadow_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        run_with(Shadow::Dram, true, &ops)?;
    }

    #[test]
    fn checksum_pm_shadow_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        run_with(Shadow::Pm, true, &ops)?;
    }
}
