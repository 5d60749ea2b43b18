//! The benchmarks of PMFS: `mount` (`pmkit bench fs`: the FUSE mount against ext4 on
//! `pmkit attach`, ext4 on a loop device and tmpfs; bytes per metadata operation), `io` (fio-style
//! I/O on the library, the shim and the mount; a slower persistence barrier), `map` (direct access
//! through a mapping), `protect` (the cost of each protection mode), `layers` (one operation
//! through each layer, from PM stores to the kernel), `apps` (applications and source trees);
//! `targets` (the file systems they compare, set up and torn down alike).

pub(crate) mod apps;
pub(crate) mod io;
pub(crate) mod layers;
pub(crate) mod map;
pub(crate) mod mount;
pub(crate) mod protect;
pub(crate) mod targets;
