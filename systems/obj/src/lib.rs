//! PMO: persistent memory objects with attach/detach and atomic, crash-safe PMO Sync, after the
//! PMO Sync thesis (Wahiduddin, *Evaluating PMO Sync Implementation for Persistent Memory
//! Object*, UCF 2021).
//!
//! A pool on any [`pmkit_media::Media`] holds a header, a Persistent Object Table, a PMO Sync
//! Table and an object area. Each object has two PM slots: the current one (named by the
//! published word of its table entry) and the target of the next sync. A read-write attachment
//! stores into a shadow: a DRAM buffer (default) or the target slot itself (the thesis's PM
//! shadow). `sync` makes the changed pages durable in the target slot, fences once, and
//! publishes it with one persisted 8-byte store (one object) or a committed intent record
//! (several objects at once). See docs/obj.md.
//!
//! Modules: `layout` (on-media format), `pool` (the pool, split by job; `pool::shadow` holds
//! the two shadows), `staging` and `keys` (DRAM shadow buffers and their protection keys),
//! `faults` (write-fault tracking), `bits` (page sets), `alloc` (the object area's free
//! extents). The C ABI is `libpmo` (`frontends/c/pmo`).

mod alloc;
mod bits;
pub mod error;
mod faults;
mod keys;
pub mod layout;
pub mod pool;
mod staging;

pub use error::{ObjError, Result};
pub use layout::{MAX_NAME, MAX_SYNC, PAGE};
pub use pool::{
    Access, CheckReport, Handle, ObjInfo, Pool, PoolOptions, Recovery, Shadow, Stats, Tracking,
    MAX_HANDLES,
};
