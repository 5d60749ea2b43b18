//! What the benchmarks need from the machine, checked up front with a clear message, and the
//! scratch files and folders they leave nothing of.

use anyhow::{bail, ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Fail unless this process runs as root; `why` says what needs it.
pub(crate) fn need_root(why: &str) -> Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    ensure!(euid == 0, "{why} and needs root");
    Ok(())
}

/// Fail unless `tool` is on PATH; `hint` says how to install it.
pub(crate) fn need_tool(tool: &str, hint: &str) -> Result<()> {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ensure!(found, "`{tool}` is not installed: {hint}");
    Ok(())
}

/// Run `c`; its stdout, or an error with its output.
pub(crate) fn sh(c: &mut Command) -> Result<String> {
    let what = format!("{c:?}");
    let o = c.output().with_context(|| format!("running {what}"))?;
    if !o.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Run fio (`c`, with `--output-format=json`) and parse its report, skipping any notes fio or
/// its engine print before the JSON document.
pub(crate) fn fio_json(c: &mut Command) -> Result<serde_json::Value> {
    let out = sh(c)?;
    let start = out.find('{').context("fio printed no JSON")?;
    serde_json::from_str(&out[start..]).context("parsing fio's JSON report")
}

/// A file or folder of this process (`pmkit-bench-{what}-{pid}` in `dir`), removed beforehand
/// and on drop.
pub(crate) struct Scratch(pub PathBuf);

impl Scratch {
    /// The path of a scratch file; nothing is created.
    pub(crate) fn file(dir: &Path, what: &str) -> Scratch {
        let p = dir.join(format!("pmkit-bench-{what}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        Scratch(p)
    }

    /// A new empty scratch folder.
    pub(crate) fn dir(parent: &Path, what: &str) -> Result<Scratch> {
        let p = parent.join(format!("pmkit-bench-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(Scratch(p))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.0.is_dir() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

pub(crate) use pmkit_media::cpu::label as cpu_label;
