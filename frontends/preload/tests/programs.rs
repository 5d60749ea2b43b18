//! Unmodified programs (sh, cat, cp, dd, mkdir, mv, rm, ln, ls, find, stat,
//! touch, chmod, tar, cmp, python3) under the shim: what they
//! leave is checked through pmkit_fs after they exit, and nothing reached the kernel's tree
//! under the prefix.

mod common;
use common::{bytes, have, read_all, Shim};

#[test]
fn coreutils_shell_and_python() {
    if !have("python3") {
        return;
    }
    let s = Shim::new();
    let src = s.dir().join("src");
    let data = bytes(512 << 10, 7);
    std::fs::write(&src, &data).unwrap();
    let src = src.to_str().unwrap();

    s.ok("sh", &["-c", &format!("echo hello > {}", s.m("a"))]);
    s.ok("sh", &["-c", &format!("echo more >> {}", s.m("a"))]);
    assert_eq!(s.ok("cat", &[&s.m("a")]), "hello\nmore\n");
    // cp in (copy_file_range from a kernel file into the pool), within the pool (one call of
    // the pool's own copy), and out again.
    s.ok("cp", &[src, &s.m("in")]);
    s.ok("cp", &[&s.m("in"), &s.m("in2")]);
    s.ok("cmp", &[src, &s.m("in2")]);
    s.ok("rm", &[&s.m("in2")]);
    let out = s.dir().join("out");
    s.ok("cp", &[&s.m("in"), out.to_str().unwrap()]);
    assert!(
        std::fs::read(&out).unwrap() == data,
        "cp out of the pool differs"
    );
    let dd_of = format!("of={}", s.m("x"));
    s.ok(
        "dd",
        &[
            &format!("if={src}"),
            &dd_of,
            "bs=4k",
            "count=100",
            "conv=fsync",
        ],
    );
    s.ok("mkdir", &[&s.m("d")]);
    s.ok("mkdir", &["-p", &s.m("d/e/f")]);
    s.ok("mv", &[&s.m("a"), &s.m("d/b")]);
    s.ok("rm", &[&s.m("in")]);
    s.ok("ln", &["-s", "../x", &s.m("d/lx")]);
    assert_eq!(s.ok("readlink", &[&s.m("d/lx")]), "../x\n");
    assert_eq!(
        s.ok("stat", &["-L", "-c", "%s %F", &s.m("d/lx")])
            .trim_end(),
        "409600 regular file"
    );
    let out = s.cmd("stat").arg(s.m("d/lx/")).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Not a directory"),
        "{out:?}"
    );
    // Relative paths from a real current directory, through `..`, and from one in the pool.
    s.ok("sh", &["-c", "printf rel > mnt/d/../d/e/rel"]);
    // (Builtins only: the current directory in the pool does not survive exec.)
    let cd = format!(
        "cd {} && echo in > in-d && read l < ../e/in-d && echo $l && cd .. && pwd",
        s.m("d/e")
    );
    assert_eq!(s.ok("sh", &["-c", &cd]), format!("in\n{}\n", s.m("d")));
    let py = format!(
        "import os\n\
         fd = os.open('{}', os.O_CREAT | os.O_RDWR, 0o600)\n\
         assert os.write(fd, b'0123456789') == 10\n\
         os.lseek(fd, 2, os.SEEK_SET)\n\
         print(os.read(fd, 4).decode())\n\
         os.pwrite(fd, b'AB', 8)\n\
         os.fsync(fd)\n\
         print(os.fstat(fd).st_size, oct(os.stat('{}').st_mode & 0o777))\n\
         os.close(fd)\n\
         with open('{}', 'rb') as f: print(f.read().decode())\n",
        s.m("py"),
        s.m("py"),
        s.m("py")
    );
    assert_eq!(
        s.ok("python3", &["-c", &py]),
        "2345\n10 0o600\n01234567AB\n"
    );
    // Attributes: touch (futimens/utimensat), chmod (fchmodat), stat -f (statfs).
    s.ok("touch", &["-d", "@1000000000", &s.m("d/t")]);
    s.ok("chmod", &["640", &s.m("d/t")]);
    assert_eq!(
        s.ok("stat", &["-c", "%Y %a", &s.m("d/t")]),
        "1000000000 640\n"
    );
    assert!(s
        .ok("stat", &["-f", "-c", "%t", &s.m("")])
        .contains("504d4653"));
    // statvfs (glibc's calls the kernel past the shim): df and Python see the pool's numbers
    let blocks = s.ok("stat", &["-f", "-c", "%b %S", &s.m("")]);
    let py = format!(
        "import os\nv = os.statvfs('{}')\nprint(v.f_blocks, v.f_frsize)\n",
        s.m("d")
    );
    assert_eq!(s.ok("python3", &["-c", &py]), blocks);
    // Times before 1970 (once EINVAL here) and after 2038, to the nanosecond.
    for (when, want) in [
        ("1960-01-01 01:01:30 UTC", "-315615510.000000000"),
        ("1969-12-31 23:59:58.5 UTC", "-1.500000000"),
        ("2100-01-01 00:00:00.25 UTC", "4102444800.250000000"),
    ] {
        s.ok("touch", &["-d", when, &s.m("d/t")]);
        assert_eq!(
            s.ok("stat", &["-c", "%.9Y %.9X", &s.m("d/t")]),
            format!("{want} {want}\n"),
            "touch -d {when:?}"
        );
    }
    s.ok("rm", &[&s.m("d/t")]);
    // Directory streams: ls, find, rm -r, python's listdir.
    assert_eq!(s.ok("ls", &[&s.m("d")]), "b\ne\nlx\n");
    let ll = s.ok("ls", &["-l", &s.m("d")]);
    assert!(ll.contains("lx -> ../x") && ll.starts_with("total"), "{ll}");
    s.ok("mkdir", &["-p", &s.m("t/u/v")]);
    s.ok("cp", &[src, &s.m("t/u/v/w")]);
    assert_eq!(
        s.ok("find", &[&s.m("t")]),
        format!(
            "{}\n{}\n{}\n{}\n",
            s.m("t"),
            s.m("t/u"),
            s.m("t/u/v"),
            s.m("t/u/v/w")
        )
    );
    // tar reads the tree out (fstatat, openat, fdopendir) and writes it back in elsewhere.
    let tar = s.dir().join("t.tar");
    let tar = tar.to_str().unwrap();
    s.ok("tar", &["-C", &s.m("t"), "-cf", tar, "."]);
    s.ok("mkdir", &[&s.m("t2")]);
    s.ok("tar", &["-C", &s.m("t2"), "-xf", tar]);
    s.ok("cmp", &[&s.m("t/u/v/w"), &s.m("t2/u/v/w")]);
    // find from above the prefix: openat relative to a kernel directory descriptor.
    let above = s.ok("find", &[s.dir().to_str().unwrap(), "-name", "w"]);
    assert_eq!(above, format!("{}\n{}\n", s.m("t/u/v/w"), s.m("t2/u/v/w")));
    s.ok("rm", &["-r", &s.m("t"), &s.m("t2")]);
    let listed = s.ok(
        "python3",
        &[
            "-c",
            &format!("import os; print(sorted(os.listdir('{}')))", s.m("")),
        ],
    );
    assert_eq!(listed, "['d', 'py', 'x']\n");
    // Threads: four writers on files of their own and on one O_APPEND log at once.
    let threads = format!(
        "import os, threading\n\
         def work(t):\n\
         \x20   fd = os.open('{m}/t%d' % t, os.O_CREAT | os.O_WRONLY, 0o644)\n\
         \x20   log = os.open('{m}/log', os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)\n\
         \x20   for i in range(300):\n\
         \x20       os.write(fd, b'%d:%04d\\n' % (t, i))\n\
         \x20       os.write(log, b'%d:%04d\\n' % (t, i))\n\
         \x20   os.close(fd); os.close(log)\n\
         ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]\n\
         [t.start() for t in ts]; [t.join() for t in ts]\n",
        m = s.mnt.display()
    );
    s.ok("python3", &["-c", &threads]);
    // A missing file is the pool's ENOENT, not the kernel's (same answer, checked anyway).
    let out = s.cmd("cat").arg(s.m("nope")).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("No such file"));

    s.assert_prefix_empty();
    // Every program above mounted from the checkpoint the one before it saved at exit; check
    // (in `mount`) finds the last one equal to its walk.
    let (p, rec) = s.mount();
    assert!(
        rec.was_clean && rec.from_checkpoint,
        "the shim unmounts at exit, saving the checkpoint: {rec:?}"
    );
    assert_eq!(read_all(&p, b"/d/b"), b"hello\nmore\n");
    assert!(p.stat(b"/a").is_err() && p.stat(b"/in").is_err());
    assert!(read_all(&p, b"/x") == data[..409600], "dd's file differs");
    assert_eq!(p.stat(b"/d/e/f").unwrap().kind, pmkit_fs::Kind::Dir);
    assert_eq!(read_all(&p, b"/d/e/rel"), b"rel");
    assert_eq!(read_all(&p, b"/d/e/in-d"), b"in\n");
    assert_eq!(read_all(&p, b"/py"), b"01234567AB");
    assert_eq!(p.readlink(b"/d/lx").unwrap(), b"../x");
    let mut log: Vec<Vec<u8>> = read_all(&p, b"/log")
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    assert_eq!(log.len(), 1200, "every append landed once");
    log.sort();
    log.dedup();
    assert_eq!(log.len(), 1200);
    for t in 0..4 {
        let want: String = (0..300).map(|i| format!("{t}:{i:04}\n")).collect();
        assert_eq!(read_all(&p, format!("/t{t}").as_bytes()), want.as_bytes());
    }
    drop(p.unmount());
}

