//! Access times under each mount rule: relatime (the default) stores a read's time when the last
//! access is not after the last change or is a day old, noatime never, strictatime at every
//! read; a directory listing is a read of the directory; the time survives a remount.

use pmkit_fs::{Atime, Fs, MkfsOptions, MountOptions, SetAttr, ROOT};
use pmkit_media::crashsim::CrashSim;

const DAY: i64 = 24 * 3600 * 1_000_000_000;

fn mount(sim: &CrashSim, atime: Atime) -> Fs<&CrashSim> {
    let o = MountOptions {
        atime,
        ..MountOptions::default()
    };
    Fs::mount(sim, &o).unwrap().0
}

/// Past a tick of the file system's coarse clock.
fn tick() {
    std::thread::sleep(std::time::Duration::from_millis(20));
}

fn set_atime(fs: &Fs<&CrashSim>, ino: u64, t: i64) {
    let s = SetAttr {
        atime: Some(t),
        ..SetAttr::default()
    };
    fs.setattr(ino, &s).unwrap();
}

#[test]
fn relatime_noatime_and_strictatime() {
    let sim = CrashSim::new(1 << 20);
    Fs::mkfs(&sim, &MkfsOptions::tiny()).unwrap();
    let fs = mount(&sim, Atime::Relatime);
    let f = fs.create(ROOT, b"f", 0o644).unwrap().ino;
    fs.write(f, 0, b"data").unwrap();
    let a = fs.getattr(f).unwrap();
    // created: atime before mtime, so the first read stores its time (a tick of the coarse
    // clock later)
    tick();
    fs.read(f, 0, 4).unwrap();
    let first = fs.getattr(f).unwrap().atime;
    assert!(first > a.mtime, "relatime: a read after a change stores it");
    fs.read(f, 0, 4).unwrap();
    assert_eq!(
        fs.getattr(f).unwrap().atime,
        first,
        "relatime: not again the same day"
    );
    set_atime(&fs, f, first - 2 * DAY);
    let ctime = fs.getattr(f).unwrap().ctime;
    // (the setattr changed ctime after the atime it set: a read stores a new one anyway)
    assert!(ctime > first - 2 * DAY);
    fs.read(f, 0, 4).unwrap();
    assert!(
        fs.getattr(f).unwrap().atime >= ctime,
        "relatime: a day-old access is renewed"
    );
    // A listing is a read of the directory.
    let d = fs.getattr(ROOT).unwrap();
    tick();
    fs.readdir(ROOT).unwrap();
    assert!(fs.getattr(ROOT).unwrap().atime > d.mtime.min(d.atime));
    let kept = fs.getattr(f).unwrap().atime;
    fs.unmount();

    let fs = mount(&sim, Atime::Noatime);
    assert_eq!(fs.getattr(f).unwrap().atime, kept, "kept across a remount");
    fs.write(f, 0, b"more").unwrap();
    tick();
    fs.read(f, 0, 4).unwrap();
    assert_eq!(fs.getattr(f).unwrap().atime, kept, "noatime: never");
    fs.unmount();

    let fs = mount(&sim, Atime::Strictatime);
    fs.read(f, 0, 4).unwrap();
    let one = fs.getattr(f).unwrap().atime;
    assert!(one > kept);
    tick();
    fs.read(f, 0, 4).unwrap();
    assert!(
        fs.getattr(f).unwrap().atime > one,
        "strictatime: every read"
    );
    fs.unmount();
    assert!(pmkit_fs::check(&sim).is_clean());
}

#[test]
fn the_words() {
    assert_eq!(Atime::parse("relatime"), Some(Atime::Relatime));
    assert_eq!(Atime::parse("noatime"), Some(Atime::Noatime));
    assert_eq!(Atime::parse("strictatime"), Some(Atime::Strictatime));
    assert_eq!(Atime::parse("atime"), None);
    assert_eq!(Atime::default(), Atime::Relatime);
}
