//! Shared helpers for the `pmkit serve` integration tests: start the real binary on a unix
//! socket in a temp dir with a small device in /dev/shm, run client tools with timeouts, and
//! clean everything up, whatever the test does.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub(crate) const PMKIT: &str = env!("CARGO_BIN_EXE_pmkit");

/// True when every tool is installed. Missing tools fail the test in CI (CI set) and skip it,
/// with a note, elsewhere.
pub(crate) fn have(tools: &[&str]) -> bool {
    pmkit_testkit::need_tool(tools)
}

/// Root, /dev/fuse and a free loop device: needed for nbdfuse + losetup.
pub(crate) fn have_fuse_and_loop() -> bool {
    let why = "nbdfuse and losetup";
    pmkit_testkit::need_root(why)
        && pmkit_testkit::need_file("/dev/fuse", why)
        && pmkit_testkit::need_file("/dev/loop-control", why)
}

/// Run a command with a time limit (coreutils `timeout`, so a hung client cannot hang the test).
pub(crate) fn run(secs: u64, cmd: &[&str]) -> Output {
    Command::new("timeout")
        .args(["-k", "5", &secs.to_string()])
        .args(cmd)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Like [`run`], but the command must succeed; returns its stdout.
pub(crate) fn ok(secs: u64, cmd: &[&str]) -> String {
    let o = run(secs, cmd);
    assert!(
        o.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A scratch directory in /dev/shm (emulated PM), removed on drop.
pub(crate) fn shm_dir(prefix: &str) -> tempfile::TempDir {
    pmkit_testkit::scratch_named(prefix)
}

/// A device file in /dev/shm, removed on drop.
pub(crate) struct DevFile(pub PathBuf);

impl DevFile {
    pub(crate) fn new(name: &str) -> Self {
        let p = PathBuf::from(format!(
            "/dev/shm/pmkit-test-{}-{name}.pmbd",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        DevFile(p)
    }
    pub(crate) fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for DevFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A running `pmkit serve`.
pub(crate) struct Serve {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub sock: PathBuf,
    pub uri: String,
    pub banner: String,
}

impl Serve {
    /// Start `pmkit serve DEV --socket <tmp>/nbd.sock EXTRA...` and wait until it accepts.
    pub(crate) fn start(dev: &str, extra: &[&str]) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("nbd.sock");
        Self::start_in(dir, sock, dev, extra)
    }

    pub(crate) fn start_in(
        dir: tempfile::TempDir,
        sock: PathBuf,
        dev: &str,
        extra: &[&str],
    ) -> Serve {
        let mut args: Vec<&str> = vec!["serve"];
        if !dev.is_empty() {
            args.push(dev);
        }
        let s = sock.to_str().unwrap();
        // With --listen ADDR the server is on TCP and the socket path is unused.
        let tcp = extra
            .iter()
            .position(|a| *a == "--listen")
            .map(|i| extra[i + 1].to_string());
        if tcp.is_none() {
            args.extend(["--socket", s]);
        }
        args.extend(extra);
        // stderr to a file: a pipe nobody reads could fill up and stall the server.
        let log = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        let mut child = Command::new(PMKIT)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start pmkit serve");
        let t = Instant::now();
        loop {
            let up = match &tcp {
                Some(a) => std::net::TcpStream::connect(a).is_ok(),
                None => UnixStream::connect(&sock).is_ok(),
            };
            if up {
                break;
            }
            if let Some(st) = child.try_wait().unwrap() {
                let e = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
                panic!("pmkit serve {args:?} exited early ({st}): {e}");
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "pmkit serve did not listen within 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The banner ends with the "stop with" line; it may still be on its way.
        let mut banner = String::new();
        {
            let out = child.stdout.as_mut().unwrap();
            let mut buf = [0u8; 8192];
            let fd = std::os::fd::AsRawFd::as_raw_fd(out);
            // SAFETY: setting O_NONBLOCK on a pipe fd we own, to poll it without blocking.
            unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) };
            let t = Instant::now();
            while !banner.contains("stop with") && t.elapsed() < Duration::from_secs(10) {
                match out.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => banner.push_str(&String::from_utf8_lossy(&buf[..n])),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        Serve {
            child: Some(child),
            dir,
            uri: format!("nbd+unix:///?socket={s}"),
            sock,
            banner,
        }
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// SIGTERM, then wait (bounded); returns the exit status and stderr.
    pub(crate) fn stop(mut self) -> (ExitStatus, String) {
        let mut c = self.child.take().unwrap();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let st = wait_bounded(&mut c, Duration::from_secs(60));
        (st, self.stderr())
    }

    /// SIGKILL: a crash.
    pub(crate) fn kill9(mut self) {
        let mut c = self.child.take().unwrap();
        let _ = c.kill();
        let _ = c.wait();
    }
}

fn wait_bounded(c: &mut Child, limit: Duration) -> ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st;
        }
        if t.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            panic!("pmkit serve did not exit within {limit:?} of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Copy `data` into the export with `nbdcopy`, copy it back out, and compare (the export may be
/// larger than `data`). Each copy gets `secs` seconds.
pub(crate) fn nbdcopy_round_trip(s: &Serve, data: &[u8], secs: u64) {
    let src = s.dir.path().join("src.img");
    let back = s.dir.path().join("back.img");
    std::fs::write(&src, data).unwrap();
    ok(secs, &["nbdcopy", src.to_str().unwrap(), &s.uri]);
    ok(
        secs,
        &["nbdcopy", "--no-extents", &s.uri, back.to_str().unwrap()],
    );
    let out = std::fs::read(&back).unwrap();
    assert!(out.len() >= data.len());
    assert!(
        out[..data.len()] == data[..],
        "data read back differs from data written"
    );
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&back);
}

/// Deterministic pseudo-random bytes (xorshift), fast enough for hundreds of MiB.
pub(crate) fn fill_random(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

// A minimal NBD client (simple replies) for tests that need exact control over requests.

pub(crate) const REQ_MAGIC: u32 = 0x2560_9513;
pub(crate) const SIMPLE_MAGIC: u32 = 0x6744_6698;

/// Connect and finish the handshake with GO (asking for block size info), no structured replies.
pub(crate) fn nbd_connect(sock: &Path) -> std::io::Result<UnixStream> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut g = [0u8; 18];
    s.read_exact(&mut g)?;
    s.write_all(&3u32.to_be_bytes())?; // FIXED_NEWSTYLE | NO_ZEROES
    let mut opt = Vec::new();
    opt.extend_from_slice(&0x4948_4156_454f_5054u64.to_be_bytes());
    opt.extend_from_slice(&7u32.to_be_bytes()); // GO
    opt.extend_from_slice(&8u32.to_be_bytes());
    opt.extend_from_slice(&0u32.to_be_bytes()); // default export
    opt.extend_from_slice(&1u16.to_be_bytes());
    opt.extend_from_slice(&3u16.to_be_bytes()); // NBD_INFO_BLOCK_SIZE
    s.write_all(&opt)?;
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h)?;
        let typ = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut d = vec![0u8; len as usize];
        s.read_exact(&mut d)?;
        match typ {
            1 => return Ok(s), // ACK: transmission
            3 => {}            // INFO
            t => return Err(std::io::Error::other(format!("GO failed: reply {t:#x}"))),
        }
    }
}

pub(crate) fn nbd_request(typ: u16, handle: u64, off: u64, len: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(28);
    b.extend_from_slice(&REQ_MAGIC.to_be_bytes());
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&typ.to_be_bytes());
    b.extend_from_slice(&handle.to_be_bytes());
    b.extend_from_slice(&off.to_be_bytes());
    b.extend_from_slice(&len.to_be_bytes());
    b
}

/// Read a simple reply header: (error, handle).
pub(crate) fn nbd_reply(s: &mut UnixStream) -> std::io::Result<(u32, u64)> {
    let mut h = [0u8; 16];
    s.read_exact(&mut h)?;
    assert_eq!(
        u32::from_be_bytes(h[0..4].try_into().unwrap()),
        SIMPLE_MAGIC
    );
    Ok((
        u32::from_be_bytes(h[4..8].try_into().unwrap()),
        u64::from_be_bytes(h[8..16].try_into().unwrap()),
    ))
}

/// Run `pmkit ARGS` and return its output.
pub(crate) fn pmkit(args: &[&str]) -> Output {
    Command::new(PMKIT).args(args).output().expect("run pmkit")
}

/// stdout and stderr of a command, for assertion messages.
pub(crate) fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `pmkit info PATH --json`, parsed.
pub(crate) fn info_json(p: &std::path::Path) -> serde_json::Value {
    let o = pmkit(&["info", p.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).expect("info --json prints JSON")
}
