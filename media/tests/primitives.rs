//! Every persistence primitive against a plain byte-array model: random offsets and lengths
//! (0, 1, unaligned, spanning lines and pages), on a real mapping, for all primitives this CPU has.

use pmkit_media::{Fence, Flush, Media, Persister, Region, WriteScheme, LINE};
use proptest::prelude::*;

const LEN: usize = 64 * 1024;

#[derive(Debug, Clone)]
enum Op {
    Write { off: usize, len: usize, seed: u8 },
    Zero { off: usize, len: usize },
    U64 { word: usize, v: u64 },
    U128 { word: usize, v: u128 },
    Barrier,
}

/// Offsets and lengths biased toward the edges that break copy routines.
fn span() -> impl Strategy<Value = (usize, usize)> {
    let len = prop_oneof![
        Just(0usize),
        Just(1),
        1usize..LINE,
        Just(LINE),
        LINE..3 * LINE,
        Just(4096),
        1usize..3 * 4096,
    ];
    let off = prop_oneof![
        (0..LEN / LINE).prop_map(|l| l * LINE),
        (0..LEN / LINE, 1..LINE).prop_map(|(l, d)| l * LINE + d),
        0..LEN,
    ];
    (off, len).prop_map(|(o, l)| {
        let o = o.min(LEN - 1);
        (o, l.min(LEN - o))
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (span(), any::<u8>()).prop_map(|((off, len), seed)| Op::Write { off, len, seed }),
        1 => span().prop_map(|(off, len)| Op::Zero { off, len }),
        1 => (0..LEN / 8, any::<u64>()).prop_map(|(word, v)| Op::U64 { word, v }),
        1 => (0..LEN / 16, any::<u128>()).prop_map(|(word, v)| Op::U128 { word, v }),
        1 => Just(Op::Barrier),
    ]
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

fn check_scheme(scheme: WriteScheme, ops: &[Op]) -> Result<(), TestCaseError> {
    let reg = Region::anonymous(LEN).unwrap();
    // Start from noise so a copy that touches bytes outside its range is caught.
    let noise = pattern(LEN, 7);
    reg.write(0, &noise);
    let mut model = noise;
    let p = Persister::new(scheme, reg.len(), reg.domain());
    for op in ops {
        match *op {
            Op::Write { off, len, seed } => {
                let data = pattern(len, seed);
                p.write(&reg, off, &data);
                p.fence(&reg);
                model[off..off + len].copy_from_slice(&data);
            }
            Op::Zero { off, len } => {
                p.zero(&reg, off, len);
                model[off..off + len].fill(0);
            }
            Op::U64 { word, v } => {
                reg.persist_u64(word * 8, v);
                model[word * 8..word * 8 + 8].copy_from_slice(&v.to_le_bytes());
                prop_assert_eq!(reg.load_u64(word * 8), v);
            }
            Op::U128 { word, v } => {
                reg.persist_u128(word * 16, v);
                model[word * 16..word * 16 + 16].copy_from_slice(&v.to_le_bytes());
                prop_assert_eq!(reg.load_u128(word * 16), v);
            }
            Op::Barrier => p.barrier(&reg).unwrap(),
        }
    }
    p.barrier(&reg).unwrap();
    let mut got = vec![0u8; LEN];
    reg.read(0, &mut got);
    if let Some(i) = got.iter().zip(&model).position(|(a, b)| a != b) {
        prop_assert!(
            false,
            "{scheme}: first difference at byte {i}: got {:#x}, model {:#x}",
            got[i],
            model[i]
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn every_scheme_matches_byte_model(ops in proptest::collection::vec(op(), 1..40)) {
        for s in WriteScheme::ALL.into_iter().filter(|s| s.available()) {
            check_scheme(s, &ops)?;
        }
    }

    #[test]
    fn raw_nt_and_flushes_match_byte_model((off, len) in span(), seed in any::<u8>()) {
        let reg = Region::anonymous(LEN).unwrap();
        let noise = pattern(LEN, 3);
        reg.write(0, &noise);
        let data = pattern(len, seed);
        reg.write_nt(off, &data);
        reg.fence(Fence::Sfence);
        for how in [Flush::Clflush, Flush::Clflushopt, Flush::Clwb].into_iter().filter(|f| f.available()) {
            reg.flush(off, len, how);
        }
        reg.fence(Fence::Mfence);
        let mut want = noise;
        want[off..off + len].copy_from_slice(&data);
        let mut got = vec![0u8; LEN];
        reg.read(0, &mut got);
        prop_assert!(got == want, "nt copy of {len} bytes at {off} changed bytes outside its range or lost some");
    }
}

#[test]
fn cas_reports_the_actual_value() {
    let reg = Region::anonymous(4096).unwrap();
    assert_eq!(reg.cas_u64(8, 0, 5), Ok(0));
    assert_eq!(reg.cas_u64(8, 0, 6), Err(5));
    let big = (7u128 << 64) | 9;
    assert_eq!(reg.cas_u128(16, 0, big), Ok(0));
    assert_eq!(reg.cas_u128(16, 0, 1), Err(big));
    assert_eq!(reg.load_u128(16), big);
}

#[test]
#[should_panic(expected = "outside region")]
fn out_of_range_access_panics() {
    let reg = Region::anonymous(4096).unwrap();
    reg.write(4090, &[0; 7]);
}

#[test]
fn deferred_schemes_track_dirty_pages_across_the_whole_region() {
    // A write on the last page must be flushed by a barrier (the run is clamped to the region).
    let reg = Region::anonymous(3 * 4096).unwrap();
    for s in [WriteScheme::Wb, WriteScheme::Msync] {
        let p = Persister::new(s, reg.len(), reg.domain());
        p.write(&reg, 3 * 4096 - 10, &[1; 10]);
        p.write(&reg, 0, &[2; 4096]);
        p.barrier(&reg).unwrap();
        p.barrier(&reg).unwrap();
    }
}
