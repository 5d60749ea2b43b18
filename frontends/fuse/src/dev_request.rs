//! What fuser hands the /dev/fuse transport, in the library's terms: who asks, and the times a
//! SETATTR asks for (fuser 0.18 misreads those before 1970).

use fuser::{Request, TimeOrNow};
use pmkit_fs::Owner;

pub(crate) fn owner(req: &Request) -> Owner {
    Owner {
        uid: req.uid(),
        gid: req.gid(),
    }
}

/// Nanoseconds since the epoch of a time a SETATTR asked for (`None`: now).
pub(crate) fn ns_asked(t: TimeOrNow) -> i64 {
    let TimeOrNow::SpecificTime(t) = t else {
        return crate::ops::ns_of(None);
    };
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(_) => crate::ops::ns_of(Some(t)),
        // fuser 0.18 turns the kernel's (seconds, nanoseconds) before the epoch, e.g.
        // (-2, 500000000) for -1.5 s, into the epoch minus 2.5 s (its time.rs leaves this as a
        // TODO): undo that, so the nanoseconds count forward from the seconds as the kernel
        // meant.
        Err(before) => {
            let d = before.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            pmkit_fs::ns_of_timespec(-secs, d.subsec_nanos() as i64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// fuser 0.18 gives the kernel's (-2 s, 500,000,000 ns) as the epoch minus 2.5 s; the
    /// time stored is -1.5 s. Times after the epoch pass unchanged.
    #[test]
    fn times_before_the_epoch_are_read_as_the_kernel_meant() {
        let fuser_gives = UNIX_EPOCH - Duration::new(2, 500_000_000);
        assert_eq!(
            ns_asked(TimeOrNow::SpecificTime(fuser_gives)),
            -1_500_000_000
        );
        let whole = UNIX_EPOCH - Duration::from_secs(315_615_510);
        assert_eq!(
            ns_asked(TimeOrNow::SpecificTime(whole)),
            -315_615_510_000_000_000
        );
        let later = UNIX_EPOCH + Duration::new(4_102_444_800, 250_000_000);
        assert_eq!(
            ns_asked(TimeOrNow::SpecificTime(later)),
            4_102_444_800_250_000_000
        );
    }
}
