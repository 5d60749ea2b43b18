//! Crash tests for 2 MiB blocks and the per-file atomic flag, on the simulator: crash at every
//! fence of 2 MiB writes (huge blocks), truncates that cut a huge block or free one whole,
//! `set_atomic`, and writes to an atomic file next to an in-place one. Every image must pass
//! `check`, mount, and show the tree before or after the operation in flight; only in-place
//! files may show a write torn (each byte old or new), and the in-place one must be seen torn.

mod common;

use common::crashcheck::{crash_custom_with, crash_seq, Acked};
use common::{data_of, Op, Snap};
use parking_lot::Mutex;
use pmkit_fs::{Fs, MountOptions};
use pmkit_media::crashsim::CrashSim;
use pmkit_media::Domain;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const MIB: u64 = 1 << 20;
const HUGE: u64 = 2 * MIB;

fn s(x: &str) -> String {
    x.to_string()
}

fn blocks(fs: &Fs<Arc<CrashSim>>, p: &str) -> u64 {
    fs.getattr(common::ino_of(fs, p).unwrap()).unwrap().blocks
}

#[test]
fn huge_writes_and_truncates_crash_anywhere() {
    // 6 MiB and a block: chunk 0 holds the metadata, chunks 1 and 2 are whole, and the block
    // past them holds the far superblock copy
    let setup = [
        Op::Create(s("h")),
        Op::Write(s("h"), 0, HUGE as usize, 1),
        Op::Create(s("s")),
        Op::Write(s("s"), 0, 5000, 2),
    ];
    let ops = [
        // the second huge block of h
        Op::Write(s("h"), HUGE, HUGE as usize, 3),
        // cut the first in the middle, free the second whole
        Op::Truncate(s("h"), MIB + 100),
        // a new file gets the freed chunk; an overwrite in place inside it
        Op::Create(s("n")),
        Op::Write(s("n"), 0, HUGE as usize, 4),
        Op::Write(s("n"), 4000, 10_000, 5),
        // cut on a 4 KiB boundary inside it, then free it
        Op::Truncate(s("n"), 64 * 4096),
        Op::Truncate(s("n"), 0),
    ];
    let probe = |fs: &Fs<Arc<CrashSim>>, op: &Op| match op {
        Op::Write(p, 0 | HUGE, len, _) if *len as u64 == HUGE => {
            let want = if p == "h" { 1024 + 1 } else { 512 };
            assert_eq!(blocks(fs, p), want, "{op:?}: not a huge block");
        }
        Op::Truncate(p, size) if *size > 0 => {
            let want = size.div_ceil(4096) + if p == "h" { 2 } else { 1 };
            assert_eq!(blocks(fs, p), want, "{op:?}");
        }
        _ => {}
    };
    for domain in [Domain::Adr, Domain::Eadr] {
        let rep = crash_seq((6 << 20) + 4096, &setup, &ops, domain, &probe, &|_, _| {});
        assert!(rep.is_clean(), "{rep}\n{:?}", rep.violations.first());
        assert!(rep.fences >= 20, "{rep}");
        eprintln!("{domain:?}: {rep}");
    }
}

#[test]
fn an_atomic_file_never_tears_an_in_place_file_may() {
    let setup = [
        Op::Create(s("at")),
        Op::Write(s("at"), 0, 3 * 4096, 1),
        Op::SetAtomic(s("at"), true),
        Op::Create(s("ip")),
        Op::Write(s("ip"), 0, 3 * 4096, 1),
    ];
    // overwrites inside the size: the in-place one streams into its blocks
    let ops = [
        Op::Write(s("at"), 100, 12_000, 7),
        Op::Write(s("ip"), 100, 12_000, 7),
    ];
    for domain in [Domain::Adr, Domain::Eadr] {
        let torn = AtomicUsize::new(0);
        let seen = |got: &Snap, a: &Acked| {
            let (Some(before), Some(after)) = (&a.before, &a.after) else {
                return;
            };
            let (g, b, f) = (&got.0["ip"].data, &before.0["ip"].data, &after.0["ip"].data);
            if g != b && g != f {
                torn.fetch_add(1, Ordering::Relaxed);
            }
        };
        let rep = crash_seq(256 << 10, &setup, &ops, domain, &|_, _| {}, &seen);
        assert!(rep.is_clean(), "{rep}\n{:?}", rep.violations.first());
        let torn = torn.load(Ordering::Relaxed);
        eprintln!("{domain:?}: {rep}; in-place file torn in {torn} images");
        if domain == Domain::Adr {
            // the same write tears the in-place file: the atomic one's check is not vacuous
            assert!(torn > 0, "no image showed the in-place write torn");
        }
    }
}

#[test]
fn set_atomic_crashes_anywhere() {
    let setup = [Op::Create(s("f")), Op::Write(s("f"), 0, 6000, 1)];
    let ops = [
        Op::SetAtomic(s("f"), true),
        Op::Write(s("f"), 100, 9000, 3),
        Op::SetAtomic(s("f"), false),
        Op::Write(s("f"), 50, 12_000, 4),
        Op::SetAtomic(s("f"), true),
        Op::Truncate(s("f"), 4000),
    ];
    for domain in [Domain::Adr, Domain::Eadr] {
        let rep = crash_seq(256 << 10, &setup, &ops, domain, &|_, _| {}, &|_, _| {});
        assert!(rep.is_clean(), "{rep}\n{:?}", rep.violations.first());
        assert!(rep.fences >= 15, "{rep}");
    }
}

