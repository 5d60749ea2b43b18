//! The C ABI end to end: compile examples/pmo_example.c against include/pmo.h and the cdylib
//! this build produced, run it, and check its output and exit status.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn c_example_builds_and_runs() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = pmkit_testkit::scratch();
    let Some(bin) = pmkit_testkit::cexample::build(
        &manifest.join("examples/pmo_example.c"),
        &manifest.join("include"),
        "pmo",
        &dir.path().join("pmo_example"),
    ) else {
        return;
    };
    // The same program with each shadow (PMO_SHADOW picks it; the default is DRAM), without
    // protection keys (PMO_PKEY=off: the kernel write path), with page rights (PMO_KERNEL=off
    // too), and on a pool with page checksums (PMO_CHECKSUM=on).
    for (shadow, pkey, kernel, checksum) in [
        ("dram", "on", "on", "off"),
        ("pm", "on", "on", "off"),
        ("dram", "off", "on", "off"),
        ("dram", "off", "off", "off"),
        ("dram", "on", "on", "on"),
    ] {
        let pool = dir
            .path()
            .join(format!("pool-{shadow}-{pkey}-{kernel}-{checksum}"));
        let run = Command::new(&bin)
            .arg(&pool)
            .env("PMO_SHADOW", shadow)
            .env("PMO_PKEY", pkey)
            .env("PMO_KERNEL", kernel)
            .env("PMO_CHECKSUM", checksum)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success(),
            "example failed with PMO_SHADOW={shadow} PMO_PKEY={pkey}: {:?}\n{stdout}\n{}",
            run.status,
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(
            stdout.contains("reopened: meta.count = 1024, ints[1023] = 2046"),
            "{stdout}"
        );
        assert!(stdout.contains("already exists"), "{stdout}");
        assert!(stdout.contains("not attached"), "{stdout}");
        assert!(stdout.contains("explicit: ints[0] = 7"), "{stdout}");
        assert!(stdout.contains("pmo_example: ok"), "{stdout}");
        // The header records the checksum option the pool was created with.
        let pool_opened = pmkit_obj::Pool::open(
            pmkit_media::Region::open_read_only(&pool).unwrap(),
            &pmkit_obj::PoolOptions {
                protect: false,
                ..Default::default()
            },
        );
        let (p, _) = pool_opened.unwrap();
        assert_eq!(p.checksum(), checksum == "on", "PMO_CHECKSUM={checksum}");
    }
}
