//! Migration keeps bytes and virtual addresses while writer threads keep storing: writers that
//! hit a region being moved wait and then succeed, both ways X-Mem holds them off: userfaultfd
//! write protection (the default where available: they wait in the kernel, and so do system
//! calls writing into the region) and read-only page rights (SIGSEGV handler + futex).

mod common;
use common::*;
use pmkit_xmem::{parked_writes, Tier};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const WRITERS: usize = 2;

/// Whether this process can use userfaultfd write protection; where it should (CI runs the
/// tests as root on a kernel that has it) and cannot, that is a failure, not a skip.
fn uffd_here(x: &pmkit_xmem::XMem) -> bool {
    match x.write_protection() {
        ("userfaultfd", _) => true,
        (_, why) => {
            let why = why.unwrap_or("?");
            assert!(
                std::env::var_os("CI").is_none(),
                "userfaultfd write protection is unavailable in CI: {why}"
            );
            eprintln!("skipped: userfaultfd write protection is unavailable here: {why}");
            false
        }
    }
}

#[test]
fn bytes_and_addresses_survive_migration_under_concurrent_writers_with_userfaultfd() {
    let f = fixture(8, 8, 2);
    if uffd_here(&f.xmem) {
        concurrent_writers(&f.xmem);
    }
}

#[test]
fn bytes_and_addresses_survive_migration_under_concurrent_writers_with_page_rights() {
    let f = fixture_cfg(8, 8, 2, |c| c.uffd = false);
    assert_eq!(f.xmem.write_protection().0, "page rights");
    concurrent_writers(&f.xmem);
}

fn concurrent_writers(x: &pmkit_xmem::XMem) {
    let t = x.tag("counters").unwrap();
    // One object filling a whole 2 MiB region: 262144 u64 slots.
    let p = x.alloc(t, 2 * MIB, 4096).unwrap().as_ptr() as usize;
    let r = x.region_of(p).unwrap();
    let words = 2 * MIB / 8;
    let tier = |x: &pmkit_xmem::XMem| x.regions().iter().find(|i| i.index == r).unwrap().tier;
    assert_eq!(tier(x), Tier::Fast);
    for i in 0..words {
        // SAFETY: `p` is a live 2 MiB allocation; slot i is inside it.
        unsafe { (p as *mut u64).add(i).write(i as u64) };
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stores = Arc::new(AtomicU64::new(0));
    let parked_before = parked_writes();
    let moves = std::thread::scope(|s| {
        let handles: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (stop, stores) = (stop.clone(), stores.clone());
                s.spawn(move || {
                    // Writer w owns slots w, w+WRITERS, ...; the value written last to each slot
                    // is recorded here, in ordinary memory.
                    let mut last: Vec<u64> =
                        (w..words).step_by(WRITERS).map(|i| i as u64).collect();
                    let mut round = 1u64;
                    while !stop.load(Ordering::Relaxed) {
                        for (k, i) in (w..words).step_by(WRITERS).enumerate().step_by(61) {
                            let v = (round << 32) | i as u64;
                            // SAFETY: slot i of the live allocation, owned by this writer.
                            unsafe { (p as *mut u64).add(i).write_volatile(v) };
                            last[k] = v;
                        }
                        stores.fetch_add(1, Ordering::Relaxed);
                        round += 1;
                    }
                    (w, last)
                })
            })
            .collect();
        // Move back and forth at least 6 times, and on until some writer has been parked by a
        // migration (on a busy 2-core machine a writer may be descheduled during a short copy;
        // the bound makes a handler that never parks fail the test instead of hanging it).
        let mut moves = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while moves < 12
            || (parked_writes() == parked_before && std::time::Instant::now() < deadline)
        {
            let seen = stores.load(Ordering::Relaxed);
            while stores.load(Ordering::Relaxed) == seen {
                std::thread::yield_now(); // the writers are running before each move
            }
            x.move_region(r, Tier::Slow).unwrap();
            assert_eq!(tier(x), Tier::Slow);
            x.move_region(r, Tier::Fast).unwrap();
            assert_eq!(tier(x), Tier::Fast);
            moves += 2;
        }
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let (w, last) = h.join().unwrap();
            for (k, i) in (w..words).step_by(WRITERS).enumerate() {
                // SAFETY: slot i of the live allocation; writers are done.
                let got = unsafe { (p as *const u64).add(i).read() };
                assert_eq!(
                    got, last[k],
                    "slot {i}: the last write before the end is lost"
                );
            }
        }
        moves
    });
    assert_eq!(x.region_of(p), Some(r), "same address, same region");
    assert!(stores.load(Ordering::Relaxed) > 0);
    assert!(moves >= 12);
    // On 2 cores with two writers looping the whole time, some store lands in a copy window.
    assert!(
        parked_writes() > parked_before,
        "no writer ever waited for a migration"
    );
    x.check_invariants();
}

