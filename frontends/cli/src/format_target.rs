//! The one way a command lays a new format over a file (`pmkit create`, `pmkit fs mkfs`,
//! `pmkit obj create`): the file is locked as a mount or a server locks it, so a file in use is
//! refused with its holders named; a file that already holds a pmkit format, or any data in its
//! first 64 KiB, is formatted only with `--force`, and the refusal says what it holds; a file
//! this command created is removed again if the format fails.

use crate::identify;
use anyhow::{bail, Context, Result};
use pmkit_media::{Media, Region, RegionOptions};
use std::path::Path;

/// What is being made, where.
pub(crate) struct Target<'a> {
    pub path: &'a Path,
    /// `--size`: the size of a file to create. An existing file keeps its size; a different
    /// size asked for is refused (nothing is resized in place).
    pub size: Option<u64>,
    /// `--force`: format over an existing pmkit format.
    pub force: bool,
    pub opts: RegionOptions,
    /// The command, as the user typed it ("pmkit fs mkfs").
    pub command: &'static str,
}

/// Map the target (creating it when missing), lock it, refuse what must not be overwritten, and
/// run `make` on it; `make` is told whether the file is new. A new file is removed if `make`
/// fails.
pub(crate) fn format<T>(t: &Target<'_>, make: impl FnOnce(Region, bool) -> Result<T>) -> Result<T> {
    let path = t.path;
    let exists = path.exists() || path.symlink_metadata().is_ok();
    if !exists {
        let Some(size) = t.size else {
            bail!(
                "{}: does not exist; give --size (e.g. --size 1G) to create it",
                path.display()
            );
        };
        let region = Region::create(path, size, &t.opts)
            .with_context(|| format!("{}: cannot create", path.display()))?;
        // Nobody else can hold a file this call just made, but a racing command may have
        // opened it already: the lock still decides.
        if let Err(e) = region.claim(true) {
            drop(region);
            let _ = std::fs::remove_file(path);
            return Err(e.into());
        }
        let made = make(region, true);
        if made.is_err() {
            let _ = std::fs::remove_file(path);
        }
        return made;
    }
    let region = Region::open(path, &t.opts).with_context(|| {
        format!(
            "{}: cannot open to format it (`{}` needs write access)",
            path.display(),
            t.command
        )
    })?;
    region.claim(true)?;
    let is_file = std::fs::metadata(path).is_ok_and(|m| m.is_file());
    if let (Some(size), true) = (t.size, is_file) {
        if size != region.len() as u64 {
            bail!(
                "{}: exists and is {}, not the {} asked for; omit --size to use it as it is, \
                 or remove it first (rm {}) to make it at the new size",
                path.display(),
                identify::human(region.len() as u64),
                identify::human(size),
                path.display()
            );
        }
    }
    if let Some(held) = identify::describe(&region) {
        if !t.force {
            let kind = identify::kind(&region).expect("described, so a kind");
            bail!(
                "{}: holds {held}; `{}` would destroy it. Look at it with `{} {}`; to format \
                 it anyway, add --force",
                path.display(),
                t.command,
                kind.info_command(),
                path.display()
            );
        }
        eprintln!("note: {}: formatting over {held} (--force)", path.display());
    } else if let Some(at) = first_data(&region) {
        // Not a pmkit format, but not empty either: a disk image, a database, a file given by
        // mistake. Zeros (a file from `truncate`, a fresh device) are formatted freely.
        if !t.force {
            bail!(
                "{}: holds data that is not a pmkit format (a non-zero byte at offset {at}); \
                 `{}` would destroy it. To format it anyway, add --force",
                path.display(),
                t.command
            );
        }
        eprintln!("note: {}: formatting over data (--force)", path.display());
    }
    make(region, false)
}

/// Bytes looked at for data that is not a pmkit format.
const LOOK: usize = 64 << 10;

/// The offset of the first non-zero byte in the first [`LOOK`] bytes of `region`, if any.
fn first_data(region: &Region) -> Option<usize> {
    let mut buf = vec![0u8; LOOK.min(region.len())];
    region.read(0, &mut buf);
    buf.iter().position(|&b| b != 0)
}
