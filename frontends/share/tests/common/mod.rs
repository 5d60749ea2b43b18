//! A pool served in the test process, and clients of it.
#![allow(dead_code)]

use pmkit_fs::posix::Posix;
use pmkit_fs::{Fs, MkfsOptions, MountOptions};
use pmkit_fs_share::{Client, Server};
use pmkit_media::{Region, RegionOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;

pub(crate) struct Served {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) pool: PathBuf,
    server: Option<Server<Region>>,
}

pub(crate) fn served() -> Served {
    let dir = pmkit_testkit::scratch();
    let pool = dir.path().join("pool");
    let region = Region::create(&pool, 32 << 20, &RegionOptions::default()).unwrap();
    Fs::mkfs(&region, &MkfsOptions::default()).unwrap();
    let (fs, _) = Fs::mount(region, &MountOptions::default()).unwrap();
    let server = Server::start(Arc::new(Posix::new(fs)), &pool).unwrap();
    Served {
        _dir: dir,
        pool,
        server: Some(server),
    }
}

impl Served {
    pub(crate) fn client(&self) -> Client {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.pool)
            .unwrap();
        Client::connect(&self.pool, f.as_raw_fd(), None, 4095).unwrap()
    }

    /// Stop the server; the file system with every session ended, checked clean after
    /// unmount.
    pub(crate) fn stop(mut self) {
        let root = self.server.take().unwrap().stop();
        let root = Arc::try_unwrap(root)
            .ok()
            .expect("only the root session is left");
        let region = root.unmount();
        let report = pmkit_fs::check(&region);
        assert!(report.problems.is_empty(), "{report:?}");
    }
}
