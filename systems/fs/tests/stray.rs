//! Protection: a stray store into the file system's PM from another thread faults (in every
//! mode but `none`, the control, where it lands), while the file system's own operations,
//! which store through `pm.rs`, succeed. The stray store runs in a re-executed child process so
//! the fault kills only the child.

use pmkit_fs::{Error, Fs, MkfsOptions, MountOptions, Protect, SetAttr, XattrFlags, ROOT};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::{Media, Region, RegionOptions};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

const CHILD: &str = "PMKIT_FS_STRAY_CHILD";
const OPS_OK: &str = "fs operations ok";

/// The modes this machine can run: `pkey` only where the CPU has protection keys.
fn modes() -> Vec<Option<Protect>> {
    let mut m = vec![
        Some(Protect::None),
        Some(Protect::Kernel),
        Some(Protect::Pt),
        Some(Protect::Private),
        None,
    ];
    if pmkit_media::features().pku {
        m.push(Some(Protect::Pkey));
    }
    m
}

/// Start address of the largest mapping of `path` in this process.
fn mapping_of(path: &Path) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let want = path.to_str().unwrap();
    maps.lines()
        .filter(|l| l.ends_with(want))
        .map(|l| {
            let (a, b) = l
                .split_whitespace()
                .next()
                .unwrap()
                .split_once('-')
                .unwrap();
            let a = usize::from_str_radix(a, 16).unwrap();
            (a, usize::from_str_radix(b, 16).unwrap() - a)
        })
        .max_by_key(|m| m.1)
        .unwrap_or_else(|| panic!("{want} is not mapped"))
        .0
}

/// A file system on a fresh region in /dev/shm, mounted with `protect`.
fn mounted(dir: &Path, protect: Option<Protect>) -> (std::path::PathBuf, Fs<Region>) {
    let path = dir.join("pool");
    let r = Region::create(&path, 4 << 20, &RegionOptions::default()).unwrap();
    Fs::mkfs(&r, &MkfsOptions::default()).unwrap();
    let o = MountOptions {
        protect,
        ..MountOptions::default()
    };
    (path, Fs::mount(r, &o).unwrap().0)
}

/// Every kind of store the file system makes: journaled metadata, fresh blocks, the append
/// fast path (16-byte `{size, mtime}`), in-place overwrites, xattrs, a truncate.
fn exercise(fs: &Fs<Region>) -> u64 {
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    fs.write(f, 0, &data).unwrap();
    fs.write(f, 10_000, b"tail").unwrap();
    fs.write(f, 100, b"over").unwrap();
    let d = fs.mkdir(ROOT, b"d", 0o755).unwrap().ino;
    fs.rename(ROOT, b"f", d, b"g", Default::default()).unwrap();
    fs.setxattr(f, b"user.k", b"v", XattrFlags::Either).unwrap();
    let s = SetAttr {
        size: Some(9000),
        ..SetAttr::default()
    };
    fs.setattr(f, &s).unwrap();
    let back = fs.read(f, 0, 20_000).unwrap();
    let mut want = data[..9000].to_vec();
    want[100..104].copy_from_slice(b"over");
    assert_eq!(back, want, "the file system's own stores landed");
    assert_eq!(fs.getxattr(f, b"user.k").unwrap(), b"v");
    f
}

/// The child side of `a_stray_store_from_another_thread_faults` (runs only when re-executed
/// with the variable set): mount in the mode, run the operations, then store from another
/// thread into the superblock and into the inode table.
#[test]
fn stray_child_entry() {
    let Some(mode) = pmkit_testkit::child::case(CHILD) else {
        return;
    };
    let protect = Protect::parse_choice(&mode).unwrap();
    // In the parent's directory: this process dies without cleaning up.
    let dir = pmkit_testkit::scratch();
    let (path, fs) = mounted(dir.path(), protect);
    exercise(&fs);
    println!("{OPS_OK}: {}", fs.protection().0);
    let base = mapping_of(&path);
    std::thread::spawn(move || {
        // SAFETY: a deliberate stray store into the file system's mapping from another
        // thread: in a protected mode it faults, killing this child process; in `none` it
        // lands (the control).
        unsafe { std::ptr::write_volatile((base + 4096 * 3 + 8) as *mut u64, 0x5757_5757) }
    })
    .join()
    .unwrap();
    std::process::exit(0);
}

