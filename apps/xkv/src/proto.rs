//! memcached's text protocol (the subset xkv speaks): `get`/`gets` with any number of keys,
//! `set`/`add`/`replace`/`cas`, `delete`, `flush_all`, `version`, `stats`, `quit`; `noreply` on
//! every update. Replies and errors as memcached words them ("ERROR" for an unknown command,
//! "CLIENT_ERROR ..." for a malformed one, "SERVER_ERROR object too large for cache" for a value
//! over the largest item, its data swallowed). Explicit bounds: a command line of at most
//! [`MAX_LINE`] bytes (longer: an error and the connection closes), values of at most
//! [`MAX_VALUE`] (memcached's default item limit) read at all, at most [`MAX_KEYS`] keys per get.

use crate::store::{Mode, Outcome, Store, StoreError, MAX_KEY};
use crate::CLASSES;
use parking_lot::Mutex;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// Longest command line, "\r\n" included.
pub const MAX_LINE: usize = 8192;
/// Largest value a client may send (larger ones are swallowed and refused).
pub const MAX_VALUE: usize = 1 << 20;
/// Most keys in one get.
pub const MAX_KEYS: usize = 256;
/// memcached's limit between relative and absolute expiry times (30 days).
const REL_LIMIT: i64 = 60 * 60 * 24 * 30;

pub const VERSION: &str = concat!("pmkit-xkv ", env!("CARGO_PKG_VERSION"));

/// What every connection shares.
pub struct Shared<'a> {
    pub store: Mutex<Store<'a>>,
    pub memory_bytes: usize,
    pub conns: AtomicUsize,
    pub total_conns: AtomicU64,
    pub started: Instant,
}

