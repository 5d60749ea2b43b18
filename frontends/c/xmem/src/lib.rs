//! libxmem, the C ABI of X-Mem (`include/xmem.h`) with the thesis's names: one process-wide X-Mem set up by
//! `xmem_init`, `xmalloc(tag, size)`, `xfree`, `xmem_priority`, plus tags by name, calloc,
//! realloc, profiles, rebalance and statistics as JSON. Functions returning `int` give 0 (or a
//! count) or a negative `XMEM_E*` code and leave a message for `xmem_errmsg()`; allocation
//! functions return NULL instead. Panics are caught at the boundary (`XMEM_EINTERNAL`).

use pmkit_cabi::Failure;
use pmkit_xmem::{spec, Tag, Tier, XMem, XmemError};
use std::ffi::{c_char, c_int, c_long, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::OnceLock;

pub const XMEM_OK: c_int = 0;
pub const XMEM_EINVAL: c_int = -1;
pub const XMEM_ENOTAG: c_int = -2;
pub const XMEM_ENOMEM: c_int = -3;
pub const XMEM_EFOREIGN: c_int = -4;
pub const XMEM_EINIT: c_int = -5;
pub const XMEM_EIO: c_int = -6;
pub const XMEM_EINTERNAL: c_int = -7;

/// Alignment of every `xmalloc` (as malloc's `max_align_t`).
const ALIGN: usize = 16;

static XMEM: OnceLock<XMem> = OnceLock::new();

fn code(e: &XmemError) -> c_int {
    match e {
        XmemError::UnknownTag(_) | XmemError::TooManyTags { .. } => XMEM_ENOTAG,
        XmemError::ForeignPointer(_) => XMEM_EFOREIGN,
        XmemError::ReservationExhausted { .. }
        | XmemError::PmFull { .. }
        | XmemError::FastTierFull { .. } => XMEM_ENOMEM,
        XmemError::BudgetTooLarge { .. }
        | XmemError::BadLayout { .. }
        | XmemError::BadConfig(_) => XMEM_EINVAL,
        XmemError::Os { .. } | XmemError::Media(_) => XMEM_EIO,
    }
}

/// Run `f` at the boundary: errors and panics become a code and a message.
fn guard(f: impl FnOnce() -> Result<c_int, Failure>) -> c_int {
    pmkit_cabi::call("libxmem", XMEM_EINTERNAL, f).unwrap_or_else(|code| {
        // xmem.h's codes: every failure is one of the negative XMEM_E* values, never a count.
        debug_assert!((XMEM_EINTERNAL..XMEM_OK).contains(&code), "code {code}");
        code
    })
}

/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn cstr<'a>(s: *const c_char, what: &str) -> Result<&'a [u8], Failure> {
    // SAFETY: the caller's contract.
    unsafe { pmkit_cabi::bytes(s) }.ok_or_else(|| (XMEM_EINVAL, format!("{what} is NULL")))
}

fn err(e: XmemError) -> Failure {
    (code(&e), e.to_string())
}

fn xmem() -> Result<&'static XMem, Failure> {
    XMEM.get()
        .ok_or((XMEM_EINIT, "xmem_init has not been called".into()))
}

fn tag(t: c_int) -> Result<Tag, Failure> {
    u32::try_from(t)
        .map(Tag::from_id)
        .map_err(|_| (XMEM_ENOTAG, format!("unknown tag {t}")))
}

/// Set up the process's X-Mem from `spec` (NULL or "" for the defaults), with the keys of the
/// environment variable `PMKIT_XMEM` (what `pmkit xmem run` sets) overriding it; see
/// [`pmkit_xmem::spec`]. Once per process.
///
/// # Safety
/// `spec` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn xmem_init(spec: *const c_char) -> c_int {
    guard(|| {
        let s = if spec.is_null() {
            String::new()
        } else {
            // SAFETY: the caller passes a NUL-terminated string.
            let b = unsafe { cstr(spec, "spec") }?;
            std::str::from_utf8(b)
                .map_err(|_| (XMEM_EINVAL, "spec is not UTF-8".to_string()))?
                .to_owned()
        };
        let env = std::env::var(spec::ENV).ok();
        let sp = spec::parse(&s, env.as_deref()).map_err(|m| (XMEM_EINVAL, m))?;
        if XMEM.get().is_some() {
            return Err((XMEM_EINIT, "xmem_init was called already".into()));
        }
        let x = XMem::new(sp.cfg).map_err(err)?;
        // The process-wide instance is never dropped, so the PM file it created is unlinked now;
        // its mappings and descriptor stay valid until the process ends.
        x.unlink_pm_file();
        if let Some(p) = &sp.profile {
            x.load_profiles(p).map_err(|e| {
                (
                    code(&e),
                    format!("loading the profile {}: {e}", p.display()),
                )
            })?;
        }
        for (name, n) in &sp.priorities {
            let t = x.tag(name).map_err(err)?;
            x.set_priority(t, *n).map_err(err)?;
        }
        XMEM.set(x)
            .map_err(|_| (XMEM_EINIT, "xmem_init raced with itself".to_string()))?;
        if let Some(p) = sp.stats {
            let _ = STATS_AT_EXIT.set(p);
            // SAFETY: registers a plain function with no arguments; it only reads statics.
            if unsafe { libc::atexit(write_stats_at_exit) } != 0 {
                return Err((XMEM_EINTERNAL, "atexit refused the stats writer".into()));
            }
        }
        Ok(XMEM_OK)
    })
}

