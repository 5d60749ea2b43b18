//! A client's reads in place (`pmkit_fs::direct`): `pread` copies from the pool file by a
//! layout its session hands out, checked against the server's free epoch. Each test makes the
//! layout stale in one way a file changes and checks that the bytes read are the file's: never a
//! freed block's new owner's, never a hole's zeros once it was written.

mod common;

use common::served;
use pmkit_fs_share::{Calls, PoolApi};

const RW: i32 = libc::O_RDWR | libc::O_CREAT;
const B: usize = 4096;

#[test]
fn reads_go_in_place_and_see_writes_appends_and_filled_holes() {
    let s = served();
    let (c, w) = (s.client(), s.client());
    let fw = w.open(b"/f", RW, 0o644).unwrap();
    w.pwrite(fw, &vec![b'a'; 3 * B], 0).unwrap();
    let fc = c.open(b"/f", libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; 2 * B];
    assert_eq!(c.pread(fc, &mut buf, B as u64).unwrap(), 2 * B);
    assert!(buf.iter().all(|&x| x == b'a'));
    let before = c.reads_in_place();
    assert!(before >= 1, "the read was answered in place");
    // An overwrite in place: seen at once, still in place.
    w.pwrite(fw, b"XYZ", B as u64).unwrap();
    assert_eq!(c.pread(fc, &mut buf[..3], B as u64).unwrap(), 3);
    assert_eq!(&buf[..3], b"XYZ");
    assert_eq!(c.reads_in_place(), before + 1);
    // An append: the size is read in place each time, the new block by a new layout.
    w.pwrite(fw, &vec![b'b'; B], 3 * B as u64).unwrap();
    assert_eq!(c.pread(fc, &mut buf, 3 * B as u64).unwrap(), B);
    assert!(buf[..B].iter().all(|&x| x == b'b'));
    // A hole the layout knew as a hole, written since: its bytes, not zeros.
    w.ftruncate(fw, 64 * B as u64).unwrap();
    assert_eq!(c.pread(fc, &mut buf[..B], 40 * B as u64).unwrap(), B);
    assert!(buf[..B].iter().all(|&x| x == 0));
    w.pwrite(fw, &vec![b'h'; B], 40 * B as u64).unwrap();
    assert_eq!(c.pread(fc, &mut buf[..B], 40 * B as u64).unwrap(), B);
    assert!(buf[..B].iter().all(|&x| x == b'h'), "a filled hole");
    // Past the end: nothing.
    assert_eq!(c.pread(fc, &mut buf, 64 * B as u64).unwrap(), 0);
    // A descriptor opened write-only reads nothing, in place or not.
    let wo = c.open(b"/f", libc::O_WRONLY, 0).unwrap();
    assert!(c.pread(wo, &mut buf, 0).is_err());
    // A closed number that names another file next: that file's bytes.
    c.close(fc).unwrap();
    let g = w.open(b"/g", RW, 0o644).unwrap();
    w.pwrite(g, &vec![b'g'; B], 0).unwrap();
    let fg = c.open(b"/g", libc::O_RDONLY, 0).unwrap();
    assert_eq!(c.pread(fg, &mut buf[..B], 0).unwrap(), B);
    assert!(buf[..B].iter().all(|&x| x == b'g'), "the new file's bytes");
    drop((c, w));
    s.stop();
}

/// A file truncated and its blocks given to another file, then written again, while a client
/// holds a layout of it: the client reads the file's new bytes, never the other file's.
#[test]
fn a_freed_block_given_to_another_file_is_never_read_as_this_ones() {
    let s = served();
    let (c, w) = (s.client(), s.client());
    let fa = w.open(b"/a", RW, 0o644).unwrap();
    w.pwrite(fa, &vec![1u8; 8 * B], 0).unwrap();
    let ca = c.open(b"/a", libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; 8 * B];
    assert_eq!(c.pread(ca, &mut buf, 0).unwrap(), 8 * B);
    w.ftruncate(fa, 0).unwrap();
    let fb = w.open(b"/b", RW, 0o644).unwrap();
    w.pwrite(fb, &vec![0xEE; 64 * B], 0).unwrap();
    w.pwrite(fa, &vec![2u8; 8 * B], 0).unwrap();
    assert_eq!(c.pread(ca, &mut buf, 0).unwrap(), 8 * B);
    assert!(buf.iter().all(|&x| x == 2), "the file's new bytes");
    drop((c, w));
    s.stop();
}

/// The same race at full speed: a writer truncates file A, fills file B (which takes A's freed
/// blocks), rewrites A with the next version, and removes B, over and over; a reader in
/// another session reads A in place all the while. Every block it gets must be one whole
/// version of A (or a hole's zeros after the truncate), never B's bytes, never a mix.
#[test]
fn reads_racing_frees_and_reuse_never_see_another_files_bytes() {
    let s = served();
    let (c, w) = (s.client(), s.client());
    let fa = w.open(b"/a", RW, 0o644).unwrap();
    w.pwrite(fa, &vec![1u8; 4 * B], 0).unwrap();
    let ca = c.open(b"/a", libc::O_RDONLY, 0).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let rounds = 1500u32;
    std::thread::scope(|t| {
        let reader = t.spawn(|| {
            let mut buf = vec![0u8; 4 * B];
            let mut checked = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let n = c.pread(ca, &mut buf, 0).unwrap();
                for blk in buf[..n].chunks(B) {
                    let v = blk[0];
                    assert!(v != 0xEE, "read another file's bytes through a freed block");
                    assert!(blk.iter().all(|&x| x == v), "a block mixed of two versions");
                }
                checked += 1;
            }
            checked
        });
        for v in 0..rounds {
            let version = (v % 200) as u8 + 2;
            w.ftruncate(fa, 0).unwrap();
            let fb = w.open(b"/b", RW, 0o644).unwrap();
            w.pwrite(fb, &vec![0xEE; 4 * B], 0).unwrap();
            w.pwrite(fa, &vec![version; 4 * B], 0).unwrap();
            w.close(fb).unwrap();
            w.unlink(b"/b").unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let checked = reader.join().unwrap();
        assert!(checked > 0);
    });
    assert!(c.reads_in_place() > 0, "some reads were answered in place");
    drop((c, w));
    s.stop();
}
