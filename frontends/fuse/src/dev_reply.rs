//! Typed answers of [`Ops`] turned into fuser's replies for the /dev/fuse transport (`dev.rs`),
//! and the guard that keeps a panicking handler from taking its worker down.

use crate::ops::{Entry, Opened, Ops, Xattr};
use fuser::{Errno, FileHandle, Generation, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyXattr};

pub(crate) fn fe(e: i32) -> Errno {
    Errno::from_i32(e)
}

pub(crate) fn entry<O: Ops>(ops: &O, r: Result<Entry, i32>, reply: ReplyEntry) {
    match r {
        Ok(e) => reply.entry(&ops.ttl(), &e.attr, Generation(e.generation)),
        Err(e) => reply.error(fe(e)),
    }
}

pub(crate) fn empty(r: Result<(), i32>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(fe(e)),
    }
}

pub(crate) fn opened(r: Result<Opened, i32>, reply: ReplyOpen) {
    match r {
        Ok(o) => reply.opened(FileHandle(o.fh), o.flags),
        Err(e) => reply.error(fe(e)),
    }
}

pub(crate) fn xattr(r: Result<Xattr, i32>, reply: ReplyXattr) {
    match r {
        Ok(Xattr::Size(n)) => reply.size(n),
        Ok(Xattr::Data(d)) => reply.data(&d),
        Err(e) => reply.error(fe(e)),
    }
}

/// Run a request's handler; a panic in it is logged and the worker thread goes on serving. The
/// reply the handler owned is dropped as the panic unwinds, and fuser answers a dropped reply
/// with EIO: the caller gets an error, never silence.
pub(crate) fn guard(label: &str, op: &str, handler: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(handler)).is_err() {
        tracing::error!("{label}: a {op} request panicked; answered EIO, serving on");
    }
}
