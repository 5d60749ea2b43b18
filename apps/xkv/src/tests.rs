//! The store against a HashMap model (proptest), the cuckoo table near full, the limits, and
//! every item inside a region of its own tag.

use super::store::{Outcome, StoreError, MAX_ITEM, MAX_KEY};
use crate::{check_placement, load, run, xmem_config, KvConfig, Mode, Store, Workload};
use pmkit_xmem::XMem;
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

fn xmem(k: &KvConfig) -> XMem {
    static N: AtomicU64 = AtomicU64::new(0);
    let pm = std::path::PathBuf::from("/dev/shm").join(format!(
        "pmkit-xkv-test-{}-{}.pm",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let mut c = xmem_config(&pm, k, 2 << 20, false);
    c.reserve = 1 << 30;
    XMem::new(c).expect("X-Mem over /dev/shm")
}

/// The smallest store: 8 MiB of slabs (one chunk per class) and a hash for `items`.
fn small(items: usize) -> KvConfig {
    let mut k = KvConfig::new(8 << 20);
    k.hash_items = items;
    k
}

#[derive(Debug, Clone)]
enum Cmd {
    Set(u16, usize, u32),
    Add(u16, usize, u32),
    Replace(u16, usize, u32),
    Get(u16),
    Delete(u16),
}

fn value(key: u16, len: usize, ver: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (key as u32 ^ ver.wrapping_mul(31) ^ i as u32) as u8)
        .collect()
}

fn cmd() -> impl Strategy<Value = Cmd> {
    let key = 0u16..300;
    // Small values, and 4500-5000 B ones (60%): with SETs the most common command, more than
    // 128 keys soon hold a large value, and 128 fill the one 8192 B chunk, so CLOCK evicts; a
    // small hash evicts on full buckets too.
    let len = prop_oneof![1 => 1usize..100, 1 => 200usize..600, 3 => 4500usize..5000];
    prop_oneof![
        6 => (key.clone(), len.clone(), any::<u32>()).prop_map(|(k, l, v)| Cmd::Set(k, l, v)),
        1 => (key.clone(), len.clone(), any::<u32>()).prop_map(|(k, l, v)| Cmd::Add(k, l, v)),
        1 => (key.clone(), len, any::<u32>()).prop_map(|(k, l, v)| Cmd::Replace(k, l, v)),
        3 => key.clone().prop_map(Cmd::Get),
        1 => key.prop_map(Cmd::Delete),
    ]
}

fn key_of(k: u16) -> Vec<u8> {
    format!("key-{k}").into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Every get returns the last value set or a miss after an eviction, never a wrong value;
    /// add/replace/delete agree with the model up to evictions.
    #[test]
    fn store_matches_a_map(cmds in proptest::collection::vec(cmd(), 1..2000), hash in 16usize..600) {
        let k = small(hash);
        let x = xmem(&k);
        let mut s = Store::new(&x, &k).unwrap();
        let mut model: HashMap<u16, (Vec<u8>, u32)> = HashMap::new();
        let evicted = |s: &Store| s.counters.evictions + s.counters.hash_evictions;
        // Keys whose last stored value went to the 8192 B class (128 slots): more than 128 of
        // them means evictions happened, which the run must then have counted.
        let mut large: std::collections::HashSet<u16> = Default::default();
        for c in &cmds {
            if large.len() > 128 {
                prop_assert!(evicted(&s) > 0, "{} large items in 128 slots", large.len());
            }
            match *c {
                Cmd::Set(key, len, ver) => {
                    let v = value(key, len, ver);
                    let r = s.set(&key_of(key), ver, 0, &v, Mode::Set, &mut ()).unwrap();
                    prop_assert_eq!(r, Outcome::Stored);
                    model.insert(key, (v, ver));
                    if len >= 4500 { large.insert(key); } else { large.remove(&key); }
                }
                Cmd::Add(key, len, ver) | Cmd::Replace(key, len, ver) => {
                    let add = matches!(c, Cmd::Add(..));
                    let v = value(key, len, ver);
                    let mode = if add { Mode::Add } else { Mode::Replace };
                    let r = s.set(&key_of(key), ver, 0, &v, mode, &mut ()).unwrap();
                    let present = model.contains_key(&key);
                    let want = if present != add { Outcome::Stored } else { Outcome::NotStored };
                    if r != want {
                        // Only an evicted key may differ: present in the model, gone here.
                        prop_assert!(present && evicted(&s) > 0, "{c:?}: {r:?}");
                        model.remove(&key);
                    }
                    if r == Outcome::Stored {
                        model.insert(key, (v, ver));
                        if len >= 4500 { large.insert(key); } else { large.remove(&key); }
                    }
                }
                Cmd::Get(key) => {
                    match s.get(&key_of(key), &mut ()) {
                        Some(h) => {
                            let m = model.get(&key);
                            prop_assert!(m.is_some(), "key {key} came back after its delete or eviction");
                            let (v, f) = m.unwrap();
                            prop_assert_eq!(h.value, &v[..], "key {}", key);
                            prop_assert_eq!(h.flags, *f);
                        }
                        None => {
                            if model.remove(&key).is_some() {
                                prop_assert!(evicted(&s) > 0, "key {key} lost without an eviction");
                            }
                        }
                    }
                }
                Cmd::Delete(key) => {
                    large.remove(&key);
                    let found = s.delete(&key_of(key), &mut ());
                    let had = model.remove(&key).is_some();
                    prop_assert!(found == had || (had && evicted(&s) > 0), "delete {key}");
                }
            }
        }
        s.check();
        check_placement(&x, &s).unwrap();
        prop_assert!(s.slab_bytes() <= 8 << 20);

        // Everything the model still holds and the store kept reads back exactly.
        for (key, (v, _)) in &model {
            if let Some(h) = s.get(&key_of(*key), &mut ()) {
                prop_assert_eq!(h.value, &v[..]);
            }
        }
    }
}

#[test]
fn cuckoo_fills_past_ninety_percent() {
    // 256 buckets = 1024 slots; the items are small so no class runs out.
    let k = small(900);
    let x = xmem(&k);
    let mut s = Store::new(&x, &k).unwrap();
    assert_eq!(k.buckets(), 256);
    let n = 1000;
    for i in 0..n {
        let key = format!("k{i}");
        s.set(key.as_bytes(), i, 0, b"v", Mode::Set, &mut ())
            .unwrap();
    }
    s.check();
    let lost = s.counters.hash_evictions as usize;
    assert_eq!(s.len(), n as usize - lost);
    assert!(s.len() > 930, "only {} of 1024 slots used", s.len());
    let found = (0..n)
        .filter(|i| {
            s.get(format!("k{i}").as_bytes(), &mut ())
                .is_some_and(|h| h.flags == *i && h.value == b"v")
        })
        .count();
    assert_eq!(found, s.len());
}

#[test]
fn limits_and_cas() {
    let k = small(1000);
    let x = xmem(&k);
    let mut s = Store::new(&x, &k).unwrap();
    let big = vec![0u8; MAX_ITEM];
    assert!(matches!(
        s.set(b"k", 0, 0, &big, Mode::Set, &mut ()),
        Err(StoreError::TooLarge(_))
    ));
    let long = vec![b'a'; MAX_KEY + 1];
    assert_eq!(
        s.set(&long, 0, 0, b"v", Mode::Set, &mut ()),
        Err(StoreError::KeyLength(MAX_KEY + 1))
    );
    assert_eq!(
        s.set(&long[..MAX_KEY], 0, 0, b"v", Mode::Set, &mut ()),
        Ok(Outcome::Stored)
    );
    assert_eq!(
        s.set(b"c", 1, 0, b"one", Mode::Cas(1), &mut ()),
        Ok(Outcome::NotFound)
    );
    s.set(b"c", 1, 0, b"one", Mode::Set, &mut ()).unwrap();
    let cas = s.get(b"c", &mut ()).unwrap().cas;
    assert_eq!(
        s.set(b"c", 2, 0, b"two", Mode::Cas(cas + 1), &mut ()),
        Ok(Outcome::Exists)
    );
    assert_eq!(
        s.set(b"c", 2, 0, b"two", Mode::Cas(cas), &mut ()),
        Ok(Outcome::Stored)
    );
    assert_eq!(s.get(b"c", &mut ()).unwrap().value, b"two");
    // Expired in the past: a miss, and gone.
    s.set(b"e", 0, 1, b"old", Mode::Set, &mut ()).unwrap();
    assert!(s.get(b"e", &mut ()).is_none());
    s.flush_all();
    assert_eq!(s.len(), 0);
    assert!(s.get(b"c", &mut ()).is_none());
    s.check();
}

#[test]
fn etc_load_and_run_stay_in_their_tags() {
    let w = Workload::etc(9, 20_000, 0.99);
    let mut k = KvConfig::new(32 << 20);
    k.hash_items = 20_000;
    let x = xmem(&k);
    let mut s = Store::new(&x, &k).unwrap();
    assert_eq!(load(&mut s, &w, &mut ()).unwrap(), 20_000);
    let st = run(&mut s, &w, &w.requests(20_000, 1), &mut ());
    assert_eq!(st.gets + st.sets, 20_000);
    assert_eq!(
        st.hits, st.gets,
        "no evictions under the limit: every get hits"
    );
    check_placement(&x, &s).unwrap();
    // Every class got items and so a region of its own tag.
    assert!(s.classes().iter().all(|c| c.2 > 0), "{:?}", s.classes());
}

#[test]
fn clock_evicts_within_the_limit() {
    // 8 MiB = one chunk per class: the 8192 B class holds 128 items and may not grow.
    let k = small(2000);
    let x = xmem(&k);
    let mut s = Store::new(&x, &k).unwrap();
    let n = 300u16;
    for key in 0..n {
        let v = value(key, 5000, 1);
        s.set(&key_of(key), key as u32, 0, &v, Mode::Set, &mut ())
            .unwrap();
    }
    assert_eq!(s.counters.evictions, (n - 128) as u64);
    assert_eq!(s.slab_bytes(), 8 << 20);
    // No hits in between: CLOCK evicted the oldest first, the newest 128 are all there.
    for key in 0..n {
        let got = s.get(&key_of(key), &mut ()).map(|h| h.value.to_vec());
        if key >= n - 128 {
            assert_eq!(got, Some(value(key, 5000, 1)), "key {key}");
        } else {
            assert_eq!(got, None, "key {key} should be evicted");
        }
    }
    // Every resident was just hit (reference bit set): CLOCK clears the bits and still evicts.
    for key in n..n + 100 {
        s.set(&key_of(key), 0, 0, &value(key, 5000, 2), Mode::Set, &mut ())
            .unwrap();
    }
    assert_eq!(s.counters.evictions, (n - 128 + 100) as u64);
    s.check();
    check_placement(&x, &s).unwrap();
}
