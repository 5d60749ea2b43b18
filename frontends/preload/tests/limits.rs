//! Crash safety and the shim's limits: a program killed with SIGKILL while writing through the
//! shim leaves a pool that checks clean after recovery with every fsynced file intact; a
//! forked child using the parent's descriptor, a second process on the
//! pool, a descriptor kept across exec or closed by close_range, O_APPEND changes by fcntl, special files and stdio get clear errors, and nothing
//! reaches the kernel's tree under the prefix.

mod common;
use common::{have, read_all, Shim};
use std::io::{BufRead, BufReader};
use std::process::Stdio;

#[test]
fn kill9_keeps_fsynced_files() {
    if !have("python3") {
        return;
    }
    let s = Shim::new();
    // Files f0, f1, ... of 64 KiB each (its number repeated), each fsynced then reported;
    // the last one is being written when the kill lands.
    let py = format!(
        "import os, sys\n\
         i = 0\n\
         while True:\n\
         \x20   fd = os.open('{}/f%d' % i, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)\n\
         \x20   for k in range(16):\n\
         \x20       os.write(fd, (b'%08d' % i) * 512)\n\
         \x20   os.fsync(fd)\n\
         \x20   os.close(fd)\n\
         \x20   os.rename('{}/f%d' % i, '{}/g%d' % i)\n\
         \x20   print(i, flush=True)\n\
         \x20   i += 1\n",
        s.mnt.display(),
        s.mnt.display(),
        s.mnt.display()
    );
    let mut child = s
        .cmd("python3")
        .args(["-c", &py])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut done = 0;
    for l in lines.by_ref() {
        done = l.unwrap().trim().parse::<u32>().unwrap() + 1;
        if done >= 40 {
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Lines already buffered name more durable files.
    for l in lines {
        done = done.max(l.unwrap().trim().parse::<u32>().unwrap() + 1);
    }
    assert!(done >= 40, "the writer stopped early ({done} files)");
    s.assert_prefix_empty();
    let (p, rec) = s.mount(); // check() before the mount: no problems
    assert!(
        !rec.was_clean && !rec.from_checkpoint,
        "killed: the pool was not unmounted, so mount walks: {rec:?}"
    );
    for i in 0..done {
        let want: Vec<u8> = format!("{i:08}").into_bytes().repeat(512 * 16);
        let got = read_all(&p, format!("/g{i}").as_bytes());
        assert!(
            got == want,
            "g{i}: {} bytes, not the fsynced contents",
            got.len()
        );
    }
    drop(p.unmount());
    let region =
        pmkit_media::Region::open(&s.pool, &pmkit_media::RegionOptions::default()).unwrap();
    let report = pmkit_fs::check(&region);
    assert!(report.is_clean() && report.clean, "{report:?}");
    assert!(report.checkpoint.starts_with("matches"), "{report:?}");
}

/// Run a python3 script under the shim; its stdout and stderr.
fn py(s: &Shim, script: &str) -> (String, String) {
    let out = s.cmd("python3").args(["-c", script]).output().unwrap();
    common::assert_ok(&out, script);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Python's `e(op)`: "ok", or the name of the errno `op` raised.
const OK_OR_ERRNO: &str = "import os, errno\n\
    def e(op):\n\
    \x20   try:\n\
    \x20       op()\n\
    \x20       return 'ok'\n\
    \x20   except OSError as x:\n\
    \x20       return errno.errorcode[x.errno]\n";

#[test]
fn limits_give_clear_errors() {
    if !have("python3") {
        return;
    }
    let s = Shim::new();
    let f = s.m("f");
    // fork of a process that mounted the pool itself (no server): the child's use of the
    // parent's descriptor (and of any pool path) is EIO with one line on stderr; its close
    // works; the parent goes on. (With a server, the child shares the pool: shared.rs.)
    let (out, err) = py(
        &s,
        &format!(
            "import os, errno\n\
             fd = os.open('{f}', os.O_CREAT | os.O_RDWR, 0o644)\n\
             os.write(fd, b'parent')\n\
             pid = os.fork()\n\
             if pid == 0:\n\
             \x20   r = []\n\
             \x20   for op in (lambda: os.write(fd, b'child'), lambda: os.pread(fd, 4, 0), lambda: os.stat('{f}')):\n\
             \x20       try:\n\
             \x20           op(); r.append('ok')\n\
             \x20       except OSError as e:\n\
             \x20           r.append(errno.errorcode[e.errno])\n\
             \x20   os.close(fd)\n\
             \x20   print('child', *r, flush=True)\n\
             \x20   os._exit(0)\n\
             os.waitpid(pid, 0)\n\
             print('parent', os.pread(fd, 16, 0).decode())\n"
        ),
    );
    assert_eq!(out, "child EIO EIO EIO\nparent parent\n", "{err}");
    assert_eq!(err.matches("child of fork").count(), 1, "{err}");

    // mmap of a shim file is served (kernel_rules.rs); fcntl may not turn O_APPEND on; F_GETFL
    // works.
    let (out, _) = py(
        &s,
        &format!(
            "import os, mmap, fcntl, errno\n\
             fd = os.open('{f}', os.O_RDWR)\n\
             os.ftruncate(fd, 8192)\n\
             try:\n\
             \x20   mmap.mmap(fd, 4096); print('mapped')\n\
             except OSError as e:\n\
             \x20   print('mmap', errno.errorcode[e.errno])\n\
             print(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDWR)\n\
             try:\n\
             \x20   fcntl.fcntl(fd, fcntl.F_SETFL, os.O_APPEND); print('set')\n\
             except OSError as e:\n\
             \x20   print('setfl', errno.errorcode[e.errno])\n\
             fd2 = os.dup(fd)\n\
             os.lseek(fd, 4, os.SEEK_SET)\n\
             print(os.lseek(fd2, 0, os.SEEK_CUR), os.read(fd2, 2))\n\
             os.close(fd)\n\
             print(os.read(fd2, 2))\n\
             os.close(fd2)\n\
             try:\n\
             \x20   os.read(fd2, 1)\n\
             except OSError as e:\n\
             \x20   print('closed', errno.errorcode[e.errno])\n"
        ),
    );
    assert_eq!(
        out,
        "mapped\nTrue\nsetfl EINVAL\n4 b'nt'\nb'\\x00\\x00'\nclosed EBADF\n"
    );

    // Without a server, one process per pool: while one holds it, another's first call under
    // the prefix is EBUSY with one line naming the pool and the command that shares it.
    let (out, _) = py(
        &s,
        &format!(
            "import os, subprocess\n\
             fd = os.open('{f}', os.O_RDONLY)\n\
             r = subprocess.run(['cat', '{f}'], capture_output=True, text=True)\n\
             print(r.returncode, 'busy' in r.stderr, 'pmkit fs serve' in r.stderr)\n"
        ),
    );
    assert_eq!(out, "1 True True\n");

    // exec: the new image mounts the pool itself (the lock went with the old image's
    // close-on-exec descriptor); a shim descriptor kept across exec is only a kernel number
    // there (an epoll instance): writing to it fails, it reaches no file.
    let (out, _) = py(
        &s,
        &format!(
            "import os\n\
             fd = os.open('{f}', os.O_RDONLY)\n\
             os.set_inheritable(fd, True)\n\
             os.dup2(fd, 3)\n\
             os.execvp('sh', ['sh', '-c', 'head -c 6 {f}; echo; echo x >&3 || echo write failed'])\n"
        ),
    );
    assert_eq!(out, "parent\nwrite failed\n");

    // A shim descriptor closed past `close` (close_range) is forgotten: the kernel's next
    // file with that number is the kernel's.
    let real = s.dir().join("real");
    std::fs::write(&real, b"kernel").unwrap();
    let (out, _) = py(
        &s,
        &format!(
            "import os\n\
             fd = os.open('{f}', os.O_RDONLY)\n\
             os.closerange(fd, fd + 1)\n\
             fd2 = os.open('{}', os.O_RDONLY)\n\
             print(fd2 == fd, os.read(fd2, 6))\n",
            real.display()
        ),
    );
    assert_eq!(out, "True b'kernel'\n");

    // Special files are made in the pool (never in the kernel's directory) and stat as what
    // they are; a device node cannot be opened (nothing in the process serves it; FIFOs are
    // `fifos_made_in_the_pool_carry_data_as_kernel_fifos`); owners are kept.
    let (out, _) = py(
        &s,
        &format!(
            "import os, errno, stat\n\
             os.mknod('{f}-node', 0o600 | stat.S_IFCHR, os.makedev(1, 3)); os.mkfifo('{f}-fifo')\n\
             a, b = os.stat('{f}-node'), os.stat('{f}-fifo')\n\
             print(stat.S_ISCHR(a.st_mode), os.major(a.st_rdev), os.minor(a.st_rdev), stat.S_ISFIFO(b.st_mode))\n\
             try:\n\
             \x20   os.open('{f}-node', os.O_RDONLY | os.O_NONBLOCK); print('opened')\n\
             except OSError as e:\n\
             \x20   print(errno.errorcode[e.errno])\n\
             os.chown('{f}', 7, 8)\n\
             st = os.stat('{f}'); print(st.st_uid, st.st_gid)\n"
        ),
    );
    assert_eq!(out, "True 1 3 True\nENOTSUP\n7 8\n"); // EOPNOTSUPP, the same number on Linux

    // stdio under the prefix is served (a cookie stream over a shim descriptor), never a
    // kernel file of that name. awk writes its output with stdio's fopen.
    let awk = have("awk");
    if awk {
        s.ok(
            "awk",
            &["BEGIN { print \"x\" > \"mnt/out\"; printf \"%d\\n\", 42 > \"mnt/out\" }"],
        );
    }
    s.assert_prefix_empty();
    let (p, rec) = s.mount();
    assert!(rec.was_clean);
    assert_eq!(&read_all(&p, b"/f")[..6], b"parent");
    if awk {
        assert_eq!(read_all(&p, b"/out"), b"x\n42\n");
    }
    drop(p.unmount());
}

#[test]
fn missing_pool_fails_clearly_and_leaks_nothing() {
    let s = Shim::new();
    let out = s
        .cmd("sh")
        .env("PMKIT_PRELOAD_POOL", s.dir().join("no-such-pool"))
        .args(["-c", &format!("echo x > {}", s.m("a"))])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no-such-pool") && err.contains("cannot open the pool"),
        "{err}"
    );
    s.assert_prefix_empty();
    // A relative prefix is refused (inert, one line): the kernel serves everything.
    let out = s
        .cmd("sh")
        .env("PMKIT_PRELOAD_PREFIX", "mnt")
        .args(["-c", "echo x > mnt/k"])
        .output()
        .unwrap();
    common::assert_ok(&out, "relative prefix");
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be an absolute path"));
    assert_eq!(std::fs::read(s.mnt.join("k")).unwrap(), b"x\n");
}

#[test]
fn barrier_setting_is_read_and_checked() {
    let s = Shim::new();
    let run = |ns: &str| {
        s.cmd("sh")
            .env("PMFS_BARRIER_NS", ns)
            .args(["-c", &format!("echo x > {}", s.m("b"))])
            .output()
            .unwrap()
    };
    let out = run("soon");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PMFS_BARRIER_NS"), "{err}");
    // Over the emulator's limit (1 ms): the mount refuses it.
    let out = run("2000000");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("barrier_ns"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s.assert_prefix_empty();
    common::assert_ok(&run("500"), "a 500 ns barrier");
    let (p, _) = s.mount();
    assert_eq!(read_all(&p, b"/b"), b"x\n");
    drop(p.unmount());
}

/// Paths are copied with one `process_vm_readv` of this process (its id cached, forgotten in a
/// fork child), or read in place on the stack or the brk heap (a 1000-byte buffer is malloc's,
/// there): a bad pointer, one past the break included, is still EFAULT, never a crash; a fork
/// child reads its own memory
/// (a buffer that says a kernel path in the parent and a pool path in the child routes to the
/// pool, where a child gets EIO; with the parent's id it would read the kernel path).
#[test]
fn bad_path_pointers_are_efault_and_a_fork_child_reads_its_own_memory() {
    if !have("python3") {
        return;
    }
    let s = Shim::new();
    let f = s.m("f");
    let (out, err) = py(
        &s,
        &format!(
            "import os, ctypes, errno\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             open('{f}', 'w').close()\n\
             st = ctypes.create_string_buffer(256)\n\
             r = []\n\
             libc.sbrk.restype = ctypes.c_void_p\n\
             past = libc.sbrk(0) + (1 << 20)\n\
             for p in (1, 4096, 0xffffffffffff0000, past):\n\
             \x20   n = libc.stat(ctypes.c_void_p(p), st)\n\
             \x20   r.append(errno.errorcode[ctypes.get_errno()] if n else 'ok')\n\
             r.append('ok' if libc.stat(b'{f}', st) == 0 else 'fail')\n\
             heap = ctypes.create_string_buffer(b'{f}', 1000)\n\
             r.append('ok' if libc.stat(heap, st) == 0 else 'fail')\n\
             print(*r, flush=True)\n\
             kernel = b'/tmp'.ljust(len(b'{f}'), b'/') + b'\\0'\n\
             buf = ctypes.create_string_buffer(kernel, len(kernel))\n\
             pid = os.fork()\n\
             if pid == 0:\n\
             \x20   ctypes.memmove(buf, b'{f}\\0', len(b'{f}') + 1)\n\
             \x20   n = libc.stat(buf, st)\n\
             \x20   print('child', errno.errorcode[ctypes.get_errno()] if n else 'ok', flush=True)\n\
             \x20   os._exit(0)\n\
             os.waitpid(pid, 0)\n"
        ),
    );
    assert_eq!(
        out, "EFAULT EFAULT EFAULT EFAULT ok ok\nchild EIO\n",
        "{err}"
    );
}

/// The per-file flags as the virtual xattrs `user.pmkit.atomic` and `user.pmkit.huge`, by path
/// and by descriptor: a hinted file's 4 KiB write takes a whole 2 MiB block; other names stay
/// ENOTSUP.
#[test]
fn the_flags_are_virtual_xattrs_through_the_shim() {
    if !have("python3") {
        return;
    }
    let s = Shim::new();
    let (f, d) = (s.m("f"), s.m("d"));
    let (out, err) = py(
        &s,
        &format!(
            "import os, errno\n\
             def e(op):\n\
             \x20   try:\n\
             \x20       return op()\n\
             \x20   except OSError as x:\n\
             \x20       return errno.errorcode[x.errno]\n\
             os.mkdir('{d}')\n\
             fd = os.open('{f}', os.O_CREAT | os.O_RDWR, 0o644)\n\
             print(sorted(os.listxattr('{f}')), os.listxattr('{d}'))\n\
             print(os.getxattr('{f}', 'user.pmkit.huge'), e(lambda: os.getxattr('{d}', 'user.pmkit.huge')))\n\
             os.setxattr(fd, 'user.pmkit.huge', b'1')\n\
             print(os.getxattr(fd, 'user.pmkit.huge'), os.getxattr('{f}', 'user.pmkit.atomic'))\n\
             os.write(fd, b'x' * 4096)\n\
             print(os.fstat(fd).st_blocks * 512)\n\
             print(e(lambda: os.setxattr('{f}', 'user.pmkit.huge', b'yes')), e(lambda: os.removexattr('{f}', 'user.pmkit.huge')), e(lambda: os.getxattr('{f}', 'user.other')), e(lambda: os.setxattr('{f}', 'user.pmkit.huge', b'1', os.XATTR_CREATE)))\n\
             os.setxattr('{f}', 'user.pmkit.atomic', b'1')\n\
             print(os.getxattr('{f}', 'user.pmkit.atomic'))\n"
        ),
    );
    assert_eq!(
        out,
        "[] []\n\
         b'0' ENODATA\n\
         b'1' b'0'\n\
         2097152\n\
         EINVAL EPERM ENOTSUP EEXIST\n\
         b'1'\n",
        "{err}"
    );
    s.assert_prefix_empty();
    let (p, _) = s.mount();
    let a = p.stat(b"/f").unwrap();
    assert!(a.huge && a.atomic, "{a:?}");
    drop(p.unmount());
}

/// A path in memory the shim cannot prove readable (an `mmap`'d buffer, as Python's and most
/// multi-threaded programs' heaps are) is read by the guarded copy: served; running into, or
/// starting in, an unreadable page is EFAULT, also after the program installed its own SIGSEGV
/// handler (`faulthandler`, through `sigaction`), and that handler still gets the program's own
/// faults: the process dies of SIGSEGV with Python's report, as without the shim.
#[test]
fn paths_in_mapped_memory_are_read_guarded_and_the_programs_own_faults_reach_it() {
    if !have("python3") {
        return;
    }
    let s = Shim::new();
    let f = s.m("f");
    let (out, err) = py(
        &s,
        &format!(
            "import ctypes, errno, mmap, faulthandler\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]\n\
             open('{f}', 'w').close()\n\
             st = ctypes.create_string_buffer(256)\n\
             def stat(p):\n\
             \x20   n = libc.stat(ctypes.c_void_p(p), st)\n\
             \x20   return errno.errorcode[ctypes.get_errno()] if n else 'ok'\n\
             m = mmap.mmap(-1, 2 * 4096)\n\
             m[:len(b'{f}') + 1] = b'{f}\\0'\n\
             m[4096 - 3:4096] = b'aaa'\n\
             addr = ctypes.addressof(ctypes.c_char.from_buffer(m))\n\
             assert libc.mprotect(addr + 4096, 4096, 0) == 0\n\
             r = [stat(addr), stat(addr + 4096 - 3), stat(addr + 4096)]\n\
             faulthandler.enable()\n\
             r += [stat(addr + 4096), stat(addr)]\n\
             print(*r, flush=True)\n"
        ),
    );
    assert_eq!(out, "ok EFAULT EFAULT EFAULT ok\n", "{err}");
    // With no system call: 100 stats of a mapped path, and not one `process_vm_readv`.
    if have("strace") {
        let log = s.dir.path().join("strace.log");
        let out = s
            .cmd("strace")
            .args(["-f", "-qq", "-e", "trace=process_vm_readv", "-o"])
            .arg(&log)
            .args([
                "python3",
                "-c",
                &format!(
                    "import ctypes, mmap\n\
                     libc = ctypes.CDLL(None, use_errno=True)\n\
                     st = ctypes.create_string_buffer(256)\n\
                     m = mmap.mmap(-1, 4096)\n\
                     m[:len(b'{f}') + 1] = b'{f}\\0'\n\
                     addr = ctypes.addressof(ctypes.c_char.from_buffer(m))\n\
                     print(sum(libc.stat(ctypes.c_void_p(addr), st) == 0 for _ in range(100)))\n"
                ),
            ])
            .output()
            .unwrap();
        common::assert_ok(&out, "strace python3");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "100\n");
        let calls = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            calls
                .lines()
                .filter(|l| l.contains("process_vm_readv("))
                .count(),
            0,
            "{calls}"
        );
    }
    // The program's own fault, after a guarded copy installed the shim's handler: with
    // faulthandler (its report, then SIGSEGV) and without (SIGSEGV).
    for fh in ["faulthandler.enable()", "pass"] {
        let out = s
            .cmd("python3")
            .args([
                "-c",
                &format!(
                    "import ctypes, faulthandler\n\
                     libc = ctypes.CDLL(None, use_errno=True)\n\
                     st = ctypes.create_string_buffer(256)\n\
                     assert libc.stat(ctypes.c_void_p(4096), st) != 0\n\
                     {fh}\n\
                     ctypes.string_at(1)\n"
                ),
            ])
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{fh}: {err}");
        if fh != "pass" {
            assert!(err.contains("Segmentation fault"), "{err}");
        }
    }
}

/// Bad buffers are EFAULT, as the kernel answers, never a crash in the shim: data for `write`,
/// `pwrite` and `read` (unmapped, or a read-only page to read into), an iovec array, a
/// `struct stat`/`statfs` to fill, a `readlink` buffer; nothing is written on the way, and the
/// file still works afterwards.
#[test]
fn bad_buffers_are_efault_and_change_nothing() {
    if !have("python3") {
        return;
    }
    let s = Shim::new();
    let (f, l) = (s.m("f"), s.m("l"));
    let (out, err) = py(
        &s,
        &format!(
            "import os, ctypes, errno, mmap\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             V = ctypes.c_void_p\n\
             def e(r):\n\
             \x20   return errno.errorcode[ctypes.get_errno()] if r < 0 else r\n\
             fd = os.open('{f}', os.O_CREAT | os.O_RDWR, 0o644)\n\
             os.write(fd, b'hello')\n\
             os.symlink('{f}', '{l}')\n\
             libc.mmap.restype = V\n\
             libc.mmap.argtypes = [V, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]\n\
             rop = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)\n\
             r = [e(libc.write(fd, V(1), 10)), e(libc.pwrite(fd, V(4096), 10, 0)),\n\
             \x20    e(libc.read(fd, V(1), 10)), e(libc.pread(fd, V(rop), 5, 0)),\n\
             \x20    e(libc.readv(fd, V(8), 1)), e(libc.stat(b'{f}', V(8))),\n\
             \x20    e(libc.fstat(fd, V(rop))), e(libc.statfs(b'{f}', V(16))),\n\
             \x20    e(libc.readlink(b'{l}', V(rop), 64))]\n\
             print(*r, flush=True)\n\
             print(os.pread(fd, 64, 0), os.stat('{f}').st_size, os.path.basename(os.readlink('{l}')), flush=True)\n"
        ),
    );
    assert_eq!(
        out, "EFAULT EFAULT EFAULT EFAULT EFAULT EFAULT EFAULT EFAULT EFAULT\nb'hello' 5 f\n",
        "{err}"
    );
}

/// Permissions are checked for the process's ids, and a change of ids through libc (`seteuid`,
/// `setegid`, `setgroups`) is seen by the next call: as another user, root's 0644 file cannot be
/// opened for writing, chmod is EPERM, a sticky directory keeps root's entry and a 0700
/// directory cannot be entered; back as root,
/// all of it works. Needs root (to change ids).
#[test]
fn permissions_follow_the_ids_the_process_sets() {
    // SAFETY: geteuid cannot fail.
    if !have("python3") || unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs python3 and root");
        return;
    }
    let s = Shim::new();
    let (f, t, tf, c) = (s.m("f"), s.m("t"), s.m("t/f"), s.m("c"));
    let (out, err) = py(
        &s,
        &format!(
            "{OK_OR_ERRNO}\
             os.close(os.open('{f}', os.O_CREAT | os.O_RDWR, 0o644))\n\
             os.mkdir('{t}', 0o777)\n\
             os.chmod('{t}', 0o1777)\n\
             os.close(os.open('{tf}', os.O_CREAT | os.O_RDWR, 0o666))\n\
             os.mkdir('{c}', 0o700)\n\
             os.setgroups([])\n\
             os.setegid(65534)\n\
             os.seteuid(65534)\n\
             print(e(lambda: os.open('{f}', os.O_WRONLY)), e(lambda: os.close(os.open('{f}', os.O_RDONLY))))\n\
             print(e(lambda: os.chmod('{f}', 0o600)), e(lambda: os.unlink('{tf}')), os.access('{f}', os.W_OK))\n\
             os.close(os.open('{t}/mine', os.O_CREAT | os.O_RDWR, 0o600))\n\
             print(os.stat('{t}/mine').st_uid, os.stat('{t}/mine').st_gid, e(lambda: os.chdir('{c}')))\n\
             os.seteuid(0)\n\
             os.setegid(0)\n\
             print(e(lambda: os.close(os.open('{f}', os.O_WRONLY))), e(lambda: os.chmod('{f}', 0o600)), e(lambda: os.unlink('{tf}')))\n"
        ),
    );
    assert_eq!(
        out, "EACCES ok\nEPERM EPERM False\n65534 65534 EACCES\nok ok ok\n",
        "{err}"
    );
    s.assert_prefix_empty();
}

