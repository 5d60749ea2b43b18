//! Finding the other pmkit executable (`pmkit` runs `pmkit-bench` for `pmkit bench`; the NBD
//! benchmark runs `pmkit serve`): the one in the running executable's directory first (a cargo
//! target directory or an install prefix holds both), else the first on `PATH`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The executable `name` next to this process's executable, else on `PATH`; `None` if neither.
pub fn find(name: &str) -> Option<PathBuf> {
    let here = std::env::current_exe().ok();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = here
        .as_deref()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .into_iter()
        .chain(std::env::split_paths(&path));
    dirs.find_map(|d| Some(d.join(name)).filter(|p| is_executable(p)))
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
