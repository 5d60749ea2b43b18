//! Page protection, proven by faults in a child process: the test re-runs this binary with
//! `PMO_CHILD=<case>`; the child attaches an object, makes one access through a raw pointer,
//! and must die of SIGSEGV (or, for the control cases, exit cleanly).
//!
//! Cases run on the default pool (DRAM shadow, PM area behind a protection key where the CPU
//! has keys), with `pages-` on a DRAM-shadow pool that keeps the PM area `PROT_NONE` and opens
//! it with mprotect windows, and with `pm-` on the thesis's PM shadow.
//!
//! The `thread-` cases are about keyed DRAM buffers (the default where the CPU has keys): the
//! pointer works in the attaching thread and in threads that ask for it with `as_ptr`, and in
//! no other thread; a detach takes it away from all of them. The helper thread is started
//! before the attach, because a thread started later inherits the attaching thread's rights.

use pmkit_media::Region;
use pmkit_obj::{Access, Pool, PoolOptions, Shadow, Tracking};
use std::os::unix::process::ExitStatusExt;
use std::sync::mpsc;

const CHILD: &str = "PMO_CHILD";

fn pool_for(case: &str) -> Pool<Region> {
    let kernel = case.starts_with("kernel-");
    let opts = PoolOptions {
        max_objects: 4,
        protect: true,
        shadow: if case.starts_with("pm-") {
            Shadow::Pm
        } else {
            Shadow::Dram
        },
        pkey: !case.starts_with("pages-") && !kernel,
        kernel,
        checksum: false,
    };
    // The kernel write path needs a file (emulated PM on tmpfs); the rest runs on anonymous
    // memory, where the kernel path does not exist.
    let region = if kernel {
        let path = std::env::temp_dir().join(format!("pmo-protect-{}", std::process::id()));
        let path = std::path::Path::new("/dev/shm").join(path.file_name().unwrap());
        let _ = std::fs::remove_file(&path);
        let region = Region::create(&path, 1 << 20, &Default::default()).unwrap();
        std::fs::remove_file(&path).unwrap(); // the mapping keeps it alive
        region
    } else {
        Region::anonymous(1 << 20).unwrap()
    };
    Pool::format(region, &opts).unwrap()
}

/// The child side: runs only when `PMO_CHILD` is set.
#[test]
fn child_entry() {
    let Some(case) = pmkit_testkit::child::case(CHILD) else {
        return;
    };
    let pool = pool_for(&case);
    pool.create("o", 8192).unwrap();
    let bare = case
        .trim_start_matches("pm-")
        .trim_start_matches("pages-")
        .trim_start_matches("kernel-");
    // SAFETY: in every case the raw accesses are either allowed ones (the controls) or
    // deliberately forbidden ones, which the page rights (or the key) stop with a fault before
    // they touch anything; this runs in a child process whose death is the expected outcome.
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
            "never-attached-write" => {
                let info = pool.list().remove(0);
                let p = pool.media().ptr_at(info.offset as usize, 1);
                assert_eq!(p.read_volatile(), 0, "kernel: PM is readable");
                p.write_volatile(1);
            }
            "area-other-thread" => {
                // A stray store from another thread into PM while an attachment is open.
                let h = pool.attach("o", Access::ReadWrite).unwrap();
                h.write(0, &[1]).unwrap();
                let info = pool.list().remove(0);
                let p = Ptr(pool.media().ptr_at(info.offset as usize, 1));
                std::thread::spawn(move || {
                    let p = p;
                    // A forbidden access by design (inside the caller's unsafe): it must fault.
                    p.0.write_volatile(9)
                })
                .join()
                .unwrap();
            }
            "detached-write-is-discarded" => {
                // Kernel buffers rest read-write: a store into a detached buffer lands in DRAM,
                // but the next attach refills the buffer whole, so it never reaches PM.
                let h = pool.attach("o", Access::ReadWrite).unwrap();
                let p = h.as_ptr().unwrap().unwrap();
                p.write_volatile(1);
                h.sync().unwrap();
                pool.detach(h).unwrap();
                p.write_volatile(66); // stray store into the detached buffer
                p.add(4096).write_volatile(67);
                // Cycle until the cache hands that buffer out again (after its quarantine).
                let mut tries = 0;
                let h = loop {
                    let h = pool.attach("o", Access::ReadWrite).unwrap();
                    if h.as_ptr().unwrap().unwrap() == p {
                        break h;
                    }
                    pool.detach(h).unwrap();
                    tries += 1;
                    assert!(tries < 64, "the detached buffer never came back");
                };
                let q = h.as_ptr().unwrap().unwrap();
                assert_eq!((q.read_volatile(), q.add(4096).read_volatile()), (1, 0));
                h.mark_dirty(0, 8192).unwrap();
                h.sync().unwrap();
                let r = pool.read_published("o").unwrap();
                assert_eq!((r[0], r[4096]), (1, 0));
            }
            _ if bare.starts_with("thread-") => thread_case(&pool, bare),
            other => panic!("unknown child case {other}"),
        }
    }
    std::process::exit(0);
}

/// A raw pointer to pass to the helper thread.
struct Ptr(*mut u8);
// SAFETY: only an address; which thread may use it is what these cases test.
unsafe impl Send for Ptr {}

/// What the helper thread is told to do, in order.
enum Step<'a> {
    /// Write through this pointer (taken by another thread).
    WriteVia(Ptr),
    /// Take the pointer of this handle id (what `as_ptr` does) and write through it.
    TakeAndWrite(u64),
    /// Read through the pointer it took last.
    ReadAgain,
    /// Detach this handle.
    Detach(pmkit_obj::pool::Handle<'a, Region>),
}

