//! The gate of one open media: the mode in force, how a window is opened in it, and the poison
//! state (the one rule for a store that fails).

use super::mode::{self, Protect};
use super::poison::Poison;
use super::stripes::Stripes;
use super::view::View;
use crate::error::{MediaError, Result};
use crate::kernel_write::KernelWriter;
use crate::protect::{Access, Pkey};
use crate::{Media, Region};
use std::sync::atomic::{AtomicU64, Ordering};

enum Kind {
    Open,
    /// `pt`, `pt-batch`: the region is read-only; a write window makes its pages writable.
    /// Windows over one page are serialized (a closing window must not revoke another's rights).
    Pages(Stripes),
    /// `private`: the region's own mapping has no access; each access maps the file range.
    Private,
    /// `pkey`: the region carries this key, access-disabled in every thread outside a window.
    Pkey(Pkey),
    /// `kernel`: the region is read-only for good; stores go through this writer (`None` on
    /// the crash simulator, which models the kernel's DAX copy).
    Kernel(Option<KernelWriter>),
}

/// One media's protection: built by [`Gate::open`], applied to the mapping, and the only way
/// a system gets rights to PM.
pub struct Gate {
    kind: Kind,
    /// Loads need no window (`none`, `pt`, `kernel`: the mapping is readable): the fast path.
    direct_loads: bool,
    mode: Protect,
    why: String,
    poison: Poison,
    /// Windows that cost a system call (`pt`, `private`), for the statistics.
    opened: AtomicU64,
    path: std::path::PathBuf,
}

impl Gate {
    /// Pick the mode for `m` (`want`, or [`mode::auto`] when `None`), build it and put the
    /// mapping under it. When `want` is `pkey` and the CPU has no keys, `fallback` runs instead
    /// (the block device's `--pkey-fallback`), and [`Gate::why`] says so.
    pub fn open<M: Media>(m: &M, want: Option<Protect>, fallback: Option<Protect>) -> Result<Gate> {
        let region = m.mapping();
        let (mode, why) = match want {
            Some(p) => (p, "asked for".to_string()),
            None => mode::auto(region),
        };
        let (mode, why) = match (mode::why_not(mode, region), fallback) {
            (None, _) => (mode, why),
            (Some(no), Some(fb)) if mode == Protect::Pkey => {
                if let Some(no) = mode::why_not(fb, region) {
                    return Err(unavailable(fb, no));
                }
                let why = format!(
                    "pkey protection is not available ({no}); falling back to {fb} as asked"
                );
                (fb, why)
            }
            (Some(no), _) => return Err(unavailable(mode, no)),
        };
        let kind = match mode {
            Protect::None => Kind::Open,
            Protect::Pt | Protect::PtBatch => Kind::Pages(Stripes::default()),
            Protect::Private => Kind::Private,
            Protect::Kernel => Kind::Kernel(region.map(KernelWriter::new).transpose()?),
            Protect::Pkey => Kind::Pkey(Pkey::alloc().map_err(|e| {
                unavailable(mode, format!("cannot allocate a protection key: {e}"))
            })?),
        };
        if let Some(r) = region {
            match &kind {
                Kind::Open => {}
                Kind::Pages(_) | Kind::Kernel(_) => r.set_access(0, r.len(), Access::Read)?,
                Kind::Private => r.set_access(0, r.len(), Access::None)?,
                Kind::Pkey(k) => {
                    r.set_pkey(k, Access::ReadWrite)?;
                    // Every thread has a fresh key access-disabled (the kernel's default
                    // rights, inherited by threads this one starts); make sure of this one.
                    k.deny_this_thread();
                }
            }
        }
        Ok(Gate {
            direct_loads: matches!(kind, Kind::Open | Kind::Pages(_) | Kind::Kernel(_)),
            kind,
            mode,
            why,
            poison: Poison::default(),
            opened: AtomicU64::new(0),
            path: region.map_or_else(|| "<simulator>".into(), |r| r.path().to_path_buf()),
        })
    }

    /// No protection, for tools that own the media outright (mkfs, check, repair).
    pub fn open_unprotected(why: &str) -> Gate {
        Gate {
            direct_loads: true,
            kind: Kind::Open,
            mode: Protect::None,
            why: why.into(),
            poison: Poison::default(),
            opened: AtomicU64::new(0),
            path: "<media>".into(),
        }
    }