#[test]
fn inert_without_configuration() {
    let s = Shim::new();
    // No PMKIT_PRELOAD_* variables: the kernel serves the prefix directory.
    let out = s
        .cmd("sh")
        .env_remove("PMKIT_PRELOAD_POOL")
        .args(["-c", &format!("echo k > {} && cat {}", s.m("k"), s.m("k"))])
        .output()
        .unwrap();
    common::assert_ok(&out, "inert sh");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "k\n");
    assert_eq!(std::fs::read(s.mnt.join("k")).unwrap(), b"k\n");
    // Said on stderr, once per process (sh, then cat: two lines, not one per call).
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("pmkit-preload: ").count(), 2, "{err}");
    assert!(
        err.contains("inert, every path goes to the kernel"),
        "{err}"
    );
}

#[test]
fn remove_of_a_file_and_a_directory() {
    if !have("python3") {
        return;
    }
    let s = Shim::new();
    // remove(3) through ctypes (glibc's own calls unlink inside libc, past the shim).
    let py = format!(
        "import ctypes, os\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         os.mkdir('{d}')\n\
         os.close(os.open('{f}', os.O_CREAT | os.O_WRONLY))\n\
         assert libc.remove(b'{f}') == 0, ctypes.get_errno()\n\
         assert libc.remove(b'{d}') == 0, ctypes.get_errno()\n\
         assert libc.remove(b'{d}') == -1 and ctypes.get_errno() == 2\n\
         print(sorted(os.listdir('{m}')))\n",
        d = s.m("d"),
        f = s.m("f"),
        m = s.m("")
    );
    assert_eq!(s.ok("python3", &["-c", &py]), "[]\n");
    let (p, _) = s.mount();
    assert!(p.lstat(b"/d").is_err() && p.lstat(b"/f").is_err());
    drop(p.unmount());
    s.assert_prefix_empty();
}

