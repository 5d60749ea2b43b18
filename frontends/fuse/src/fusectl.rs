//! The kernel's FUSE control file system (`fusectl`, at /sys/fs/fuse/connections): a mount's
//! connection, and aborting it. Abort is the last resort of a daemon that cannot answer: the
//! kernel fails every request in flight and every later one (ECONNABORTED, then ENOTCONN), so
//! callers waiting in uninterruptible sleep for a reply that will never come are freed.

use std::path::Path;

const CONNECTIONS: &str = "/sys/fs/fuse/connections";

/// Abort connection `conn`, mounting fusectl first where nobody has (root needed, as for the
/// mount itself).
pub fn abort(conn: u64) -> Result<(), String> {
    let dir = Path::new(CONNECTIONS).join(conn.to_string());
    if !dir.exists() && !mounted() {
        let st = std::process::Command::new("mount")
            .args(["-t", "fusectl", "fusectl", CONNECTIONS])
            .status()
            .map_err(|e| format!("cannot run mount for fusectl: {e}"))?;
        if !st.success() {
            return Err(format!("cannot mount fusectl on {CONNECTIONS} ({st})"));
        }
    }
    match std::fs::write(dir.join("abort"), b"1") {
        // Gone already: the connection ended (an abort before this one, or the unmount).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r.map_err(|e| format!("{}: cannot abort: {e}", dir.display())),
    }
}

fn mounted() -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .is_ok_and(|m| m.lines().any(|l| l.split(' ').nth(2) == Some("fusectl")))
}