#[test]
fn a_stray_store_from_another_thread_faults() {
    for protect in modes() {
        let name = protect.map_or("auto", Protect::name);
        let out = pmkit_testkit::child::run("stray_child_entry", CHILD, name);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(OPS_OK),
            "{name}: the file system's own operations must succeed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if protect == Some(Protect::None) {
            assert!(
                out.status.success(),
                "control: the store lands: {:?}",
                out.status
            );
        } else {
            assert_eq!(
                out.status.signal(),
                Some(libc::SIGSEGV),
                "{name}: a stray store from another thread must fault: {:?}",
                out.status
            );
        }
    }
}

#[test]
fn auto_picks_pkey_or_kernel_on_a_file_pt_on_memory_and_none_on_the_simulator() {
    let dir = pmkit_testkit::scratch();
    let (_, fs) = mounted(dir.path(), None);
    let want = if pmkit_media::features().pku {
        Protect::Pkey
    } else {
        Protect::Kernel
    };
    assert_eq!(fs.protection().0, want, "{}", fs.protection().1);
    drop(fs);
    let anon = Region::anonymous(4 << 20).unwrap();
    Fs::mkfs(&anon, &MkfsOptions::default()).unwrap();
    let (fs, _) = Fs::mount(anon, &MountOptions::default()).unwrap();
    let want = match pmkit_media::features().pku {
        true => Protect::Pkey,
        false => Protect::Pt,
    };
    assert_eq!(fs.protection().0, want, "{}", fs.protection().1);
    let sim = CrashSim::new(2 << 20);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    for p in [Protect::Pkey, Protect::Pt, Protect::Private] {
        let o = MountOptions {
            protect: Some(p),
            ..MountOptions::default()
        };
        let e = Fs::mount(&sim, &o).unwrap_err();
        assert!(matches!(e, Error::ProtectUnavailable { .. }), "{p}: {e}");
        assert_eq!(e.errno(), libc::EOPNOTSUPP);
    }
    let (fs, _) = Fs::mount(&sim, &MountOptions::default()).unwrap();
    assert_eq!(fs.protection().0, Protect::None);
    drop(fs);
    // `kernel` runs on the simulator as the kernel's DAX copy (durable at return).
    let o = MountOptions {
        protect: Some(Protect::Kernel),
        ..MountOptions::default()
    };
    let (fs, _) = Fs::mount(&sim, &o).unwrap();
    assert_eq!(fs.protection().0, Protect::Kernel);
}

#[test]
fn kernel_mode_survives_a_remount_and_gives_the_mapping_back_writable() {
    let dir = pmkit_testkit::scratch();
    let (_, fs) = mounted(dir.path(), Some(Protect::Kernel));
    let f = exercise(&fs);
    let r = fs.unmount();
    assert!(pmkit_fs::check(&r).is_clean());
    // The mapping is read-write again: a direct store by the owner lands (it would fault here,
    // killing the test, if unmount had left it read-only).
    let at = r.len() - 8;
    r.store_u64(at, 7);
    assert_eq!(r.load_u64(at), 7);
    let o = MountOptions {
        protect: Some(Protect::Kernel),
        ..MountOptions::default()
    };
    let (fs, rec) = Fs::mount(r, &o).unwrap();
    assert!(rec.was_clean);
    assert_eq!(fs.getattr(f).unwrap().size, 9000);
    assert_eq!(fs.read(f, 100, 4).unwrap(), b"over");
}
