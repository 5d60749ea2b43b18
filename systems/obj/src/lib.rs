//! PMO: persistent memory objects with attach/detach and atomic, crash-safe PMO Sync (seed 004).
//!
//! A pool on any [`pmkit_media::Media`] holds a header, a Persistent Object Table, a PMO Sync
//! Table and an object area. Each object has two slots: the current one (named by the published
//! word of its table entry) and a shadow that a read-write attachment writes. `sync` writes back
//! the shadow's dirty pages, fences once, and publishes it with one persisted 8-byte store (one
//! object) or a committed intent record (several objects at once). See docs/obj.md.

mod alloc;
mod bits;
pub mod error;
mod faults;
pub mod ffi;
pub mod layout;
pub mod media;
pub mod pool;

pub use error::{ObjError, Result};
pub use layout::{MAX_NAME, MAX_SYNC, PAGE};
pub use media::{ByRef, ObjMedia};
pub use pool::{
    Access, CheckReport, Handle, ObjInfo, Pool, PoolOptions, Recovery, Stats, Tracking, MAX_HANDLES,
};
