//! FS_IOC_FIEMAP through the shim: Python's `fcntl.ioctl` and e2fsprogs' `filefrag` (both
//! unmodified) see a sparse file's extents where its data lies (two runs of the file; how many
//! extents they take depends on where the blocks were allocated), the last one flagged, and an
//! empty file's none.

mod common;

use common::*;

#[test]
fn fiemap_shows_where_the_data_lies() {
    if !have("python3") {
        assert!(std::env::var_os("CI").is_none(), "needs python3 in CI");
        return;
    }
    let s = Shim::new();
    let f = s.m("/sparse");
    let script = format!(
        "import fcntl, os, struct\n\
         fd = os.open('{f}', os.O_RDWR | os.O_CREAT, 0o644)\n\
         os.pwrite(fd, b'a' * 12288, 0)\n\
         os.pwrite(fd, b'b' * 100, 40960)\n\
         def fiemap(count):\n\
         \x20   buf = bytearray(struct.pack('=QQIIII', 0, 2**64 - 1, 1, 0, count, 0) + bytes(56 * count))\n\
         \x20   fcntl.ioctl(fd, 0xC020660B, buf)\n\
         \x20   n = struct.unpack_from('=I', buf, 20)[0]\n\
         \x20   return n, [struct.unpack_from('=QQQ', buf, 32 + 56 * i) + struct.unpack_from('=I', buf, 32 + 56 * i + 40) for i in range(min(n, count))]\n\
         n0, _ = fiemap(0)\n\
         n, ext = fiemap(8)\n\
         print('count', n0 == n == len(ext))\n\
         runs = []\n\
         for (lo, phys, ln, fl) in ext:\n\
         \x20   assert phys % 4096 == 0 and fl in (0, 1)\n\
         \x20   if runs and runs[-1][1] == lo: runs[-1][1] = lo + ln\n\
         \x20   else: runs.append([lo, lo + ln])\n\
         print('data', runs, 'last', [fl for (_, _, _, fl) in ext][-1], sum(fl for (_, _, _, fl) in ext))\n\
         try:\n\
         \x20   fcntl.ioctl(fd, 0xC020660B, bytearray(struct.pack('=QQIIII', 0, 1, 2, 0, 0, 0)))\n\
         except OSError as e: print('xattr flag', e.errno)\n\
         e = os.open('{f}.empty', os.O_RDWR | os.O_CREAT, 0o644)\n\
         buf = bytearray(struct.pack('=QQIIII', 0, 2**64 - 1, 0, 0, 4, 0) + bytes(56 * 4))\n\
         fcntl.ioctl(e, 0xC020660B, buf)\n\
         print('empty', struct.unpack_from('=I', buf, 20)[0])\n"
    );
    let got = s.cmd("python3").args(["-c", &script]).output().unwrap();
    assert_ok(&got, "fiemap through the shim");
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        format!(
            "count True\ndata [[0, 12288], [40960, 45056]] last 1 1\nxattr flag {}\nempty 0\n",
            libc::EBADR
        )
    );
    if have("filefrag") {
        let ff = s.cmd("filefrag").arg(&f).output().unwrap();
        assert_ok(&ff, "filefrag through the shim");
        let out = String::from_utf8_lossy(&ff.stdout);
        assert!(
            out.contains("extents found") || out.contains("extent found"),
            "{out}"
        );
    }
    s.assert_prefix_empty();
}
