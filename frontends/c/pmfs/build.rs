//! The shared library's SONAME, libpmfs.so.MAJOR (the ABI's version: programs linked with -lpmfs
//! load the library of the same major version), as installed packages carry it.
fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpmfs.so.{major}");
}