/// Paths in the program's own image (a string literal, a static buffer) are read with no
/// system call, and served: a C program built here, whose paths are neither on the stack nor
/// in the heap.
#[test]
fn paths_in_the_programs_image() {
    if !have("cc") {
        return;
    }
    let s = Shim::new();
    let src = s.dir().join("image.c");
    let bin = s.dir().join("image");
    std::fs::write(
        &src,
        r#"#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
static char buf[4096]; /* .bss */
int main(void) {
    strcpy(buf, MNT "/static");
    int fd = open(buf, O_CREAT | O_WRONLY, 0644);
    if (fd < 0 || write(fd, "image", 5) != 5 || close(fd) != 0) { perror(buf); return 1; }
    struct stat st;
    if (stat(MNT "/static", &st) != 0) { perror("stat of a literal"); return 1; }
    printf("%lld\n", (long long)st.st_size);
    return 0;
}
"#,
    )
    .unwrap();
    let out = std::process::Command::new("cc")
        .arg(format!("-DMNT=\"{}\"", s.mnt.display()))
        .arg("-O1")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap();
    common::assert_ok(&out, "cc");
    assert_eq!(s.ok(bin.to_str().unwrap(), &[]), "5\n");
    s.assert_prefix_empty();
    let (p, _) = s.mount();
    assert_eq!(read_all(&p, b"/static"), b"image");
    drop(p.unmount());
}

/// SQLite in WAL mode through the shim: its WAL index is the `-shm` file mapped `MAP_SHARED`,
/// now the file's own blocks (it was ENODEV, SQLITE_IOERR_SHMMAP). Transactions, a checkpoint
/// and a reopen; the database reads back through pmkit_fs and passes SQLite's integrity check.
#[test]
fn sqlite_in_wal_mode() {
    if !have("sqlite3") {
        assert!(std::env::var_os("CI").is_none(), "needs sqlite3 in CI");
        return;
    }
    let s = Shim::new();
    let db = s.m("wal.db");
    let sql = "PRAGMA journal_mode=WAL;\
               CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);\
               BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<5000) \
               INSERT INTO t SELECT i, printf('value %d', i) FROM n; COMMIT;\
               UPDATE t SET v = 'changed' WHERE k % 7 = 0;\
               DELETE FROM t WHERE k % 11 = 0;\
               SELECT count(*), sum(k), count(*) FILTER (WHERE v = 'changed') FROM t;";
    let check = "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA integrity_check; SELECT count(*) FROM t;";
    // The model: the same statements on a kernel file.
    let model = s.dir().join("model.db");
    let run = |db: &str, q: &str| {
        let o = std::process::Command::new("sqlite3")
            .args([db, q])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let model = model.to_str().unwrap();
    let (want, want_again) = (run(model, sql), run(model, check));
    assert!(
        want.starts_with("wal\n") && want_again.contains("ok\n"),
        "{want}{want_again}"
    );
    assert_eq!(s.ok("sqlite3", &[&db, sql]), want);
    assert_eq!(s.ok("sqlite3", &[&db, check]), want_again);
    let (p, _) = s.mount();
    let head = read_all(&p, b"/wal.db");
    assert!(
        head.starts_with(b"SQLite format 3\0"),
        "the database is in the pool"
    );
    drop(p);
    s.assert_prefix_empty();
}
