//! The test kit every pmkit suite uses (a dev-dependency, never in a product binary), so each
//! crate's tests share one way to make a scratch pool directory, run a case that may die by a
//! fault, seed randomness that can be replayed, build a C example, and say what a test needs.
//!
//! Outside CI a missing tool or privilege skips a test with a note; under CI (`CI` set) it fails
//! the test: CI installs everything (scripts/test.sh), so a skip there would hide a gap.

pub mod acked;
pub mod cexample;
pub mod child;
pub mod need;
pub mod rng;
pub mod scratch;

pub use need::{have, in_ci, need_file, need_root, need_tool};
pub use rng::Seeded;
pub use scratch::{scratch, scratch_named};
