//! Build a C program against one of pmkit's C libraries as a user would: `cc -std=c11 -Wall
//! -Wextra -Werror`, the library's header directory, and the shared library cargo left in
//! `target/<profile>` (`cargo test` does not build cdylibs: `cargo build` does, as
//! scripts/test.sh runs it first).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`, where cargo puts the shared libraries: two levels above the test binary
/// (`target/<profile>/deps/<test>`).
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// Compile `src` with `include` on the header path, linked to `-l<lib>` (found, and at run time
/// loaded, from [`lib_dir`]), into `out`. `None` (with a note) where no C compiler is installed
/// outside CI; in CI that fails the test. A compile error fails the test with cc's output.
pub fn build(src: &Path, include: &Path, lib: &str, out: &Path) -> Option<PathBuf> {
    let dir = lib_dir();
    let so = dir.join(format!("lib{lib}.so"));
    assert!(
        so.exists(),
        "{} missing: build it first (cargo build --workspace; cargo test alone does not)",
        so.display()
    );
    // The library's SONAME (libLIB.so.MAJOR, see its build.rs) is what the program loads: an
    // install links it to the file; here, next to cargo's output.
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    let soname = dir.join(format!("lib{lib}.so.{major}"));
    if std::fs::read_link(&soname).is_err() {
        let _ = std::fs::remove_file(&soname);
        let _ = std::os::unix::fs::symlink(format!("lib{lib}.so"), &soname);
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = match Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg(src)
        .arg("-I")
        .arg(include)
        .arg("-L")
        .arg(&dir)
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg(format!("-l{lib}"))
        .arg("-o")
        .arg(out)
        .output()
    {
        Ok(o) => o,
        Err(e) if !crate::in_ci() => {
            eprintln!("note: skipping: no C compiler ({cc}: {e})");
            return None;
        }
        Err(e) => panic!("no C compiler in CI ({cc}: {e}); scripts/test.sh installs gcc"),
    };
    assert!(
        o.status.success(),
        "cc {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    Some(out.to_path_buf())
}
