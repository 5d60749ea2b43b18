//! `--stats FILE` of `serve` and `attach`: a device's statistics kept as JSON in a file.

use anyhow::{Context, Result};

/// `--stats FILE` of `serve` and `attach`: the device's statistics (counts, bytes, latency
/// histograms, flushes) as JSON in FILE, rewritten every second while the device is up and once
/// more after it closes. Each write goes to a temporary file renamed over FILE, so a reader
/// never sees half a document.
pub struct StatsWriter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    path: std::path::PathBuf,
}

/// Write `value` as pretty JSON to `path` atomically.
fn write_json_atomically(
    path: &std::path::Path,
    value: &impl serde::Serialize,
) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(&tmp, path)
}

impl StatsWriter {
    pub fn spawn<S: serde::Serialize>(
        path: std::path::PathBuf,
        stats: impl Fn() -> S + Send + 'static,
    ) -> Result<StatsWriter> {
        use std::sync::atomic::Ordering;
        write_json_atomically(&path, &stats())
            .with_context(|| format!("writing statistics to {}", path.display()))?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, p) = (stop.clone(), path.clone());
        let thread = std::thread::Builder::new()
            .name("pmkit-stats".into())
            .spawn(move || {
                // Wake every 200 ms (quick to stop), write every fifth time (once a second).
                let mut ticks = 0u64;
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    ticks += 1;
                    if ticks.is_multiple_of(5) {
                        if let Err(e) = write_json_atomically(&p, &stats()) {
                            tracing::warn!("writing statistics to {}: {e}", p.display());
                        }
                    }
                }
            })?;
        Ok(StatsWriter {
            stop,
            thread: Some(thread),
            path,
        })
    }

    /// Stop the periodic writes and write `last` (the statistics after close).
    pub fn finish(mut self, last: &impl serde::Serialize) -> Result<()> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        write_json_atomically(&self.path, last)
            .with_context(|| format!("writing statistics to {}", self.path.display()))
    }
}
