//! What a file holds, said in words: a PMBD block device, a PMFS pool or a PMO pool (with its
//! size and, for pools, what is in them), so that a refusal to reformat, or a command given the
//! wrong kind of file, tells the user what the file is and which command reads it.
//!
//! Every pmkit format starts with an 8-byte magic at byte 0; block devices and PMFS keep a
//! second superblock at byte 2048, so a file whose first copy is damaged is still recognised.

use pmkit_media::{Media, Region};
use std::path::Path;

/// The kinds of pmkit file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Blk,
    Fs,
    Obj,
}

/// Byte offsets where a superblock copy (and so a magic) can sit.
const MAGIC_AT: [usize; 2] = [0, 2048];

impl Kind {
    /// The command that shows a file of this kind.
    pub(crate) fn info_command(self) -> &'static str {
        match self {
            Kind::Blk => "pmkit info",
            Kind::Fs => "pmkit fs info",
            Kind::Obj => "pmkit obj info",
        }
    }

    /// The kind whose magic (each system's own constant) `m` is.
    fn of_magic(m: [u8; 8]) -> Option<Kind> {
        let word = u64::from_le_bytes(m);
        if m == pmkit_blk::superblock::MAGIC {
            Some(Kind::Blk)
        } else if word == pmkit_fs::layout::MAGIC {
            Some(Kind::Fs)
        } else if word == pmkit_obj::layout::MAGIC {
            Some(Kind::Obj)
        } else {
            None
        }
    }
}

/// The kind of pmkit file `m` holds, from its magic, if any.
pub(crate) fn kind(m: &impl Media) -> Option<Kind> {
    MAGIC_AT.iter().find_map(|&at| {
        if at + 8 > m.len() {
            return None;
        }
        let mut b = [0u8; 8];
        m.read(at, &mut b);
        Kind::of_magic(b)
    })
}

/// A sentence naming what `region` holds ("a PMFS pool of 64 MiB: 6620 files, ..."), or `None`
/// when it holds no pmkit format.
pub(crate) fn describe(region: &Region) -> Option<String> {
    let size = human(region.len() as u64);
    Some(match kind(region)? {
        Kind::Blk => match pmkit_blk::superblock::read(region) {
            Ok(f) => {
                let l = &f.current.layout;
                format!(
                    "a PMBD block device of {size} ({} blocks of {} bytes{}{})",
                    l.nblocks,
                    l.block_size,
                    if l.checksum() { ", checksums" } else { "" },
                    if l.atomic() { ", atomic" } else { "" }
                )
            }
            Err(_) => format!("a PMBD block device of {size} (its superblocks are damaged)"),
        },
        Kind::Fs => {
            let r = pmkit_fs::check(region);
            if r.blocks == 0 {
                format!("a PMFS pool of {size} (its superblocks are damaged)")
            } else {
                format!(
                    "a PMFS pool of {size}: {}, {}, {} of {} blocks used",
                    count(r.files, "file"),
                    count(r.dirs, "directory"),
                    r.blocks.saturating_sub(r.free_blocks),
                    r.blocks
                )
            }
        }
        Kind::Obj => {
            let r = pmkit_obj::Pool::check(region);
            match r.geometry {
                Some(_) => format!(
                    "a PMO object pool of {size}: {}, {} used",
                    count(r.objects as u64, "object"),
                    human(r.bytes_used)
                ),
                None => format!("a PMO object pool of {size} (its header is damaged)"),
            }
        }
    })
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Blk => "a PMBD block device",
            Kind::Fs => "a PMFS pool",
            Kind::Obj => "a PMO object pool",
        })
    }
}

/// Refuse a file of another pmkit kind than `want` before a command of `want`'s kind reads
/// or repairs it: the error says what the file is and which command shows it. A file of no
/// pmkit kind passes (the command's own check says what it lacks, and repair may rebuild it).
pub(crate) fn expect(path: &Path, region: &Region, want: Kind) -> anyhow::Result<()> {
    match kind(region) {
        Some(k) if k != want => {
            let held = describe(region).unwrap_or_else(|| k.to_string());
            anyhow::bail!(
                "{}: is not {want}: it holds {held}; see it with `{} {}`",
                path.display(),
                k.info_command(),
                path.display()
            )
        }
        _ => Ok(()),
    }
}

/// [`expect`] by path: opens the file read-only to look. A file that cannot be opened passes,
/// for the command to report in its own words.
pub(crate) fn expect_path(path: &Path, want: Kind) -> anyhow::Result<()> {
    match Region::open_read_only(path) {
        Ok(r) => expect(path, &r, want),
        Err(_) => Ok(()),
    }
}

/// "1 file", "2 files", "1 directory", "3 directories".
fn count(n: u64, one: &str) -> String {
    match (n, one.strip_suffix('y')) {
        (1, _) => format!("1 {one}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        _ => format!("{n} {one}s"),
    }
}

/// Bytes in binary units, as `--size` takes them: "64 MiB", "1.5 GiB", "4096 bytes".
pub(crate) fn human(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let (mut v, mut u) = (n as f64 / 1024.0, 0);
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human(4096), "4 KiB");
        assert_eq!(human(64 << 20), "64 MiB");
        assert_eq!(human(3 << 29), "1.5 GiB");
        assert_eq!(human(100), "100 bytes");
    }

    #[test]
    fn every_format_is_known_by_its_magic_at_either_copy() {
        let r = Region::anonymous(8192).unwrap();
        assert_eq!(kind(&r), None);
        r.write(2048, b"PMKITFS1");
        assert_eq!(kind(&r), Some(Kind::Fs));
        r.write(0, b"PMKITBLK");
        assert_eq!(kind(&r), Some(Kind::Blk));
        r.write(0, b"PMKITOBJ");
        assert_eq!(kind(&r), Some(Kind::Obj));
    }
}
