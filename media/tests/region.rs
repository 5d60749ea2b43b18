//! Regions: creation, reopening, and clear errors naming the path on bad input, with nothing
//! created half-way.

use pmkit_media::{DaxMode, Media, MediaError, Region, RegionKind, RegionOptions};
use std::path::Path;

fn shm_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("pmkit-media-test")
        .tempdir_in("/dev/shm")
        .unwrap()
}

#[test]
fn create_write_reopen() {
    let d = shm_dir();
    let p = d.path().join("pm");
    {
        let r = Region::create(&p, 1 << 20, &RegionOptions::default()).unwrap();
        assert_eq!(r.len(), 1 << 20);
        assert_eq!(
            r.kind(),
            RegionKind::File,
            "tmpfs is not DAX: must fall back"
        );
        assert!(
            r.notes().iter().any(|n| n.contains("not DAX")),
            "fallback must be reported: {:?}",
            r.notes()
        );
        r.write(12345, b"hello");
    }
    let r = Region::open(&p, &RegionOptions::default()).unwrap();
    let mut b = [0u8; 5];
    r.read(12345, &mut b);
    assert_eq!(&b, b"hello");
    assert!(!r.needs_msync(), "tmpfs needs no msync");
}

#[test]
fn create_refuses_existing_file() {
    let d = shm_dir();
    let p = d.path().join("pm");
    Region::create(&p, 8192, &RegionOptions::default()).unwrap();
    let e = Region::create(&p, 8192, &RegionOptions::default()).unwrap_err();
    assert!(e.to_string().contains(&p.display().to_string()), "{e}");
}

#[test]
fn dax_required_on_tmpfs_is_an_error() {
    let d = shm_dir();
    let p = d.path().join("pm");
    let e = Region::create(
        &p,
        8192,
        &RegionOptions {
            dax: DaxMode::Require,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, MediaError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("DAX"), "{e}");
    assert!(!p.exists(), "a failed create must leave nothing behind");
}

#[test]
fn missing_path_names_the_path_and_says_what_to_do() {
    let e = Region::open(
        Path::new("/dev/shm/pmkit-no-such-file"),
        &RegionOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, MediaError::Missing { .. }));
    let s = e.to_string();
    // The path, and no option: only the command knows which of its options would make it.
    assert!(
        s.contains("/dev/shm/pmkit-no-such-file")
            && s.contains("does not exist")
            && !s.contains("--"),
        "{s}"
    );
}

#[test]
fn unwritable_path_is_a_clear_error() {
    let p = Path::new("/proc/pmkit-cannot-create-here");
    let e = Region::create(p, 8192, &RegionOptions::default()).unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains("/proc/pmkit-cannot-create-here") && s.contains("cannot create"),
        "{s}"
    );
}

#[test]
fn bad_sizes_are_rejected_before_anything_is_created() {
    let d = shm_dir();
    for size in [0u64, 100, 4095, 4096 + 1, 10_000] {
        let p = d.path().join(format!("pm{size}"));
        let e = Region::create(&p, size, &RegionOptions::default()).unwrap_err();
        assert!(matches!(e, MediaError::BadSize { .. }), "{size}: {e}");
        assert!(e.to_string().contains(&p.display().to_string()));
        assert!(!p.exists(), "size {size}: nothing may be created");
    }
}

#[test]
fn failed_allocation_leaves_nothing_behind() {
    let d = shm_dir();
    let p = d.path().join("huge");
    // Far more than /dev/shm can hold: fallocate fails after the file was created.
    let e = Region::create(&p, 1 << 50, &RegionOptions::default()).unwrap_err();
    assert!(e.to_string().contains("huge"), "{e}");
    assert!(!p.exists(), "the half-made file must be removed");
}

#[test]
fn devdax_path_that_is_not_dax() {
    let e = Region::open(Path::new("/dev/null"), &RegionOptions::default()).unwrap_err();
    assert!(matches!(e, MediaError::NotDevDax { .. }), "{e}");
    assert!(e.to_string().contains("/dev/null"));
}

#[test]
fn directory_is_not_a_region() {
    let d = shm_dir();
    let e = Region::open(d.path(), &RegionOptions::default()).unwrap_err();
    assert!(matches!(e, MediaError::Unsupported { .. }), "{e}");
}

#[test]
fn existing_file_with_bad_size_is_rejected() {
    let d = shm_dir();
    let p = d.path().join("odd");
    std::fs::write(&p, vec![0u8; 5000]).unwrap();
    let e = Region::open(&p, &RegionOptions::default()).unwrap_err();
    assert!(matches!(e, MediaError::BadSize { .. }), "{e}");
}

/// The raw-pointer copies (for buffers a user may reach) move the same bytes as `read` and
/// `write_nt`: on a mapping (streamed directly) and on the crash simulator (the trait's default,
/// through a private copy).
#[test]
fn raw_pointer_copies_match_the_slice_copies() {
    fn check<M: Media>(m: &M) {
        let src: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
        // Unaligned start and length: a head, whole lines and a tail.
        // SAFETY: `src` is valid for 8000 bytes from offset 5.
        unsafe { m.write_nt_from(100, src.as_ptr().add(5), 8000) };
        m.fence(pmkit_media::Fence::Sfence);
        let mut back = vec![0u8; 8000];
        m.read(100, &mut back);
        assert_eq!(back, src[5..8005]);
        let mut raw = vec![0u8; 8000];
        // SAFETY: `raw` is valid for 8000 bytes.
        unsafe { m.read_into(100, raw.as_mut_ptr(), 8000) };
        assert_eq!(raw, back);
    }
    check(&Region::anonymous(1 << 16).unwrap());
    check(&pmkit_media::crashsim::CrashSim::new(1 << 16));
}
