//! PM speed emulation on DRAM, as PMBD did it: slow a copy down by a factor of the cycles it
//! took (`rdsx`/`wrsx`), enforce a minimum latency per request (`rdlat`/`wrlat`), and cap
//! bandwidth with a token bucket (`rdbw`/`wrbw`), and make every ordering fence cost at least
//! `barrier` nanoseconds (PMFS's Fig. 15c: what a slower persistence barrier does to a file
//! system). Off by default; on, it applies to every layer that routes its copies through
//! [`Emulator::read`] / [`Emulator::write`] and its fences through [`Emulator::barrier`].

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Emulation settings. `1`/`0` mean "no change".
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EmulationSpec {
    /// Reads take `rdsx` times as long as the DRAM copy.
    pub rdsx: u32,
    /// Writes take `wrsx` times as long as the DRAM copy.
    pub wrsx: u32,
    /// Minimum nanoseconds per read / write request.
    pub rdlat_ns: u64,
    pub wrlat_ns: u64,
    /// Bandwidth caps in MB/s (0 = none).
    pub rdbw_mbs: u64,
    pub wrbw_mbs: u64,
    /// Nanoseconds each persistence barrier (fence) takes at least, beyond its own cost.
    pub barrier_ns: u64,
}

impl Default for EmulationSpec {
    fn default() -> Self {
        EmulationSpec {
            rdsx: 1,
            wrsx: 1,
            rdlat_ns: 0,
            wrlat_ns: 0,
            rdbw_mbs: 0,
            wrbw_mbs: 0,
            barrier_ns: 0,
        }
    }
}

impl EmulationSpec {
    pub fn is_off(&self) -> bool {
        *self == EmulationSpec::default()
    }
}

impl std::str::FromStr for EmulationSpec {
    type Err = String;
    /// `rdsx=2,wrsx=10,rdlat=300,wrlat=1000,rdbw=4000,wrbw=1000,barrier=500` (any subset;
    /// `off` for none).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut e = EmulationSpec::default();
        if s == "off" || s.is_empty() {
            return Ok(e);
        }
        for part in s.split(',') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected key=value"))?;
            let n: u64 = v
                .trim()
                .parse()
                .map_err(|_| format!("{part:?}: value is not a number"))?;
            match k.trim() {
                "rdsx" | "wrsx" if n == 0 || n > 1000 => {
                    return Err(format!("{k} must be 1..=1000"))
                }
                "rdsx" => e.rdsx = n as u32,
                "wrsx" => e.wrsx = n as u32,
                "rdlat" => e.rdlat_ns = n,
                "wrlat" => e.wrlat_ns = n,
                "rdbw" => e.rdbw_mbs = n,
                "wrbw" => e.wrbw_mbs = n,
                "barrier" if n > MAX_BARRIER_NS => {
                    return Err(format!("barrier must be at most {MAX_BARRIER_NS} ns"))
                }
                "barrier" => e.barrier_ns = n,
                other => {
                    return Err(format!(
                        "unknown emulation key {other:?} (rdsx, wrsx, rdlat, wrlat, rdbw, wrbw, barrier)"
                    ))
                }
            }
        }
        Ok(e)
    }
}

/// The longest barrier emulated (1 ms): beyond it a fence is a sleep, not a barrier.
pub const MAX_BARRIER_NS: u64 = 1_000_000;

/// Spin `ns` nanoseconds after a fence (the emulated barrier latency; 0: nothing).
#[inline]
pub fn barrier_delay(ns: u64) {
    if ns == 0 {
        return;
    }
    let t = Instant::now();
    while (t.elapsed().as_nanos() as u64) < ns {
        std::hint::spin_loop();
    }
}

/// A token bucket shared by all threads: bytes may be spent at `rate` bytes per second.
struct Bucket {
    /// Nanoseconds since `origin` at which the bucket is next empty ("virtual time").
    next_free_ns: AtomicU64,
    ns_per_byte_x1024: u64,
}

impl Bucket {
    fn new(mbs: u64) -> Option<Bucket> {
        (mbs > 0).then(|| Bucket {
            next_free_ns: AtomicU64::new(0),
            ns_per_byte_x1024: 1024 * 1000 / mbs,
        })
    }

    /// Reserve `bytes` and return the time (ns since origin) when they may complete.
    fn reserve(&self, now_ns: u64, bytes: usize) -> u64 {
        let cost = (bytes as u64 * self.ns_per_byte_x1024) >> 10;
        let mut cur = self.next_free_ns.load(Ordering::Relaxed);
        loop {
            let start = cur.max(now_ns);
            match self.next_free_ns.compare_exchange_weak(
                cur,
                start + cost,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return start + cost,
                Err(a) => cur = a,
            }
        }
    }
}

