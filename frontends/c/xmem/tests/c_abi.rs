//! The C ABI end to end: compile examples/xmem_example.c against include/xmem.h and the cdylib
//! this build produced (`cargo build` makes libxmem.so; `cargo test` alone does not), run
//! it, and check its output. Also: `xfree` of a foreign pointer aborts with a message.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Command;

fn build(dir: &std::path::Path, src: &std::path::Path, name: &str) -> Option<PathBuf> {
    let include = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include");
    pmkit_testkit::cexample::build(src, &include, "xmem", &dir.join(name))
}

#[test]
fn c_example_builds_and_runs() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = pmkit_testkit::scratch();
    let src = manifest.join("examples/xmem_example.c");
    let Some(bin) = build(dir.path(), &src, "xmem_example") else {
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
    let dir = pmkit_testkit::scratch();
    let src = dir.path().join("bad.c");
    std::fs::write(
        &src,
        "#include \"xmem.h\"\nint main(void) { long x = 0; if (xmem_init(\"pm_size=2M,budget=0,region=2M,reserve=8M\")) return 2; xfree(&x); return 0; }\n",
    )
    .unwrap();
    let Some(bin) = build(dir.path(), &src, "bad") else {
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
