//! The memory a calibration runs over, and the loops that time it: the one module of this crate
//! with `unsafe`. A `Buf` owns one private mapping (anonymous, with or without transparent huge
//! pages, or of a file such as emulated PM on /dev/shm) that nothing else maps or changes while
//! it lives; every load goes through a raw pointer inside bounds the loops check.

use crate::error::{HmepError, Result};
use std::path::PathBuf;

/// Cache line: one word used per line by the latency loops.
pub const LINE: usize = 64;
const WORDS_PER_LINE: usize = LINE / 8;
const HUGE: usize = 2 << 20;

/// What backs a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// Anonymous memory with 4 KiB pages (`MADV_NOHUGEPAGE`).
    Anon,
    /// Anonymous memory asking for 2 MiB pages (`MADV_HUGEPAGE`, 2 MiB aligned).
    AnonThp,
    /// A shared mapping of a new file in this directory (emulated PM: /dev/shm).
    File(PathBuf),
}

impl Backing {
    pub fn name(&self) -> String {
        match self {
            Backing::Anon => "anon-4k".into(),
            Backing::AnonThp => "anon-thp".into(),
            Backing::File(d) => format!("file:{}", d.display()),
        }
    }
}

/// A mapping of `len` bytes (a power of two, at least 2 MiB).
pub struct Buf {
    map: *mut u8,
    map_len: usize,
    /// Start of the usable bytes (2 MiB aligned for THP).
    base: *mut u64,
    len: usize,
    file: Option<PathBuf>,
}

// SAFETY: the mapping is owned by the Buf alone and moves with it; no thread shares it.
unsafe impl Send for Buf {}

fn os(what: &str) -> HmepError {
    HmepError::Os {
        what: what.into(),
        source: std::io::Error::last_os_error(),
    }
}

