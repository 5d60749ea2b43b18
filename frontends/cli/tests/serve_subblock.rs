//! Model test of `pmkit serve`'s 512-byte sector emulation over 4 KiB device blocks: random
//! reads, writes, write-zeroes and trims at 512-byte granularity from two connections,
//! compared byte for byte with a model after every read, then after a restart.

mod serve_util;

use serve_util::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

const SECTOR: u64 = 512;
const DEV_MIB: u64 = 4;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn call(s: &mut UnixStream, typ: u16, off: u64, len: u32, payload: &[u8]) -> (u32, Vec<u8>) {
    let mut m = nbd_request(typ, 1, off, len);
    m.extend_from_slice(payload);
    s.write_all(&m).unwrap();
    let (err, h) = nbd_reply(s).unwrap();
    assert_eq!(h, 1);
    let mut data = Vec::new();
    if typ == 0 && err == 0 {
        data = vec![0u8; len as usize];
        s.read_exact(&mut data).unwrap();
    }
    (err, data)
}

#[test]
fn sub_block_io_matches_a_model() {
    let dev = DevFile::new("subblock");
    let size_arg = format!("{DEV_MIB}M");
    let s = Serve::start(dev.path(), &["--size", &size_arg]);
    let size = (DEV_MIB << 20) - 4096;
    let mut model = vec![0u8; size as usize];
    let mut conns = [nbd_connect(&s.sock).unwrap(), nbd_connect(&s.sock).unwrap()];
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    // Ranges cluster in the first 64 KiB so sub-block pieces of one block collide often.
    let pick = |rng: &mut Rng| {
        let span = if rng.below(4) == 0 {
            size / SECTOR
        } else {
            128
        };
        let start = rng.below(span) * SECTOR;
        let max = ((size - start) / SECTOR).min(24);
        let len = (1 + rng.below(max)) * SECTOR;
        (start, len)
    };
    for step in 0..1500u64 {
        let c = &mut conns[(step % 2) as usize];
        let (off, len) = pick(&mut rng);
        let (o, l) = (off as usize, len as usize);
        match rng.below(10) {
            0..=4 => {
                let mut d = vec![0u8; l];
                fill_random(&mut d, step + 1);
                assert_eq!(call(c, 1, off, len as u32, &d).0, 0);
                model[o..o + l].copy_from_slice(&d);
            }
            5 => {
                assert_eq!(call(c, 6, off, len as u32, &[]).0, 0);
                model[o..o + l].fill(0);
            }
            6 => {
                // TRIM discards only the whole 4 KiB blocks inside the range (PMBD zeroes them).
                assert_eq!(call(c, 4, off, len as u32, &[]).0, 0);
                let (a, b) = (off.div_ceil(4096) * 4096, (off + len) / 4096 * 4096);
                if b > a {
                    model[a as usize..b as usize].fill(0);
                }
            }
            _ => {
                let (err, got) = call(c, 0, off, len as u32, &[]);
                assert_eq!(err, 0);
                assert!(
                    got == model[o..o + l],
                    "step {step}: read {off}+{len} differs from the model"
                );
            }
        }
    }
    // A misaligned (non-512) request is still refused.
    assert_eq!(call(&mut conns[0], 0, 100, 512, &[]).0, 22);
    assert_eq!(call(&mut conns[0], 3, 0, 0, &[]).0, 0); // FLUSH
    drop(conns);
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
    // After a clean restart, the whole device equals the model.
    let s = Serve::start(dev.path(), &[]);
    let mut c = nbd_connect(&s.sock).unwrap();
    for off in (0..size).step_by(1 << 20) {
        let len = (1u64 << 20).min(size - off);
        let (err, got) = call(&mut c, 0, off, len as u32, &[]);
        assert_eq!(err, 0);
        assert!(
            got == model[off as usize..(off + len) as usize],
            "after restart: {off}+{len} differs"
        );
    }
    drop(c);
    let (st, _) = s.stop();
    assert!(st.success());
}
