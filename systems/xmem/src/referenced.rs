//! A coarse online access signal per region, an extension beyond the thesis (whose profile is
//! offline): how many bytes of each region the process touched since the last [`clear`], from
//! the kernel's referenced bits: `clear` writes `1` to `/proc/self/clear_refs` (which clears
//! the accessed bits of every page of the process), [`read`] sums `Referenced:` per VMA from
//! `/proc/self/smaps`. Each mapped region is its own VMA (`space.rs` keeps neighbours apart), so
//! a VMA inside the reservation belongs to one region. It sees touches, not patterns, and
//! counts a page once however often it is touched.

use crate::error::{Result, XmemError};
use std::collections::BTreeMap;

/// Clear the referenced bits of every page of this process.
pub(crate) fn clear() -> Result<()> {
    std::fs::write("/proc/self/clear_refs", "1").map_err(|source| XmemError::Os {
        what: "write /proc/self/clear_refs",
        source,
    })
}

/// Referenced bytes per region index for the VMAs inside `[base, base + len)`, regions of
/// `1 << shift` bytes (a VMA spanning several regions, which `space.rs` prevents, is split
/// evenly between them).
pub(crate) fn read(base: usize, len: usize, shift: u32) -> Result<BTreeMap<usize, u64>> {
    let text = std::fs::read_to_string("/proc/self/smaps").map_err(|source| XmemError::Os {
        what: "read /proc/self/smaps",
        source,
    })?;
    Ok(parse(&text, base, len, shift))
}

fn parse(text: &str, base: usize, len: usize, shift: u32) -> BTreeMap<usize, u64> {
    let mut out = BTreeMap::new();
    let mut vma: Option<(usize, usize)> = None;
    for line in text.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    vma = (a >= base && b <= base + len && a < b).then_some((a, b));
                    continue;
                }
            }
        }
        let (Some((a, b)), Some(kb)) = (vma, line.strip_prefix("Referenced:")) else {
            continue;
        };
        let Some(kb) = kb
            .trim()
            .strip_suffix("kB")
            .and_then(|k| k.trim().parse::<u64>().ok())
        else {
            continue;
        };
        let (first, last) = ((a - base) >> shift, (b - 1 - base) >> shift);
        let n = (last - first + 1) as u64;
        for r in first..=last {
            *out.entry(r).or_insert(0) += kb * 1024 / n;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smaps_lines_sum_per_region() {
        let text = "\
7f0000000000-7f0000200000 rw-p 00000000 00:00 0
Rss:                2048 kB
Referenced:          512 kB
7f0000200000-7f0000400000 rw-s 00000000 00:01 5     /dev/shm/pm (deleted)
Referenced:            8 kB
7f0000400000-7f0000800000 rw-p 00000000 00:00 0
Referenced:         1024 kB
7f1000000000-7f1000001000 r--p 00000000 00:00 0     /usr/lib/libc.so
Referenced:            4 kB
";
        let m = parse(text, 0x7f00_0000_0000, 8 << 20, 21);
        assert_eq!(m[&0], 512 * 1024);
        assert_eq!(m[&1], 8 * 1024);
        // A VMA over two regions is split between them; outside the reservation is ignored.
        assert_eq!((m[&2], m[&3]), (512 * 1024, 512 * 1024));
        assert_eq!(m.len(), 4);
    }
}