impl Buf {
    pub fn new(backing: &Backing, len: usize) -> Result<Buf> {
        if !len.is_power_of_two() || len < HUGE {
            return Err(HmepError::Calibration(format!(
                "buffer size {len} must be a power of two of at least 2 MiB"
            )));
        }
        let (map_len, prot) = (len + HUGE, libc::PROT_READ | libc::PROT_WRITE);
        let (map, file) = match backing {
            Backing::Anon | Backing::AnonThp => {
                // SAFETY: a new anonymous mapping at an address the kernel picks.
                let m = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        map_len,
                        prot,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                (m, None)
            }
            Backing::File(dir) => {
                // Unique within the process too: several buffers of one size may be live.
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let path = dir.join(format!("pmkit-hmep-{}-{n}-{len}", std::process::id()));
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(|e| HmepError::Os {
                        what: format!("creating {}", path.display()),
                        source: e,
                    })?;
                // Unlinked at drop; a failure here removes it at once.
                let r = f.set_len(map_len as u64);
                if let Err(e) = r {
                    let _ = std::fs::remove_file(&path);
                    return Err(HmepError::Os {
                        what: format!("sizing {}", path.display()),
                        source: e,
                    });
                }
                use std::os::fd::AsRawFd;
                // SAFETY: a new shared mapping of a file this process just made.
                let m = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        map_len,
                        prot,
                        libc::MAP_SHARED,
                        f.as_raw_fd(),
                        0,
                    )
                };
                (m, Some(path))
            }
        };
        if map == libc::MAP_FAILED {
            let e = os("mmap of the calibration buffer");
            if let Some(p) = &file {
                let _ = std::fs::remove_file(p);
            }
            return Err(e);
        }
        let map = map as *mut u8;
        let off = (HUGE - (map as usize) % HUGE) % HUGE;
        // SAFETY: off < HUGE, so base..base+len lies inside the map_len-byte mapping.
        let base = unsafe { map.add(off) } as *mut u64;
        let advice = match backing {
            Backing::Anon => Some(libc::MADV_NOHUGEPAGE),
            Backing::AnonThp => Some(libc::MADV_HUGEPAGE),
            Backing::File(_) => None,
        };
        if let Some(a) = advice {
            // SAFETY: advice on our own mapping; it changes no contents.
            if unsafe { libc::madvise(base as *mut libc::c_void, len, a) } != 0 {
                let e = os("madvise of the calibration buffer");
                // SAFETY: unmapping what we mapped above, used nowhere else.
                unsafe { libc::munmap(map as *mut libc::c_void, map_len) };
                return Err(e);
            }
        }
        Ok(Buf {
            map,
            map_len,
            base,
            len,
            file,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn lines(&self) -> usize {
        self.len / LINE
    }

    /// Where the buffer starts (for finding it in /proc/self/smaps).
    pub fn addr(&self) -> usize {
        self.base as usize
    }

    /// Link every line into one random cycle (Sattolo's algorithm: a single cycle through all
    /// lines, so a chase visits each once per lap), the next line's index in the line's first
    /// word. This also touches every page.
    pub fn link_cycle(&mut self, seed: u64) {
        let n = self.lines();
        assert!(n <= u32::MAX as usize, "at most 2^32 lines");
        let mut next: Vec<u32> = (0..n as u32).collect();
        let mut rng = Rng(seed | 1);
        for i in (1..n).rev() {
            let j = (rng.next_u64() % i as u64) as usize; // j < i: Sattolo, not Fisher-Yates
            next.swap(i, j);
        }
        for (i, &v) in next.iter().enumerate() {
            // SAFETY: i < lines, so the word lies inside the buffer.
            unsafe { self.base.add(i * WORDS_PER_LINE).write_volatile(v as u64) };
        }
    }

    /// Link one line in each of the first `pages` 4 KiB pages into one random cycle (Sattolo
    /// again, over pages), the line inside each page picked at random so the lines spread over
    /// the cache's sets: a chase over it touches `pages` lines (inside the cache) on `pages`
    /// pages (beyond a TLB's reach), so what 4 KiB pages add to it is the page walks. Returns
    /// the line the cycle starts at ([`Buf::chase_from`]).
    pub fn link_pages(&mut self, seed: u64, pages: usize) -> u64 {
        const LINES_PER_PAGE: usize = 4096 / LINE;
        assert!(
            pages >= 2 && pages * 4096 <= self.len,
            "{pages} pages in a {} byte buffer",
            self.len
        );
        let mut rng = Rng(seed | 1);
        let line: Vec<usize> = (0..pages)
            .map(|p| p * LINES_PER_PAGE + (rng.next_u64() % LINES_PER_PAGE as u64) as usize)
            .collect();
        let mut next: Vec<usize> = (0..pages).collect();
        for i in (1..pages).rev() {
            let j = (rng.next_u64() % i as u64) as usize;
            next.swap(i, j);
        }
        for (p, &q) in next.iter().enumerate() {
            // SAFETY: line[p] < pages * LINES_PER_PAGE <= lines, inside the buffer.
            unsafe {
                self.base
                    .add(line[p] * WORDS_PER_LINE)
                    .write_volatile(line[q] as u64)
            };
        }
        line[0] as u64
    }

    /// Follow the cycle `steps` times from line 0: each load's address depends on the value
    /// the one before loaded. Returns the line reached (to keep the loop).
    pub fn chase(&self, steps: u64) -> u64 {
        self.chase_from(0, steps)
    }

    /// Steps from line 0 back to line 0: the number of lines when the cycle is whole.
    pub fn cycle_len(&self) -> u64 {
        let n = self.lines() as u64;
        let mut steps = 0;
        let mut at = 0;
        loop {
            at = self.chase_from(at, 1);
            steps += 1;
            if at == 0 || steps > n {
                return steps;
            }
        }
    }

    /// Follow the cycle `steps` times from line `at`; returns the line reached.
    pub fn chase_from(&self, mut at: u64, steps: u64) -> u64 {
        let n = self.lines() as u64;
        for _ in 0..steps {
            assert!(
                at < n,
                "the cycle holds only line indices (link_cycle first)"
            );
            // SAFETY: at < lines (asserted), so the word is inside the buffer.
            at = unsafe { self.base.add(at as usize * WORDS_PER_LINE).read_volatile() };
        }
        at
    }

    /// The `n` lines of the cycle from line `start`, in the cycle's order.
    pub fn cycle_lines(&self, start: u64, n: usize) -> Vec<u32> {
        let mut at = start;
        (0..n)
            .map(|_| {
                let line = u32::try_from(at).expect("a line index fits 32 bits");
                at = self.chase_from(at, 1);
                line
            })
            .collect()
    }

    /// One load of each line in `lines`, in that order, `laps` times: the same addresses as a
    /// chase of their cycle, but each taken from the list rather than from the load before, so
    /// the CPU overlaps the loads and their page walks as it does a program's independent ones.
    pub fn gather(&self, lines: &[u32], laps: u64) -> u64 {
        let n = self.lines();
        assert!(
            lines.iter().all(|&l| (l as usize) < n),
            "a line outside the buffer"
        );
        let mut sum = 0u64;
        for _ in 0..laps {
            for &l in lines {
                // SAFETY: every line < lines (asserted above), so the word is in the buffer.
                sum = sum.wrapping_add(unsafe {
                    self.base.add(l as usize * WORDS_PER_LINE).read_volatile()
                });
            }
        }
        sum
    }

    /// `count` loads of lines picked by a generator, none depending on another's value.
    pub fn random(&self, count: u64, seed: u64) -> u64 {
        let mask = self.lines() as u64 - 1; // lines is a power of two
        let mut rng = Rng(seed | 1);
        let mut sum = 0u64;
        for _ in 0..count {
            let i = rng.next_u64() & mask;
            // SAFETY: i <= mask < lines.
            sum = sum.wrapping_add(unsafe {
                self.base.add(i as usize * WORDS_PER_LINE).read_volatile()
            });
        }
        sum
    }

    /// One load per line, in address order, over the whole buffer.
    pub fn sequential(&self) -> u64 {
        let mut sum = 0u64;
        for i in 0..self.lines() {
            // SAFETY: i < lines.
            sum = sum.wrapping_add(unsafe { self.base.add(i * WORDS_PER_LINE).read_volatile() });
        }
        sum
    }

    /// Read every word (the compiler may vectorise): a one-thread read stream.
    pub fn read_all(&self) -> u64 {
        let p = self.base as *const u64;
        let mut acc = [0u64; 4];
        for i in (0..self.len / 8).step_by(4) {
            for (k, a) in acc.iter_mut().enumerate() {
                // SAFETY: i + k < len / 8 (len is a multiple of 32), inside the buffer; plain
                // reads, since nothing else writes it during this borrow of self.
                *a = a.wrapping_add(unsafe { p.add(i + k).read() });
            }
        }
        acc.iter().fold(0, |a, &b| a.wrapping_add(b))
    }

    /// Write every byte: a one-thread write stream.
    pub fn write_all(&mut self, byte: u8) {
        // SAFETY: the buffer is len bytes of our own writable mapping.
        unsafe { std::ptr::write_bytes(self.base as *mut u8, byte, self.len) };
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `new`, used by nothing after this.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
        if let Some(p) = &self.file {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// xorshift64*: reproducible from a seed, cheap enough not to hide a 10 ns load.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Bytes of the mapping at `addr` that the kernel backs with huge pages (AnonHugePages, or
/// ShmemPmdMapped/FilePmdMapped for files), and its resident bytes, from /proc/self/smaps.
pub fn huge_backed(addr: usize) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    let (mut rss, mut huge) = (0u64, 0u64);
    for line in text.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    if inside {
                        break;
                    }
                    inside = a <= addr && addr < b;
                    continue;
                }
            }
        }
        if !inside {
            continue;
        }
        let kb = |l: &str| -> u64 {
            l.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
                * 1024
        };
        if line.starts_with("Rss:") {
            rss = kb(line);
        } else if line.starts_with("AnonHugePages:")
            || line.starts_with("ShmemPmdMapped:")
            || line.starts_with("FilePmdMapped:")
        {
            huge += kb(line);
        }
    }
    inside.then_some((huge, rss))
}