/// A FIFO made in the pool opens as a kernel FIFO: ENXIO for a non-blocking writer with no
/// reader (as Linux), data from a writer to a reader, a blocking reader waiting for its writer
/// (another thread), fstat of every descriptor (dup'd too) answering the pool node, ENOENT once
/// unlinked; the private directory of backing FIFOs is gone when the process exits.
#[test]
fn fifos_made_in_the_pool_carry_data_as_kernel_fifos() {
    if !have("python3") {
        return;
    }
    let s = Shim::new();
    let fifo = s.m("fifo");
    let tmp = s.dir().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out = s
        .cmd("python3")
        .env("TMPDIR", &tmp)
        .args([
            "-c",
            &format!(
                "{OK_OR_ERRNO}\
                 import stat, threading\n\
                 os.mkfifo('{fifo}')\n\
                 print(e(lambda: os.open('{fifo}', os.O_WRONLY | os.O_NONBLOCK)))\n\
                 r = os.open('{fifo}', os.O_RDONLY | os.O_NONBLOCK)\n\
                 w = os.open('{fifo}', os.O_WRONLY | os.O_NONBLOCK)\n\
                 os.write(w, b'abc'); print(os.read(r, 10))\n\
                 st, fs, d = os.stat('{fifo}'), os.fstat(r), os.dup(w)\n\
                 same = lambda a: (a.st_ino, a.st_dev, a.st_mode, a.st_nlink) == (st.st_ino, st.st_dev, st.st_mode, st.st_nlink)\n\
                 print(stat.S_ISFIFO(fs.st_mode), same(fs), same(os.fstat(d)))\n\
                 for x in (r, w, d): os.close(x)\n\
                 got = []\n\
                 def reader():\n\
                 \x20   fd = os.open('{fifo}', os.O_RDONLY)\n\
                 \x20   got.append(os.read(fd, 100)); os.close(fd)\n\
                 t = threading.Thread(target=reader); t.start()\n\
                 w = os.open('{fifo}', os.O_WRONLY); os.write(w, b'hello'); os.close(w); t.join()\n\
                 print(got, os.listdir(os.path.dirname('{fifo}')))\n\
                 os.unlink('{fifo}')\n\
                 print(e(lambda: os.open('{fifo}', os.O_RDONLY | os.O_NONBLOCK)))\n"
            ),
        ])
        .output()
        .unwrap();
    common::assert_ok(&out, "the FIFO script");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ENXIO\nb'abc'\nTrue True True\n[b'hello'] ['fifo']\nENOENT\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(left.is_empty(), "backing FIFOs left after exit: {left:?}");
    s.assert_prefix_empty();
}

