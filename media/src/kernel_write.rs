//! Writes through the kernel: the process keeps PM mapped read-only and every change reaches it
//! by `pwrite(2)` on the file behind the mapping. Any stray store from any thread faults (the
//! mapping is `PROT_READ` and never changes, so there is no window to race with and no TLB
//! shootdown); only the library's own write calls change PM. The Linux page cache is one copy of
//! each file page, so loads from the mapping see a `pwrite` as soon as it returns.
//!
//! Durability by region kind: on a DAX file the kernel copies with non-temporal stores and
//! flushes (`copy_from_iter_flushcache`), so the bytes are in the persistence domain at return;
//! on tmpfs (emulated PM) the page cache *is* the emulated media, so a returned write counts as
//! durable too (that is what the same call does on real PM; the kernel's copy there is cached
//! stores, an emulation artefact that flushing from user space would only add cost to); on a
//! plain file on a disk they need `msync`, as before.
//! Device-dax has no `write(2)`: there is nothing to write through, so this path is refused.

use crate::error::{MediaError, Result};
use crate::region::{Region, RegionKind};
use std::fs::File;
use std::path::{Path, PathBuf};

/// The kernel write path of one region: a handle on its file, and what a write through it means.
#[derive(Debug)]
pub struct KernelWriter {
    file: File,
    path: PathBuf,
    len: usize,
    /// The file is on a DAX file system or is emulated PM: a returned write is durable.
    durable: bool,
}

fn refusal(region: &Region, why: &str) -> MediaError {
    MediaError::Unsupported {
        path: region.path().into(),
        why: format!("cannot write through the kernel: {why}"),
    }
}

impl KernelWriter {
    /// Whether the kind of `region` has a kernel write path (whatever its open mode): a file
    /// (regular, tmpfs or DAX), not device-dax or anonymous memory.
    pub fn supports(region: &Region) -> Result<()> {
        if region.kind() == RegionKind::DevDax {
            return Err(refusal(
                region,
                "device-dax has no write(2); use a file on a DAX file system, or another protection mode",
            ));
        }
        if region.file().is_none() {
            return Err(refusal(
                region,
                "the region has no backing file (anonymous memory)",
            ));
        }
        Ok(())
    }

    /// The write path of `region`, or why there is none (no file, device-dax, read-only).
    pub fn new(region: &Region) -> Result<KernelWriter> {
        if region.is_read_only() {
            return Err(refusal(region, "the region is opened read-only"));
        }
        Self::supports(region)?;
        let file = region.file().expect("checked by supports");
        let file = file
            .try_clone()
            .map_err(|e| MediaError::io(region.path(), "cannot duplicate the file handle", e))?;
        Ok(KernelWriter {
            file,
            path: region.path().to_path_buf(),
            len: region.len(),
            durable: region.kind() == RegionKind::Dax || region.is_emulated(),
        })
    }

    /// Whether a write is durable when it returns (a DAX file, or emulated PM on tmpfs): no
    /// flush is needed after it. Not on a plain file on a disk (msync is).
    pub fn durable_at_return(&self) -> bool {
        self.durable
    }

    /// The one flush rule after a write through the kernel with non-temporal meaning (durable
    /// after the next fence), for every system: on a plain file the kernel's copy is cached
    /// stores into the page cache, so the lines are written back now (where caches are outside
    /// the persistence domain) and the next fence orders them; on DAX and emulated PM the write
    /// is durable already and nothing is flushed. msync then writes a plain file's pages, as
    /// in every mode there.
    pub fn flush_after<M: crate::Media + ?Sized>(&self, m: &M, off: usize, len: usize) {
        debug_assert_eq!(m.len(), self.len, "the media this writer writes");
        self.check(off, len);
        if !self.durable && m.domain() == crate::Domain::Adr {
            m.flush(off, len, crate::Flush::best());
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file written to (for callers that submit writes themselves, e.g. by io_uring).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Write `src` at region offset `off` (all of it: short writes are continued).
    pub fn write(&self, off: usize, src: &[u8]) -> Result<()> {
        // SAFETY: `src` is valid for reads of its length for the whole call.
        unsafe { self.write_from(off, src.as_ptr(), src.len()) }
    }

    /// Write `len` bytes from `src`, memory other code may change while the call runs (a user's
    /// buffer): the kernel reads it, and no `&[u8]` over it is ever formed here.
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes during the call.
    pub unsafe fn write_from(&self, off: usize, src: *const u8, len: usize) -> Result<()> {
        self.check(off, len);
        let mut done = 0;
        while done < len {
            // SAFETY: the caller vouches `src` is valid for `len` reads; the kernel copies from
            // it and fails with EFAULT (never a fault here) if it is not mapped.
            let n = unsafe {
                libc::pwrite(
                    std::os::fd::AsRawFd::as_raw_fd(&self.file),
                    src.add(done).cast(),
                    len - done,
                    (off + done) as libc::off_t,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(self.error(off + done, e));
            }
            if n == 0 {
                return Err(self.error(off + done, std::io::ErrorKind::WriteZero.into()));
            }
            done += n as usize;
        }
        Ok(())
    }

    fn check(&self, off: usize, len: usize) {
        assert!(
            off <= self.len && len <= self.len - off,
            "kernel write {off}+{len} outside region of {} bytes",
            self.len
        );
    }

    fn error(&self, off: usize, e: std::io::Error) -> MediaError {
        MediaError::Write {
            path: self.path.clone(),
            offset: off as u64,
            err: e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protect::Access;
    use crate::{Media, RegionOptions};

    #[test]
    fn writes_land_in_a_read_only_mapping_and_are_seen_at_once() {
        let dir = pmkit_testkit::scratch();
        let r = Region::create(&dir.path().join("r"), 1 << 20, &RegionOptions::default()).unwrap();
        let kw = KernelWriter::new(&r).unwrap();
        assert!(kw.durable_at_return(), "tmpfs is emulated PM");
        r.set_access(0, r.len(), Access::Read).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        kw.write(4093, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        r.read(4093, &mut back);
        assert_eq!(back, data);
        // SAFETY: `data` is valid for its length.
        unsafe { kw.write_from(1, data.as_ptr(), 3) }.unwrap();
        assert_eq!(r.load_u64(0) >> 8 & 0xff_ffff, 0x0e_0700);
        r.set_access(0, r.len(), Access::ReadWrite).unwrap();
    }

    #[test]
    fn regions_without_a_writable_file_are_refused_with_the_reason() {
        let anon = Region::anonymous(1 << 20).unwrap();
        let e = KernelWriter::new(&anon).unwrap_err().to_string();
        assert!(e.contains("no backing file"), "{e}");
        let dir = pmkit_testkit::scratch();
        let p = dir.path().join("r");
        drop(Region::create(&p, 1 << 20, &RegionOptions::default()).unwrap());
        let ro = Region::open_read_only(&p).unwrap();
        let e = KernelWriter::new(&ro).unwrap_err().to_string();
        assert!(e.contains("read-only"), "{e}");
    }

    #[test]
    #[should_panic(expected = "outside region")]
    fn a_write_past_the_end_is_a_caller_bug() {
        let dir = pmkit_testkit::scratch();
        let r = Region::create(&dir.path().join("r"), 1 << 20, &RegionOptions::default()).unwrap();
        let kw = KernelWriter::new(&r).unwrap();
        let _ = kw.write((1 << 20) - 2, &[0; 4]);
    }
}
