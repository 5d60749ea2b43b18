//! The C ABI end to end: compile examples/xmem_example.c against include/xmem.h and the cdylib
//! this build produced (`cargo build -p pmkit-xmem` makes it; `cargo test` alone does not), run
//! it, and check its output. Also: `xfree` of a foreign pointer aborts with a message.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Command;

fn build(dir: &std::path::Path, src: &str, name: &str) -> Option<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::current_exe().unwrap();
    let libdir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let so = libdir.join("libpmkit_xmem.so");
    assert!(
        so.exists(),
        "{} missing: build the cdylib first (cargo build -p pmkit-xmem)",
        so.display()
    );
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let bin = dir.join(name);
    let out = match Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror"])
        .arg(src)
        .arg("-I")
        .arg(manifest.join("include"))
        .arg("-L")
        .arg(&libdir)
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .arg("-lpmkit_xmem")
        .arg("-o")
        .arg(&bin)
        .output()
    {
        Ok(o) => o,
        Err(e) if std::env::var("CI").is_err() => {
            eprintln!("note: skipping: no C compiler ({cc}: {e})");
            return None;
        }
        Err(e) => panic!("no C compiler in CI ({cc}: {e}); install gcc"),
    };
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(bin)
}

#[test]
fn c_example_builds_and_runs() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let src = manifest.join("examples/xmem_example.c");
    let Some(bin) = build(dir.path(), src.to_str().unwrap(), "xmem_example") else {
        return;
    };
    let pm = dir.path().join("pm.img");
    let run = Command::new(&bin).arg(&pm).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{:?}\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("\"fast_slots\":1,\"fast_used\":1"),
        "{stdout}"
    );
    assert!(stdout.contains("foreign free: pointer 0x"), "{stdout}");
    assert!(stdout.trim_end().ends_with("ok"), "{stdout}");
    assert!(!pm.exists(), "the PM file X-Mem created is gone");
}

#[test]
fn xfree_of_a_foreign_pointer_aborts_with_a_message() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let src = dir.path().join("bad.c");
    std::fs::write(
        &src,
        "#include \"xmem.h\"\nint main(void) { long x = 0; if (xmem_init(\"pm_size=2M,budget=0,region=2M,reserve=8M\")) return 2; xfree(&x); return 0; }\n",
    )
    .unwrap();
    let Some(bin) = build(dir.path(), src.to_str().unwrap(), "bad") else {
        return;
    };
    let run = Command::new(&bin).output().unwrap();
    assert_eq!(run.status.signal(), Some(libc::SIGABRT), "{:?}", run.status);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("was not handed out by this XMem"),
        "{stderr}"
    );
}
