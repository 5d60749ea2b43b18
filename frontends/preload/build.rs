//! Compiles `src/execl.c`: the variadic exec calls, which stable Rust cannot define.

fn main() {
    println!("cargo:rerun-if-changed=src/execl.c");
    cc::Build::new()
        .file("src/execl.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("pmkit_execl");
}