/// Where `stats=` asked the regions to be written at exit.
static STATS_AT_EXIT: OnceLock<std::path::PathBuf> = OnceLock::new();

/// Write the stats document beside its final name, then rename, so a reader never sees half.
extern "C" fn write_stats_at_exit() {
    let (Some(path), Some(x)) = (STATS_AT_EXIT.get(), XMEM.get()) else {
        return;
    };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let tmp = path.with_extension("tmp");
        if std::fs::write(&tmp, stats_json(x)).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }));
}

/// The tag named `name` (made on first use): >= 0, or a negative code.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn xmem_tag(name: *const c_char) -> c_int {
    guard(|| {
        // SAFETY: the caller passes NULL or a NUL-terminated string.
        let n = String::from_utf8_lossy(unsafe { cstr(name, "name") }?);
        Ok(xmem()?.tag(&n).map_err(err)?.id() as c_int)
    })
}

/// `xmem_priority(tag, prio)`: higher priorities go to DRAM first (at the next region
/// allocation or rebalance).
#[no_mangle]
pub extern "C" fn xmem_priority(t: c_int, prio: c_int) -> c_int {
    guard(|| {
        xmem()?.set_priority(tag(t)?, prio).map_err(err)?;
        Ok(XMEM_OK)
    })
}

/// Set a tag's profile: average pointer-chasing, random and streaming accesses per region.
#[no_mangle]
pub extern "C" fn xmem_profile(t: c_int, chase: f64, random: f64, streaming: f64) -> c_int {
    guard(|| {
        let f = [chase, random, streaming];
        xmem()?.set_profile(tag(t)?, f).map_err(err)?;
        Ok(XMEM_OK)
    })
}

/// Set a tag's lines written back to memory per region (the write term of Eq. 3).
#[no_mangle]
pub extern "C" fn xmem_writebacks(t: c_int, per_region: f64) -> c_int {
    guard(|| {
        xmem()?.set_writebacks(tag(t)?, per_region).map_err(err)?;
        Ok(XMEM_OK)
    })
}

/// Re-run the placement and move regions: the number of regions moved, or a negative code.
#[no_mangle]
pub extern "C" fn xmem_rebalance() -> c_int {
    guard(|| {
        let r = xmem()?.rebalance().map_err(err)?;
        Ok((r.to_fast.len() + r.to_slow.len()) as c_int)
    })
}

/// Run an allocation at the boundary: NULL and a message on any failure.
fn alloc_guard(f: impl FnOnce() -> Result<*mut c_void, Failure>) -> *mut c_void {
    let mut out = std::ptr::null_mut();
    let rc = guard(|| {
        out = f()?;
        Ok(XMEM_OK)
    });
    if rc == XMEM_OK {
        out
    } else {
        std::ptr::null_mut()
    }
}

/// `xmalloc(tag, size)`: `size` bytes (16-byte aligned) in the tag's regions, or NULL.
#[no_mangle]
pub extern "C" fn xmalloc(t: c_int, size: usize) -> *mut c_void {
    alloc_guard(|| {
        let p = xmem()?.alloc(tag(t)?, size, ALIGN).map_err(err)?;
        Ok(p.as_ptr().cast())
    })
}

/// `n * size` zeroed bytes in the tag's regions, or NULL (also when `n * size` overflows).
#[no_mangle]
pub extern "C" fn xcalloc(t: c_int, n: usize, size: usize) -> *mut c_void {
    alloc_guard(|| {
        let total = n
            .checked_mul(size)
            .ok_or((XMEM_EINVAL, "n * size overflows".to_string()))?;
        let p = xmem()?.alloc(tag(t)?, total, ALIGN).map_err(err)?;
        // SAFETY: a fresh allocation of at least `total` bytes.
        unsafe { p.as_ptr().write_bytes(0, total) };
        Ok(p.as_ptr().cast())
    })
}

