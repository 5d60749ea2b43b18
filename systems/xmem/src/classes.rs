//! Size classes for small objects: 16-byte steps up to 128, then four classes per power of two
//! up to [`MAX_SMALL`]. Every power of two from 16 is a class, which is how alignments above 16
//! are served (a power-of-two object in a page-aligned slab is aligned to its size, up to a page).

use crate::config::PAGE;

/// Largest small object; bigger ones are page runs.
pub const MAX_SMALL: usize = 8192;
/// Pages per slab (64 KiB: at least 8 objects of every class).
pub const SLAB_PAGES: usize = 16;
/// Number of classes.
pub const COUNT: usize = 32;

/// The class sizes, ascending.
pub const SIZES: [usize; COUNT] = sizes();

const fn sizes() -> [usize; COUNT] {
    let mut out = [0; COUNT];
    let mut i = 0;
    while i < 8 {
        out[i] = 16 * (i + 1);
        i += 1;
    }
    let mut pow = 128;
    while i < COUNT {
        let mut q = 1;
        while q <= 4 {
            out[i] = pow + q * pow / 4;
            i += 1;
            q += 1;
        }
        pow *= 2;
    }
    out
}

/// The class of each size in 16-byte steps: `BY_STEP[(size + 15) / 16]` (a table lookup, not a
/// search, on the allocation path).
const BY_STEP: [u8; MAX_SMALL / 16 + 1] = by_step();

const fn by_step() -> [u8; MAX_SMALL / 16 + 1] {
    let mut out = [0u8; MAX_SMALL / 16 + 1];
    let (mut i, mut c) = (0, 0);
    while i < out.len() {
        while SIZES[c] < i * 16 {
            c += 1;
        }
        out[i] = c as u8;
        i += 1;
    }
    out
}

/// Objects per slab, by class.
const PER_SLAB: [usize; COUNT] = per_slab_table();

const fn per_slab_table() -> [usize; COUNT] {
    let mut out = [0; COUNT];
    let mut c = 0;
    while c < COUNT {
        out[c] = SLAB_PAGES * PAGE / SIZES[c];
        c += 1;
    }
    out
}

/// `ceil(2^32 / size)` by class: `(off * INV[c]) >> 32` is `off / SIZES[c]` exactly for every
/// offset inside a slab (off < 2^16, and the rounding error times 2^16 stays below 2^32), which
/// spares the free path an integer division.
const INV: [u64; COUNT] = inv_table();

const fn inv_table() -> [u64; COUNT] {
    let mut out = [0; COUNT];
    let mut c = 0;
    while c < COUNT {
        out[c] = (1u64 << 32).div_ceil(SIZES[c] as u64);
        c += 1;
    }
    out
}

/// The class serving `size` bytes aligned to `align` (a power of two ≤ a page), or `None` when
/// the object is large.
#[inline]
pub fn class_of(size: usize, align: usize) -> Option<usize> {
    debug_assert!(align.is_power_of_two() && align <= PAGE);
    let size = size.max(1);
    let need = if align <= 16 {
        size
    } else {
        size.max(align).next_power_of_two()
    };
    if need > MAX_SMALL {
        return None;
    }
    let c = BY_STEP[need.div_ceil(16)] as usize;
    debug_assert!(SIZES[c] >= need && SIZES[c].is_multiple_of(align.min(SIZES[c])));
    Some(c)
}

/// Objects per slab of class `c`.
#[inline]
pub fn per_slab(c: usize) -> usize {
    PER_SLAB[c]
}

/// `off / SIZES[c]` for an offset inside a slab, by multiplication.
#[inline]
pub fn index_in_slab(off: usize, c: usize) -> usize {
    debug_assert!(off < SLAB_PAGES * PAGE);
    ((off as u64 * INV[c]) >> 32) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_ascend_and_end_at_max_small() {
        assert!(SIZES.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(SIZES[COUNT - 1], MAX_SMALL);
        assert!(SIZES.iter().all(|s| s % 16 == 0));
        for c in 0..COUNT {
            assert!(per_slab(c) >= 8);
        }
    }

    #[test]
    fn index_by_multiplication_is_exact_division() {
        for (c, size) in SIZES.iter().enumerate() {
            for off in 0..SLAB_PAGES * PAGE {
                assert_eq!(index_in_slab(off, c), off / size, "class {c}, offset {off}");
            }
        }
    }

    #[test]
    fn class_by_table_is_the_smallest_that_fits() {
        for size in 1..=MAX_SMALL {
            let c = class_of(size, 8).unwrap();
            assert_eq!(c, SIZES.partition_point(|&s| s < size), "size {size}");
        }
    }

    #[test]
    fn class_fits_size_and_alignment() {
        for size in 1..=MAX_SMALL + 1 {
            for align in [1, 8, 16, 32, 64, 256, 4096] {
                match class_of(size, align) {
                    Some(c) => {
                        let s = SIZES[c];
                        assert!(s >= size);
                        // Objects sit at slab + k·s with slabs page aligned.
                        assert!(align <= 16 || (s.is_power_of_two() && s >= align));
                        // Smallest fitting class when no alignment is asked for.
                        if align <= 16 && c > 0 {
                            assert!(SIZES[c - 1] < size);
                        }
                    }
                    None => assert!(size.max(align) > MAX_SMALL || size > MAX_SMALL),
                }
            }
        }
    }
}