    /// The mode in force.
    pub fn mode(&self) -> Protect {
        self.mode
    }
    /// Why this mode runs, in words for the user.
    pub fn why(&self) -> &str {
        &self.why
    }
    /// Every store is a system call, durable at return on DAX and emulated PM (`kernel` on a
    /// file): a system that batches small stores into one may prefer to.
    pub fn stores_are_calls(&self) -> bool {
        matches!(self.kind, Kind::Kernel(Some(_)))
    }
    /// Loads need no window in this mode (the mapping is readable as it rests).
    #[inline]
    pub fn direct_loads(&self) -> bool {
        self.direct_loads
    }
    /// Stores need no window and none has failed: a store may go straight to the media.
    #[inline]
    pub fn direct_stores(&self) -> bool {
        matches!(self.kind, Kind::Open) && !self.poison.is_set()
    }
    /// Windows opened that cost a system call.
    pub fn windows_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }
    /// `Err(Poisoned)` once a store has failed.
    #[inline]
    pub fn check(&self) -> Result<()> {
        if !self.poison.is_set() {
            return Ok(());
        }
        match self.poison.why() {
            None => Ok(()),
            Some(why) => Err(MediaError::Poisoned {
                path: self.path.clone(),
                why: why.to_string(),
            }),
        }
    }
    /// Test hook: poison the gate as a failed store would.
    #[doc(hidden)]
    pub fn inject_failure(&self, why: &str) {
        self.poison.set(why.into())
    }

    /// Poison the gate with `e` and return the error every later write gets.
    fn fail(&self, e: MediaError) -> MediaError {
        self.poison.set(e.to_string());
        self.check().expect_err("just poisoned")
    }

    /// Give the region back its ordinary rights (at close), so the owner of the mapping can use
    /// it again; a key's pages go back to the default key 0.
    pub fn unprotect(&self, region: Option<&Region>) -> Result<()> {
        let Some(r) = region else { return Ok(()) };
        match self.kind {
            Kind::Open => Ok(()),
            Kind::Pages(_) | Kind::Private | Kind::Kernel(_) => {
                r.set_access(0, r.len(), Access::ReadWrite)
            }
            Kind::Pkey(_) => r.set_access_key(0, r.len(), Access::ReadWrite, None),
        }
    }

    /// Run `f` with write (and read) rights to media bytes `[off, off+len)`. Fails, without
    /// running `f`, once the gate is poisoned, and with the failure when a store in `f` fails
    /// (that store and every later one dropped).
    #[inline]
    pub fn write<M: Media, R>(
        &self,
        m: &M,
        off: usize,
        len: usize,
        f: impl FnOnce(&View<'_, M>) -> R,
    ) -> Result<R> {
        inside(m, off, len);
        self.check()?;
        let out = match &self.kind {
            Kind::Open => f(&View::Main(m)),
            Kind::Pkey(k) => {
                let _w = k.open_write();
                f(&View::Main(m))
            }
            Kind::Kernel(kw) => f(&View::Kernel {
                m,
                kw: kw.as_ref(),
                poison: &self.poison,
            }),
            Kind::Pages(locks) => {
                let r = m.mapping().expect("pt runs on a mapping");
                let _g = locks.lock(off, len, true);
                self.opened.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = r.set_access(off, len, Access::ReadWrite) {
                    return Err(self.fail(e));
                }
                let out = f(&View::Main(m));
                if let Err(e) = r.set_access(off, len, Access::Read) {
                    self.poison.set(e.to_string());
                }
                out
            }
            Kind::Private => match self.private(m, off, len, Access::ReadWrite, f) {
                Ok(out) => out,
                Err(e) => return Err(self.fail(e)),
            },
        };
        self.check()?;
        Ok(out)
    }

    /// Run `f` with read rights to media bytes `[off, off+len)`. Reads go on after a failed
    /// store: they see the media as it was left.
    #[inline]
    pub fn read<M: Media, R>(
        &self,
        m: &M,
        off: usize,
        len: usize,
        f: impl FnOnce(&View<'_, M>) -> R,
    ) -> Result<R> {
        inside(m, off, len);
        Ok(match &self.kind {
            Kind::Open | Kind::Pages(_) | Kind::Kernel(_) => f(&View::Main(m)),
            Kind::Pkey(k) => {
                let _w = k.open_read();
                f(&View::Main(m))
            }
            Kind::Private => return self.private(m, off, len, Access::Read, f),
        })
    }

    /// A `private` access: `f` runs on a fresh mapping of `[off, off+len)` of the file.
    fn private<M: Media, R>(
        &self,
        m: &M,
        off: usize,
        len: usize,
        access: Access,
        f: impl FnOnce(&View<'_, M>) -> R,
    ) -> Result<R> {
        debug_assert!(matches!(self.kind, Kind::Private));
        let r = m.mapping().expect("private runs on a mapping");
        self.opened.fetch_add(1, Ordering::Relaxed);
        let w = r.window(off, len, access)?;
        Ok(f(&View::Window {
            win: w.media(),
            base: off - w.offset_of(off),
        }))
    }

    /// Run `f` (a write barrier: flushes and syncs over any part of the media) with the rights
    /// it needs.
    pub fn barrier<M: Media, R>(&self, m: &M, f: impl FnOnce(&View<'_, M>) -> R) -> Result<R> {
        let out = match &self.kind {
            // Flushes and msync need only read rights.
            Kind::Open | Kind::Pages(_) => f(&View::Main(m)),
            Kind::Kernel(kw) => f(&View::Kernel {
                m,
                kw: kw.as_ref(),
                poison: &self.poison,
            }),
            Kind::Pkey(k) => {
                let _w = k.open_read();
                f(&View::Main(m))
            }
            Kind::Private => f(&View::Lazy {
                region: m.mapping().expect("private runs on a mapping"),
                poison: &self.poison,
            }),
        };
        self.check()?;
        Ok(out)
    }
}

/// A window is a caller's bug unless it lies inside the media.
#[inline]
fn inside<M: Media>(m: &M, off: usize, len: usize) {
    debug_assert!(
        off.checked_add(len).is_some_and(|end| end <= m.len()),
        "window {off}+{len} outside the media of {} bytes",
        m.len()
    );
}

fn unavailable(mode: Protect, why: String) -> MediaError {
    MediaError::ProtectUnavailable {
        mode: mode.name(),
        why,
    }
}