#[test]
fn small_objects_of_many_tags_survive_rebalance() {
    let f = fixture(16, 16, 2);
    let x = &f.xmem;
    let tags: Vec<_> = ["hash", "values", "log"]
        .iter()
        .map(|n| x.tag(n).unwrap())
        .collect();
    let mut objs = Vec::new();
    for (n, &t) in tags.iter().enumerate() {
        // Two regions per tag: 300 objects of 10 KiB (large path) plus small ones.
        for k in 0..300 {
            let size = if k % 4 == 3 { 200 } else { 10_000 };
            let o = x.alloc(t, size, 8).unwrap();
            fill(o.as_ptr(), size, (n * 31 + k) as u8);
            objs.push((o, size, (n * 31 + k) as u8));
        }
    }
    // Allocation order put "hash" in DRAM; the profile says "log" (streaming) is worth least and
    // "values" (pointer chasing) most.
    x.set_profile(tags[0], [0.0, 1000.0, 0.0]).unwrap(); // random: 3800
    x.set_profile(tags[1], [500.0, 0.0, 0.0]).unwrap(); // chase: 13000
    x.set_profile(tags[2], [0.0, 0.0, 9000.0]).unwrap(); // streaming: 9000
    let before: Vec<_> = x.regions();
    let fast_tag = |x: &pmkit_xmem::XMem| {
        x.regions()
            .iter()
            .filter(|r| r.tier == Tier::Fast)
            .map(|r| r.tag)
            .collect::<Vec<_>>()
    };
    let rb = x.rebalance().unwrap();
    assert!(!rb.to_fast.is_empty() && !rb.to_slow.is_empty());
    assert!(
        fast_tag(x).iter().all(|&t| t == tags[1]),
        "{:?}",
        x.regions()
    );
    assert_eq!(fast_tag(x).len(), 2);
    // Priorities come first: "log" with priority 1 takes the fast slots.
    x.set_priority(tags[2], 1).unwrap();
    x.rebalance().unwrap();
    assert!(fast_tag(x).iter().all(|&t| t == tags[2]));
    // A second rebalance with nothing changed moves nothing.
    let again = x.rebalance().unwrap();
    assert!(again.to_fast.is_empty() && again.to_slow.is_empty());
    for (o, size, seed) in &objs {
        assert!(
            holds(o.as_ptr(), *size, *seed),
            "bytes changed by migration"
        );
    }
    let after = x.regions();
    assert_eq!(
        before
            .iter()
            .map(|r| (r.index, r.addr, r.tag, r.bytes))
            .collect::<Vec<_>>(),
        after
            .iter()
            .map(|r| (r.index, r.addr, r.tag, r.bytes))
            .collect::<Vec<_>>()
    );
    x.check_invariants();
}

#[test]
fn a_new_region_displaces_a_weaker_dram_region() {
    let f = fixture(16, 16, 1);
    let x = &f.xmem;
    let (cold, hot, tie) = (
        x.tag("cold").unwrap(),
        x.tag("hot").unwrap(),
        x.tag("tie").unwrap(),
    );
    x.set_profile(cold, [0.0, 0.0, 100.0]).unwrap(); // benefit 100
    x.set_profile(hot, [10.0, 0.0, 0.0]).unwrap(); // benefit 260
    x.set_profile(tie, [0.0, 0.0, 100.0]).unwrap(); // benefit 100: a tie does not displace
    let tier_of = |p: *mut u8| {
        let r = x.region_of(p as usize).unwrap();
        x.regions().iter().find(|i| i.index == r).unwrap().tier
    };
    let c = x.alloc(cold, 2 * MIB, 8).unwrap().as_ptr();
    fill(c, 2 * MIB, 1);
    assert_eq!(tier_of(c), Tier::Fast);
    let t = x.alloc(tie, 2 * MIB, 8).unwrap().as_ptr();
    assert_eq!((tier_of(c), tier_of(t)), (Tier::Fast, Tier::Slow));
    let h = x.alloc(hot, 2 * MIB, 8).unwrap().as_ptr();
    assert_eq!((tier_of(c), tier_of(h)), (Tier::Slow, Tier::Fast));
    assert!(holds(c, 2 * MIB, 1), "the displaced region kept its bytes");
    // Priority beats benefit at allocation too.
    x.set_priority(cold, 5).unwrap();
    let c2 = x.alloc(cold, 2 * MIB, 8).unwrap().as_ptr();
    assert_eq!((tier_of(c2), tier_of(h)), (Tier::Fast, Tier::Slow));
    x.check_invariants();
}

