//! Faults X-Mem does not own still crash: a store to a page someone else made read-only, and a
//! store into an unused region of the reservation, kill the process with SIGSEGV instead of being
//! retried forever by the migration handler. Each case runs in a re-executed child.

mod common;
use common::*;
use pmkit_xmem::Tier;
use std::os::unix::process::ExitStatusExt;

const CHILD: &str = "PMKIT_XMEM_FAULT_CHILD";

fn run_child(case: &str) -> std::process::ExitStatus {
    // The child dies by the fault: its fixture lives in a directory this process removes.
    pmkit_testkit::child::run("child", CHILD, case).status
}

/// The child: set up X-Mem (with a migration first, so the handler is installed and has seen
/// one), then make the fault named by the environment.
#[test]
fn child() {
    let Some(case) = pmkit_testkit::child::case(CHILD) else {
        return; // run only as a child
    };
    let f = fixture(8, 8, 1);
    let x = &f.xmem;
    let t = x.tag("t").unwrap();
    let p = x.alloc(t, 2 * MIB, 4096).unwrap().as_ptr();
    let r = x.region_of(p as usize).unwrap();
    x.move_region(r, Tier::Slow).unwrap();
    x.move_region(r, Tier::Fast).unwrap();
    // SAFETY: `p` is a live 2 MiB allocation.
    unsafe { p.write(1) };
    match case.as_str() {
        "read-only" => {
            // SAFETY: the first page of our own allocation; the store below must crash.
            unsafe {
                assert_eq!(libc::mprotect(p.cast(), 4096, libc::PROT_READ), 0);
                p.write_volatile(2);
            }
        }
        "unused-region" => {
            // Region 3 of the reservation was never handed out (PROT_NONE).
            let q = (p as usize + 3 * 2 * MIB) as *mut u8;
            assert!(x.region_of(q as usize).is_none());
            // SAFETY: deliberately invalid: the store must crash.
            unsafe { q.write_volatile(2) };
        }
        "ok" => {}
        _ => panic!("unknown case"),
    }
    std::process::exit(0);
}

#[test]
fn genuine_faults_still_crash() {
    assert!(
        run_child("ok").success(),
        "the child runs cleanly without a fault"
    );
    for case in ["read-only", "unused-region"] {
        let s = run_child(case);
        assert_eq!(s.signal(), Some(libc::SIGSEGV), "{case}: {s:?}");
    }
}
