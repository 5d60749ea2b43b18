//! Page protection, proven by faults in a child process: the test re-runs this binary with
//! `PMO_CHILD=<case>`; the child attaches an object, makes one access through a raw pointer,
//! and must die of SIGSEGV (or, for the control cases, exit cleanly).
//!
//! Cases run on the default pool (DRAM shadow, PM area behind a protection key where the CPU
//! has keys), with `pages-` on a DRAM-shadow pool that keeps the PM area `PROT_NONE` and opens
//! it with mprotect windows, and with `pm-` on the thesis's PM shadow.

use pmkit_media::Region;
use pmkit_obj::{Access, Pool, PoolOptions, Shadow};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

const CHILD: &str = "PMO_CHILD";

fn pool_for(case: &str) -> Pool<Region> {
    let opts = PoolOptions {
        max_objects: 4,
        protect: true,
        shadow: if case.starts_with("pm-") {
            Shadow::Pm
        } else {
            Shadow::Dram
        },
        pkey: !case.starts_with("pages-"),
    };
    Pool::format(Region::anonymous(1 << 20).unwrap(), &opts).unwrap()
}

/// The child side: runs only when `PMO_CHILD` is set.
#[test]
fn child_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    let pool = pool_for(&case);
    pool.create("o", 8192).unwrap();
    let bare = case.trim_start_matches("pm-").trim_start_matches("pages-");
    // SAFETY (all cases): the accesses are deliberately forbidden ones; the point is that the
    // page rights (or the key) stop them with a fault before they touch the object.
    unsafe {
        match bare {
            "rw-write-ok" => {
                let h = pool.attach("o", Access::ReadWrite).unwrap();
                let p = h.as_ptr().unwrap().unwrap();
                p.add(100).write_volatile(7);
                h.sync().unwrap();
                assert_eq!(pool.read_published("o").unwrap()[100], 7);
                // Pointers are taken again after a sync (required with the PM shadow).
                let p = h.as_ptr().unwrap().unwrap();
                p.add(4096 + 5).write_volatile(8);
                h.sync().unwrap();
                let r = pool.read_published("o").unwrap();
                assert_eq!((r[100], r[4096 + 5]), (7, 8));
                pool.detach(h).unwrap();
                let h = pool.attach("o", Access::Read).unwrap();
                let p = h.as_ptr().unwrap().unwrap();
                assert_eq!(p.add(4096 + 5).read_volatile(), 8);
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
                // PM shadow: after sync the old shadow is the published slot: writing faults.
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
            "area-while-attached" => {
                // DRAM shadow: even while attached read-write, the object's PM slots are out of
                // reach of stray stores (only the library writes them, at sync).
                let h = pool.attach("o", Access::ReadWrite).unwrap();
                h.write(0, &[1]).unwrap();
                let info = pool.list().remove(0);
                let p = pool.media().ptr_at(info.offset as usize + 8192, 1);
                p.write_volatile(9);
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
    for case in ["rw-write-ok", "pages-rw-write-ok", "pm-rw-write-ok"] {
        let st = run_child(case);
        assert!(st.success(), "{case}: control case must succeed: {st:?}");
    }
}

#[test]
fn protection_faults() {
    for case in [
        "read-only-write",
        "detached-read",
        "never-attached",
        "area-while-attached",
        "pages-read-only-write",
        "pages-detached-read",
        "pages-never-attached",
        "pages-area-while-attached",
        "pm-read-only-write",
        "pm-detached-read",
        "pm-stale-pointer-after-sync",
        "pm-never-attached",
    ] {
        let st = run_child(case);
        assert_eq!(
            st.signal(),
            Some(libc::SIGSEGV),
            "{case}: expected death by SIGSEGV, got {st:?}"
        );
    }
}

#[test]
fn default_pool_keys_the_object_area_when_the_cpu_can() {
    let pool = pool_for("rw-write-ok");
    assert_eq!(pool.shadow(), Shadow::Dram);
    assert_eq!(pool.uses_pkey(), pmkit_media::features().pku);
    assert!(!pool_for("pages-x").uses_pkey());
    assert!(!pool_for("pm-x").uses_pkey());
}