/// The limit of page rights, gone with userfaultfd: a system call writing into a region being
/// moved (`read(2)` into it, here from a pipe) waits for the move instead of failing with
/// `EFAULT`, and every byte it wrote is in the new pages.
#[test]
fn a_system_call_writing_into_a_moving_region_waits_and_succeeds() {
    let f = fixture(8, 8, 2);
    let x = &f.xmem;
    if !uffd_here(x) {
        return;
    }
    const BLOCK: usize = 4096; // PIPE_BUF: each write and read moves one whole block
    const SLOTS: usize = 2 * MIB / BLOCK;
    let t = x.tag("buffers").unwrap();
    let p = x.alloc(t, 2 * MIB, 4096).unwrap().as_ptr() as usize;
    let r = x.region_of(p).unwrap();
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two descriptors into `fds`.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (rd, wr) = (fds[0], fds[1]);
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let parked_before = parked_writes();
    let last = std::thread::scope(|s| {
        // The writer: block n is n repeated in every word.
        s.spawn(|| {
            let mut block = [0u64; BLOCK / 8];
            for n in 1u64.. {
                block.fill(n);
                // SAFETY: writes BLOCK bytes from `block`; the reader may have closed nothing yet.
                let w = unsafe { libc::write(wr, block.as_ptr().cast(), BLOCK) };
                if w != BLOCK as isize {
                    break; // the read end is gone
                }
            }
        });
        // The reader: read(2) straight into the region, slot after slot.
        let reader = s.spawn(|| {
            let mut last = vec![0u64; SLOTS];
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let k = (n as usize) % SLOTS;
                // SAFETY: the slot is inside the live 2 MiB allocation; only this thread
                // writes it.
                let got = unsafe { libc::read(rd, (p + k * BLOCK) as *mut libc::c_void, BLOCK) };
                assert_eq!(
                    got,
                    BLOCK as isize,
                    "read(2) into a moving region: {}",
                    std::io::Error::last_os_error()
                );
                n += 1;
                last[k] = n;
                reads.store(n, Ordering::Relaxed);
            }
            last
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut moves = 0;
        while !reader.is_finished()
            && (moves < 12
                || (parked_writes() == parked_before && std::time::Instant::now() < deadline))
        {
            let seen = reads.load(Ordering::Relaxed);
            while reads.load(Ordering::Relaxed) == seen && !reader.is_finished() {
                std::thread::yield_now();
            }
            x.move_region(r, Tier::Slow).unwrap();
            x.move_region(r, Tier::Fast).unwrap();
            moves += 2;
        }
        stop.store(true, Ordering::Relaxed);
        let last = reader.join();
        // SAFETY: our descriptor; the writer's next write fails and it stops (also when the
        // reader failed).
        unsafe { libc::close(rd) };
        last.unwrap()
    });
    // SAFETY: our descriptor.
    unsafe { libc::close(wr) };
    for (k, &n) in last.iter().enumerate().filter(|(_, n)| **n > 0) {
        // SAFETY: inside the live allocation; the reader is done.
        let w = unsafe { ((p + k * BLOCK) as *const u64).read() };
        assert_eq!(w, n, "slot {k}: the last block read into it is lost");
    }
    assert!(
        parked_writes() > parked_before,
        "no read(2) ever waited for a migration"
    );
    x.check_invariants();
}

/// Minor page faults this thread has taken so far (not the other tests' threads).
fn minor_faults() -> i64 {
    // SAFETY: getrusage fills the struct we own.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut u);
        u.ru_minflt
    }
}

/// A move to PM leaves the region's page tables filled: the application's next reads and
/// writes of every page take no fault (they used to take one per 4 KiB page, charged to the
/// slow tier by every measurement after a migration).
#[test]
fn a_region_moved_to_pm_is_touched_without_faults() {
    let f = fixture(8, 8, 4);
    let x = &f.xmem;
    let t = x.tag("t").unwrap();
    let p = x.alloc(t, 2 * MIB, 4096).unwrap().as_ptr();
    fill(p, 2 * MIB, 7);
    let r = x.region_of(p as usize).unwrap();
    x.move_region(r, Tier::Slow).unwrap();
    let before = minor_faults();
    let mut sum = 0u64;
    for off in (0..2 * MIB).step_by(4096) {
        // SAFETY: inside the live 2 MiB object.
        unsafe {
            sum += p.add(off).read_volatile() as u64;
            p.add(off).write_volatile(8);
        }
    }
    let faults = minor_faults() - before;
    assert!(sum > 0);
    // 512 pages touched. Without the populate step the kernel's fault-around maps 16 pages per
    // read fault: 32 faults.
    assert!(
        faults <= 2,
        "{faults} minor faults touching the 512 pages of a region just moved to PM"
    );
    x.move_region(r, Tier::Fast).unwrap();
    x.check_invariants();
}
