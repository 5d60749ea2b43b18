//! Protection of the file system's PM from stray stores: which mode a mount runs in, and what
//! each mode does to the mapping. `pm.rs` applies it to every store; see `docs/fs.md`.
//!
//! | mode     | the mapping outside a store        | a store                                  |
//! |----------|------------------------------------|------------------------------------------|
//! | `none`   | read-write                         | a CPU store                              |
//! | `pkey`   | pages tagged with a key that every thread has access-disabled | WRPKRU opens the key in this thread for the one store (and for each load or flush: a read window) |
//! | `kernel` | `PROT_READ`, for good              | `pwrite(2)` on the file behind the mapping (durable at return on DAX and tmpfs) |
//! | `pt`     | `PROT_READ`                        | `mprotect` the store's pages read-write, store, `mprotect` them back (the thesis's page-table toggling; one lock serializes the windows, so one store's close never cuts another's) |

use crate::error::{Error, Result};
use pmkit_media::protect::{Access, Pkey};
use pmkit_media::{KernelWriter, Media, Region};

/// The protection mode of a mount (`MountOptions::protect`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protect {
    /// `pkey` where the CPU has protection keys, else `kernel` where the region has a writable
    /// file behind it, else `none` (the crash simulator, anonymous memory, device-dax).
    #[default]
    Auto,
    /// No protection: PM is mapped read-write.
    None,
    /// PM mapped read-only; every store is a `pwrite` on the backing file.
    Kernel,
    /// PM behind a protection key; each store opens a per-thread WRPKRU write window.
    Pkey,
    /// Page rights: PM read-only, each store's pages made writable around it (`mprotect`).
    /// Never picked by `Auto`: it is the costly baseline the other modes are measured against
    /// (PMFS's Fig. 18: write windows against page-table toggling).
    Pt,
}

impl Protect {
    pub fn name(self) -> &'static str {
        match self {
            Protect::Auto => "auto",
            Protect::None => "none",
            Protect::Kernel => "kernel",
            Protect::Pkey => "pkey",
            Protect::Pt => "pt",
        }
    }
}

impl std::fmt::Display for Protect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Protect {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Protect, String> {
        Ok(match s {
            "auto" => Protect::Auto,
            "none" => Protect::None,
            "kernel" => Protect::Kernel,
            "pkey" => Protect::Pkey,
            "pt" => Protect::Pt,
            _ => {
                return Err(format!(
                    "unknown protection {s:?} (auto, none, kernel, pkey, pt)"
                ))
            }
        })
    }
}

/// A mode, built and applied to the mapping.
pub(crate) enum Gate {
    Open,
    Kernel(KernelWriter),
    Pkey(Pkey),
    /// `pt`: the lock every store's mprotect window holds.
    Pages(parking_lot::Mutex<()>),
}

fn unavailable(mode: Protect, why: impl Into<String>) -> Error {
    Error::ProtectUnavailable {
        mode: mode.name(),
        why: why.into(),
    }
}

impl Gate {
    /// Pick the mode for `m` (resolving `Auto`), build it and put the mapping under it.
    /// Returns the mode chosen and why.
    pub(crate) fn resolve<M: Media>(m: &M, want: Protect) -> Result<(Gate, Protect, String)> {
        let region = m.mapping();
        let (mode, why) = match want {
            Protect::Auto => auto(region),
            p => (p, "asked for".to_string()),
        };
        let gate = match (mode, region) {
            (Protect::None | Protect::Auto, _) => Gate::Open,
            (_, None) => {
                return Err(unavailable(
                    mode,
                    "the media has no mapping to protect (the crash simulator)",
                ))
            }
            (Protect::Kernel, Some(r)) => {
                let kw = KernelWriter::new(r).map_err(|e| unavailable(mode, e.to_string()))?;
                r.set_access(0, r.len(), Access::Read)
                    .map_err(|e| unavailable(mode, e.to_string()))?;
                Gate::Kernel(kw)
            }
            (Protect::Pt, Some(r)) => {
                if r.is_read_only() {
                    return Err(unavailable(mode, "the region is opened read-only"));
                }
                r.set_access(0, r.len(), Access::Read)
                    .map_err(|e| unavailable(mode, e.to_string()))?;
                Gate::Pages(parking_lot::Mutex::new(()))
            }
            (Protect::Pkey, Some(r)) => {
                let k = Pkey::alloc().map_err(|e| unavailable(mode, e.to_string()))?;
                r.set_pkey(&k, Access::ReadWrite)
                    .map_err(|e| unavailable(mode, e.to_string()))?;
                // Every thread has a fresh key access-disabled (the kernel's default rights,
                // inherited by threads this one starts); make sure of this one.
                k.deny_this_thread();
                Gate::Pkey(k)
            }
        };
        Ok((gate, mode, why))
    }

    /// Give the mapping back its ordinary rights (at unmount), so the owner of the media can
    /// use it again.
    pub(crate) fn unprotect(&self, region: Option<&Region>) -> Result<()> {
        let Some(r) = region else { return Ok(()) };
        let done = match self {
            Gate::Open => Ok(()),
            Gate::Kernel(_) | Gate::Pages(_) => r.set_access(0, r.len(), Access::ReadWrite),
            // Back to the default key 0, which every thread may use.
            Gate::Pkey(_) => r.set_access_key(0, r.len(), Access::ReadWrite, None),
        };
        done.map_err(|e| unavailable(Protect::None, e.to_string()))
    }
}

/// What `Auto` picks on `region` (`None`: media without a mapping), and why.
fn auto(region: Option<&Region>) -> (Protect, String) {
    let Some(r) = region else {
        return (Protect::None, "the media has no mapping (simulator)".into());
    };
    if pmkit_media::features().pku {
        return (
            Protect::Pkey,
            "the CPU has protection keys: PM is behind a key every thread has disabled; each \
             store opens it in its own thread (WRPKRU)"
                .into(),
        );
    }
    match KernelWriter::supports(r) {
        Ok(()) if !r.is_read_only() => (
            Protect::Kernel,
            "the CPU has no protection keys: PM is mapped read-only and every store is a \
             pwrite on the backing file"
                .into(),
        ),
        Ok(()) => (Protect::None, "the region is opened read-only".into()),
        Err(e) => (
            Protect::None,
            format!("the CPU has no protection keys and there is no kernel write path ({e})"),
        ),
    }
}