/// The `thread-` cases (keyed buffers): a helper thread, started before the attach, does the
/// steps it is sent and acknowledges each.
///
/// # Safety
/// Deliberately forbidden accesses, as in `child_entry`.
unsafe fn thread_case(pool: &Pool<Region>, case: &str) {
    let (tx, rx) = mpsc::channel::<Step>();
    let (ack_tx, ack) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut mine: Option<*mut u8> = None;
            for step in rx {
                match step {
                    // SAFETY: a forbidden access by design (this thread lacks the key): it must
                    // fault; the pointer is inside the attached buffer either way.
                    Step::WriteVia(p) => unsafe { p.0.add(1).write_volatile(5) },
                    Step::TakeAndWrite(id) => {
                        let p = pool.ptr_id(id).unwrap().unwrap();
                        // SAFETY: this thread took the pointer, so it may write; byte 2 lies
                        // inside the object.
                        unsafe { p.add(2).write_volatile(6) };
                        mine = Some(p);
                    }
                    Step::ReadAgain => {
                        let taken = mine.expect("a pointer was taken");
                        // SAFETY: a forbidden access by design (the handle was detached): it
                        // must fault.
                        let _ = unsafe { taken.read_volatile() };
                    }
                    Step::Detach(h) => h.detach().unwrap(),
                }
                ack_tx.send(()).unwrap();
            }
        });
        let tracking = if case.ends_with("-tracked") {
            Tracking::Faults
        } else {
            Tracking::Explicit
        };
        let h = pool.attach_with("o", Access::ReadWrite, tracking).unwrap();
        let p = h.as_ptr().unwrap().unwrap();
        // SAFETY: the attaching thread may write its read-write buffer; byte 0 is inside it.
        unsafe { p.write_volatile(4) };
        let step = |st| {
            tx.send(st).unwrap();
            ack.recv().unwrap();
        };
        match case.trim_end_matches("-tracked") {
            // Must fault (a tracked buffer must fault too, not loop in the fault handler).
            "thread-other-writes" => step(Step::WriteVia(Ptr(p))),
            // Control: a thread that asks for the pointer may use it.
            "thread-takes-pointer-ok" => {
                step(Step::TakeAndWrite(h.id()));
                h.mark_dirty(0, 8).unwrap();
                h.sync().unwrap();
                assert_eq!(pool.read_published("o").unwrap()[..3], [4, 0, 6]);
                h.detach().unwrap();
                // Re-attach: the same buffer may come back with its key; all still works.
                let h = pool.attach("o", Access::ReadWrite).unwrap();
                let again = h.as_ptr().unwrap().unwrap();
                // SAFETY: a fresh read-write attachment in this thread; byte 0 is inside it.
                unsafe { again.write_volatile(9) };
            }
            // Must fault: the detach in this thread takes the helper's access away too.
            "thread-taken-then-detached" => {
                step(Step::TakeAndWrite(h.id()));
                h.detach().unwrap();
                step(Step::ReadAgain);
            }
            // Must fault: a detach in another thread takes this thread's access away.
            "thread-detaches" => {
                step(Step::Detach(h));
                // SAFETY: a forbidden access by design (detached in another thread): it must
                // fault.
                let _ = unsafe { p.read_volatile() };
            }
            other => panic!("unknown thread case {other}"),
        }
        drop(tx);
    });
}

/// Run one case in a child process; a child that neither exits nor dies within the kit's limit
/// (a fault handler retrying forever) is killed and fails the test.
fn run_child(case: &str) -> std::process::ExitStatus {
    pmkit_testkit::child::run("child_entry", CHILD, case).status
}

#[test]
fn read_write_attach_is_writable() {
    for case in [
        "rw-write-ok",
        "pages-rw-write-ok",
        "pm-rw-write-ok",
        "kernel-rw-write-ok",
        "kernel-detached-write-is-discarded",
    ] {
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
        "kernel-read-only-write",
        "kernel-never-attached-write",
        "kernel-area-while-attached",
        "kernel-area-other-thread",
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
fn keyed_buffers_are_per_thread() {
    if !pmkit_media::features().pku {
        eprintln!("skipped: this CPU has no protection keys; DRAM buffers use page rights");
        return;
    }
    let st = run_child("thread-takes-pointer-ok");
    assert!(st.success(), "control case must succeed: {st:?}");
    for case in [
        "thread-other-writes",
        "thread-other-writes-tracked",
        "thread-taken-then-detached",
        "thread-detaches",
    ] {
        let st = run_child(case);
        assert_eq!(
            st.signal(),
            Some(libc::SIGSEGV),
            "{case}: expected death by SIGSEGV, got {st:?}"
        );
    }
    // Without keys (page rights) a pointer works in every thread.
    let st = run_child("pages-thread-other-writes");
    assert!(st.success(), "page rights hold for every thread: {st:?}");
}

#[test]
fn default_pool_keys_the_object_area_when_the_cpu_can() {
    let pool = pool_for("rw-write-ok");
    assert_eq!(pool.shadow(), Shadow::Dram);
    assert_eq!(pool.uses_pkey(), pmkit_media::features().pku);
    assert!(!pool_for("pages-x").uses_pkey());
    assert!(!pool_for("pm-x").uses_pkey());
    assert_eq!(pool_for("kernel-x").protection(), "kernel");
    assert_eq!(pool_for("pages-x").protection(), "mprotect");
    // DRAM buffers get keys too: attach and detach make no mprotect calls.
    pool.create("o", 4096).unwrap();
    for _ in 0..3 {
        pool.attach("o", Access::ReadWrite)
            .unwrap()
            .detach()
            .unwrap();
    }
    let keyed = pool.stats().keyed_attaches;
    assert_eq!(keyed, if pmkit_media::features().pku { 3 } else { 0 });
}
