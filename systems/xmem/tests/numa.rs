//! NUMA plumbing: with `fast_node` set, DRAM regions are bound to that node (`mbind(MPOL_BIND)`),
//! also after a migration back from PM; PM regions keep the default policy.
//!
//! This machine has one NUMA node, so this checks the plumbing on node 0 only: the policy is
//! in place and pages land on node 0. It cannot show pages moving between nodes.

mod common;
use common::*;
use pmkit_xmem::{Config, Tier, XMem, XmemError};

const MPOL_DEFAULT: i32 = 0;
const MPOL_BIND: i32 = 2;

fn config(dir: &std::path::Path, node: Option<u32>) -> Config {
    let mut cfg = Config::new(dir.join("pm.img"), 8 * MIB as u64, 2 * MIB as u64);
    cfg.region_size = 2 * MIB;
    cfg.reserve = 16 * MIB;
    cfg.fast_node = node;
    cfg
}

#[test]
fn dram_regions_are_bound_to_the_fast_node_on_node_0() {
    let nodes = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("node"))
                .count()
        })
        .unwrap_or(0);
    eprintln!("NUMA nodes here: {nodes} (plumbing on node 0 only)");
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let x = XMem::new(config(dir.path(), Some(0))).unwrap();
    let t = x.tag("t").unwrap();
    let fast = x.alloc(t, 2 * MIB, 4096).unwrap();
    let slow = x.alloc(t, 2 * MIB, 4096).unwrap();
    fill(fast.as_ptr(), 4096, 1);
    fill(slow.as_ptr(), 4096, 2);
    assert_eq!(x.policy_of(fast).unwrap(), (MPOL_BIND, vec![0]));
    assert_eq!(x.node_of(fast).unwrap(), 0);
    assert_eq!(x.policy_of(slow).unwrap().0, MPOL_DEFAULT);
    // Swap them: the region coming back to DRAM is bound again, the one leaving is not.
    let (rf, rs) = (
        x.region_of(fast.as_ptr() as usize).unwrap(),
        x.region_of(slow.as_ptr() as usize).unwrap(),
    );
    x.move_region(rf, Tier::Slow).unwrap();
    x.move_region(rs, Tier::Fast).unwrap();
    assert_eq!(x.policy_of(slow).unwrap(), (MPOL_BIND, vec![0]));
    assert_eq!(x.node_of(slow).unwrap(), 0);
    assert_eq!(x.policy_of(fast).unwrap().0, MPOL_DEFAULT);
    assert!(holds(fast.as_ptr(), 4096, 1) && holds(slow.as_ptr(), 4096, 2));

    // Without fast_node, DRAM keeps the default policy.
    let dir2 = tempfile::tempdir_in("/dev/shm").unwrap();
    let y = XMem::new(config(dir2.path(), None)).unwrap();
    let p = y.alloc(y.tag("t").unwrap(), 64, 8).unwrap();
    fill(p.as_ptr(), 64, 3);
    assert_eq!(y.policy_of(p).unwrap().0, MPOL_DEFAULT);
}

#[test]
fn a_missing_node_is_refused() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    assert!(matches!(
        XMem::new(config(dir.path(), Some(1000))),
        Err(XmemError::BadConfig(_))
    ));
}
