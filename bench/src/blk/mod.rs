//! The benchmarks of PMBD, the block device: the PMBD paper's figures (`figures/`: protection,
//! write schemes, overview, emulation), `attach` (file systems and applications on
//! `pmkit attach` against ext4 on a loop device and PMDK's libpmemblk), `nbd` (`pmkit serve`
//! against nbdkit's memory plugin), `atomic` (atomic block writes against libpmemblk) and
//! `kernel_path` (the kernel write path against stores).

pub(crate) mod atomic;
pub(crate) mod attach;
pub(crate) mod figures;
pub(crate) mod kernel_path;
pub(crate) mod nbd;
