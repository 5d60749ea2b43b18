//! Allocation throughput: X-Mem's per-tag allocator against the system allocator (glibc malloc
//! through `std::alloc::System`), small and large objects, one thread and two.
//!
//! `cargo run --release -p pmkit-xmem --example allocbench`
//! Each case allocates a batch, frees it (in allocation order), and repeats; the figure is the
//! median of 5 timed rounds after a warm-up, in million alloc+free pairs per second.

use pmkit_xmem::{Config, Tag, XMem};
use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::NonNull;
use std::time::Instant;

const ROUNDS: usize = 5;

/// Object size by index in the batch.
type SizeFn = dyn Fn(usize) -> usize + Sync;

trait Alloc: Sync {
    fn alloc(&self, size: usize) -> *mut u8;
    fn free(&self, p: *mut u8, size: usize);
}

struct Sys;
impl Alloc for Sys {
    fn alloc(&self, size: usize) -> *mut u8 {
        // SAFETY: a non-zero size with alignment 8.
        unsafe { System.alloc(Layout::from_size_align(size, 8).unwrap()) }
    }
    fn free(&self, p: *mut u8, size: usize) {
        // SAFETY: `p` came from System.alloc with this layout.
        unsafe { System.dealloc(p, Layout::from_size_align(size, 8).unwrap()) }
    }
}

struct X<'a>(&'a XMem, Tag);
impl Alloc for X<'_> {
    fn alloc(&self, size: usize) -> *mut u8 {
        self.0.alloc(self.1, size, 8).unwrap().as_ptr()
    }
    fn free(&self, p: *mut u8, _size: usize) {
        // SAFETY: `p` came from this XMem and is freed once.
        unsafe { self.0.free(NonNull::new(p).unwrap()).unwrap() }
    }
}

/// Million alloc+free pairs per second of `batch` objects of `size(i)` bytes, `rounds` times.
fn run(a: &dyn Alloc, batch: usize, size: &SizeFn, reps: usize) -> f64 {
    let mut ptrs = Vec::with_capacity(batch);
    let s = Instant::now();
    for _ in 0..reps {
        for i in 0..batch {
            ptrs.push(a.alloc(size(i)));
        }
        for (i, p) in ptrs.drain(..).enumerate() {
            a.free(p, size(i));
        }
    }
    (batch * reps) as f64 / s.elapsed().as_secs_f64() / 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench(name: &str, a: &[&dyn Alloc], threads: usize, batch: usize, size: &SizeFn) -> f64 {
    let reps = (2_000_000 / batch).max(1);
    run(a[0], batch, size, 1);
    let m = median(
        (0..ROUNDS)
            .map(|_| {
                std::thread::scope(|s| {
                    let hs: Vec<_> = (0..threads)
                        .map(|i| {
                            let a = a[i % a.len()];
                            s.spawn(move || run(a, batch, size, reps))
                        })
                        .collect();
                    hs.into_iter().map(|h| h.join().unwrap()).sum::<f64>()
                })
            })
            .collect(),
    );
    println!("  {name:<8} {m:8.2} M pairs/s");
    m
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir_in("/dev/shm")?;
    let cfg = Config::new(dir.path().join("pm.img"), 1 << 30, 1 << 30);
    let x = XMem::new(cfg)?;
    let t = x.tag("bench")?;
    let xa = X(&x, t);
    let small64 = |_: usize| 64;
    let mixed = |i: usize| 16 + (i * 7919) % 497;
    let large = |_: usize| 64 << 10;
    let xb = X(&x, x.tag("bench2")?);
    let cases: [(&str, usize, usize, &SizeFn); 6] = [
        ("small 64 B, 1 thread", 1, 10_000, &small64),
        ("small 16-512 B mixed, 1 thread", 1, 10_000, &mixed),
        ("large 64 KiB, 1 thread", 1, 500, &large),
        ("small 64 B, 2 threads, one tag", 2, 10_000, &small64),
        ("large 64 KiB, 2 threads, one tag", 2, 200, &large),
        ("small 64 B, 2 threads, a tag each", 2, 10_000, &small64),
    ];
    for (name, threads, batch, size) in cases {
        println!("{name}:");
        let sys = bench("system", &[&Sys], threads, batch, size);
        let xs: Vec<&dyn Alloc> = if name.ends_with("a tag each") {
            vec![&xa, &xb]
        } else {
            vec![&xa]
        };
        let xm = bench("xmem", &xs, threads, batch, size);
        println!("  xmem/system {:.2}x", xm / sys);
    }
    Ok(())
}
