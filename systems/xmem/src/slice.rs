//! `XSlice<T>`: a fixed-length array in a tag's regions, for the large structures the thesis
//! tags (adjacency lists, vertex data, hash tables), as `XBox` is for one value. The length is
//! set at allocation; the array never grows (allocate a new one to resize).

use crate::error::Result;
use crate::{Tag, XMem};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

pub struct XSlice<'a, T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    xmem: &'a XMem,
}

// SAFETY: an XSlice owns its elements exclusively, like Box<[T]>; XMem is Sync.
unsafe impl<T: Copy + Send> Send for XSlice<'_, T> {}
// SAFETY: sharing an XSlice shares only &[T].
unsafe impl<T: Copy + Sync> Sync for XSlice<'_, T> {}

impl<'a, T: Copy> XSlice<'a, T> {
    /// `len` copies of `value` in tag `t`'s regions (at most one region's bytes, like every
    /// allocation).
    pub fn new_in(xmem: &'a XMem, t: Tag, len: usize, value: T) -> Result<XSlice<'a, T>> {
        let l = std::alloc::Layout::array::<T>(len).map_err(|_| crate::XmemError::BadLayout {
            size: usize::MAX,
            align: std::mem::align_of::<T>(),
            why: "the array's size overflows",
        })?;
        let ptr = xmem
            .alloc(t, l.size().max(1), l.align().max(8))?
            .cast::<T>();
        for i in 0..len {
            // SAFETY: i < len elements of a fresh allocation of len * size_of::<T>() bytes.
            unsafe { ptr.as_ptr().add(i).write(value) };
        }
        Ok(XSlice { ptr, len, xmem })
    }
}

impl<T: Copy> Deref for XSlice<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised elements owned by this slice until drop; migration keeps the
        // address and the bytes (writes wait while a region is copied).
        unsafe { std::ptr::slice_from_raw_parts(self.ptr.as_ptr(), self.len).as_ref() }
            .expect("not null")
    }
}

impl<T: Copy> DerefMut for XSlice<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for deref; `&mut self` makes the access exclusive.
        unsafe { std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len).as_mut() }
            .expect("not null")
    }
}

impl<T: Copy> Drop for XSlice<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the elements are Copy (nothing to drop); the memory came from this XMem's
        // `alloc` and nothing refers to it after this.
        unsafe { self.xmem.free(self.ptr.cast()) }
            .expect("an XSlice frees what its XMem handed out");
    }
}