/// Applies an [`EmulationSpec`] around copies.
pub struct Emulator {
    spec: EmulationSpec,
    origin: Instant,
    rd: Option<Bucket>,
    wr: Option<Bucket>,
}

impl Emulator {
    pub fn new(spec: EmulationSpec) -> Emulator {
        Emulator {
            spec,
            origin: Instant::now(),
            rd: Bucket::new(spec.rdbw_mbs),
            wr: Bucket::new(spec.wrbw_mbs),
        }
    }

    pub fn spec(&self) -> &EmulationSpec {
        &self.spec
    }

    /// Run the read copy `f` of `bytes` bytes at emulated speed.
    #[inline]
    pub fn read<R>(&self, bytes: usize, f: impl FnOnce() -> R) -> R {
        if self.spec.is_off() {
            return f();
        }
        self.run(
            bytes,
            self.spec.rdsx,
            self.spec.rdlat_ns,
            self.rd.as_ref(),
            f,
        )
    }

    /// Run the write copy `f` of `bytes` bytes at emulated speed.
    #[inline]
    pub fn write<R>(&self, bytes: usize, f: impl FnOnce() -> R) -> R {
        if self.spec.is_off() {
            return f();
        }
        self.run(
            bytes,
            self.spec.wrsx,
            self.spec.wrlat_ns,
            self.wr.as_ref(),
            f,
        )
    }

    /// After a persistence fence: wait the emulated barrier latency (`barrier`).
    #[inline]
    pub fn barrier(&self) {
        barrier_delay(self.spec.barrier_ns);
    }

    fn run<R>(
        &self,
        bytes: usize,
        sx: u32,
        lat_ns: u64,
        bucket: Option<&Bucket>,
        f: impl FnOnce() -> R,
    ) -> R {
        let t0 = Instant::now();
        let c0 = cycles();
        let r = f();
        let took = cycles().wrapping_sub(c0);
        if sx > 1 {
            // Spin (sx - 1) times the cycles the real copy took, as PMBD did.
            let until = cycles().wrapping_add(took.saturating_mul(sx as u64 - 1));
            while cycles() < until {
                std::hint::spin_loop();
            }
        }
        let mut deadline_ns = t0.duration_since(self.origin).as_nanos() as u64 + lat_ns;
        if let Some(b) = bucket {
            deadline_ns =
                deadline_ns.max(b.reserve(t0.duration_since(self.origin).as_nanos() as u64, bytes));
        }
        spin_until(self.origin, deadline_ns);
        r
    }
}

fn spin_until(origin: Instant, deadline_ns: u64) {
    loop {
        let now = origin.elapsed().as_nanos() as u64;
        if now >= deadline_ns {
            return;
        }
        // Long waits (bandwidth caps on big requests) sleep instead of burning a core.
        if deadline_ns - now > 200_000 {
            std::thread::sleep(std::time::Duration::from_nanos(deadline_ns - now - 100_000));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The CPU's time-stamp counter (constant rate on every CPU pmkit targets).
#[inline]
pub fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC has no preconditions.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::time::UNIX_EPOCH
            .elapsed()
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        let e: EmulationSpec = "rdsx=2,wrsx=10,wrlat=500,rdbw=100".parse().unwrap();
        assert_eq!((e.rdsx, e.wrsx, e.wrlat_ns, e.rdbw_mbs), (2, 10, 500, 100));
        assert!("rdsx=0".parse::<EmulationSpec>().is_err());
        assert!("bogus=1".parse::<EmulationSpec>().is_err());
        assert!("off".parse::<EmulationSpec>().unwrap().is_off());
        let b: EmulationSpec = "barrier=700".parse().unwrap();
        assert_eq!(b.barrier_ns, 700);
        assert!(!b.is_off());
        assert!("barrier=2000000".parse::<EmulationSpec>().is_err());
    }

    #[test]
    fn a_barrier_takes_at_least_its_latency() {
        let e = Emulator::new("barrier=50000".parse().unwrap());
        let t = Instant::now();
        for _ in 0..10 {
            e.barrier();
        }
        assert!(t.elapsed().as_nanos() >= 500_000, "10 barriers of 50 µs");
    }

    #[test]
    fn latency_floor_is_enforced() {
        let e = Emulator::new("wrlat=2000000".parse().unwrap());
        let t = Instant::now();
        e.write(8, || ());
        assert!(
            t.elapsed().as_nanos() >= 2_000_000,
            "a 2 ms floor must hold"
        );
    }
}
