//! What each operation costs the journal: bytes of journal entries written and fences issued,
//! measured by running the operation on a small in-memory file system (thesis Table 3's
//! "bytes of metadata logged", by definition: the counters of `pm.rs`). The media is the crash
//! simulator used as plain memory: the file system counts its own journal bytes and fences, so
//! the figures are the same on any media.

use crate::{Fs, MkfsOptions, MountOptions, RenameFlags, SetAttr, ROOT};
use pmkit_media::crashsim::CrashSim;

/// One operation's cost.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OpCost {
    pub op: &'static str,
    pub journal_bytes: u64,
    pub fences: u64,
    pub transactions: u64,
}

/// Run each operation once on a fresh in-memory file system and count.
pub fn op_costs() -> Vec<OpCost> {
    let media = CrashSim::new(4 << 20);
    let opts = MkfsOptions {
        inodes: 256,
        lanes: 2,
        lane_entries: 256,
    };
    Fs::mkfs(&media, &opts).expect("mkfs on 4 MiB");
    let (fs, _) = Fs::mount(&media, &MountOptions::default()).expect("mount what mkfs made");
    let d = fs.mkdir(ROOT, b"dir", 0o755).expect("mkdir");
    let f = fs.create(d.ino, b"file", 0o644).expect("create");
    fs.write(f.ino, 0, &[1; 100]).expect("write");
    let mut out = Vec::new();
    let mut measure = |op: &'static str, run: &mut dyn FnMut()| {
        let a = fs.counters();
        run();
        let b = fs.counters();
        out.push(OpCost {
            op,
            journal_bytes: b.journal_bytes - a.journal_bytes,
            fences: b.fences - a.fences,
            transactions: b.transactions - a.transactions,
        });
    };
    let block = [7u8; 4096];
    measure("create (touch)", &mut || {
        fs.create(ROOT, b"t", 0o644).expect("create");
    });
    measure("mkdir", &mut || {
        fs.mkdir(ROOT, b"m", 0o755).expect("mkdir");
    });
    measure("rename (mv)", &mut || {
        fs.rename(ROOT, b"t", d.ino, b"t2", RenameFlags::Replace)
            .expect("rename")
    });
    measure("unlink", &mut || fs.unlink(d.ino, b"t2").expect("unlink"));
    measure("append 100 B in an allocated block", &mut || {
        fs.write(f.ino, 100, &[2; 100]).expect("write");
    });
    measure("append 4 KiB (new block)", &mut || {
        fs.write(f.ino, 4096, &block).expect("write");
    });
    measure("overwrite 4 KiB in place", &mut || {
        fs.write(f.ino, 4096, &block).expect("write");
    });
    let trunc = SetAttr {
        size: Some(10),
        ..Default::default()
    };
    measure("truncate", &mut || {
        fs.setattr(f.ino, &trunc).expect("truncate");
    });
    let chmod = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    measure("chmod", &mut || {
        fs.setattr(f.ino, &chmod).expect("chmod");
    });
    measure("rmdir", &mut || fs.rmdir(ROOT, b"m").expect("rmdir"));
    fs.unmount();
    let media = CrashSim::new(4 << 20);
    Fs::mkfs(&media, &opts).expect("mkfs on 4 MiB");
    let atomic = MountOptions {
        data: crate::DataMode::Atomic,
        ..Default::default()
    };
    let (fs, _) = Fs::mount(&media, &atomic).expect("mount what mkfs made");
    let f = fs.create(ROOT, b"a", 0o644).expect("create");
    fs.write(f.ino, 0, &block).expect("write");
    let a = fs.counters();
    fs.write(f.ino, 0, &block).expect("write");
    let b = fs.counters();
    out.push(OpCost {
        op: "overwrite 4 KiB, atomic mode",
        journal_bytes: b.journal_bytes - a.journal_bytes,
        fences: b.fences - a.fences,
        transactions: b.transactions - a.transactions,
    });
    out
}
