//! The shim's configuration (read once from the environment), the path helpers built on it, and
//! its one-line warnings.

use crate::busy::Busy;
use std::path::PathBuf;
use std::sync::OnceLock;

pub(crate) struct Config {
    /// Absolute, normalized (see [`normalize`]), never "/".
    pub prefix: Vec<u8>,
    pub pool: PathBuf,
}

static CONFIG: OnceLock<Option<Config>> = OnceLock::new();

/// The configuration, or None (inert) when `PMKIT_PRELOAD_POOL` or `PMKIT_PRELOAD_PREFIX` is
/// missing or empty.
pub(crate) fn config() -> Option<&'static Config> {
    CONFIG
        .get_or_init(|| {
            let _b = Busy::new();
            let pool = std::env::var_os("PMKIT_PRELOAD_POOL").filter(|v| !v.is_empty());
            let prefix = std::env::var_os("PMKIT_PRELOAD_PREFIX").filter(|v| !v.is_empty());
            let (Some(pool), Some(prefix)) = (pool, prefix) else {
                // Preloaded but not told what to serve: say so once, or a user believes the
                // program ran on the pool while the kernel served every path.
                warn(
                    "PMKIT_PRELOAD_POOL and PMKIT_PRELOAD_PREFIX are not both set: inert, \
                     every path goes to the kernel",
                );
                return None;
            };
            let raw = std::os::unix::ffi::OsStrExt::as_bytes(prefix.as_os_str()).to_vec();
            let prefix = normalize(&raw);
            if raw.first() != Some(&b'/') || prefix == b"/" {
                warn(&format!(
                    "PMKIT_PRELOAD_PREFIX={} must be an absolute path other than /: inert",
                    String::from_utf8_lossy(&raw)
                ));
                return None;
            }
            Some(Config {
                prefix,
                pool: PathBuf::from(pool),
            })
        })
        .as_ref()
}

/// `path` (absolute) with empty and `.` components dropped and `..` applied lexically.
/// A pool path as a name to keep (a descriptor's, the current directory's): without the
/// trailing slashes and the "/." that `route` keeps for the calls that refuse a final dot.
pub(crate) fn kept_path(mut p: Vec<u8>) -> Vec<u8> {
    while p.len() > 1 && (p.ends_with(b"/") || p.ends_with(b"/.")) {
        p.pop();
        if p.ends_with(b"/") && p.len() > 1 {
            p.pop();
        }
    }
    p
}

/// The last component of `path`, trailing slashes ignored (empty for "/" or "").
pub(crate) fn last_component(path: &[u8]) -> &[u8] {
    path.split(|&b| b == b'/')
        .rfind(|c| !c.is_empty())
        .unwrap_or(b"")
}

pub(crate) fn normalize(path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::with_capacity(path.len() + 1);
    for c in parts {
        out.push(b'/');
        out.extend_from_slice(c);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// One line on stderr, prefixed with the library's name.
pub(crate) fn warn(msg: &str) {
    let _b = Busy::new();
    let line = format!("pmkit-preload: {msg}\n");
    // SAFETY: a write of our own buffer; the guard sends it to libc.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}
