//! The C ABI end to end: compile examples/pmo_example.c against include/pmo.h and the cdylib
//! this build produced, run it, and check its output and exit status.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn c_example_builds_and_runs() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // target/<profile>/deps/c_abi-... -> target/<profile>, where cargo puts libpmkit_obj.so.
    let exe = std::env::current_exe().unwrap();
    let libdir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let so = libdir.join("libpmkit_obj.so");
    if !so.exists() {
        panic!(
            "{} missing: build the cdylib first (cargo build -p pmkit-obj)",
            so.display()
        );
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("pmo_example");
    let out = match Command::new(&cc)
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-Werror")
        .arg(manifest.join("examples/pmo_example.c"))
        .arg("-I")
        .arg(manifest.join("include"))
        .arg("-L")
        .arg(&libdir)
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .arg("-lpmkit_obj")
        .arg("-o")
        .arg(&bin)
        .output()
    {
        Ok(o) => o,
        Err(e) if std::env::var("CI").is_err() => {
            eprintln!("note: skipping: no C compiler ({cc}: {e})");
            return;
        }
        Err(e) => panic!("no C compiler in CI ({cc}: {e}); install gcc"),
    };
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
