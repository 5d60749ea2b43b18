//! Devices by path: map a region (file, DAX file or device-dax) and create, open, inspect or
//! check the device on it. A read-write open holds an exclusive `flock` on the file; read-only
//! opens, `check` and `info` a shared one, so two processes never drive one device at once.
//! Read-only opens, `inspect_path` and `check_path` without `mark_clean` open the file
//! `O_RDONLY`, map it `PROT_READ` and change no byte of it.

use crate::check::{self, CheckReport};
use crate::device::Device;
use crate::error::{BlkError, Result};
use crate::options::{CreateOptions, EngineOptions};
use crate::superblock::{self, Found};
use pmkit_media::{MediaError, Region, RegionOptions};
use std::path::Path;

fn region_opts(populate: bool, read_only: bool) -> RegionOptions {
    RegionOptions {
        populate,
        read_only,
        ..Default::default()
    }
}

/// Take the device file's advisory lock, or say who holds it.
fn lock(region: &Region, exclusive: bool) -> Result<()> {
    region.claim(exclusive).map_err(|e| match e {
        MediaError::InUse { path, holders } => BlkError::Busy { path, holders },
        e => e.into(),
    })
}

/// Create a device at `path`. With `size`, a new file of that many bytes (fails if the path
/// exists); without, an existing file or device-dax device is formatted (its data zeroed).
pub fn create_path(
    path: &Path,
    size: Option<u64>,
    create: &CreateOptions,
    engine: &EngineOptions,
) -> Result<Device<Region>> {
    create.validate()?;
    let (region, fresh) = match size {
        Some(n) => {
            if path.exists() {
                return Err(BlkError::BadOption(format!(
                    "{} already exists; remove it first, or omit --size to format it in place",
                    path.display()
                )));
            }
            (
                Region::create(path, n, &region_opts(engine.populate, false))?,
                true,
            )
        }
        None => (
            Region::open(path, &region_opts(engine.populate, false))?,
            false,
        ),
    };
    lock(&region, true)?;
    // A freshly fallocate'd file reads as zeroes already.
    let create = CreateOptions {
        zero_data: create.zero_data && !fresh,
        ..*create
    };
    let made = Device::create(region, &create, engine);
    if made.is_err() && fresh {
        let _ = std::fs::remove_file(path);
    }
    made
}

/// Open the device at `path` with every engine option: read-write, or with
/// [`EngineOptions::read_only`] read-only (`O_RDONLY`, a shared lock, nothing written).
pub fn open_path(path: &Path, engine: &EngineOptions) -> Result<Device<Region>> {
    let region = Region::open(path, &region_opts(engine.populate, engine.read_only))?;
    lock(&region, !engine.read_only)?;
    Device::open(region, engine)
}

/// Read the superblock at `path` without changing anything. `in_use` says whether another
/// process has the device open.
pub fn inspect_path(path: &Path) -> Result<(Found, bool)> {
    let region = Region::open_read_only(path)?;
    let in_use = matches!(lock(&region, false), Err(BlkError::Busy { .. }));
    Ok((superblock::read(&region)?, in_use))
}

/// Whether another process holds the device at `path` open read-only (a shared lock, e.g.
/// `pmkit serve --read-only`). A concurrent inspection holds one briefly too, so this can say
/// yes for an instant while another `pmkit info` runs.
pub fn open_read_only_elsewhere(path: &Path) -> Result<bool> {
    let region = Region::open_read_only(path)?;
    // Our own shared lock must not count: ask for the exclusive one on a fresh descriptor.
    Ok(!region.try_lock(true)?)
}

/// Check the device at `path` (superblock, and every block's checksum when they are on).
/// With `mark_clean`, a device whose only finding is an unclean shutdown is marked clean: only
/// then is the file opened read-write.
pub fn check_path(path: &Path, mark_clean: bool) -> Result<CheckReport> {
    let region = Region::open(path, &region_opts(false, !mark_clean))?;
    lock(&region, mark_clean)?;
    check::check(&region, mark_clean)
}
