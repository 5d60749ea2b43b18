//! `pmkit xmem profile`'s process side: run the program under `valgrind --tool=lackey
//! --trace-mem=yes` and keep its log; the classification is `pmkit_xmem::untagged`.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Run `program` under `valgrind --tool=lackey --trace-mem=yes`, the log going to `log`.
pub(crate) fn run_lackey(program: &[String], log: &Path) -> Result<std::process::ExitStatus> {
    let mut cmd = std::process::Command::new("valgrind");
    cmd.arg("--tool=lackey")
        .arg("--trace-mem=yes")
        .arg(format!("--log-file={}", log.display()))
        .args(program);
    match cmd.status() {
        Ok(s) => Ok(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "valgrind is not installed (apt-get install valgrind), or pass a saved lackey log with --trace FILE"
        ),
        Err(e) => Err(e).context("starting valgrind"),
    }
}

/// A scratch path for the lackey log, removed on drop unless kept.
pub(crate) struct LogFile {
    pub path: PathBuf,
    pub keep: bool,
}

impl Drop for LogFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
