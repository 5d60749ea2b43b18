//! What one call changed, for a thread that asks ([`watching`]): the mount's daemon serves
//! shim clients beside the kernel (docs/fs-sharing.md), and after each client call it tells the
//! kernel to drop what it cached of the inodes and names that call changed. The kernel needs no
//! telling of its own calls, so only the serving threads watch; every other thread pays one
//! thread-local read per note.
//!
//! Notes are over-approximate by design: a transaction that stages an inode and then fails still
//! notes it, and a dropped cache entry costs the kernel one request, never a wrong answer.

use std::cell::RefCell;

/// Most changes one call notes (a call changes a handful: a rename notes two names and up to
/// four inodes). Past it, further notes are dropped with a warning.
pub const MAX_CHANGES: usize = 256;

/// One thing a call changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The inode's attributes (its size, times, mode, owner, links).
    Attr(u64),
    /// The file's bytes (and so its attributes too).
    Data(u64),
    /// The name `name` in directory `dir` was added, removed or pointed elsewhere.
    Entry(u64, Vec<u8>),
    /// A new inode took the slot `ino` (a file the kernel still remembers there is another).
    Created(u64),
}

thread_local! {
    static NOTES: RefCell<Option<Vec<Change>>> = const { RefCell::new(None) };
}

/// Run `f`, and return with its result every change it made on this thread.
pub fn watching<R>(f: impl FnOnce() -> R) -> (R, Vec<Change>) {
    let outer = NOTES.with(|n| n.borrow_mut().replace(Vec::new()));
    let r = f();
    let notes = NOTES.with(|n| std::mem::replace(&mut *n.borrow_mut(), outer));
    (r, notes.unwrap_or_default())
}

/// Note a change, when this thread is watching (`c` is built only then).
pub(crate) fn note(c: impl FnOnce() -> Change) {
    // `try_with`: a thread's last calls may come while its thread-locals are torn down (the
    // shim unmounts at process exit); such a thread is not watching.
    let _ = NOTES.try_with(|n| {
        let mut n = n.borrow_mut();
        let Some(list) = n.as_mut() else {
            return;
        };
        let c = c();
        if list.contains(&c) {
            return;
        }
        if list.len() >= MAX_CHANGES {
            tracing::warn!("one call changed more than {MAX_CHANGES} things: {c:?} not noted");
            return;
        }
        list.push(c);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_watching_thread_notes_once_each() {
        note(|| unreachable!("not watching: the change is never built"));
        let ((), got) = watching(|| {
            note(|| Change::Attr(3));
            note(|| Change::Attr(3));
            note(|| Change::Entry(1, b"a".to_vec()));
            let ((), inner) = watching(|| note(|| Change::Data(9)));
            assert_eq!(inner, vec![Change::Data(9)]);
        });
        assert_eq!(got, vec![Change::Attr(3), Change::Entry(1, b"a".to_vec())]);
        let ((), capped) =
            watching(|| (0..MAX_CHANGES as u64 + 5).for_each(|i| note(|| Change::Attr(i))));
        assert_eq!(capped.len(), MAX_CHANGES);
    }
}
