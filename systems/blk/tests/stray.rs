//! Stray writes (and, for pkey and private, stray reads) from code outside the engine, from any
//! thread, fault in every protection mode but `none`, and the data is intact afterwards. Each
//! stray access runs in a child process (forked, or this binary re-executed for the
//! other-thread case) so the fault kills only the child. `none` is the control: there the stray
//! write lands and corrupts the block, which shows the test can fail.

mod common;

use common::*;
use pmkit_blk::{CreateOptions, Protect, WriteScheme};
use std::path::Path;

/// Start address and length of the largest mapping of `path` in this process.
fn mapping_of(path: &Path) -> (usize, usize) {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let want = path.to_str().unwrap();
    maps.lines()
        .filter(|l| l.ends_with(want))
        .map(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let (a, b) = (
                usize::from_str_radix(a, 16).unwrap(),
                usize::from_str_radix(b, 16).unwrap(),
            );
            (a, b - a)
        })
        .max_by_key(|m| m.1)
        .unwrap_or_else(|| panic!("{want} is not mapped"))
}

/// Fork; the child touches `addr` (a store, or a load) and exits 0 if it survived. Returns the
/// signal that killed the child, or `None` if it exited normally.
fn stray_access(addr: usize, store: bool) -> Option<i32> {
    // SAFETY: the child only does one volatile access and _exit: no locks, no allocation.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: a deliberate stray access to the device's mapping (the fault is the point of
        // the test), then _exit without unwinding; the parent checks how the child died.
        unsafe {
            if store {
                std::ptr::write_volatile(addr as *mut u64, 0xdead_beef_dead_beef);
            } else {
                let _ = std::ptr::read_volatile(addr as *const u64);
            }
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    if libc::WIFSIGNALED(status) {
        Some(libc::WTERMSIG(status))
    } else {
        assert_eq!(libc::WEXITSTATUS(status), 0);
        None
    }
}

#[test]
fn stray_accesses_fault_in_every_protected_mode_and_data_survives() {
    let dir = shm_dir();
    for protect in modes() {
        let e = engine(protect, WriteScheme::Nt);
        let (path, dev) = new_device(&dir, protect.name(), 1 << 20, &CreateOptions::default(), &e);
        let data = pattern(42, 0, 4096);
        dev.write(0, &data, false).unwrap();
        dev.flush().unwrap();
        let (found, _) = pmkit_blk::inspect_path(&path).unwrap();
        let (base, len) = mapping_of(&path);
        assert_eq!(len, 1 << 20, "{protect}: the region's own mapping");
        let target = base + found.current.layout.block_off(0) + 128;
        let sig = stray_access(target, true);
        let mut back = vec![0u8; 4096];
        dev.read(0, &mut back).unwrap();
        if protect == Protect::None {
            assert_eq!(sig, None, "without protection the stray write lands");
            assert_ne!(back, data, "control: the stray write corrupted the block");
        } else {
            assert_eq!(
                sig,
                Some(libc::SIGSEGV),
                "{protect}: a stray write must fault"
            );
            assert_eq!(back, data, "{protect}: data intact after the stray write");
        }
        // pkey and private protect reads too; pt keeps PM readable, as in the paper.
        let read_sig = stray_access(target, false);
        match protect {
            Protect::Pkey | Protect::Private => {
                assert_eq!(read_sig, Some(libc::SIGSEGV), "{protect}: stray read")
            }
            _ => assert_eq!(read_sig, None, "{protect}: reads are not protected"),
        }
        // The superblock is protected like the data.
        if protect != Protect::None {
            assert_eq!(
                stray_access(base + 8, true),
                Some(libc::SIGSEGV),
                "{protect}: superblock"
            );
        }
        dev.close().unwrap();
        drop(dev);
        assert!(
            pmkit_blk::check_path(&path, false).unwrap().is_clean(),
            "{protect}"
        );
    }
}

const CHILD: &str = "PMKIT_STRAY_CHILD";

/// The child side of `a_stray_store_from_another_thread_faults`: runs only when re-executed
/// with `PMKIT_STRAY_CHILD=<mode>`. Opens a device in that mode, writes through it, then has a
/// second thread store into the data block; the fault kills the process (the parent checks).
#[test]
fn stray_child_entry() {
    let Some(mode) = pmkit_testkit::child::case(CHILD) else {
        return;
    };
    let protect: Protect = mode.parse().unwrap();
    let dir = shm_dir();
    let e = engine(protect, WriteScheme::Nt);
    let create = CreateOptions {
        checksum: true,
        ..CreateOptions::default()
    };
    let (path, dev) = new_device(&dir, "other-thread", 1 << 20, &create, &e);
    let data = pattern(7, 0, 4096);
    dev.write(0, &data, true).unwrap();
    let mut back = vec![0u8; 4096];
    dev.read(0, &mut back).unwrap();
    assert_eq!(
        back, data,
        "{protect}: the mode's own writes read back, checksums match"
    );
    let (found, _) = pmkit_blk::inspect_path(&path).unwrap();
    let (base, _) = mapping_of(&path);
    let target = base + found.current.layout.block_off(0) + 64;
    std::thread::spawn(move || {
        // SAFETY: a deliberate stray store into the device's mapping from another thread: in
        // a protected mode it faults, which kills this (child) process; in `none` it lands.
        unsafe { std::ptr::write_volatile(target as *mut u64, 0x5757_5757_5757_5757) }
    })
    .join()
    .unwrap();
    std::process::exit(0);
}

/// Run `stray_child_entry` for `mode` in a fresh process; how it ended.
fn run_child(mode: Protect) -> std::process::ExitStatus {
    pmkit_testkit::child::run("stray_child_entry", CHILD, mode.name()).status
}

#[test]
fn a_stray_store_from_another_thread_faults() {
    use std::os::unix::process::ExitStatusExt;
    for protect in modes() {
        let st = run_child(protect);
        if protect == Protect::None {
            assert!(
                st.success(),
                "control: without protection the store lands: {st:?}"
            );
        } else {
            assert_eq!(
                st.signal(),
                Some(libc::SIGSEGV),
                "{protect}: a stray store from another thread must fault: {st:?}"
            );
        }
    }
}
