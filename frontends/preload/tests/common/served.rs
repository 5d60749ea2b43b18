//! A pool served by `pmkit fs serve`'s server, run in the test process, to shim processes.

use super::Shim;
use pmkit_fs::posix::Posix;
use pmkit_fs::{Fs, MountOptions};
use pmkit_fs_share::Server;
use pmkit_media::{Region, RegionOptions};
use std::sync::Arc;

pub(crate) struct Served {
    pub shim: Shim,
    server: Option<Server<Region>>,
    pub root: Arc<Posix<Region>>,
}

pub(crate) fn served() -> Served {
    let shim = Shim::new();
    let region = Region::open(&shim.pool, &RegionOptions::default()).unwrap();
    region.claim(true).unwrap();
    let (fs, _) = Fs::mount(region, &MountOptions::default()).unwrap();
    let root = Arc::new(Posix::new(fs));
    let server = Server::start(Arc::clone(&root), &shim.pool).unwrap();
    Served {
        shim,
        server: Some(server),
        root,
    }
}

impl Served {
    /// `script` under sh with the shim; its stdout (panics unless it succeeds).
    pub(crate) fn sh(&self, script: &str) -> String {
        self.shim.ok("sh", &["-c", script])
    }

    /// A whole file, read by the server's own session.
    pub(crate) fn read(&self, path: &str) -> String {
        String::from_utf8(super::read_all(&self.root, path.as_bytes())).unwrap()
    }

    /// Stop serving, unmount and check the pool.
    pub(crate) fn stop(mut self) {
        let root = self.server.take().unwrap().stop();
        drop(std::mem::replace(&mut self.root, root));
        let root = Arc::try_unwrap(self.root).ok().expect("sessions ended");
        let region = root.unmount();
        let report = pmkit_fs::check(&region);
        assert!(report.problems.is_empty(), "{report:?}");
        self.shim.assert_prefix_empty();
    }
}
