//! `XAlloc`: an allocator handle for one tag, for collections. It implements the stable form
//! of the standard library's `Allocator` trait from the `allocator-api2` crate, which its
//! collections (`allocator_api2::vec::Vec`, `boxed::Box`) and hashbrown's `HashMap`/`HashSet`
//! take (`Vec::new_in(xmem.allocator(tag))`); every allocation lands in the tag's regions. The
//! standard `Vec`/`HashMap` take an allocator only on nightly (`allocator_api`).

use crate::{Tag, XMem};
use allocator_api2::alloc::{AllocError, Allocator};
use std::alloc::Layout;
use std::ptr::NonNull;

/// Allocates in one tag of one `XMem` (from [`XMem::allocator`]). Copy it freely.
#[derive(Clone, Copy)]
pub struct XAlloc<'a> {
    xmem: &'a XMem,
    tag: Tag,
}

impl<'a> XAlloc<'a> {
    pub(crate) fn new(xmem: &'a XMem, tag: Tag) -> XAlloc<'a> {
        XAlloc { xmem, tag }
    }

    pub fn tag(&self) -> Tag {
        self.tag
    }
}

// SAFETY: a block returned by `allocate` stays valid until `deallocate` (X-Mem moves regions
// keeping their addresses), copies of an `XAlloc` share the same `XMem` and tag (any of them may
// free what another allocated), and an `XAlloc` cannot outlive its `XMem` (the borrow).
unsafe impl Allocator for XAlloc<'_> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            // A zero-sized block: any aligned non-null address, never dereferenced nor freed.
            let p = NonNull::new(layout.align() as *mut u8).ok_or(AllocError)?;
            return Ok(NonNull::slice_from_raw_parts(p, 0));
        }
        // Errors (alignment above a page, a full tier, an exhausted reservation) are
        // `AllocError`, as the trait has it; `XMem::alloc` gives the reason.
        let p = self
            .xmem
            .alloc(self.tag, layout.size(), layout.align())
            .map_err(|_| AllocError)?;
        Ok(NonNull::slice_from_raw_parts(p, layout.size()))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() == 0 {
            return;
        }
        // SAFETY: the caller passes a block this allocator (this XMem) handed out, once.
        let r = unsafe { self.xmem.free(ptr) };
        r.expect("a collection freed a block its X-Mem allocator did not hand out");
    }
}

impl XMem {
    /// An allocator handle for tag `t`, for collections (see [`XAlloc`]).
    pub fn allocator(&self, t: Tag) -> XAlloc<'_> {
        XAlloc::new(self, t)
    }
}
