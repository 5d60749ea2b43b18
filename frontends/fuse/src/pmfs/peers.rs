//! The mount's peers: processes served by the mount's daemon through the LD_PRELOAD shim
//! (`pmkit_fs_share::Server`, docs/fs-sharing.md) change the file system behind the kernel's
//! back, and under `--cache long` the kernel keeps attributes, names (missing ones too) and pages
//! for an hour. After each peer call, before the peer has its answer, the daemon tells the kernel
//! to drop what it holds of each inode and name the call changed (`FUSE_NOTIFY_INVAL_INODE` and
//! `FUSE_NOTIFY_INVAL_ENTRY`, written to /dev/fuse), so a file written through the shim reads
//! new through the mount at once. The kernel answers ENOENT for what it does not hold: ignored.

use super::PmfsOps;
use pmkit_fs::posix::Posix;
use pmkit_fs::watch::Change;
use pmkit_fs_share::Server;
use pmkit_media::Media;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// The kernel's notification codes (`enum fuse_notify_code`).
const NOTIFY_INVAL_INODE: i32 = 2;
const NOTIFY_INVAL_ENTRY: i32 = 3;

/// Tells the kernel of one mount what its peers changed.
pub struct Peers<M: Media> {
    /// A duplicate of the mount's /dev/fuse descriptor: notifications go through it.
    dev: OwnedFd,
    ops: Arc<PmfsOps<M>>,
}

impl<M: Media> Peers<M> {
    pub fn new(dev: OwnedFd, ops: Arc<PmfsOps<M>>) -> Peers<M> {
        Peers { dev, ops }
    }

    /// A peer call changed `changes`: drop them from the kernel's caches.
    pub fn changed(&self, changes: &[Change]) {
        // The kernel caches nothing of an inode it was never given: no notification then.
        let known = |ino: &u64| self.ops.refs.known(*ino);
        for c in changes {
            match c {
                Change::Attr(ino) | Change::Data(ino) | Change::Entry(ino, _) if !known(ino) => {}
                Change::Attr(ino) => self.inval_inode(*ino, false),
                Change::Data(ino) => self.inval_inode(*ino, true),
                // The name, and the directory's cached listing (its pages) and attributes.
                Change::Entry(dir, name) => {
                    self.inval_entry(*dir, name);
                    self.inval_inode(*dir, true);
                }
                Change::Created(ino) => self.ops.peer_created(*ino),
            }
        }
    }

    /// Drop inode `ino`'s attributes, and with `pages` its whole page cache.
    fn inval_inode(&self, ino: u64, pages: bool) {
        self.ops.refs.attrs_dropped(ino);
        let mut body = [0u8; 24];
        debug_assert!(ino != 0, "no inode 0");
        body[..8].copy_from_slice(&ino.to_ne_bytes());
        // Offset -1: attributes only; 0 with length 0: every page.
        let off: i64 = if pages { 0 } else { -1 };
        body[8..16].copy_from_slice(&off.to_ne_bytes());
        self.notify(NOTIFY_INVAL_INODE, &[&body]);
    }

    /// Drop the name `name` in directory `dir` (an entry or a cached miss).
    fn inval_entry(&self, dir: u64, name: &[u8]) {
        let Ok(len) = u32::try_from(name.len()) else {
            return;
        };
        let mut body = [0u8; 16];
        body[..8].copy_from_slice(&dir.to_ne_bytes());
        body[8..12].copy_from_slice(&len.to_ne_bytes());
        self.notify(NOTIFY_INVAL_ENTRY, &[&body, name, &[0]]);
    }

    /// One notification: `fuse_out_header` with unique 0 and the code as its error, then `parts`.
    fn notify(&self, code: i32, parts: &[&[u8]]) {
        let len = 16 + parts.iter().map(|p| p.len()).sum::<usize>();
        let mut head = [0u8; 16];
        head[..4].copy_from_slice(&(len as u32).to_ne_bytes());
        head[4..8].copy_from_slice(&code.to_ne_bytes());
        let mut iov = vec![IoSlice::new(&head)];
        iov.extend(parts.iter().map(|p| IoSlice::new(p)));
        // SAFETY: the slices outlive the call; writev reads them and nothing else.
        let r = unsafe {
            libc::writev(
                self.dev.as_raw_fd(),
                iov.as_ptr().cast(),
                iov.len() as libc::c_int,
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            // ENOENT: the kernel holds nothing of it. ENODEV/ENOTCONN: the mount is going.
            if !matches!(
                e.raw_os_error(),
                Some(libc::ENOENT | libc::ENODEV | libc::ENOTCONN)
            ) {
                tracing::warn!("telling the kernel of a peer's change failed: {e}");
            }
        }
    }
}

impl<M: Media> PmfsOps<M> {
    /// A peer made a new inode in slot `ino`: a new generation, as for the mount's own.
    fn peer_created(&self, ino: u64) {
        let g = self
            .next_gen
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.gens.lock().insert(ino, g);
        self.gone.lock().reused(ino);
    }
}

/// Serve the mounted `fs` to shim clients beside the kernel (`pmkit_fs_share::Server`, on the
/// abstract socket named after `pool`), telling the kernel through `dev` what each client call
/// changed. `None`, with the reason logged, when it cannot listen: the mount serves alone.
pub fn serve(
    fs: &Arc<pmkit_fs::Fs<pmkit_media::Region>>,
    ops: Arc<PmfsOps<pmkit_media::Region>>,
    dev: OwnedFd,
    pool: &std::path::Path,
) -> Option<Server<pmkit_media::Region>> {
    let root = Arc::new(Posix::shared(Arc::clone(fs)));
    let peers = Peers::new(dev, ops);
    let peer: pmkit_fs_share::Peer = Arc::new(move |c: &[Change]| peers.changed(c));
    match Server::start_with_peer(root, pool, Some(peer)) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(
                "cannot serve {} to shim processes beside the mount ({e}); the mount serves alone",
                pool.display()
            );
            None
        }
    }
}
