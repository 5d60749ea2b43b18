//! CPU features that decide which persistence primitives and protection windows pmkit can use.
//! Read once from CPUID (and the OS's XSAVE state for the vector widths) and cached.

use serde::Serialize;
use std::sync::OnceLock;

/// What this CPU (and OS) offers for persistent memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CpuFeatures {
    pub clflush: bool,
    pub clflushopt: bool,
    pub clwb: bool,
    pub sse2: bool,
    pub avx2: bool,
    pub avx512f: bool,
    /// Memory protection keys, supported by the CPU and enabled by the OS (OSPKE).
    pub pku: bool,
    pub rtm: bool,
    pub cmpxchg16b: bool,
    /// AVX-512F, VPCLMULQDQ and SSE4.2 (with the OS saving zmm state): what the fused
    /// stream-and-CRC-32C copy (`raw::stream_lines_crc32c`) needs.
    pub crc_fold: bool,
}

impl CpuFeatures {
    /// The widest non-temporal store this CPU can issue, in bytes (0: none).
    pub fn nt_width(&self) -> usize {
        if self.avx512f {
            64
        } else if self.avx2 {
            32
        } else if self.sse2 {
            16
        } else {
            0
        }
    }
}

/// Features of the running CPU, detected once.
pub fn features() -> &'static CpuFeatures {
    static F: OnceLock<CpuFeatures> = OnceLock::new();
    F.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> CpuFeatures {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // CPUID exists on every x86_64 CPU; leaf 7 is only read when leaf 0 says it exists.
    let (l1, l7) = {
        let max = __cpuid(0).eax;
        let l1 = __cpuid(1);
        let l7 = if max >= 7 {
            Some(__cpuid_count(7, 0))
        } else {
            None
        };
        (l1, l7)
    };
    let ebx7 = l7.map_or(0, |r| r.ebx);
    let ecx7 = l7.map_or(0, |r| r.ecx);
    CpuFeatures {
        clflush: l1.edx & (1 << 19) != 0,
        clflushopt: ebx7 & (1 << 23) != 0,
        clwb: ebx7 & (1 << 24) != 0,
        sse2: std::arch::is_x86_feature_detected!("sse2"),
        // Vector widths also need the OS to save the registers: std's detection checks XCR0.
        avx2: std::arch::is_x86_feature_detected!("avx2"),
        avx512f: std::arch::is_x86_feature_detected!("avx512f"),
        pku: ecx7 & (1 << 3) != 0 && ecx7 & (1 << 4) != 0,
        rtm: ebx7 & (1 << 11) != 0,
        cmpxchg16b: std::arch::is_x86_feature_detected!("cmpxchg16b"),
        crc_fold: std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
            && std::arch::is_x86_feature_detected!("sse4.2"),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> CpuFeatures {
    CpuFeatures {
        clflush: false,
        clflushopt: false,
        clwb: false,
        sse2: false,
        avx2: false,
        avx512f: false,
        pku: false,
        rtm: false,
        cmpxchg16b: false,
        crc_fold: false,
    }
}

/// The CPU, as a table label: model name and whether it has protection keys (pku).
pub fn label() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let pku = if features().pku { "yes" } else { "no" };
    format!(
        "{model}, {} CPUs, pku {pku}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    )
}
