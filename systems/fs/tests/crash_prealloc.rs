//! Crash tests for preallocation past the end of a file: appends into preallocated blocks (the
//! fast path: no transaction), a write past the end that leaves a gap inside them, a truncate
//! that grows over them, one that drops them, the trim at the last close, all crashed at every
//! fence in both domains. Every image must pass `check` (blocks beyond a file's size are legal),
//! mount, and show the tree before or after the operation in flight, the gap reading zeros.

mod common;

use common::crashcheck::crash_seq;
use common::Op;
use pmkit_fs::Fs;
use pmkit_media::crashsim::CrashSim;
use pmkit_media::Domain;
use std::sync::Arc;

fn s(x: &str) -> String {
    x.to_string()
}

#[test]
fn appends_into_preallocated_blocks_crash_anywhere() {
    let setup = [
        Op::Create(s("f")),
        // blocks 0-1 written, 2-15 preallocated (a 1 MiB pool has about 250 free blocks)
        Op::Write(s("f"), 0, 5000, 1),
        Op::Create(s("g")),
        Op::Write(s("g"), 0, 100, 2),
    ];
    let ops = [
        // appends into preallocated blocks: no transaction
        Op::Write(s("f"), 5000, 4000, 3),
        Op::Write(s("f"), 9000, 4096, 4),
        // past the end, leaving a gap inside the preallocation (zeroed before the size moves)
        Op::Write(s("f"), 30_000, 100, 5),
        // grow over preallocated blocks (zeroed in the transaction)
        Op::Truncate(s("f"), 45_000),
        // drop the preallocation with the tail
        Op::Truncate(s("f"), 6000),
        // an append that needs a block again: a transaction that preallocates
        Op::Write(s("f"), 6000, 5000, 6),
        // the other file: an append past its first block, then closed (trimmed)
        Op::Write(s("g"), 100, 8000, 7),
        Op::Chmod(s("g"), 0o600),
    ];
    let probe = |fs: &Fs<Arc<CrashSim>>, op: &Op| {
        let st = |p: &str| fs.getattr(common::ino_of(fs, p).unwrap()).unwrap();
        match op {
            Op::Write(p, ..) => {
                let a = st(p);
                assert!(
                    a.blocks > a.size.div_ceil(4096),
                    "{op:?}: no preallocation ({} blocks, size {})",
                    a.blocks,
                    a.size
                );
            }
            // two data blocks and the level-1 node
            Op::Truncate(p, 6000) => assert_eq!(st(p).blocks, 3, "{op:?}: tail not dropped"),
            Op::Chmod(p, _) => {
                // the last close gives the preallocation back
                let ino = common::ino_of(fs, p).unwrap();
                fs.open(ino).unwrap();
                fs.release(ino).unwrap();
                assert_eq!(st(p).blocks, 3, "{op:?}: not trimmed at release");
            }
            _ => {}
        }
    };
    for domain in [Domain::Adr, Domain::Eadr] {
        let rep = crash_seq(1 << 20, &setup, &ops, domain, &probe, &|_, _| {});
        assert!(rep.is_clean(), "{rep}\n{:?}", rep.violations.first());
        assert!(rep.fences >= 20, "{rep}");
        eprintln!("{domain:?}: {rep}");
    }
}