/// No block free for the split node: the truncate goes through the orphan list (size first) and
/// the cut tail's last block becomes the node; a crash anywhere leaves the old file or the new.
#[test]
fn a_cut_on_a_full_disk_crashes_anywhere() {
    let setup = |fs: &Fs<&CrashSim>| {
        let a = fs.create(pmkit_fs::ROOT, b"a", 0o644).unwrap();
        fs.write(a.ino, 0, &data_of(0, HUGE as usize, 6)).unwrap();
        let c = fs.create(pmkit_fs::ROOT, b"c", 0o644).unwrap();
        let mut off = 0;
        while fs.fallocate(c.ino, off, 4096).is_ok() {
            off += 4096;
        }
        let mut n = 0;
        while fs.statfs().free_blocks > 0 {
            let e = fs.create(pmkit_fs::ROOT, format!("e{n}").as_bytes(), 0o644);
            fs.write(e.unwrap().ino, 0, b"x").unwrap();
            n += 1;
        }
    };
    let work = |fs: &Fs<Arc<CrashSim>>, a: &Mutex<Acked>| {
        let mut after = a.lock().before.clone().unwrap();
        after
            .0
            .get_mut("a")
            .unwrap()
            .data
            .truncate((MIB + 100) as usize);
        a.lock().after = Some(after.clone());
        let ino = common::ino_of(fs, "a").unwrap();
        let s = pmkit_fs::SetAttr {
            size: Some(MIB + 100),
            ..Default::default()
        };
        fs.setattr(ino, &s).unwrap();
        assert_eq!(
            fs.getattr(ino).unwrap().blocks,
            258,
            "the tail's block is the node"
        );
        let mut g = a.lock();
        (g.before, g.after) = (Some(after), None);
    };
    for domain in [Domain::Adr, Domain::Eadr] {
        let mount = MountOptions::default();
        let rep = crash_custom_with(7 << 20, &setup, &work, domain, &|_, _| {}, &mount);
        assert!(rep.is_clean(), "{rep}\n{:?}", rep.violations.first());
        assert!(rep.fences >= 6, "{rep}");
    }
}

/// The per-file huge flag: set, then writes of any size into empty 2 MiB spans take a whole huge
/// block (an append from 0, a small write into a hole inside the size, whose span's visible part
/// must read as zeros), truncates keep the span whole while the flag is set and cut it again once
/// it is cleared. Crashed at every fence: each image shows the flag and the data before or after
/// the operation in flight, and the blocks are checked after each.
#[test]
fn the_huge_flag_and_hinted_writes_crash_anywhere() {
    let setup = [Op::Create(s("h")), Op::Create(s("p"))];
    let ops = [
        Op::SetHuge(s("h"), true),
        // 5000 bytes from 0: one huge block (the rest of it beyond the size, not written)
        Op::Write(s("h"), 0, 5000, 1),
        // grow over a hole, then 100 bytes into the span at 2 MiB: a huge block whose visible
        // part around the write must read as zeros
        Op::Truncate(s("h"), 3 * MIB + 300),
        Op::Write(s("h"), HUGE + 12_345, 100, 2),
        // shrink into the first span: its huge block kept whole; grow back: zeros
        Op::Truncate(s("h"), 3000),
        Op::Truncate(s("h"), MIB),
        // the flag off: a truncate cuts (splits) the huge block again
        Op::SetHuge(s("h"), false),
        Op::Truncate(s("h"), 4096 + 10),
        // a fallocate of 4 KiB on a hinted file takes a whole block too
        Op::SetHuge(s("p"), true),
        Op::Fallocate(s("p"), 8192, 4096),
    ];
    let probe = |fs: &Fs<Arc<CrashSim>>, op: &Op| {
        let want = match op {
            Op::Write(p, 0, 5000, _) if p == "h" => 512,
            Op::Write(p, _, 100, _) if p == "h" => 1024 + 1,
            // the first span kept whole, the second freed
            Op::Truncate(p, 3000) | Op::Truncate(p, MIB) if p == "h" => 512 + 1,
            Op::Truncate(p, 4106) if p == "h" => 2 + 1 + 1,
            Op::Fallocate(p, ..) if p == "p" => 512,
            _ => return,
        };
        let p = match op {
            Op::Write(p, ..) | Op::Truncate(p, _) | Op::Fallocate(p, ..) => p,
            _ => unreachable!(),
        };
        assert_eq!(blocks(fs, p), want, "{op:?}");
    };
    for domain in [Domain::Adr, Domain::Eadr] {
        let rep = crash_seq(8 << 20, &setup, &ops, domain, &probe, &|_, _| {});
        assert!(rep.is_clean(), "{rep}\n{:?}", rep.violations.first());
        assert!(rep.fences >= 25, "{rep}");
        eprintln!("{domain:?}: {rep}");
    }
}