impl<'a> Shared<'a> {
    pub fn new(store: Store<'a>, memory_bytes: usize) -> Shared<'a> {
        Shared {
            store: Mutex::new(store),
            memory_bytes,
            conns: AtomicUsize::new(0),
            total_conns: AtomicU64::new(0),
            started: Instant::now(),
        }
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// memcached's exptime: 0 never, up to 30 days relative, beyond that unix time, negative
/// already expired. As unix seconds for the store (0 = never).
fn expiry(exptime: i64) -> u32 {
    match exptime {
        0 => 0,
        e if e < 0 => 1,
        e if e <= REL_LIMIT => (unix_now() + e).clamp(1, u32::MAX as i64) as u32,
        e => e.clamp(1, u32::MAX as i64) as u32,
    }
}

/// memcached splits command lines on spaces only and takes any other byte in a key (memcaslap's
/// keys start with binary bytes); only the length is bounded.
fn valid_key(k: &[u8]) -> bool {
    !k.is_empty() && k.len() <= MAX_KEY
}

/// Serve one connection until `quit`, end of input or a protocol error that closes it.
pub fn serve<R: Read, W: Write>(r: R, w: W, sh: &Shared) -> io::Result<()> {
    let mut r = BufReader::with_capacity(64 << 10, r);
    let mut w = io::BufWriter::with_capacity(64 << 10, w);
    let mut line = Vec::with_capacity(256);
    let mut data = Vec::new();
    loop {
        line.clear();
        let n = r
            .by_ref()
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        if line.last() != Some(&b'\n') {
            if n >= MAX_LINE {
                w.write_all(b"CLIENT_ERROR line too long\r\n")?;
                w.flush()?;
            }
            break;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        let words: Vec<&[u8]> = text
            .split(|&b| b == b' ')
            .filter(|w| !w.is_empty())
            .collect();
        if !command(&words, &mut r, &mut w, &mut data, sh)? {
            w.flush()?;
            break;
        }
        if r.buffer().is_empty() {
            w.flush()?;
        }
    }
    w.flush()
}

fn num<T: std::str::FromStr>(w: &[u8]) -> Option<T> {
    std::str::from_utf8(w).ok()?.parse().ok()
}

/// One command; false: close the connection.
fn command<R: Read, W: Write>(
    words: &[&[u8]],
    r: &mut BufReader<R>,
    w: &mut W,
    data: &mut Vec<u8>,
    sh: &Shared,
) -> io::Result<bool> {
    let Some((&cmd, args)) = words.split_first() else {
        w.write_all(b"ERROR\r\n")?;
        return Ok(true);
    };
    let bad = |w: &mut W| w.write_all(b"CLIENT_ERROR bad command line format\r\n");
    match cmd {
        b"get" | b"gets" => {
            if args.is_empty() || args.len() > MAX_KEYS || !args.iter().all(|k| valid_key(k)) {
                bad(w)?;
                return Ok(true);
            }
            let mut s = sh.store.lock();
            for &k in args {
                if let Some(h) = s.get(k, &mut ()) {
                    w.write_all(b"VALUE ")?;
                    w.write_all(k)?;
                    if cmd == b"gets" {
                        write!(w, " {} {} {}\r\n", h.flags, h.value.len(), h.cas)?;
                    } else {
                        write!(w, " {} {}\r\n", h.flags, h.value.len())?;
                    }
                    w.write_all(h.value)?;
                    w.write_all(b"\r\n")?;
                }
            }
            w.write_all(b"END\r\n")?;
        }
        b"set" | b"add" | b"replace" | b"cas" => {
            let is_cas = cmd == b"cas";
            let want = if is_cas { 5 } else { 4 };
            let noreply = args.len() == want + 1 && args[want] == b"noreply";
            if args.len() != want && !noreply {
                w.write_all(b"ERROR\r\n")?;
                return Ok(true);
            }
            let (key, flags, exptime, len) = (
                args[0],
                num::<u32>(args[1]),
                num::<i64>(args[2]),
                num::<usize>(args[3]),
            );
            let unique = if is_cas { num::<u64>(args[4]) } else { Some(0) };
            let (Some(flags), Some(exptime), Some(len), Some(unique)) =
                (flags, exptime, len, unique)
            else {
                bad(w)?;
                return Ok(true);
            };
            if !valid_key(key) {
                bad(w)?;
                return Ok(true);
            }
            if len > MAX_VALUE {
                // Swallow the data block without keeping it, as memcached does.
                io::copy(&mut r.by_ref().take(len as u64 + 2), &mut io::sink())?;
                w.write_all(b"SERVER_ERROR object too large for cache\r\n")?;
                return Ok(true);
            }
            data.clear();
            data.resize(len + 2, 0);
            r.read_exact(data)?;
            if &data[len..] != b"\r\n" {
                w.write_all(b"CLIENT_ERROR bad data chunk\r\n")?;
                return Ok(false);
            }
            let mode = match cmd {
                b"set" => Mode::Set,
                b"add" => Mode::Add,
                b"replace" => Mode::Replace,
                _ => Mode::Cas(unique),
            };
            let res = sh
                .store
                .lock()
                .set(key, flags, expiry(exptime), &data[..len], mode, &mut ());
            let reply: &[u8] = match res {
                Ok(Outcome::Stored) => b"STORED\r\n",
                Ok(Outcome::NotStored) => b"NOT_STORED\r\n",
                Ok(Outcome::Exists) => b"EXISTS\r\n",
                Ok(Outcome::NotFound) => b"NOT_FOUND\r\n",
                Err(StoreError::TooLarge(_)) => b"SERVER_ERROR object too large for cache\r\n",
                Err(StoreError::OutOfMemory(_)) => b"SERVER_ERROR out of memory storing object\r\n",
                Err(StoreError::KeyLength(_)) => b"CLIENT_ERROR bad command line format\r\n",
            };
            if !noreply {
                w.write_all(reply)?;
            }
        }
        b"delete" => {
            // memcached still takes a trailing "0" (the old hold time).
            let rest: Vec<&[u8]> = args.iter().skip(1).copied().collect();
            let noreply = rest.last() == Some(&&b"noreply"[..]);
            let extra = rest.len() - noreply as usize;
            if args.is_empty() || extra > 1 || (extra == 1 && rest[0] != b"0") {
                bad(w)?;
                return Ok(true);
            }
            if !valid_key(args[0]) {
                bad(w)?;
                return Ok(true);
            }
            let found = sh.store.lock().delete(args[0], &mut ());
            if !noreply {
                w.write_all(if found {
                    b"DELETED\r\n"
                } else {
                    b"NOT_FOUND\r\n"
                })?;
            }
        }
        b"flush_all" => {
            let noreply = args.last() == Some(&&b"noreply"[..]);
            let delay = args.len() - noreply as usize;
            if delay > 1 || (delay == 1 && num::<u64>(args[0]) != Some(0)) {
                // A delayed flush is not kept: refuse rather than flush at the wrong time.
                w.write_all(b"CLIENT_ERROR delayed flush_all is not supported\r\n")?;
                return Ok(true);
            }
            sh.store.lock().flush_all();
            if !noreply {
                w.write_all(b"OK\r\n")?;
            }
        }
        b"version" => write!(w, "VERSION {VERSION}\r\n")?,
        b"stats" if args.is_empty() => stats(w, sh)?,
        b"quit" => return Ok(false),
        _ => w.write_all(b"ERROR\r\n")?,
    }
    Ok(true)
}

fn stats<W: Write>(w: &mut W, sh: &Shared) -> io::Result<()> {
    let s = sh.store.lock();
    let c = &s.counters;
    let items: usize = s.len();
    let live_bytes: usize = s
        .classes()
        .iter()
        .map(|&(size, _, live, _)| size * live)
        .sum();
    let mut out = vec![
        ("pid", std::process::id().to_string()),
        ("uptime", sh.started.elapsed().as_secs().to_string()),
        ("time", unix_now().to_string()),
        ("version", VERSION.to_string()),
        (
            "curr_connections",
            sh.conns.load(Ordering::Relaxed).to_string(),
        ),
        (
            "total_connections",
            sh.total_conns.load(Ordering::Relaxed).to_string(),
        ),
        ("cmd_get", c.gets.to_string()),
        ("cmd_set", c.sets.to_string()),
        ("get_hits", c.hits.to_string()),
        ("get_misses", (c.gets - c.hits).to_string()),
        ("delete_cmds", c.deletes.to_string()),
        ("curr_items", items.to_string()),
        ("bytes", live_bytes.to_string()),
        ("limit_maxbytes", sh.memory_bytes.to_string()),
        ("evictions", c.evictions.to_string()),
        ("hash_evictions", c.hash_evictions.to_string()),
        ("hash_bytes", s.hash_bytes().to_string()),
        ("slab_bytes", s.slab_bytes().to_string()),
        ("threads", "1".to_string()),
    ];
    for (i, &(size, chunks, live, ev)) in s.classes().iter().enumerate() {
        debug_assert_eq!(size, CLASSES[i]);
        out.push(("", format!("class_{size}_chunks {chunks}")));
        out.push(("", format!("class_{size}_items {live}")));
        out.push(("", format!("class_{size}_evictions {ev}")));
    }
    for (k, v) in out {
        if k.is_empty() {
            write!(w, "STAT {v}\r\n")?;
        } else {
            write!(w, "STAT {k} {v}\r\n")?;
        }
    }
    w.write_all(b"END\r\n")
}
