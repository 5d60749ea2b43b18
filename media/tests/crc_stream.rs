//! The fused stream-and-CRC-32C copy: the CRC it returns is exactly `crc32c_append`'s, the bytes
//! it stores are the source's, and `Media::write_nt_crc32c` agrees between the default (store,
//! then checksum) and a mapping's fused override, through `&` and `Arc` as well.

use pmkit_media::crashsim::CrashSim;
use pmkit_media::{raw, Fence, Media, Region, LINE};
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use std::sync::Arc;

#[test]
fn fused_stream_matches_crc32c_and_copies() {
    if !raw::crc32c_stream_supported() {
        eprintln!("skipped: no AVX-512F + VPCLMULQDQ + SSE4.2 on this CPU");
        // The dispatcher must say so rather than run.
        let r = Region::anonymous(1 << 16).unwrap();
        let src = [7u8; LINE];
        // SAFETY: one line inside the region, aligned; `src` is a separate buffer.
        let got = unsafe { raw::stream_lines_crc32c(r.ptr_at(0, LINE), src.as_ptr(), 1, 0) };
        assert_eq!(got, None);
        return;
    }
    const MAX: usize = 256;
    let r = Region::anonymous(MAX * LINE * 2).unwrap();
    let mut rng = SmallRng::seed_from_u64(0x5EED_C3C3);
    // One spare byte at the front so the source can be misaligned by any amount.
    let mut buf = vec![0u8; MAX * LINE + 64];
    for lines in 1..=MAX {
        for _ in 0..4 {
            rng.fill_bytes(&mut buf);
            let skew = rng.gen_range(0..64);
            let src = &buf[skew..skew + lines * LINE];
            let crc: u32 = rng.gen();
            let line = rng.gen_range(0..=MAX * 2 - lines);
            let off = line * LINE;
            let dst = r.ptr_at(off, lines * LINE);
            // SAFETY: `[off, off + lines*64)` is inside the region and line-aligned; `src` is
            // a separate buffer of `lines * 64` bytes.
            let got = unsafe { raw::stream_lines_crc32c(dst, src.as_ptr(), lines, crc) };
            raw::fence(Fence::Sfence);
            assert_eq!(
                got,
                Some(crc32c::crc32c_append(crc, src)),
                "{lines} lines, skew {skew}, crc {crc:#x}"
            );
            let mut back = vec![0u8; lines * LINE];
            r.read(off, &mut back);
            assert!(
                back == src,
                "{lines} lines: stored bytes differ from the source"
            );
        }
    }
    // No lines: the CRC passes through unchanged.
    // SAFETY: zero bytes are touched.
    let got = unsafe { raw::stream_lines_crc32c(r.ptr_at(0, 0), buf.as_ptr(), 0, 0x1234_5678) };
    assert_eq!(got, Some(0x1234_5678));
}

#[test]
fn write_nt_crc32c_default_and_region_agree() {
    const LEN: usize = 64 * 1024;
    let region = Region::anonymous(LEN).unwrap();
    let sim = CrashSim::new(LEN);
    let mut rng = SmallRng::seed_from_u64(0xC2C3_2C00);
    let mut cases: Vec<(usize, usize)> = vec![
        (0, 4096),
        (4096, 64),
        (64, 64 * 17),
        (0, 0),
        (128, 0),
        (3, 64),
        (64, 65),
        (1, 4095),
        (4096 - 5, 10),
        (LEN - 4096, 4096),
    ];
    for _ in 0..300 {
        let aligned = rng.gen_bool(0.5);
        let len = if aligned {
            rng.gen_range(0..=64) * LINE
        } else {
            rng.gen_range(0..=4200)
        };
        let off = if aligned {
            rng.gen_range(0..=(LEN - len) / LINE) * LINE
        } else {
            rng.gen_range(0..=LEN - len)
        };
        cases.push((off, len));
    }
    let shared = Arc::new(Region::anonymous(LEN).unwrap());
    for (off, len) in cases {
        let mut data = vec![0u8; len];
        rng.fill_bytes(&mut data);
        let crc: u32 = rng.gen();
        let want = crc32c::crc32c_append(crc, &data);
        let by_region = region.write_nt_crc32c(off, &data, crc);
        let by_sim = sim.write_nt_crc32c(off, &data, crc);
        let by_ref = (&&region).write_nt_crc32c(off, &data, crc);
        let by_arc = shared.write_nt_crc32c(off, &data, crc);
        region.fence(Fence::Sfence);
        sim.fence(Fence::Sfence);
        shared.fence(Fence::Sfence);
        assert_eq!(by_region, want, "region at {off}+{len}");
        assert_eq!(by_sim, want, "default at {off}+{len}");
        assert_eq!(by_ref, want, "&region at {off}+{len}");
        assert_eq!(by_arc, want, "Arc<Region> at {off}+{len}");
        let mut back = vec![0u8; len];
        region.read(off, &mut back);
        assert!(back == data, "region bytes at {off}+{len}");
        sim.read(off, &mut back);
        assert!(back == data, "simulator bytes at {off}+{len}");
        shared.read(off, &mut back);
        assert!(back == data, "Arc<Region> bytes at {off}+{len}");
    }
    // The whole images agree too (nothing stored outside the ranges).
    let mut a = vec![0u8; LEN];
    let mut b = vec![0u8; LEN];
    region.read(0, &mut a);
    sim.read(0, &mut b);
    assert!(a == b, "region and simulator images differ");
}
