//! A one-line progress report on stderr for long measurements (`pmkit probe`, `pmkit-bench`):
//! `[pos/len] message, ETA`, redrawn in place, shown only on a terminal and never with `--json`.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Instant;

/// Progress through `len` steps; a hidden one does nothing.
pub struct Progress {
    state: Option<Mutex<State>>,
}

struct State {
    len: u64,
    pos: u64,
    msg: String,
    start: Instant,
}

impl Progress {
    /// Progress through `len` steps, drawn when `shown` and stderr is a terminal.
    pub fn new(shown: bool, len: u64) -> Progress {
        let state = (shown && std::io::stderr().is_terminal()).then(|| {
            Mutex::new(State {
                len,
                pos: 0,
                msg: String::new(),
                start: Instant::now(),
            })
        });
        Progress { state }
    }

    /// Name the step under way.
    pub fn set_message(&self, msg: impl Into<String>) {
        self.update(|s| s.msg = msg.into());
    }

    /// One step done.
    pub fn inc(&self) {
        self.update(|s| s.pos += 1);
    }

    /// Erase the line.
    pub fn finish(&self) {
        if self.state.is_some() {
            eprint!("\r\x1b[2K");
        }
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        let Some(m) = &self.state else { return };
        let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut s);
        let eta = if s.pos > 0 && s.pos < s.len {
            let left = s.start.elapsed().as_secs_f64() / s.pos as f64 * (s.len - s.pos) as f64;
            format!(", about {left:.0} s left")
        } else {
            String::new()
        };
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[2K[{}/{}] {}{eta}", s.pos, s.len, s.msg);
        let _ = e.flush();
    }
}
