//! The allocator handle with collections: `allocator_api2`'s `Vec` and hashbrown's `HashMap`
//! keep every block in their tag's regions, survive migrations at the same addresses, and give
//! everything back when dropped.

mod common;
use common::*;
use pmkit_xmem::allocator_api2::vec::Vec as AVec;
use pmkit_xmem::{Tier, XMem};

fn in_tag(x: &XMem, addr: usize, tag: pmkit_xmem::Tag) -> bool {
    let r = x.region_of(addr).expect("in the reservation");
    x.regions().iter().any(|i| i.index == r && i.tag == tag)
}

#[test]
fn a_vec_and_a_hash_map_live_in_their_tags_and_survive_migration() {
    let f = fixture(16, 16, 2);
    let x = &f.xmem;
    let (tv, tm) = (x.tag("vec").unwrap(), x.tag("map").unwrap());
    let mut v = AVec::new_in(x.allocator(tv));
    // Grows through reallocations, small then large, up to 2 MiB (one region: the largest
    // object X-Mem serves with these 2 MiB regions).
    for i in 0..200_000u64 {
        v.push(i * 3);
    }
    let mut m = hashbrown::HashMap::with_capacity_in(0, x.allocator(tm));
    for i in 0..50_000u64 {
        m.insert(i, i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }
    assert!(in_tag(x, v.as_ptr() as usize, tv));
    let bucket = m.get(&7).unwrap() as *const u64 as usize;
    assert!(in_tag(x, bucket, tm));
    let addrs = (v.as_ptr() as usize, bucket);

    // Move every region to PM and back: same addresses, same contents.
    let regions: Vec<usize> = x.regions().iter().map(|r| r.index).collect();
    for to in [Tier::Slow, Tier::Fast] {
        for &r in regions.iter().rev() {
            // The budget holds 2 regions: demote all, then promote what fits.
            let _ = x.move_region(r, to);
        }
        assert_eq!(
            (
                v.as_ptr() as usize,
                m.get(&7).unwrap() as *const u64 as usize
            ),
            addrs
        );
        assert!(v.iter().enumerate().all(|(i, &e)| e == i as u64 * 3));
        assert!((0..50_000u64).all(|i| m[&i] == i.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    }
    drop(v);
    drop(m);
    x.flush_thread_cache();
    let live: usize = x.regions().iter().map(|r| r.bytes).sum();
    assert_eq!(live, 0, "the collections gave every block back");
    x.check_invariants();
}

#[test]
fn a_layout_x_mem_cannot_serve_is_an_alloc_error() {
    use pmkit_xmem::allocator_api2::alloc::Allocator;
    let f = fixture(4, 4, 1);
    let a = f.xmem.allocator(f.xmem.tag("t").unwrap());
    let big_align = std::alloc::Layout::from_size_align(64, 8192).unwrap();
    assert!(a.allocate(big_align).is_err());
    let zst = std::alloc::Layout::from_size_align(0, 64).unwrap();
    let p = a.allocate(zst).unwrap();
    assert_eq!(p.len(), 0);
    // SAFETY: a zero-sized block of this allocator.
    unsafe { a.deallocate(p.cast(), zst) };
}
