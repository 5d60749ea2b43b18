//! Protection of PM from stray stores, in one place for every system (the Linux pmem driver
//! and NOVA keep one lock/unlock pair around every PM store; this is that pair). A system
//! opens its media with [`Guarded::open`] and writes through the result like any other
//! [`Media`](crate::Media): each access gets the rights it needs in the mode in force, and the
//! system never branches on the mode.
//!
//! | mode              | the mapping outside a window | a write window                               |
//! |-------------------|------------------------------|----------------------------------------------|
//! | `none`            | read-write                   | nothing                                      |
//! | `pt`, `pt-batch`  | read-only (`mprotect`)       | `mprotect` the pages read-write, and back; windows over one page serialized by striped locks |
//! | `private`         | no access (`PROT_NONE`)      | `mmap` the range of the file, `munmap` after |
//! | `pkey`            | key access-disabled (PKRU)   | WRPKRU to enable in this thread, WRPKRU to restore |
//! | `kernel`          | read-only, for good          | none: stores become `pwrite` on the file     |
//!
//! **One rule for a store that fails** (a `pwrite` in `kernel` mode, an `mprotect` or `mmap`
//! that opens a window; on real PM a media error answers EIO): the first failure *poisons* the
//! gate. That store and every later one are dropped, so the media stops changing exactly there,
//! as if the machine had crashed at that store, the state every system's crash tests prove it
//! recovers from. Every write from then on fails with [`MediaError::Poisoned`](crate::MediaError);
//! reads go on and see the media as it was left; opening the media again recovers it.
//!
//! **One flush rule after a kernel write:** on DAX and emulated PM (tmpfs) a returned `pwrite`
//! is durable and flushes are skipped; on a plain file the kernel's copy is cached stores into
//! the page cache, so a store with non-temporal meaning has its lines written back at once,
//! and msync makes the pages durable as in every mode there.
//!
//! **On the crash simulator** `none` and `kernel` run (`kernel` modelled as the kernel's DAX
//! copy: a non-temporal copy and a fence, durable at return); the others need a mapping.

mod gate;
mod guarded;
mod mode;
mod poison;
pub mod stripes;
mod view;

pub use gate::Gate;
pub use guarded::Guarded;
pub use mode::{auto, why_not, Protect};
pub use poison::Poison;
pub use view::{View, MAX_WORDS};
