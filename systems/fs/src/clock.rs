//! The clock for inode times, and conversions between nanoseconds and `struct timespec`.

/// The time for an inode's times, in nanoseconds since the epoch: the coarse clock
/// (`CLOCK_REALTIME_COARSE`, the last timer tick: a few milliseconds' granularity), as the
/// kernel's file systems stamp times (`current_time()`, jiffies), and several times cheaper
/// to read than the precise clock on the append path.
pub(crate) fn now() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock id is a constant Linux has.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } != 0 {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        return d.map(|d| d.as_nanos() as i64).unwrap_or(0);
    }
    ns_of_timespec(ts.tv_sec, ts.tv_nsec)
}

/// Nanoseconds since the epoch of `sec` seconds and `nsec` nanoseconds (`0..1e9`), negative
/// before the epoch; a time past what an inode holds (before 1677 or after 2262) is clamped to
/// the nearest it holds, as Linux file systems clamp to their own range.
pub fn ns_of_timespec(sec: i64, nsec: i64) -> i64 {
    debug_assert!((0..1_000_000_000).contains(&nsec), "nsec {nsec}");
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// The seconds and nanoseconds (`0..1e9`, as `struct timespec` has them) of `ns` nanoseconds
/// since the epoch: -1.5 s is -2 s + 500,000,000 ns.
pub fn timespec_of(ns: i64) -> (i64, i64) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000))
}
