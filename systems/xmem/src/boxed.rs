//! `XBox<T>`: a `Box`-like owner of one value in a tag's regions, with no other crate's types in
//! its signature. For collections, see `XAlloc` (`handle.rs`).

use crate::error::Result;
use crate::{Tag, XMem};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

pub struct XBox<'a, T> {
    ptr: NonNull<T>,
    xmem: &'a XMem,
}

// SAFETY: an XBox owns its T exclusively, like Box; XMem is Sync, so freeing from another thread
// is fine. Sending it sends the T.
unsafe impl<T: Send> Send for XBox<'_, T> {}
// SAFETY: sharing an XBox shares only &T.
unsafe impl<T: Sync> Sync for XBox<'_, T> {}

impl<'a, T> XBox<'a, T> {
    /// Move `value` into tag `t`'s regions.
    pub fn new_in(xmem: &'a XMem, t: Tag, value: T) -> Result<XBox<'a, T>> {
        let l = std::alloc::Layout::new::<T>();
        let ptr = xmem.alloc(t, l.size().max(1), l.align())?.cast::<T>();
        // SAFETY: `ptr` is a fresh allocation of at least size_of::<T>() bytes aligned for T.
        unsafe { ptr.as_ptr().write(value) };
        Ok(XBox { ptr, xmem })
    }

    /// The value's address (it never changes, migrations included).
    pub fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }
}

impl<T> Deref for XBox<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the box owns an initialised T at `ptr` until drop; migration keeps the address
        // and the bytes (writes wait while a region is copied).
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> DerefMut for XBox<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for deref; `&mut self` makes the access exclusive.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T> Drop for XBox<'_, T> {
    fn drop(&mut self) {
        // SAFETY: we own the initialised T; after dropping it in place nothing refers to it and
        // the memory goes back to the allocator that handed it out.
        unsafe {
            std::ptr::drop_in_place(self.ptr.as_ptr());
            self.xmem
                .free(self.ptr.cast())
                .expect("an XBox frees what its XMem handed out");
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for XBox<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}
