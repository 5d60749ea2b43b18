//! The counter every free bumps when peers read in place (`direct.rs`): a trait, so the
//! allocator that bumps it depends on nothing else.

/// The counter frees bump, in memory the readers share (the server's clients map it).
pub trait FreeEpoch: Send + Sync + std::fmt::Debug {
    /// Count a free, before its blocks can be allocated again.
    fn bump(&self);
    /// The count now.
    fn now(&self) -> u64;
}
