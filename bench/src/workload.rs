//! The PMO Sync workload's data, shared by pmkit's variants (`pmo/`) and libpmemobj's (`pmdk/`),
//! so both store and check the same bytes.

/// The value of store `i` (the thesis stores even numbers: element i gets 2i, Fig. 4.2).
#[inline]
pub(crate) fn value(i: usize) -> u32 {
    (2 * i) as u32
}
