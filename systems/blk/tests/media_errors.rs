//! Media errors injected by the crash simulator: a read of a poisoned line is an EIO naming the
//! block, never data; rewriting the block clears it; a failing msync fails the FLUSH.

use pmkit_blk::{BlkError, CreateOptions, Device, EngineOptions, Protect, WriteScheme};
use pmkit_media::crashsim::CrashSim;
use std::sync::Arc;

const LEN: usize = 2 << 20;

fn device(create: &CreateOptions, write: WriteScheme) -> (Arc<CrashSim>, Device<Arc<CrashSim>>) {
    let sim = Arc::new(CrashSim::new(LEN));
    let engine = EngineOptions {
        protect: Some(Protect::None),
        write,
        ..Default::default()
    };
    let dev = Device::create(Arc::clone(&sim), create, &engine).expect("create on the simulator");
    (sim, dev)
}

/// Media offset of logical block `b`'s data, found by writing a marker and searching for it
/// (the test does not assume the layout, which differs for atomic devices).
fn media_off_of(sim: &CrashSim, dev: &Device<Arc<CrashSim>>, b: u64) -> usize {
    let bs = dev.block_size() as usize;
    let marker: Vec<u8> = (0..bs).map(|i| (i * 7 + 13) as u8).collect();
    dev.write(b * bs as u64, &marker, true).unwrap();
    let image = sim.image();
    image
        .windows(bs)
        .position(|w| w == marker.as_slice())
        .expect("the marker is on the media")
}

#[test]
fn a_poisoned_block_reads_as_eio_never_as_data_and_a_rewrite_clears_it() {
    for (name, create) in [
        ("plain", CreateOptions::default()),
        (
            "checksum",
            CreateOptions {
                checksum: true,
                ..Default::default()
            },
        ),
        (
            "atomic",
            CreateOptions {
                atomic: true,
                ..Default::default()
            },
        ),
    ] {
        let (sim, dev) = device(&create, WriteScheme::Nt);
        let bs = dev.block_size() as usize;
        let at = media_off_of(&sim, &dev, 5);
        sim.poison(at + 100, 1);
        let mut buf = vec![0x11u8; 3 * bs];
        let err = dev
            .read(4 * bs as u64, &mut buf)
            .expect_err("poison must not read");
        assert!(
            matches!(err, BlkError::BadMedia { block: 5, .. }),
            "{name}: {err}"
        );
        assert_eq!(err.errno(), libc::EIO, "{name}");
        assert!(
            buf.iter().all(|&b| b == 0),
            "{name}: data leaked from a failed read"
        );
        // A sub-block write into the bad block is a read-modify-write: it must fail too,
        // rather than write back the fill pattern around the new bytes.
        assert!(
            dev.write_bytes(5 * bs as u64 + 10, &[1, 2, 3], false)
                .is_err(),
            "{name}"
        );
        // Whole-block writes replace the bad data and clear the error.
        let fresh = vec![0x5Au8; bs];
        dev.write(5 * bs as u64, &fresh, true).unwrap();
        let mut back = vec![0u8; bs];
        dev.read(5 * bs as u64, &mut back).unwrap();
        assert_eq!(back, fresh, "{name}");
        assert!(dev.stats().media_errors >= 2, "{name}: {:?}", dev.stats());
        dev.close().unwrap();
    }
}

#[test]
fn a_failing_msync_fails_the_flush_not_the_process() {
    let (sim, dev) = device(&CreateOptions::default(), WriteScheme::Msync);
    dev.write(0, &vec![7u8; dev.block_size() as usize], false)
        .unwrap();
    sim.fail_syncs_after(0);
    let err = dev.flush().expect_err("the barrier's msync failed");
    assert_eq!(err.errno(), libc::EIO, "{err}");
    sim.fail_syncs_after(u64::MAX);
    dev.flush().expect("a later flush succeeds again");
    dev.close().unwrap();
}
