//! stdio streams (`fopen`, `fdopen`) and temporary names (`mkstemp`, `mkdtemp`) on pool paths
//! through the shim, from a C program (these calls cannot be reached from Python or the shell
//! alone).

mod common;

use common::{have, Shim};

#[test]
fn stdio_streams_and_temporary_files_reach_the_pool() {
    if !have("cc") {
        return;
    }
    let s = Shim::new();
    let exe = common::build_c(s.dir(), "stdio");
    let out = s.ok(exe.to_str().unwrap(), &[&s.m("")]);
    assert_eq!(
        out,
        "fileno yes\n\
         fstat 0 size 10\n\
         read one 1\n\
         read two\n\
         read three\n\
         tell 16\n\
         patched one 1\n\
         missing null errno 2\n\
         excl null\n\
         fdopen one 1\n\
         closed 1\n\
         mkstemp 1 named\n\
         tmp mode 600 size 3\n\
         mkdtemp dir 700\n\
         popen popen\n\
         fclosed 0 reaped 1\n"
    );
    s.assert_prefix_empty();
    let (p, _) = s.mount();
    assert_eq!(common::read_all(&p, b"/s.txt"), b"one 1\ntwo\nthree\n");
    // stdout reopened on a pool file and closed twice, as flex does.
    assert_eq!(common::read_all(&p, b"/re.txt"), b"reopened 1\n");
    assert_eq!(
        p.readdir(b"/").unwrap().len(),
        4,
        "only s.txt and re.txt left (and . and ..)"
    );
    drop(p.unmount());
}
