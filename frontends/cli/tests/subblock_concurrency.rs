//! Writers of different 512-byte sectors of the same 4 KiB blocks, at the same time, through
//! each front end (two NBD connections to `pmkit serve`; two writers of the FUSE file of
//! `pmkit attach`): every sector must keep its own writer's bytes. Each sector is written once
//! per pass, so a read-modify-write that loses a neighbour's sector leaves it lost for the check.

mod serve_util;

use pmkit::adapters::BlkDisk;
use pmkit_blk::{CreateOptions, EngineOptions};
use pmkit_fuse::attach::{attach, AttachOptions};
use serve_util::*;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

const SECTOR: usize = 512;
const BLOCK: usize = 4096;
const BLOCKS: usize = 256;
const WRITERS: usize = 4;
const PASSES: usize = 3;

/// The byte writer `w` stores in its sectors in `pass`.
fn value(pass: usize, w: usize) -> u8 {
    (pass * WRITERS + w) as u8 | 0x80
}

/// Writer `w` owns sectors `w` and `w + WRITERS` of every block; `put(offset, bytes)` writes.
fn write_sectors(w: usize, pass: usize, mut put: impl FnMut(u64, &[u8])) {
    let data = [value(pass, w); SECTOR];
    for b in 0..BLOCKS {
        for s in [w, w + WRITERS] {
            put((b * BLOCK + s * SECTOR) as u64, &data);
        }
    }
}

/// Every sector holds its writer's value of `pass`.
fn check(image: &[u8], pass: usize, front: &str) {
    let mut lost = 0;
    let mut first = None;
    for b in 0..BLOCKS {
        for s in 0..2 * WRITERS {
            let want = value(pass, s % WRITERS);
            let at = b * BLOCK + s * SECTOR;
            if image[at..at + SECTOR].iter().any(|&x| x != want) {
                lost += 1;
                first.get_or_insert((b, s));
            }
        }
    }
    assert_eq!(
        lost, 0,
        "{front}, pass {pass}: {lost} sectors lost their write (first: block {:?})",
        first
    );
}

fn nbd_call(
    s: &mut std::os::unix::net::UnixStream,
    typ: u16,
    off: u64,
    payload: &[u8],
    len: u32,
) -> Vec<u8> {
    let mut m = nbd_request(typ, 7, off, len);
    m.extend_from_slice(payload);
    s.write_all(&m).unwrap();
    let (err, handle) = nbd_reply(s).unwrap();
    assert_eq!(
        (err, handle),
        (0, 7),
        "NBD request type {typ} at {off} failed"
    );
    let mut data = vec![];
    if typ == 0 {
        data = vec![0u8; len as usize];
        s.read_exact(&mut data).unwrap();
    }
    data
}

#[test]
fn nbd_connections_writing_sectors_of_one_block_lose_nothing() {
    let dev = DevFile::new("subblock-race");
    let s = Serve::start(dev.path(), &["--size", "4M", "--block-size", "4096"]);
    for pass in 0..PASSES {
        std::thread::scope(|scope| {
            for w in 0..WRITERS {
                let sock = s.sock.clone();
                scope.spawn(move || {
                    let mut c = nbd_connect(&sock).unwrap();
                    write_sectors(w, pass, |off, data| {
                        nbd_call(&mut c, 1, off, data, data.len() as u32);
                    });
                });
            }
        });
        let mut c = nbd_connect(&s.sock).unwrap();
        let image = nbd_call(&mut c, 0, 0, &[], (BLOCKS * BLOCK) as u32);
        check(&image, pass, "nbd");
    }
}

#[test]
fn fuse_writers_of_sectors_of_one_block_lose_nothing() {
    if !have_fuse_and_loop() {
        return;
    }
    let dir = shm_dir("subblock-fuse");
    let pm = dir.path().join("dev.pmbd");
    let create = CreateOptions {
        block_size: BLOCK as u32,
        ..Default::default()
    };
    let dev = pmkit_blk::create_path(&pm, Some(4 << 20), &create, &EngineOptions::default())
        .expect("create the device");
    let opts = AttachOptions {
        pm_path: pm.clone(),
        mountpoint: None,
        mkfs: None,
        threads: 2,
        mount_options: None,
        route: Default::default(),
        // PMKIT_ATTACH_TRANSPORT=dev|uring: run over that FUSE transport (default auto).
        transport: std::env::var("PMKIT_ATTACH_TRANSPORT")
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or_default(),
    };
    let mut attached = attach(BlkDisk(Arc::new(dev)), &opts).expect("attach the FUSE file");
    let file = attached.state.fuse_dir.join(pmkit_fuse::DISK_NAME);
    for pass in 0..PASSES {
        std::thread::scope(|scope| {
            for w in 0..WRITERS {
                let file = file.clone();
                scope.spawn(move || {
                    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
                    write_sectors(w, pass, |off, data| f.write_all_at(data, off).unwrap());
                });
            }
        });
        let mut image = vec![0u8; BLOCKS * BLOCK];
        std::fs::File::open(&file)
            .unwrap()
            .read_exact_at(&mut image, 0)
            .unwrap();
        check(&image, pass, "fuse");
    }
    attached.detach().expect("detach");
}
