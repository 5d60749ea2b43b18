//! mmap(2) of pool files by processes a pool's server serves: each maps the pool file at the
//! extents its session pins, so two processes that map one file share its bytes, a child of
//! fork keeps its parent's mapping, and a killed or exec'd process's pins are dropped. SQLite in
//! WAL mode, which maps its `-shm` file, runs with several processes at once.

mod common;

use common::have;
use common::served::served;

/// Two processes map one file: each sees the other's stores at once, and `read` sees them too.
#[test]
fn two_processes_share_a_mapped_files_bytes() {
    if !have("python3") {
        return;
    }
    let s = served();
    let f = s.shim.m("shared");
    let ready = s.shim.dir().join("ready");
    let seen = s.shim.dir().join("seen");
    // A maps the file and stores "hello", waits for B's "world" in the mapping, then stores
    // "done". B maps the file while A holds it, checks A's bytes, stores its own.
    let a = format!(
        "import mmap, os, time\n\
         fd = os.open('{f}', os.O_RDWR | os.O_CREAT, 0o644)\n\
         os.ftruncate(fd, 8192)\n\
         m = mmap.mmap(fd, 8192, mmap.MAP_SHARED)\n\
         m[0:5] = b'hello'\n\
         m.flush()\n\
         open('{ready}', 'w').close()\n\
         for _ in range(500):\n\
         \x20   if m[4096:4101] == b'world': break\n\
         \x20   time.sleep(0.01)\n\
         open('{seen}', 'w').write(m[4096:4101].decode())\n\
         m[5:9] = b'done'\n\
         m.flush()\n\
         m.close()\n",
        ready = ready.display(),
        seen = seen.display()
    );
    let b = format!(
        "import mmap, os\n\
         fd = os.open('{f}', os.O_RDWR)\n\
         m = mmap.mmap(fd, 8192, mmap.MAP_SHARED)\n\
         assert m[0:5] == b'hello', m[0:5]\n\
         m[4096:4101] = b'world'\n\
         m.flush()\n\
         m.close()\n"
    );
    let mut pa = s.shim.cmd("python3").args(["-c", &a]).spawn().unwrap();
    for _ in 0..500 {
        if ready.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    s.shim.ok("python3", &["-c", &b]);
    assert!(pa.wait().unwrap().success());
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "world");
    let all = common::read_all(&s.root, b"/shared");
    assert_eq!(all.len(), 8192);
    assert_eq!(&all[..9], b"hellodone");
    assert_eq!(&all[4096..4101], b"world");
    // Every pin was dropped at munmap: the file may be cut now.
    s.sh(&format!("truncate -s 0 {f}"));
    s.stop();
}

/// A child of fork writes through the mapping it inherited after its parent unmapped and
/// exited; the pins follow the sessions, so the blocks stay the file's until the child's end.
/// A process killed with a mapping loses its pins with its session.
#[test]
fn a_fork_child_keeps_its_mapping_and_a_killed_process_its_pins_go() {
    if !have("python3") {
        return;
    }
    let s = served();
    let f = s.shim.m("forked");
    let py = format!(
        "import mmap, os, time\n\
         fd = os.open('{f}', os.O_RDWR | os.O_CREAT, 0o644)\n\
         os.ftruncate(fd, 4096)\n\
         m = mmap.mmap(fd, 4096, mmap.MAP_SHARED)\n\
         m[0:6] = b'parent'\n\
         pid = os.fork()\n\
         if pid == 0:\n\
         \x20   time.sleep(1.0)\n\
         \x20   m[6:11] = b'child'\n\
         \x20   m.flush()\n\
         \x20   os._exit(0)\n\
         m.close()\n\
         os.close(fd)\n"
    );
    // Waited for alone (with output, the wait would last until the child closed it too).
    let parent = s
        .shim
        .cmd("python3")
        .args(["-c", &py])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(parent.success());
    // The parent is gone; the child still maps the file: its blocks stay.
    let busy = s
        .shim
        .cmd("truncate")
        .args(["-s", "0", &f])
        .output()
        .unwrap();
    assert!(
        !busy.status.success(),
        "a truncate while the child maps the range is refused (EBUSY)"
    );
    let mut all = Vec::new();
    for _ in 0..200 {
        all = common::read_all(&s.root, b"/forked");
        if &all[..11] == b"parentchild" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(&all[..11], b"parentchild");
    let mut killed = s.shim.python_ready(
        &format!(
            "import mmap, os, time\n\
             fd = os.open('{f}', os.O_RDWR | os.O_CREAT)\n\
             os.ftruncate(fd, 4096)\n\
             m = mmap.mmap(fd, 4096, mmap.MAP_SHARED)\n\
             print('mapped', flush=True)\n\
             time.sleep(30)\n"
        ),
        "mapped",
    );
    let refused = s
        .shim
        .cmd("truncate")
        .args(["-s", "0", &f])
        .output()
        .unwrap();
    assert!(!refused.status.success(), "a mapped range cannot be cut");
    killed.kill().unwrap();
    killed.wait().unwrap();
    // The session ends when the server sees the connection close.
    let mut cut = false;
    for _ in 0..100 {
        if s.shim
            .cmd("truncate")
            .args(["-s", "0", &f])
            .output()
            .unwrap()
            .status
            .success()
        {
            cut = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(cut, "the killed process's pin was dropped");
    s.stop();
}

/// SQLite in WAL mode maps its `-shm` file: two writers and a reader at once on a served pool.
#[test]
fn sqlite_in_wal_mode_runs_with_several_processes() {
    if !have("sqlite3") {
        return;
    }
    let s = served();
    let db = s.shim.m("wal.db");
    s.sh(&format!(
        "sqlite3 {db} 'PRAGMA journal_mode=WAL; CREATE TABLE t (w, i);' > /dev/null"
    ));
    let inserts = |w: u32| {
        let mut sql = String::from(".timeout 10000\n");
        for i in 0..200 {
            sql.push_str(&format!("INSERT INTO t VALUES ({w}, {i});\n"));
        }
        sql
    };
    let (a, b) = (inserts(1), inserts(2));
    s.sh(&format!(
        "set -e\n\
         printf '%s' '{a}' | sqlite3 {db} > /dev/null &\n\
         printf '%s' '{b}' | sqlite3 {db} > /dev/null &\n\
         for i in 1 2 3 4 5; do sqlite3 -cmd '.timeout 10000' {db} 'SELECT count(*) FROM t;' > /dev/null; done\n\
         wait"
    ));
    let out = s.sh(&format!(
        "sqlite3 {db} 'PRAGMA journal_mode; SELECT w, count(*) FROM t GROUP BY w; PRAGMA integrity_check;'"
    ));
    assert_eq!(out, "wal\n1|200\n2|200\nok\n");
    s.stop();
}