/// A UNIX socket bound to a pool path: the node is in the pool (a socket, listed and stat'ed),
/// a client in the same process connects by that path and talks to the server; a second bind
/// to the name is EADDRINUSE, opening the node ENXIO, and once unlinked the path is ENOENT.
#[test]
fn unix_sockets_bound_in_the_pool_connect_by_their_path() {
    if !have("python3") {
        return;
    }
    let s = Shim::new();
    let sock = s.m("sock");
    let (out, err) = py(
        &s,
        &format!(
            "{OK_OR_ERRNO}\
             import socket, stat, threading\n\
             srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
             srv.bind('{sock}')\n\
             srv.listen(1)\n\
             print(stat.S_ISSOCK(os.stat('{sock}').st_mode), os.listdir(os.path.dirname('{sock}')))\n\
             def serve():\n\
             \x20   c, _ = srv.accept()\n\
             \x20   c.sendall(c.recv(5).upper())\n\
             \x20   c.close()\n\
             t = threading.Thread(target=serve)\n\
             t.start()\n\
             cl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
             cl.connect('{sock}')\n\
             cl.sendall(b'hello')\n\
             print(cl.recv(5))\n\
             t.join()\n\
             again = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
             print(e(lambda: again.bind('{sock}')), e(lambda: os.open('{sock}', os.O_RDONLY)))\n\
             os.unlink('{sock}')\n\
             print(e(lambda: socket.socket(socket.AF_UNIX).connect('{sock}')))\n"
        ),
    );
    assert_eq!(
        out, "True ['sock']\nb'HELLO'\nEADDRINUSE ENXIO\nENOENT\n",
        "{err}"
    );
    s.assert_prefix_empty();
}