/// Resize: a new object of `size` bytes in the same tag holding the old bytes (up to the
/// smaller size); the old one is freed. NULL `p` or size 0 are refused (NULL returned, `p`
/// untouched), since the tag would be unknown or the result ambiguous.
///
/// # Safety
/// `p` is an object from `xmalloc`/`xcalloc`/`xrealloc` not yet freed, and not used after a
/// successful call.
#[no_mangle]
pub unsafe extern "C" fn xrealloc(p: *mut c_void, size: usize) -> *mut c_void {
    alloc_guard(|| {
        let x = xmem()?;
        let old = NonNull::new(p.cast::<u8>()).ok_or((
            XMEM_EINVAL,
            "xrealloc(NULL): use xmalloc with a tag".to_string(),
        ))?;
        if size == 0 {
            return Err((XMEM_EINVAL, "xrealloc to size 0: use xfree".into()));
        }
        let (have, t) = x.usable_size(old).map_err(err)?;
        let new = x.alloc(t, size, ALIGN).map_err(err)?;
        // SAFETY: both are live allocations of at least min(have, size) bytes, distinct.
        unsafe { std::ptr::copy_nonoverlapping(old.as_ptr(), new.as_ptr(), have.min(size)) };
        // SAFETY: the caller stops using `p` once this returns it resized.
        unsafe { x.free(old) }.map_err(err)?;
        Ok(new.as_ptr().cast())
    })
}

/// Free an object; NULL does nothing. A pointer X-Mem did not hand out is reported on stderr
/// and the process aborts (as glibc's free does): continuing would hide a memory bug. Use
/// `xmem_free` for an error code instead.
///
/// # Safety
/// As for `free`: `p` is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn xfree(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    // SAFETY: the caller's contract, passed on.
    let rc = unsafe { xmem_free(p) };
    if rc != XMEM_OK {
        let msg = pmkit_cabi::message_text();
        eprintln!("xfree({p:p}): {msg}");
        std::process::abort();
    }
}

/// Free an object: 0, or `XMEM_EFOREIGN` (nothing changed) for a pointer X-Mem did not hand out.
///
/// # Safety
/// As for `free`: `p` is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn xmem_free(p: *mut c_void) -> c_int {
    guard(|| {
        let x = xmem()?;
        let Some(p) = NonNull::new(p.cast::<u8>()) else {
            return Ok(XMEM_OK);
        };
        // SAFETY: the caller's contract.
        unsafe { x.free(p) }.map_err(err)?;
        Ok(XMEM_OK)
    })
}

/// The regions and the DRAM budget as JSON. Writes at most `len` bytes (NUL included) into
/// `buf` and returns the length the whole document needs (without the NUL), like `snprintf`;
/// a negative code on error.
///
/// # Safety
/// `buf` is NULL (with `len` 0) or valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn xmem_stats_json(buf: *mut c_char, len: usize) -> c_long {
    let mut doc = String::new();
    let rc = guard(|| {
        doc = stats_json(xmem()?);
        Ok(XMEM_OK)
    });
    if rc != XMEM_OK {
        return rc as c_long;
    }
    if !buf.is_null() && len > 0 {
        let n = doc.len().min(len - 1);
        // SAFETY: the caller vouches for `len` writable bytes at `buf`; we write n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(doc.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
    }
    doc.len() as c_long
}

fn stats_json(x: &XMem) -> String {
    let (slots, used) = x.fast_slots();
    let regions: Vec<String> = x
        .regions()
        .iter()
        .map(|r| {
            let name = x.tag_name(r.tag).unwrap_or_default();
            format!(
                "{{\"index\":{},\"tag\":{},\"name\":{},\"tier\":\"{}\",\"bytes\":{},\"benefit\":{},\"priority\":{}}}",
                r.index,
                r.tag.id(),
                json_str(&name),
                if r.tier == Tier::Fast { "dram" } else { "pm" },
                r.bytes,
                if r.benefit.is_finite() { r.benefit } else { 0.0 },
                r.priority
            )
        })
        .collect();
    format!(
        "{{\"region_size\":{},\"fast_slots\":{slots},\"fast_used\":{used},\"regions\":[{}]}}",
        x.config().region_size,
        regions.join(",")
    )
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The message of the calling thread's last error (valid until its next failing call).
#[no_mangle]
pub extern "C" fn xmem_errmsg() -> *const c_char {
    pmkit_cabi::message()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
