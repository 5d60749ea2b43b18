//! The FUSE device file over an in-memory disk: byte-exact reads and writes (aligned and not),
//! fsync reaching the device's flush, discard, and a real ext4 through losetup.

use parking_lot::Mutex;
use pmkit_fuse::attach::{attach, AttachOptions, Mkfs};
use pmkit_fuse::{Disk, DiskError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Clone)]
struct MemDisk {
    data: Arc<Mutex<Vec<u8>>>,
    flushes: Arc<AtomicU64>,
    bs: u32,
}

impl MemDisk {
    fn new(size: usize, bs: u32) -> Self {
        MemDisk {
            data: Arc::new(Mutex::new(vec![0; size])),
            flushes: Arc::default(),
            bs,
        }
    }
    /// Reads, writes and zeroing take any bytes inside the disk (the device patches partial
    /// blocks itself); discards whole blocks only.
    fn in_range(&self, off: u64, len: u64) {
        assert!(len > 0, "empty request reached the disk");
        assert!(off + len <= self.size(), "out of range");
    }
    fn check(&self, off: u64, len: u64) {
        assert_eq!(
            off % self.bs as u64,
            0,
            "misaligned offset {off} reached the disk"
        );
        assert_eq!(
            len % self.bs as u64,
            0,
            "misaligned length {len} reached the disk"
        );
        assert!(off + len <= self.size(), "out of range");
    }
}

impl Disk for MemDisk {
    fn size(&self) -> u64 {
        self.data.lock().len() as u64
    }
    fn block_size(&self) -> u32 {
        self.bs
    }
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        self.in_range(off, buf.len() as u64);
        buf.copy_from_slice(&self.data.lock()[off as usize..off as usize + buf.len()]);
        Ok(())
    }
    fn write(&self, off: u64, d: &[u8], _fua: bool) -> Result<(), DiskError> {
        self.in_range(off, d.len() as u64);
        self.data.lock()[off as usize..off as usize + d.len()].copy_from_slice(d);
        Ok(())
    }
    fn flush(&self) -> Result<(), DiskError> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn discard(&self, off: u64, len: u64) -> Result<(), DiskError> {
        self.check(off, len);
        self.zero(off, len)
    }
    fn zero(&self, off: u64, len: u64) -> Result<(), DiskError> {
        self.in_range(off, len);
        self.data.lock()[off as usize..(off + len) as usize].fill(0);
        Ok(())
    }
}

/// Root and /dev/fuse are needed; in CI their absence is a failure, elsewhere a skip.
fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    let ok = unsafe { libc::geteuid() } == 0 && std::path::Path::new("/dev/fuse").exists();
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the FUSE tests as root with /dev/fuse"
        );
        eprintln!("skipping: needs root and /dev/fuse");
    }
    ok
}

fn opts(pm: &std::path::Path) -> AttachOptions {
    AttachOptions {
        pm_path: pm.into(),
        mountpoint: None,
        mkfs: None,
        threads: 2,
        mount_options: None,
        route: Default::default(),
        // PMKIT_ATTACH_TRANSPORT=dev|uring: run over that FUSE transport (default auto).
        transport: std::env::var("PMKIT_ATTACH_TRANSPORT")
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or_default(),
    }
}

#[test]
fn file_io_flush_and_discard() {
    if !can_run() {
        return;
    }
    let disk = MemDisk::new(8 << 20, 4096);
    let tag = tempfile::NamedTempFile::new().unwrap();
    let mut a = attach(disk.clone(), &opts(tag.path())).expect("attach");
    let path = a.state.fuse_dir.join("disk");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    assert_eq!(f.metadata().unwrap().len(), 8 << 20);
    // Unaligned write: read-modify-write must keep the neighbours.
    f.write_all_at(&[7u8; 4096], 4096).unwrap();
    f.write_all_at(b"hello", 4096 + 100).unwrap();
    let mut b = vec![0u8; 4096];
    f.read_exact_at(&mut b, 4096).unwrap();
    assert_eq!(&b[100..105], b"hello");
    assert!(b[..100].iter().all(|&x| x == 7) && b[105..].iter().all(|&x| x == 7));
    assert_eq!(&disk.data.lock()[4096 + 100..4096 + 105], b"hello");
    // fsync is the device's FLUSH.
    let before = disk.flushes.load(Ordering::SeqCst);
    f.sync_all().unwrap();
    assert!(
        disk.flushes.load(Ordering::SeqCst) > before,
        "fsync must reach Disk::flush"
    );
    // Discard (punch hole) reads back zeroes.
    // SAFETY: fallocate on a file descriptor `f` owns; it touches no memory of ours.
    let r = unsafe {
        libc::fallocate(
            std::os::unix::io::AsRawFd::as_raw_fd(&f),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            4096,
            4096,
        )
    };
    assert_eq!(r, 0, "punch hole: {}", std::io::Error::last_os_error());
    assert!(disk.data.lock()[4096..8192].iter().all(|&x| x == 0));
    // Past the end: writes fail, reads are short.
    f.seek(SeekFrom::Start(8 << 20)).unwrap();
    assert!(f.write(&[1]).is_err() || f.metadata().unwrap().len() == 8 << 20);
    let mut tail = vec![];
    f.read_to_end(&mut tail).unwrap();
    assert!(tail.is_empty());
    drop(f);
    a.detach().expect("detach");
    assert!(!pmkit_fuse::attach::is_mountpoint(&a.state.fuse_dir));
}

#[test]
fn ext4_through_loop_device() {
    if !can_run() {
        return;
    }
    if std::process::Command::new("mkfs.ext4")
        .arg("-V")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install e2fsprogs"
        );
        return;
    }
    let disk = MemDisk::new(64 << 20, 4096);
    let tag = tempfile::NamedTempFile::new().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let mut o = opts(tag.path());
    o.mkfs = Some(Mkfs::Ext4);
    o.mountpoint = Some(mnt.path().into());
    let mut a = attach(disk.clone(), &o).expect("attach with mkfs and mount");
    let want: Vec<Vec<u8>> = (0..20).map(|i| vec![i as u8; 10_000 + i * 777]).collect();
    for (i, w) in want.iter().enumerate() {
        let mut f = std::fs::File::create(mnt.path().join(format!("f{i}"))).unwrap();
        f.write_all(w).unwrap();
        f.sync_all().unwrap();
    }
    a.detach().expect("detach");
    assert!(!pmkit_fuse::attach::is_mountpoint(mnt.path()));
    // Attach again, mount without mkfs: the files are there.
    o.mkfs = None;
    let mut a = attach(disk.clone(), &o).expect("re-attach and mount");
    for (i, w) in want.iter().enumerate() {
        assert_eq!(
            &std::fs::read(mnt.path().join(format!("f{i}"))).unwrap(),
            w,
            "file f{i}"
        );
    }
    a.detach().unwrap();
    // And the file system is clean.
    let mut a = attach(disk.clone(), &opts(tag.path())).expect("attach for fsck");
    let dev = a.state.loop_dev.clone().unwrap();
    let fsck = std::process::Command::new("fsck.ext4")
        .arg("-fn")
        .arg(&dev)
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "fsck: {}",
        String::from_utf8_lossy(&fsck.stdout)
    );
    a.detach().unwrap();
}
