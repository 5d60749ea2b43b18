//! Page protection, proven by faults in a child process: the test re-runs this binary with
//! `PMO_CHILD=<case>`; the child attaches an object, makes one access through the raw pointer,
//! and must die of SIGSEGV (or, for the control case, exit cleanly).

use pmkit_media::Region;
use pmkit_obj::{Access, Pool, PoolOptions};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

const CHILD: &str = "PMO_CHILD";

/// The child side: runs only when `PMO_CHILD` is set.
#[test]
fn child_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    let pool = Pool::format(
        Region::anonymous(1 << 20).unwrap(),
        &PoolOptions {
            max_objects: 4,
            protect: true,
        },
    )
    .unwrap();
    pool.create("o", 8192).unwrap();
    // SAFETY (all cases): the accesses are deliberately forbidden ones; the point is that the
    // page rights stop them with a fault before they touch the object.
    unsafe {
        match case.as_str() {
            "rw-write-ok" => {
                let h = pool.attach("o", Access::ReadWrite).unwrap();
                let p = h.as_ptr().unwrap().unwrap();
                p.add(100).write_volatile(7);
                h.sync().unwrap();
                assert_eq!(pool.read_published("o").unwrap()[100], 7);
            }
            "read-only-write" => {
                let h = pool.attach("o", Access::Read).unwrap();
                let p = h.as_ptr().unwrap().unwrap();
                let _ = p.add(10).read_volatile(); // reading is allowed
                p.add(10).write_volatile(1);
            }
            "detached-read" => {
                let h = pool.attach("o", Access::ReadWrite).unwrap();
                let p = h.as_ptr().unwrap().unwrap();
                p.write_volatile(1);
                pool.detach(h).unwrap();
                let _ = p.read_volatile();
            }
            "stale-pointer-after-sync" => {
                // After sync the old shadow is the published slot: writing it must fault.
                let h = pool.attach("o", Access::ReadWrite).unwrap();
                let p = h.as_ptr().unwrap().unwrap();
                p.write_volatile(1);
                h.sync().unwrap();
                p.write_volatile(2);
            }
            "never-attached" => {
                let info = pool.list().remove(0);
                let p = pool.media().ptr_at(info.offset as usize, 1);
                let _ = p.read_volatile();
            }
            other => panic!("unknown child case {other}"),
        }
    }
    std::process::exit(0);
}

fn run_child(case: &str) -> std::process::ExitStatus {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD, case)
        .output()
        .unwrap()
        .status
}

#[test]
fn read_write_attach_is_writable() {
    let st = run_child("rw-write-ok");
    assert!(st.success(), "control case must succeed: {st:?}");
}

#[test]
fn protection_faults() {
    for case in [
        "read-only-write",
        "detached-read",
        "stale-pointer-after-sync",
        "never-attached",
    ] {
        let st = run_child(case);
        assert_eq!(
            st.signal(),
            Some(libc::SIGSEGV),
            "{case}: expected death by SIGSEGV, got {st:?}"
        );
    }
}
