//! The boundary every C front end shares (`libpmfs`, `libpmo`, `libxmem` and the `LD_PRELOAD`
//! shim): the caller's strings and buffers turned into Rust borrows in one place, the calling
//! thread's last error message, `errno`, and panics stopped before they cross into C.
//!
//! The `unsafe` of a C front end lives here: each library's functions check their handles and
//! call these. Each library links its own copy, so each has its own last message, as
//! `dlerror` per library would.

mod boundary;
mod memory;

pub use boundary::{call, errno, message, message_text, set_errno, set_message, Failure};
pub use memory::{bytes, slice, slice_mut};
