//! What the benches' smoke tests share: tool checks and reading a `--json` run.

use serde_json::Value;
use std::process::Output;

/// `tool` is on PATH.
pub(crate) fn have(tool: &str) -> bool {
    pmkit_testkit::have(tool)
}

/// The JSON a `--json` run printed, which must be all it printed on stdout.
pub(crate) fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "--json prints only JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}
