//! A client's reads in place (`pmkit_fs::direct`): `pread` of a pool file copies the bytes from
//! the pool file, mapped read-only here, by a layout its session hands out and caches per
//! descriptor, checked against the server's free epoch; no call and no system call when the
//! layout holds. Whatever the layout cannot vouch for goes to the server: a hole or a block past
//! the window (a write or an append may have filled it since: the layout is taken again once),
//! a file with data checksums, a free meanwhile (the copy is thrown away).

use crate::api::Calls;
use crate::epoch::Epoch;
use parking_lot::Mutex;
use pmkit_fs::direct::{size_of_word, ReadLayout};
use pmkit_fs::posix::Fd;
use pmkit_media::{Media, Region};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

const BLOCK: u64 = 4096;
/// The bytes of one layout's window (`pmkit_fs::direct::LAYOUT_BLOCKS` blocks, aligned).
const WINDOW: u64 = pmkit_fs::direct::LAYOUT_BLOCKS * BLOCK;
/// Layouts kept at most (8 KiB each: 2 MiB); past it the cache starts over.
const MAX_CACHED: usize = 256;

/// What a window of a descriptor's file is read by: a layout, or the server (a file that
/// cannot be read in place, until the descriptor is closed).
#[derive(Clone)]
enum Cached {
    Layout(Arc<ReadLayout>),
    Server,
}

pub(crate) struct Direct {
    pool: PathBuf,
    epoch: Option<Epoch>,
    /// The pool file mapped read-only, at the first read (`None`: it cannot be; every read goes
    /// to the server).
    region: OnceLock<Option<Region>>,
    /// By descriptor and window number.
    cache: Mutex<HashMap<(Fd, u64), Cached>>,
    /// Reads answered in place.
    hits: AtomicU64,
}

/// The result of one try at a read in place.
enum Try {
    Done(usize),
    /// The layout does not vouch for it: take it again (once), then ask the server.
    Stale,
}

impl Direct {
    pub(crate) fn new(pool: &Path, epoch: Option<Epoch>) -> Direct {
        Direct {
            pool: pool.to_path_buf(),
            epoch,
            region: OnceLock::new(),
            cache: Mutex::new(HashMap::new()),
            hits: AtomicU64::new(0),
        }
    }

    /// Reads answered in place so far.
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// The descriptor is closed (its number may name another file next).
    pub(crate) fn forget(&self, fd: Fd) {
        self.cache.lock().retain(|k, _| k.0 != fd);
    }

    fn region(&self) -> Option<&Region> {
        self.region
            .get_or_init(|| Region::open_read_only(&self.pool).ok())
            .as_ref()
    }

    /// `pread(fd, buf, off)` in place, or `None`: ask the server. A read across windows is
    /// read window by window, each piece checked on its own (as a read racing a write may see
    /// it page by page).
    pub(crate) fn pread(
        &self,
        calls: &dyn Calls,
        fd: Fd,
        buf: &mut [u8],
        off: u64,
    ) -> Option<usize> {
        if buf.is_empty() {
            return None; // the server says whether the descriptor is good
        }
        let epoch = self.epoch.as_ref()?;
        let region = self.region()?;
        let mut done = 0;
        while done < buf.len() {
            let at = off + done as u64;
            let piece = ((at / WINDOW + 1) * WINDOW - at).min((buf.len() - done) as u64) as usize;
            let n = self.window(calls, (epoch, region), fd, &mut buf[done..done + piece], at)?;
            done += n;
            if n < piece {
                break; // the end of the file
            }
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(done)
    }

    /// A read inside one window.
    fn window(
        &self,
        calls: &dyn Calls,
        (epoch, region): (&Epoch, &Region),
        fd: Fd,
        buf: &mut [u8],
        off: u64,
    ) -> Option<usize> {
        let key = (fd, off / WINDOW);
        let cached = self.cache.lock().get(&key).cloned();
        let (mut layout, mut fresh) = match cached {
            Some(Cached::Server) => return None,
            Some(Cached::Layout(l)) => (l, false),
            None => (self.fetch(calls, key, off)?, true),
        };
        loop {
            match read(epoch, region, &layout, buf, off, fresh) {
                Try::Done(n) => return Some(n),
                Try::Stale if fresh => return None,
                Try::Stale => (layout, fresh) = (self.fetch(calls, key, off)?, true),
            }
        }
    }

    /// A new layout of the window `key` (holding `off`), cached.
    fn fetch(&self, calls: &dyn Calls, key: (Fd, u64), off: u64) -> Option<Arc<ReadLayout>> {
        let fd = key.0;
        let got = calls.read_layout(fd, off);
        let mut cache = self.cache.lock();
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        match got {
            Ok(l) => {
                let l = Arc::new(l);
                cache.insert(key, Cached::Layout(Arc::clone(&l)));
                Some(l)
            }
            Err(e) => {
                // A file that is not read in place (checksums, not a regular file) stays with
                // the server; an error the server's read would give too (EBADF) is its to say.
                if matches!(e.errno(), libc::EOPNOTSUPP | libc::EINVAL) {
                    cache.insert(key, Cached::Server);
                }
                None
            }
        }
    }
}

/// One try: the file's size from its inode, the bytes from the layout's blocks, the epoch
/// checked on both sides of the copy. `fresh`: the layout was just taken, so a hole in it is a
/// hole (zeros), not a block written since.
fn read(
    epoch: &Epoch,
    region: &Region,
    l: &ReadLayout,
    buf: &mut [u8],
    off: u64,
    fresh: bool,
) -> Try {
    let e1 = epoch.load();
    if e1 != l.epoch {
        return Try::Stale;
    }
    let Some(size) = size_of_word(region.load_u64(l.size_at as usize), l.sealed) else {
        return Try::Stale;
    };
    let end = size.min(off.saturating_add(buf.len() as u64));
    if off >= end {
        return finish(epoch, e1, 0);
    }
    let window_end = l.start + l.blocks.len() as u64 * BLOCK;
    if off < l.start || end > window_end {
        return Try::Stale;
    }
    let mut pos = off;
    while pos < end {
        let idx = ((pos - l.start) / BLOCK) as usize;
        let in_blk = pos % BLOCK;
        let n = (BLOCK - in_blk).min(end - pos) as usize;
        let o = (pos - off) as usize;
        match l.blocks[idx] {
            0 if !fresh => return Try::Stale,
            0 => buf[o..o + n].fill(0),
            b => region.read((b * BLOCK + in_blk) as usize, &mut buf[o..o + n]),
        }
        pos += n as u64;
    }
    finish(epoch, e1, (end - off) as usize)
}

/// The copy stands if no free came during it.
fn finish(epoch: &Epoch, e1: u64, n: usize) -> Try {
    // The copy's loads happen before the second load of the epoch.
    fence(Ordering::Acquire);
    match epoch.load() == e1 {
        true => Try::Done(n),
        false => Try::Stale,
    }
}
